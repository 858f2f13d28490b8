/*
 * lockrunctl: administration of lockrun's database: schema, semaphore
 * capacities, status. Runs one command and exits.
 */
#include <errno.h>
#include <getopt.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <uv.h>

#include "admin.h"
#include "config.h"
#include "db.h"
#include "exitcodes.h"
#include "lock.h"
#include "log.h"
#include "lr_build.h"
#include "schema.h"
#include "text.h"

static const struct option longopts[] = {
    {"config", required_argument, NULL, 'c'},
    {"json", no_argument, NULL, 'j'},
    {"verbose", no_argument, NULL, 'v'},
    {"quiet", no_argument, NULL, 'q'},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, 'V'},
    {NULL, 0, NULL, 0},
};

static void usage(FILE *out)
{
	fputs("Usage: lockrunctl [OPTIONS] COMMAND [ARGS]\n"
	      "Administer the MariaDB/MySQL database that lockrun keeps its locks in.\n"
	      "\n"
	      "Commands:\n"
	      "  init                  create or upgrade the schema (needs DDL privileges)\n"
	      "  set NAME CAPACITY     create semaphore NAME or change its capacity (0-1000000)\n"
	      "  status [NAME]         show resources, use, holders and waiters\n"
	      "\n"
	      "Options:\n"
	      "  -c, --config FILE     configuration file (default $LOCKRUN_CONFIG,\n"
	      "                        then /etc/lockrun.conf)\n"
	      "  -j, --json            status as JSON\n"
	      "  -v, --verbose         say more; twice: every statement\n"
	      "  -q, --quiet           print errors only\n"
	      "  -h, --help            show this help\n"
	      "  -V, --version         show the version\n"
	      "\n"
	      "Exit status: 0 done; 1 status NAME found nothing; 64 usage error;\n"
	      "69 database unavailable or schema missing; 70 internal error;\n"
	      "71 system error; 78 configuration error.\n",
	      out);
}

struct ctl {
	struct lr_config cfg;
	uv_loop_t loop;
	lr_db *db;
	bool loop_ready;
	bool json;
	int verbosity;
	const char *config;
};

static bool parse_capacity(const char *s, unsigned *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	if (!*s || *s == '-' || *s == '+')
		return false;
	v = strtoul(s, &end, 10);
	if (errno || *end || v > 1000000)
		return false;
	*out = (unsigned)v;
	return true;
}

static int cmd_init(struct ctl *c)
{
	char err[1024];
	unsigned from, to;
	bool routines;

	if (!lr_schema_migrate(c->db, &from, &to, &routines, err, sizeof(err))) {
		lr_log_error("init failed: %s", err);
		return LR_EXIT_UNAVAILABLE;
	}
	if (c->verbosity < 0)
		return LR_EXIT_OK;
	if (from != to)
		printf("schema upgraded from version %u to %u\n", from, to);
	else if (routines)
		printf("schema version %u; stored routines updated\n", to);
	else
		printf("schema is up to date (version %u)\n", to);
	return LR_EXIT_OK;
}

/*
 * Creates or resizes a semaphore and audits the change with who did it
 * from where. Host and user names are the system's bytes: they are
 * recorded escaped (see text.h) to fit the audit's utf8mb4 columns, so an
 * odd name never stops the change.
 */
