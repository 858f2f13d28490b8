#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "duration.h"
#include "exitcodes.h"

enum {
	OPT_TTL = 256,
	OPT_ID,
	OPT_KILL_AFTER,
	OPT_ON_LOST,
	OPT_READ,
	OPT_WRITE,
	OPT_NAMED,
	OPT_ONCE_PER,
	OPT_ONCE_OFFSET,
	OPT_MIN_HOLD,
	OPT_DONE_EXIT,
	OPT_LOCAL_QUEUE,
	OPT_NO_LOCAL_QUEUE,
	OPT_LOG_FORMAT,
};

static const struct option longopts[] = {
    {"semaphore", required_argument, NULL, 's'},
    {"mutex", required_argument, NULL, 'x'},
    {"read", required_argument, NULL, OPT_READ},
    {"write", required_argument, NULL, OPT_WRITE},
    {"named", required_argument, NULL, OPT_NAMED},
    {"nonblock", no_argument, NULL, 'n'},
    {"wait", required_argument, NULL, 'w'},
    {"timeout", required_argument, NULL, 'w'},
    {"conflict-exit-code", required_argument, NULL, 'E'},
    {"ttl", required_argument, NULL, OPT_TTL},
    {"kill-after", required_argument, NULL, OPT_KILL_AFTER},
    {"on-lost", required_argument, NULL, OPT_ON_LOST},
    {"id", required_argument, NULL, OPT_ID},
    {"once-per", required_argument, NULL, OPT_ONCE_PER},
    {"once-offset", required_argument, NULL, OPT_ONCE_OFFSET},
    {"done-exit-code", required_argument, NULL, OPT_DONE_EXIT},
    {"min-hold", required_argument, NULL, OPT_MIN_HOLD},
    {"local-queue", no_argument, NULL, OPT_LOCAL_QUEUE},
    {"no-local-queue", no_argument, NULL, OPT_NO_LOCAL_QUEUE},
    {"config", required_argument, NULL, 'c'},
    {"verbose", no_argument, NULL, 'v'},
    {"log-format", required_argument, NULL, OPT_LOG_FORMAT},
    {"quiet", no_argument, NULL, 'q'},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, 'V'},
    {NULL, 0, NULL, 0},
};

