/* lockrun's argument parsing: what is accepted, what is refused and how
 * the refusal reads. No database involved. */
#include <stdlib.h>

#include "cli.h"
#include "tap.h"

static bool parse(struct lr_cli *cli, char *err, size_t n, char **argv)
{
	int argc = 0;

	while (argv[argc])
		argc++;
	lr_cli_finish(cli);
	lr_cli_init(cli);
	return lr_cli_parse(cli, argc, argv, err, n);
}

#define ARGV(...) ((char *[]){"lockrun", __VA_ARGS__, NULL})

int main(void)
{
	struct lr_cli cli;
	char err[512];

	lr_cli_init(&cli);

	ok(parse(&cli, err, sizeof(err),
	         ARGV("-s", "backup-slots:2", "--", "./backup.sh", "-s", "x")),
	   "semaphore with count, command after --");
	ok(cli.nitems == 1 && cli.items[0].count == 2 &&
	       strcmp(cli.items[0].name, "backup-slots") == 0,
	   "count and name parsed");
	is_str(cli.command[0], "./backup.sh", "command starts after --");
	is_str(cli.command[1], "-s", "the command's own flags are not parsed");

	ok(parse(&cli, err, sizeof(err), ARGV("-s", "a", "sleep", "-n", "1")),
	   "options stop at the first non-option");
	ok(!cli.nonblock, "-n after the command belongs to the command");

	ok(parse(&cli, err, sizeof(err),
	         ARGV("-s", "a", "-s", "b:3", "-x", "m", "--read", "r", "-n", "-w", "0.5", "-E",
	              "9", "--ttl", "20", "--id", "k", "true")),
	   "every kind together");
	ok(cli.nitems == 5 && cli.nonblock && cli.wait == 0.5 && cli.conflict_exit == 9 &&
	       cli.ttl == 20,
	   "values recorded");
	is_str(cli.items[4].name, "id:k", "an idempotency key is kept apart from resource names");

	ok(!parse(&cli, err, sizeof(err), ARGV("-s", "a:0", "true")), "count 0 refused");
	ok(strstr(err, "invalid count '0'") != NULL, "message names the count: %s", err);
	ok(!parse(&cli, err, sizeof(err), ARGV("-s", "a:-1", "true")), "negative count refused");
	ok(!parse(&cli, err, sizeof(err), ARGV("-s", "a:2x", "true")), "junk after count refused");
	ok(!parse(&cli, err, sizeof(err), ARGV("-s", "-bad", "true")),
	   "name starting with '-' refused");
	ok(!parse(&cli, err, sizeof(err), ARGV("-s", "a b", "true")), "space in name refused");
	ok(strstr(err, "invalid name 'a b'") != NULL, "message names the culprit: %s", err);
	ok(!parse(&cli, err, sizeof(err),
	          ARGV("-s", "a123456789012345678901234567890123456789012345678901234567890123456",
	               "true")),
	   "name over 64 bytes refused");
	ok(parse(&cli, err, sizeof(err),
	         ARGV("-s", "a123456789012345678901234567890123456789012345678901234567890123",
	              "true")),
	   "name of exactly 64 bytes accepted");
	ok(!parse(&cli, err, sizeof(err), ARGV("-w", "soon", "-s", "a", "true")),
	   "bad --wait refused");
	ok(strstr(err, "--wait") != NULL, "message names the option: %s", err);
	ok(!parse(&cli, err, sizeof(err), ARGV("-w", "nan", "-s", "a", "true")),
	   "--wait nan refused");
	ok(!parse(&cli, err, sizeof(err), ARGV("-E", "256", "-s", "a", "true")), "-E 256 refused");
	ok(!parse(&cli, err, sizeof(err), ARGV("--ttl", "0", "-s", "a", "true")),
	   "--ttl 0 refused");
	ok(!parse(&cli, err, sizeof(err), ARGV("--bogus", "-s", "a", "true")),
	   "unknown long option");
	is_str(err, "unknown option '--bogus'", "message names it");
	ok(!parse(&cli, err, sizeof(err), ARGV("-z", "-s", "a", "true")), "unknown short option");
	is_str(err, "unknown option '-z'", "message names it");
	ok(!parse(&cli, err, sizeof(err), ARGV("-x", "foo", "-la", "true")),
	   "unknown option in a cluster");
	is_str(err, "unknown option '-l' in '-la'", "message names it, not the value before");
	ok(!parse(&cli, err, sizeof(err), ARGV("-x", "foo", "-nw")), "cluster without a value");
	is_str(err, "option '-w' needs a value", "message names the option: %s", err);
	ok(!parse(&cli, err, sizeof(err), ARGV("-x", "foo", "--ttl")), "long without a value");
	is_str(err, "option '--ttl' needs a value", "message names the option: %s", err);
	ok(!parse(&cli, err, sizeof(err), ARGV("-x", "foo", "--nonblock=yes", "true")),
	   "a value for a flag");
	is_str(err, "option '--nonblock' takes no value", "message says so: %s", err);
	ok(!parse(&cli, err, sizeof(err), ARGV("-x", "foo", "--t", "5", "true")), "ambiguous");
	is_str(err, "option '--t' is ambiguous", "message says so: %s", err);
	ok(parse(&cli, err, sizeof(err),
	         ARGV("-w", "1.5m", "--ttl", "2m", "--kill-after", "0.5s", "-x", "a", "true")) &&
	       cli.wait == 90 && cli.ttl == 120 && cli.kill_after == 0.5,
	   "--wait, --ttl and --kill-after take units");
	ok(!parse(&cli, err, sizeof(err), ARGV("--timeout", "400d", "-x", "a", "true")),
	   "--timeout 400d refused");
	is_str(err, "--timeout: '400d' is out of range (0d to 365d)", "named as written: %s", err);
	ok(!parse(&cli, err, sizeof(err), ARGV("--ttl", "2d", "-x", "a", "true")),
	   "--ttl 2d refused");
	is_str(err, "--ttl: '2d' is out of range (1s to 1d)", "the range in days: %s", err);
	ok(!parse(&cli, err, sizeof(err), ARGV("-s")), "missing value");
	ok(strstr(err, "needs a value") != NULL, "message says so: %s", err);
	ok(!parse(&cli, err, sizeof(err), ARGV("-s", "a")), "no command");
	is_str(err, "no command given", "message says so");
	ok(!parse(&cli, err, sizeof(err), ARGV("-n", "true")), "no lock");
	ok(!parse(&cli, err, sizeof(err), ARGV("--id", "a", "--id", "b", "true")),
	   "two --id refused");
	ok(parse(&cli, err, sizeof(err), ARGV("--help")) && cli.help, "--help");
	ok(parse(&cli, err, sizeof(err), ARGV("--version")) && cli.version, "--version");
	ok(!parse(&cli, err, sizeof(err), ARGV("--on-lost", "maybe", "-s", "a", "true")),
	   "bad --on-lost refused");

	lr_cli_finish(&cli);
	return tap_done();
}