static int cmd_set(struct ctl *c, const char *name, const char *cap_s)
{
	char err[1024], host[256], *rec_host = NULL, *rec_user = NULL;
	struct passwd *pw = getpwuid(geteuid());
	unsigned cap;
	long old;
	int rc = LR_EXIT_OK;

	if (!lr_name_valid(name)) {
		lr_log_error("invalid name '%s': use 1-%d letters, digits, '_', '.' or '-', "
		             "starting with a letter or digit",
		             name, LR_NAME_MAX);
		return LR_EXIT_USAGE;
	}
	if (!parse_capacity(cap_s, &cap)) {
		lr_log_error("invalid capacity '%s': use a whole number 0-1000000", cap_s);
		return LR_EXIT_USAGE;
	}
	if (!lr_schema_check(c->db, err, sizeof(err))) {
		lr_log_error("%s", err);
		return LR_EXIT_UNAVAILABLE;
	}
	if (gethostname(host, sizeof(host)) != 0)
		snprintf(host, sizeof(host), "unknown");
	host[sizeof(host) - 1] = '\0';
	/* The widths of lr_capacity_audit.host and .os_user. */
	rec_host = lr_text_record(host, 255);
	rec_user = lr_text_record(pw ? pw->pw_name : "unknown", 64);
	if (!rec_host || !rec_user) {
		lr_log_error("out of memory");
		rc = LR_EXIT_SOFTWARE;
		goto out;
	}
	switch (
	    lr_admin_set_capacity(c->db, name, cap, rec_user, rec_host, &old, err, sizeof(err))) {
	case LR_ADMIN_OK:
		break;
	case LR_ADMIN_INVALID:
		lr_log_error("%s", err);
		rc = LR_EXIT_USAGE;
		goto out;
	default:
		lr_log_error("%s", err);
		rc = LR_EXIT_UNAVAILABLE;
		goto out;
	}
	if (c->verbosity >= 0) {
		if (old < 0)
			printf("%s: created with capacity %u\n", name, cap);
		else if (old == (long)cap)
			printf("%s: capacity %u (unchanged)\n", name, cap);
		else
			printf("%s: capacity %u (was %ld)\n", name, cap, old);
	}
out:
	free(rec_host);
	free(rec_user);
	return rc;
}

static int cmd_status(struct ctl *c, const char *name)
{
	char err[1024];
	bool found;

	if (name && !lr_name_valid(name)) {
		lr_log_error("invalid name '%s'", name);
		return LR_EXIT_USAGE;
	}
	if (!lr_schema_check(c->db, err, sizeof(err))) {
		lr_log_error("%s", err);
		return LR_EXIT_UNAVAILABLE;
	}
	if (!lr_admin_status(c->db, name, c->json, stdout, &found, err, sizeof(err))) {
		lr_log_error("%s", err);
		return LR_EXIT_UNAVAILABLE;
	}
	if (name && !found) {
		if (!c->json)
			lr_log_error("no resource named '%s'", name);
		return LR_EXIT_FAILURE;
	}
	if (!name && !found && !c->json && c->verbosity >= 0)
		printf(
		    "no resources yet; create a semaphore with 'lockrunctl set NAME CAPACITY'\n");
	return LR_EXIT_OK;
}

/* Checks the argument count of a command before anything connects. */
static bool arity(const char *cmd, int have, int min, int max)
{
	if (have >= min && have <= max)
		return true;
	if (max == 0)
		lr_log_error("'%s' takes no arguments (see 'lockrunctl --help')", cmd);
	else if (min == max)
		lr_log_error("'%s' takes exactly %d arguments (see 'lockrunctl --help')", cmd, max);
	else
		lr_log_error("'%s' takes at most %d argument (see 'lockrunctl --help')", cmd, max);
	return false;
}

static int dispatch(struct ctl *c, int argc, char **argv)
{
	const char *cmd = argv[0];
	int nargs = argc - 1;

	if (strcmp(cmd, "init") == 0)
		return arity(cmd, nargs, 0, 0) ? cmd_init(c) : LR_EXIT_USAGE;
	if (strcmp(cmd, "set") == 0)
		return arity(cmd, nargs, 2, 2) ? cmd_set(c, argv[1], argv[2]) : LR_EXIT_USAGE;
	if (strcmp(cmd, "status") == 0)
		return arity(cmd, nargs, 0, 1) ? cmd_status(c, nargs ? argv[1] : NULL)
		                               : LR_EXIT_USAGE;
	return LR_EXIT_USAGE;
}