void lr_cli_usage(FILE *out)
{
	fputs(
	    "Usage: lockrun [OPTIONS] LOCK... [--] COMMAND [ARG...]\n"
	    "Run COMMAND while holding locks kept in a MariaDB or MySQL database.\n"
	    "\n"
	    "Locks (any mix, taken all together or not at all):\n"
	    "  -s, --semaphore NAME[:COUNT]  COUNT permits (default 1) of semaphore NAME\n"
	    "  -x, --mutex NAME              exclusive lock NAME (created on first use)\n"
	    "      --read NAME               shared side of read-write lock NAME\n"
	    "      --write NAME              exclusive side of read-write lock NAME\n"
	    "      --named NAME              the server's named lock NAME (GET_LOCK): no tables,\n"
	    "                                no token, lost with the connection; not on Galera\n"
	    "      --id KEY                  no overlap: exit at once if a live run holds KEY\n"
	    "      --once-per DURATION       with --id: one successful run of KEY per window\n"
	    "                                of DURATION by the database server's clock;\n"
	    "                                waits for a running one instead of exiting\n"
	    "      --once-offset DURATION    windows start DURATION after the epoch's\n"
	    "      --done-exit-code N        exit status when the window is done (default 0)\n"
	    "\n"
	    "Options:\n"
	    "  -n, --nonblock                fail at once if the locks are not free\n"
	    "  -w, --wait DURATION           give up after waiting DURATION (default: forever)\n"
	    "      --timeout DURATION        the same as --wait\n"
	    "  -E, --conflict-exit-code N    exit status when not acquired (default 75)\n"
	    "      --ttl DURATION            lease length, renewed every ttl/3 (default 30s)\n"
	    "      --kill-after DURATION     SIGTERM-to-SIGKILL grace on lock loss (default 5s)\n"
	    "      --on-lost kill|ignore     stop the command if the lease is lost (default kill)\n"
	    "      --min-hold DURATION       keep the locks at least DURATION from the grant\n"
	    "      --no-local-queue          wait at the database directly, not first behind\n"
	    "                                runs of this host that want the same locks\n"
	    "      --local-queue             queue on this host first (the default)\n"
	    "  -c, --config FILE             configuration file (default $LOCKRUN_CONFIG,\n"
	    "                                then /etc/lockrun.conf)\n"
	    "  -v, --verbose                 say what happens; twice: every statement\n"
	    "  -q, --quiet                   print errors only\n"
	    "      --log-format text|json    messages as text (default) or one JSON object\n"
	    "                                a line: time, program, pid, level, message\n"
	    "  -h, --help                    show this help\n"
	    "  -V, --version                 show the version\n"
	    "\n"
	    "NAME: 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit.\n"
	    "DURATION: seconds, or a number with s, m, h or d (90, 1.5m, 5m, 2h, 1d).\n"
	    "The command sees LOCKRUN_FENCE (its fencing token when it holds one lock),\n"
	    "LOCKRUN_FENCES (name=token ...), LOCKRUN_LEASE (the grant's secret, for\n"
	    "CALL lockrun_check), LOCKRUN_GRANT (the grant's number) and with\n"
	    "--once-per LOCKRUN_WINDOW (its window's start, e.g. 2026-11-22T10:05:00Z).\n"
	    "\n"
	    "Exit status:\n"
	    "  the command's status, or 128+N if it was killed by signal N (also when\n"
	    "  lockrun itself was, before the command started); with --once-per, 0 (or\n"
	    "  --done-exit-code) without running it when the window is done already\n"
	    "   64  usage error: bad option, name or count, a name used twice or as\n"
	    "       another kind, unknown semaphore, count over its capacity, unsafe\n"
	    "       --ttl/--kill-after, --named on a Galera cluster\n"
	    "   69  database unavailable, refused the login, too old, or lacks the schema\n"
	    "   70  internal error            71  cannot fork or set up signals\n"
	    "   75  not acquired: busy, --wait ran out, --id taken (see -E)\n"
	    "   76  lock lost while the command ran; the command was stopped\n"
	    "   78  configuration error\n"
	    "  126  command cannot be executed    127  command not found\n",
	    out);
}

void lr_cli_init(struct lr_cli *cli)
{
	memset(cli, 0, sizeof(*cli));
	cli->wait = -1;
	cli->ttl = -1;
	cli->kill_after = -1;
	cli->conflict_exit = -1;
	cli->on_lost = -1;
	cli->done_exit = -1;
	cli->local_queue = -1;
}

void lr_cli_finish(struct lr_cli *cli)
{
	free(cli->items);
	memset(cli, 0, sizeof(*cli));
}

/* A DURATION option within lo..hi seconds, in whole milliseconds. */
static bool duration_ms(const char *opt, const char *v, double lo, double hi, uint64_t *out,
                        char *err, size_t errlen)
{
	double d;

	if (!lr_duration_arg(opt, v, lo, hi, &d, err, errlen))
		return false;
	*out = lr_duration_round(d * 1000.0);
	return true;
}

static bool exit_code(const char *opt, const char *v, int *out, char *err, size_t errlen)
{
	char *end;
	long n;

	errno = 0;
	n = strtol(v, &end, 10);
	if (errno || !*v || *end || n < 0 || n > 255) {
		snprintf(err, errlen, "%s: '%s' is not an exit status (0-255)", opt, v);
		return false;
	}
	*out = (int)n;
	return true;
}

/* What --once-per and its companions need of the rest of the line. */
static bool once_ok(const struct lr_cli *cli, char *err, size_t errlen)
{
	if (cli->once_offset_set && !cli->once_per_ms) {
		snprintf(err, errlen, "--once-offset needs --once-per");
		return false;
	}
	if (cli->once_per_ms && !cli->id) {
		snprintf(err, errlen, "--once-per needs --id KEY: the key whose runs it counts");
		return false;
	}
	if (cli->once_per_ms && cli->once_offset_ms >= cli->once_per_ms) {
		snprintf(err, errlen, "--once-offset must be shorter than --once-per");
		return false;
	}
	return true;
}

static bool add_item(struct lr_cli *cli, enum lr_kind kind, const char *arg, char *err,
                     size_t errlen)
{
	struct lr_item it, *grown;

	if (!lr_item_parse(&it, kind, arg, err, errlen))
		return false;
	grown = realloc(cli->items, (cli->nitems + 1) * sizeof(*grown));
	if (!grown) {
		snprintf(err, errlen, "out of memory");
		return false;
	}
	cli->items = grown;
	cli->items[cli->nitems++] = it;
	return true;
}

/*
 * The one-line message for what getopt_long() refused: c is what it
 * returned (':' for a missing value, '?' otherwise) and argv[at] the
 * element it was reading, which is optind before the call (getopt moves
 * optind past an element only once done with all of it). So "-la" after
 * "-x foo" is blamed as "-l in '-la'", not as "foo". Shared by lockrun and
 * lockrunctl. No system calls.
 */
void lr_cli_bad_option(const struct option *opts, char **argv, int at, int c, char *err,
                       size_t errlen)
{
	const char *arg = argv[at], *name = arg + 2;
	size_t len = strcspn(name, "="), matches = 0;
	const struct option *hit = NULL;

	if (arg[0] != '-' || arg[1] != '-') {
		if (c == ':')
			snprintf(err, errlen, "option '-%c' needs a value", optopt);
		else if (strlen(arg) > 2)
			snprintf(err, errlen, "unknown option '-%c' in '%s'", optopt, arg);
		else
			snprintf(err, errlen, "unknown option '-%c'", optopt);
		return;
	}
	for (const struct option *o = opts; o->name; o++) {
		if (strncmp(o->name, name, len) != 0)
			continue;
		if (strlen(o->name) == len) {
			hit = o;
			matches = 1;
			break;
		}
		hit = matches++ ? hit : o;
	}
	if (c == ':' && hit)
		snprintf(err, errlen, "option '--%s' needs a value", hit->name);
	else if (matches == 1 && name[len] == '=' && hit->has_arg == no_argument)
		snprintf(err, errlen, "option '--%s' takes no value", hit->name);
	else if (matches > 1)
		snprintf(err, errlen, "option '--%.*s' is ambiguous", (int)len, name);
	else
		snprintf(err, errlen, "unknown option '--%.*s'", (int)len, name);
}

/*
 * Parses argv. Returns false with a one-line message in err on any usage
 * error. Validates everything that can be checked without the database.
 */