/* Everything about the command line that can be checked before
 * connecting: the command exists and has the right number of arguments. */
static bool command_ok(int argc, char **argv)
{
	const char *cmd = argv[0];
	int nargs = argc - 1;

	if (strcmp(cmd, "init") == 0)
		return arity(cmd, nargs, 0, 0);
	if (strcmp(cmd, "set") == 0)
		return arity(cmd, nargs, 2, 2);
	if (strcmp(cmd, "status") == 0)
		return arity(cmd, nargs, 0, 1);
	lr_log_error("unknown command '%s' (see 'lockrunctl --help')", cmd);
	return false;
}

static int run(struct ctl *c, int argc, char **argv)
{
	int opt;

	opterr = 0;
	while ((opt = getopt_long(argc, argv, ":c:jvqhV", longopts, NULL)) != -1) {
		switch (opt) {
		case 'c':
			c->config = optarg;
			break;
		case 'j':
			c->json = true;
			break;
		case 'v':
			c->verbosity = c->verbosity < 0 ? 1 : c->verbosity + 1;
			break;
		case 'q':
			c->verbosity = -1;
			break;
		case 'h':
			usage(stdout);
			return LR_EXIT_OK;
		case 'V':
			printf("lockrunctl %s\n", LR_VERSION);
			return LR_EXIT_OK;
		case ':':
			lr_log_error("option '%s' needs a value (see 'lockrunctl --help')",
			             argv[optind - 1]);
			return LR_EXIT_USAGE;
		default:
			lr_log_error("unknown option '%s' (see 'lockrunctl --help')",
			             argv[optind - 1]);
			return LR_EXIT_USAGE;
		}
	}
	lr_log_init("lockrunctl", c->verbosity < 0    ? LR_LOG_QUIET
	                          : c->verbosity == 0 ? LR_LOG_NORMAL
	                          : c->verbosity == 1 ? LR_LOG_VERBOSE
	                                              : LR_LOG_DEBUG);
	if (optind >= argc) {
		lr_log_error("no command given (see 'lockrunctl --help')");
		return LR_EXIT_USAGE;
	}
	if (!command_ok(argc - optind, argv + optind))
		return LR_EXIT_USAGE;
	if (!lr_config_load(&c->cfg, c->config)) {
		lr_log_error("%s", c->cfg.err);
		return LR_EXIT_CONFIG;
	}
	if (uv_loop_init(&c->loop) != 0) {
		lr_log_error("cannot set up the event loop");
		return LR_EXIT_OSERR;
	}
	c->loop_ready = true;
	c->db = lr_db_create(&c->loop, &c->cfg.db);
	if (!c->db) {
		lr_log_error("out of memory");
		return LR_EXIT_SOFTWARE;
	}
	if (!lr_db_connect(c->db)) {
		lr_log_error("cannot connect to %s", lr_db_error(c->db));
		return LR_EXIT_UNAVAILABLE;
	}
	if (!lr_db_query(c->db, "SET SESSION time_zone = '+00:00'")) {
		lr_log_error("%s", lr_db_error(c->db));
		return LR_EXIT_UNAVAILABLE;
	}
	return dispatch(c, argc - optind, argv + optind);
}

int main(int argc, char **argv)
{
	struct ctl c;
	int rc;

	memset(&c, 0, sizeof(c));
	signal(SIGPIPE, SIG_IGN);
	lr_log_init("lockrunctl", LR_LOG_NORMAL);
	lr_config_init(&c.cfg);
	rc = run(&c, argc, argv);
	lr_db_destroy(c.db);
	if (c.loop_ready) {
		while (uv_run(&c.loop, UV_RUN_DEFAULT) != 0)
			; /* a callback's uv_stop() may end a run early */
		uv_loop_close(&c.loop);
	}
	lr_config_finish(&c.cfg);
	return rc;
}