bool lr_cli_parse(struct lr_cli *cli, int argc, char **argv, char *err, size_t errlen)
{
	int c, at, li;
	bool timeout;

	opterr = 0;
	optind = 0; /* 0, not 1: getopt forgets a cluster left half read */
	for (;;) {
		at = optind ? optind : 1;
		li = -1;
		if ((c = getopt_long(argc, argv, "+:s:x:nw:E:c:vqhV", longopts, &li)) == -1)
			break;
		switch (c) {
		case 's':
			if (!add_item(cli, LR_KIND_SEMAPHORE, optarg, err, errlen))
				return false;
			break;
		case 'x':
			if (!add_item(cli, LR_KIND_MUTEX, optarg, err, errlen))
				return false;
			break;
		case OPT_READ:
			if (!add_item(cli, LR_KIND_READ, optarg, err, errlen))
				return false;
			break;
		case OPT_WRITE:
			if (!add_item(cli, LR_KIND_WRITE, optarg, err, errlen))
				return false;
			break;
		case OPT_NAMED:
			if (!add_item(cli, LR_KIND_NAMED, optarg, err, errlen))
				return false;
			break;
		case OPT_ID:
			if (cli->id) {
				snprintf(err, errlen, "--id given more than once");
				return false;
			}
			if (!add_item(cli, LR_KIND_KEY, optarg, err, errlen))
				return false;
			cli->id = optarg;
			break;
		case 'n':
			cli->nonblock = true;
			break;
		case 'w':
			/* --timeout is named as such: it is what the user wrote. */
			timeout = li >= 0 && strcmp(longopts[li].name, "timeout") == 0;
			if (!lr_duration_arg(timeout ? "--timeout" : "--wait", optarg, 0,
			                     LR_WAIT_MAX_S, &cli->wait, err, errlen))
				return false;
			break;
		case OPT_TTL:
			if (!lr_duration_arg("--ttl", optarg, LR_TTL_MIN_S, LR_TTL_MAX_S, &cli->ttl,
			                     err, errlen))
				return false;
			break;
		case OPT_KILL_AFTER:
			if (!lr_duration_arg("--kill-after", optarg, 0, LR_KILL_AFTER_MAX_S,
			                     &cli->kill_after, err, errlen))
				return false;
			break;
		case 'E':
			if (!exit_code("--conflict-exit-code", optarg, &cli->conflict_exit, err,
			               errlen))
				return false;
			break;
		case OPT_DONE_EXIT:
			if (!exit_code("--done-exit-code", optarg, &cli->done_exit, err, errlen))
				return false;
			break;
		case OPT_ONCE_PER:
			if (!duration_ms("--once-per", optarg, 1, LR_ONCE_MAX_S, &cli->once_per_ms,
			                 err, errlen))
				return false;
			break;
		case OPT_ONCE_OFFSET:
			if (!duration_ms("--once-offset", optarg, 0, LR_ONCE_MAX_S,
			                 &cli->once_offset_ms, err, errlen))
				return false;
			cli->once_offset_set = true;
			break;
		case OPT_MIN_HOLD:
			if (!duration_ms("--min-hold", optarg, 0, LR_MIN_HOLD_MAX_S,
			                 &cli->min_hold_ms, err, errlen))
				return false;
			break;
		case OPT_ON_LOST:
			if (strcmp(optarg, "kill") == 0)
				cli->on_lost = LR_ON_LOST_KILL;
			else if (strcmp(optarg, "ignore") == 0)
				cli->on_lost = LR_ON_LOST_IGNORE;
			else {
				snprintf(err, errlen, "--on-lost: '%s' is not 'kill' or 'ignore'",
				         optarg);
				return false;
			}
			break;
		case OPT_LOCAL_QUEUE:
		case OPT_NO_LOCAL_QUEUE:
			cli->local_queue = c == OPT_LOCAL_QUEUE;
			break;
		case OPT_LOG_FORMAT:
			if (strcmp(optarg, "text") != 0 && strcmp(optarg, "json") != 0) {
				snprintf(err, errlen, "--log-format: '%s' is not 'text' or 'json'",
				         optarg);
				return false;
			}
			cli->log_json = strcmp(optarg, "json") == 0;
			break;
		case 'c':
			cli->config = optarg;
			break;
		case 'v':
			cli->verbosity = cli->verbosity < 0 ? 1 : cli->verbosity + 1;
			break;
		case 'q':
			cli->verbosity = -1;
			break;
		case 'h':
			cli->help = true;
			return true;
		case 'V':
			cli->version = true;
			return true;
		default:
			lr_cli_bad_option(longopts, argv, at, c, err, errlen);
			return false;
		}
	}
	if (!once_ok(cli, err, errlen))
		return false;
	if (cli->nitems == 0) {
		snprintf(err, errlen,
		         "no lock given: use -s, -x, --read, --write, --named or --id");
		return false;
	}
	if (optind >= argc) {
		snprintf(err, errlen, "no command given");
		return false;
	}
	cli->command = &argv[optind];
	return true;
}
