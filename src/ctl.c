/*
 * lockrunctl: administration of lockrun's database: schema, resources,
 * status, the lock log, forced releases and checks of a deployment. Runs
 * one command and exits. This file only parses the command line and
 * hands each command to its module.
 *
 * May use: admin, cli, config, db, doctor, duration, exitcodes, grant,
 * hint, history, item, log, schema, settings, status, sweep, text, timeline,
 * lr_build (generated).
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <pwd.h>
#include <signal.h>
#include <stdint.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mysqld_error.h>
#include <uv.h>

#include "admin.h"
#include "cli.h"
#include "config.h"
#include "db.h"
#include "doctor.h"
#include "duration.h"
#include "exitcodes.h"
#include "grant.h"
#include "hint.h"
#include "history.h"
#include "item.h"
#include "log.h"
#include "lr_build.h"
#include "schema.h"
#include "settings.h"
#include "status.h"
#include "sweep.h"
#include "text.h"
#include "timeline.h"

/* Options that only some commands take: one bit each. */
enum {
	O_JSON = 1,
	O_SINCE = 2,
	O_LIMIT = 4,
	O_RETENTION = 8,
	O_REASON = 16,
	O_FORMAT = 32,
	O_NAMES = 64,
	O_UNTIL = 128,
	O_OUTPUT = 256,
};

static const struct option longopts[] = {
    {"config", required_argument, NULL, 'c'},
    {"json", no_argument, NULL, 'j'},
    {"verbose", no_argument, NULL, 'v'},
    {"quiet", no_argument, NULL, 'q'},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, 'V'},
    {"since", required_argument, NULL, 'S'},
    {"limit", required_argument, NULL, 'L'},
    {"retention", required_argument, NULL, 'R'},
    {"reason", required_argument, NULL, 'r'},
    {"format", required_argument, NULL, 'F'},
    {"names", no_argument, NULL, 'N'},
    {"until", required_argument, NULL, 'U'},
    {"output", required_argument, NULL, 'o'},
    {NULL, 0, NULL, 0},
};

static void usage(FILE *out)
{
	fputs("Usage: lockrunctl [OPTIONS] COMMAND [ARGS]\n"
	      "Administer the MariaDB or MySQL database that lockrun keeps its locks in.\n"
	      "\n"
	      "Commands:\n"
	      "  init                  create or upgrade the schema (needs DDL privileges)\n"
	      "  set NAME CAPACITY     create semaphore NAME or change its capacity (1-1000000)\n"
	      "  max-ttl [DURATION]    show or set the longest lease (default 5m); a fail-over\n"
	      "                        to another server holds new grants back that long\n"
	      "  status [NAME] [--format=text|json|prometheus]\n"
	      "                        resources, holders (lease left, held for, token) and\n"
	      "                        waiters (queue position, waited for)\n"
	      "  list [KIND] [--names] every resource (of KIND: semaphore, mutex, rwlock,\n"
	      "                        key); --names: only the names, one a line\n"
	      "  delete NAME           delete a resource nobody holds or waits for; its tokens\n"
	      "                        are never handed out again\n"
	      "  pause NAME [--reason TEXT]\n"
	      "                        grant nothing new on NAME (waiters wait, holders run on)\n"
	      "  resume NAME           grant again after a pause\n"
	      "  timeline [NAME...] [--since DURATION] [--until DURATION] [-o FILE.svg]\n"
	      "                        the lock log of a window (default: the last hour) as\n"
	      "                        a picture: lanes of grants and waits; SVG with -o\n"
	      "  history [NAME] [--since DURATION] [--limit N]\n"
	      "                        finished and running grants from the lock log, newest\n"
	      "                        first (default limit 50)\n"
	      "  sweep [--retention DURATION]\n"
	      "                        end expired grants; delete log entries that ended more\n"
	      "                        than DURATION ago (default 7d) and audit rows older\n"
	      "                        than 30 days, 1000 rows per transaction\n"
	      "  release GRANT --reason TEXT\n"
	      "                        force-release grant GRANT (LOCKRUN_GRANT); its lockrun\n"
	      "                        stops its command at the next renewal and exits 76\n"
	      "  check GRANT [NAME=TOKEN...]\n"
	      "                        exit 0 if grant GRANT is live (and holds those tokens)\n"
	      "  doctor                check the server and account for what lockrun needs\n"
	      "  new-epoch             start a fail-over epoch on this server: no new grants\n"
	      "                        for max-ttl plus 5 s, tokens above its clock (for\n"
	      "                        fail-over tools, on the server they made the writer)\n"
	      "\n"
	      "DURATION: a number of seconds, a fraction allowed, or with a unit: 30s, 1.5m,\n"
	      "2h, 7d.\n"
	      "\n"
	      "Options:\n"
	      "  -c, --config FILE     configuration file (default $LOCKRUN_CONFIG, then\n"
	      "                        /etc/lockrun/operator.conf if readable, then\n"
	      "                        /etc/lockrun.conf)\n"
	      "  -j, --json            print JSON (status, list, history, sweep, release,\n"
	      "                        check, doctor, max-ttl)\n"
	      "      --format FORMAT   text, or json (the same as --json); status also\n"
	      "                        prometheus\n"
	      "  -v, --verbose         say more; twice: every statement\n"
	      "  -q, --quiet           print errors only (and the data asked for)\n"
	      "  -h, --help            show this help\n"
	      "  -V, --version         show the version\n"
	      "\n"
	      "Exit status: 0 done; 1 the requested check failed: status or delete found no\n"
	      "such resource, check found the grant not live (or other tokens), release\n"
	      "found no such grant or one that had ended, doctor found a problem;\n"
	      "64 usage error (nothing written); 69 database unavailable or schema missing;\n"
	      "70 internal error; 71 system error; 75 delete refused: the resource is held\n"
	      "or waited on; 78 configuration error.\n",
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
	/* Command options, checked before connecting. */
	unsigned given; /* O_* bits seen */
	unsigned long long since, retention, until;
	const char *output;
	unsigned long limit;
	const char *reason;
	enum lr_status_format format;
	enum lr_status_format asked; /* what --format said */
	bool names;
	bool view; /* reading through the procedures of 75-views.sql (read_ok) */
	/* The command and its arguments, in order, options taken out. */
	char **args;
	int nargs;
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

/* A whole number 1..max written with digits only. */
static bool parse_count(const char *s, unsigned long long max, unsigned long long *out)
{
	unsigned long long v = 0;

	if (!*s)
		return false;
	for (; *s; s++) {
		if (*s < '0' || *s > '9' || v > (max - (unsigned)(*s - '0')) / 10)
			return false;
		v = v * 10 + (unsigned)(*s - '0');
	}
	*out = v;
	return v > 0;
}

/* A resource name as the commands that name one take it: a name, or a
 * key's row name "id:KEY" as `list` prints it. */
static bool resource_ok(const char *name)
{
	return lr_name_valid(strncmp(name, "id:", 3) == 0 ? name + 3 : name);
}

static bool name_arg(const char *name)
{
	if (resource_ok(name))
		return true;
	/* An oversized name is cut, as lockrun cuts it: the start is enough
	 * to recognise it, and a line should stay a line. */
	if (strlen(name) > 80)
		lr_log_error("name '%.20s...' is longer than %d bytes", name, LR_NAME_MAX);
	else
		lr_log_error("invalid name '%s': use 1-%d letters, digits, '_', '.' or '-', "
		             "starting with a letter or digit",
		             name, LR_NAME_MAX);
	return false;
}

static bool grant_arg(const char *s, uint64_t *id)
{
	unsigned long long v;

	if (parse_count(s, UINT64_MAX, &v)) {
		*id = v;
		return true;
	}
	lr_log_error("invalid grant number '%s': use the whole number lockrun gave as "
	             "LOCKRUN_GRANT",
	             s);
	return false;
}

/* Who runs this command, for the records it writes: the OS user and the
 * host, escaped to fit the columns (see text.h). Heap strings. */
static bool whoami(char **user, char **host)
{
	struct passwd *pw = getpwuid(geteuid());
	char h[256];

	if (gethostname(h, sizeof(h)) != 0)
		snprintf(h, sizeof(h), "unknown");
	h[sizeof(h) - 1] = '\0';
	/* The widths of the os_user and host columns. */
	*host = lr_text_record(h, 255);
	*user = lr_text_record(pw ? pw->pw_name : "unknown", 64);
	if (*host && *user)
		return true;
	lr_log_error("out of memory");
	return false;
}

/* The server's error number at the end of a message, "... (1142)", or 0:
 * init's last statement (releasing its lock) has cleared lr_db_errno. */
static unsigned error_number(const char *msg)
{
	const char *open = strrchr(msg, '(');
	unsigned n = 0;

	if (!open || sscanf(open, "(%u)", &n) != 1 || msg[strlen(msg) - 1] != ')')
		return 0;
	return n;
}

static int cmd_init(struct ctl *c, int argc, char **argv)
{
	char err[1024], hint[1024];
	unsigned from, to;
	bool routines;

	(void)argc;
	(void)argv;
	if (!lr_schema_settings(c->db, err, sizeof(err)) ||
	    !lr_schema_migrate(c->db, &from, &to, &routines, err, sizeof(err))) {
		lr_log_error(
		    "init failed: %s%s", err,
		    lr_hint_rights(error_number(err), "init", &c->cfg, hint, sizeof(hint)));
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
 * The schema check every command but init and doctor starts with: the
 * first read of lockrun's tables, so an account without table rights
 * (lockrun's own) is refused here, and told which account to use. With
 * read_only (status, list, history, check), such an account (1142: its
 * role may only call the procedures) reads through the procedures made for
 * it (sql/routines/75-views.sql) instead, which show everything but
 * commands and secrets: c->view. Those exist once 'lockrunctl init' of
 * this version ran, so they also vouch for the schema. One query.
 */
static bool schema_check(struct ctl *c, bool read_only)
{
	char err[1024], hint[1024];

	if (lr_schema_check(c->db, err, sizeof(err)))
		return true;
	if (read_only && lr_db_errno(c->db) == ER_TABLEACCESS_DENIED_ERROR) {
		lr_log_debug("%s; reading through the procedures of lockrun's own account", err);
		c->view = true;
		return true;
	}
	lr_log_error("%s%s", err,
	             lr_hint_rights(lr_db_errno(c->db), c->args[0], &c->cfg, hint, sizeof(hint)));
	return false;
}

static bool schema_ok(struct ctl *c)
{
	return schema_check(c, false);
}

static bool read_ok(struct ctl *c)
{
	return schema_check(c, true);
}

/* A read-only command's failure: its error, and for one made through the
 * procedures of lockrun's own account what to do when they are missing
 * or not granted (lr_hint_rights). Exit status 69. */
static int read_failed(struct ctl *c, const char *err)
{
	char hint[1024];

	lr_log_error(
	    "%s%s", err,
	    c->view ? lr_hint_rights(lr_db_errno(c->db), c->args[0], &c->cfg, hint, sizeof(hint))
	            : "");
	return LR_EXIT_UNAVAILABLE;
}

/*
 * Creates or resizes a semaphore and audits the change with who did it
 * from where. Host and user names are the system's bytes: they are
 * recorded escaped (see text.h) to fit the audit's utf8mb4 columns, so an
 * odd name never stops the change.
 */
static int cmd_set(struct ctl *c, int argc, char **argv)
{
	char err[1024], *host = NULL, *user = NULL;
	const char *name = argv[1];
	unsigned cap;
	long old;
	int rc = LR_EXIT_OK;

	(void)argc;
	if (!schema_ok(c))
		return LR_EXIT_UNAVAILABLE;
	if (!parse_capacity(argv[2], &cap))
		return LR_EXIT_SOFTWARE; /* checked before connecting */
	if (!whoami(&user, &host)) {
		rc = LR_EXIT_SOFTWARE;
		goto out;
	}
	switch (lr_admin_set_capacity(c->db, name, cap, user, host, &old, err, sizeof(err))) {
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
	free(host);
	free(user);
	return rc;
}

/*
 * max-ttl [DURATION]: shows, or sets, the longest lease this database
 * grants (lr_settings.max_ttl_ms): also how long a fail-over to another
 * server holds new grants back. Refuses to go below a live grant's lease.
 * One or two round trips.
 */
static int cmd_max_ttl(struct ctl *c, int argc, char **argv)
{
	char err[512], d1[32], d2[32], grant_until[32] = "";
	uint64_t old = 0, ms = 0;
	double s = 0;
	enum lr_settings_result r;

	if (!schema_ok(c))
		return LR_EXIT_UNAVAILABLE;
	if (argc > 1) {
		lr_duration_parse(argv[1], 86400, &s); /* checked before connecting */
		ms = (uint64_t)(s * 1000 + 0.5);
		r = lr_settings_set_max_ttl(c->db, ms, &old, grant_until, sizeof(grant_until), err,
		                            sizeof(err));
	} else {
		r = lr_settings_max_ttl(c->db, &ms, err, sizeof(err));
		old = ms;
	}
	if (r != LR_SETTINGS_OK) {
		lr_log_error("%s", err);
		return r == LR_SETTINGS_REFUSED ? LR_EXIT_USAGE : LR_EXIT_UNAVAILABLE;
	}
	lr_duration_format((double)ms / 1000, d1, sizeof(d1));
	lr_duration_format((double)old / 1000, d2, sizeof(d2));
	if (c->json && *grant_until)
		printf("{\"max_ttl_ms\":%" PRIu64 ",\"was_ms\":%" PRIu64
		       ",\"grants_from\":\"%s\"}\n",
		       ms, old, grant_until);
	else if (c->json)
		printf("{\"max_ttl_ms\":%" PRIu64 ",\"was_ms\":%" PRIu64 "}\n", ms, old);
	else if (c->verbosity >= 0 && *grant_until)
		printf(
		    "max-ttl %s (was %s): a fail-over holds new grants back that long, plus 5 s, "
		    "from now on; leases up to %s from %s UTC, once replicas have it (until then "
		    "up to the old limit)\n",
		    d1, d2, d1, grant_until);
	else if (c->verbosity >= 0 && old != ms)
		printf("max-ttl %s (was %s): leases up to %s; a fail-over holds new grants back "
		       "that long, plus 5 s\n",
		       d1, d2, d1);
	else if (c->verbosity >= 0)
		printf("max-ttl %s: leases up to %s; a fail-over holds new grants back that long, "
		       "plus 5 s\n",
		       d1, d1);
	return LR_EXIT_OK;
}

static int cmd_status(struct ctl *c, int argc, char **argv)
{
	const char *name = argc > 1 ? argv[1] : NULL;
	char err[1024];
	bool found;

	if (!read_ok(c))
		return LR_EXIT_UNAVAILABLE;
	if (!lr_status_print(c->db, name, c->format, c->view, stdout, &found, err, sizeof(err)))
		return read_failed(c, err);
	if (name && !found) {
		if (c->format == LR_STATUS_TEXT)
			lr_log_error("no resource named '%s'", name);
		return LR_EXIT_FAILURE;
	}
	if (!name && !found && c->format == LR_STATUS_TEXT && c->verbosity >= 0)
		printf(
		    "no resources yet; create a semaphore with 'lockrunctl set NAME CAPACITY'\n");
	return LR_EXIT_OK;
}

static int cmd_list(struct ctl *c, int argc, char **argv)
{
	char err[1024];

	if (!read_ok(c))
		return LR_EXIT_UNAVAILABLE;
	if (!lr_admin_list(c->db,
	                   c->names  ? LR_ADMIN_NAMES
	                   : c->json ? LR_ADMIN_JSON
	                             : LR_ADMIN_TABLE,
	                   argc > 1 ? argv[1] : NULL, c->view, stdout, err, sizeof(err)))
		return read_failed(c, err);
	return LR_EXIT_OK;
}

/* The exit status of an administrative change, its error logged: 1 no
 * such resource, 75 refused while in use, 69 the database failed. */
static int admin_rc(enum lr_admin_result r, const char *err)
{
	if (r == LR_ADMIN_OK)
		return LR_EXIT_OK;
	lr_log_error("%s", err);
	return r == LR_ADMIN_MISSING ? LR_EXIT_FAILURE
	       : r == LR_ADMIN_BUSY  ? LR_EXIT_CONFLICT
	                             : LR_EXIT_UNAVAILABLE;
}

/*
 * delete NAME, pause NAME [--reason TEXT], resume NAME: changes to one
 * resource that need who does them, from where (for the audit). Deleting
 * keeps the fence as a floor; a paused resource grants nothing new (its
 * waiters wait, its holders run on) until resumed. One transaction each
 * (lr_admin_delete, lr_admin_pause).
 */
static int cmd_change(struct ctl *c, int argc, char **argv)
{
	char err[1024], *host = NULL, *user = NULL;
	unsigned long long fence = 0;
	bool del = strcmp(argv[0], "delete") == 0, pause = strcmp(argv[0], "pause") == 0;
	bool changed = false;
	enum lr_admin_result r;
	int rc = LR_EXIT_UNAVAILABLE;

	(void)argc;
	if (!schema_ok(c))
		return LR_EXIT_UNAVAILABLE;
	if (!whoami(&user, &host)) {
		rc = LR_EXIT_SOFTWARE;
		goto out;
	}
	if (del)
		r = lr_admin_delete(c->db, argv[1], user, host, &fence, err, sizeof(err));
	else
		r = lr_admin_pause(c->db, argv[1], pause, c->reason, user, host, &changed, err,
		                   sizeof(err));
	if (r == LR_ADMIN_OK && c->verbosity >= 0 && del)
		printf("%s: deleted; a new resource of this name starts above token %llu\n",
		       argv[1], fence);
	else if (r == LR_ADMIN_OK && c->verbosity >= 0)
		printf("%s: %s%s\n", argv[1], pause ? "paused" : "resumed",
		       changed ? "" : " (it was already)");
	rc = admin_rc(r, err);
out:
	free(host);
	free(user);
	return rc;
}

/*
 * timeline [NAME...] [--since D] [--until D] [-o FILE]: the lock log of the
 * window (default: the last hour) as a picture: SVG into FILE, else text.
 * Two queries.
 */
static int cmd_timeline(struct ctl *c, int argc, char **argv)
{
	struct lr_timeline_query q = {.names = argv + 1,
	                              .nnames = (size_t)argc - 1,
	                              .since = c->since ? c->since : 3600,
	                              .until = c->until};
	char err[1024];
	size_t shown = 0;
	FILE *out = stdout;
	int rc = LR_EXIT_UNAVAILABLE;

	if (!schema_ok(c))
		return LR_EXIT_UNAVAILABLE;
	if (c->output && !(out = fopen(c->output, "w"))) {
		lr_log_error("cannot write %s: %s", c->output, strerror(errno));
		return LR_EXIT_CANTCREAT;
	}
	if (!lr_timeline_print(c->db, &q, c->output != NULL, out, &shown, err, sizeof(err))) {
		lr_log_error("%s", err);
		goto out;
	}
	rc = LR_EXIT_OK;
	if (c->output && c->verbosity >= 0)
		printf("%s: %zu grant%s\n", c->output, shown, shown == 1 ? "" : "s");
	else if (!c->output && !shown && c->verbosity >= 0)
		puts("no grants in this window");
out:
	if (out != stdout && fclose(out) != 0 && rc == LR_EXIT_OK) {
		lr_log_error("cannot write %s: %s", c->output, strerror(errno));
		rc = LR_EXIT_CANTCREAT;
	}
	/* No half-written picture is left behind. */
	if (out != stdout && rc != LR_EXIT_OK)
		unlink(c->output);
	return rc;
}

static int cmd_history(struct ctl *c, int argc, char **argv)
{
	struct lr_history_query q = {.name = argc > 1 ? argv[1] : NULL,
	                             .since = c->since,
	                             .limit = c->limit ? c->limit : 50};
	char err[1024];
	size_t shown;

	if (!read_ok(c))
		return LR_EXIT_UNAVAILABLE;
	if (!lr_history_print(c->db, &q, c->json, c->view, stdout, &shown, err, sizeof(err)))
		return read_failed(c, err);
	if (!shown && !c->json && c->verbosity >= 0)
		printf("no runs%s%s%s\n", q.name ? " of '" : "", q.name ? q.name : "",
		       q.name ? "'" : "");
	return LR_EXIT_OK;
}

static int cmd_sweep(struct ctl *c, int argc, char **argv)
{
	struct lr_sweep_counts n;
	unsigned long long keep = c->given & O_RETENTION ? c->retention : LR_SWEEP_DEFAULT_KEEP;
	char err[1024], d[32];

	(void)argc;
	(void)argv;
	if (!schema_ok(c))
		return LR_EXIT_UNAVAILABLE;
	if (!lr_sweep_run(c->db, keep, &n, err, sizeof(err))) {
		lr_log_error("sweep stopped: %s", err);
		return LR_EXIT_UNAVAILABLE;
	}
	if (c->json)
		printf(
		    "{\"expired_grants\":%llu,\"expired_holds\":%llu,\"dead_waiters\":%llu,"
		    "\"orphan_grants\":%llu,\"grants_deleted\":%llu,\"grant_items_deleted\":%llu,"
		    "\"audit_deleted\":%llu,\"once_deleted\":%llu,\"retention_s\":%llu,"
		    "\"used_repaired\":%llu,\"transactions\":%llu}\n",
		    n.expired, n.holds, n.waiters, n.orphans, n.grants_deleted, n.items_deleted,
		    n.audit_deleted, n.once_deleted, keep, n.recounted, n.transactions);
	else if (c->verbosity >= 0)
		printf("ended %llu expired grant%s (%llu hold%s and %llu dead queue place%s "
		       "removed) and %llu open grant%s holding nothing\n"
		       "deleted %llu log entr%s that ended more than %s ago, %llu audit "
		       "row%s older than %d days and %llu --once-per completion%s past use\n",
		       n.expired, n.expired == 1 ? "" : "s", n.holds, n.holds == 1 ? "" : "s",
		       n.waiters, n.waiters == 1 ? "" : "s", n.orphans, n.orphans == 1 ? "" : "s",
		       n.grants_deleted, n.grants_deleted == 1 ? "y" : "ies",
		       lr_duration_format((double)keep, d, sizeof(d)), n.audit_deleted,
		       n.audit_deleted == 1 ? "" : "s", LR_SWEEP_AUDIT_DAYS, n.once_deleted,
		       n.once_deleted == 1 ? "" : "s");
	return LR_EXIT_OK;
}

static int grant_rc(enum lr_grant_result r, const char *err, bool log_not)
{
	switch (r) {
	case LR_GRANT_OK:
		return LR_EXIT_OK;
	case LR_GRANT_NOT:
		if (log_not)
			lr_log_error("%s", err);
		return LR_EXIT_FAILURE;
	default:
		lr_log_error("%s", err);
		return LR_EXIT_UNAVAILABLE;
	}
}

static int cmd_release(struct ctl *c, int argc, char **argv)
{
	struct lr_grant_releaser by = {0};
	char err[1024], *host = NULL, *user = NULL, *note = NULL;
	uint64_t id;
	int rc = LR_EXIT_SOFTWARE;

	(void)argc;
	if (!grant_arg(argv[1], &id))
		return LR_EXIT_USAGE;
	if (!schema_ok(c))
		return LR_EXIT_UNAVAILABLE;
	if (!whoami(&user, &host) || !(note = lr_text_record(c->reason, 255)))
		goto out;
	by.os_user = user;
	by.host = host;
	by.reason = note;
	rc = grant_rc(
	    lr_grant_release(c->db, id, &by, c->json, c->verbosity < 0, stdout, err, sizeof(err)),
	    err, true);
out:
	free(host);
	free(user);
	free(note);
	return rc;
}

/* NAME=TOKEN, split at the last '=': a name and a whole number. */
static bool token_arg(char *s, struct lr_grant_token *t)
{
	char *eq = strrchr(s, '=');
	unsigned long long v;

	if (!eq || eq == s || !parse_count(eq + 1, UINT64_MAX, &v)) {
		lr_log_error("invalid '%s': use NAME=TOKEN, TOKEN a whole number (LOCKRUN_FENCE)",
		             s);
		return false;
	}
	*eq = '\0';
	if (!resource_ok(s)) {
		*eq = '=';
		lr_log_error("invalid name in '%s': use 1-%d letters, digits, '_', '.' or '-', "
		             "starting with a letter or digit",
		             s, LR_NAME_MAX);
		return false;
	}
	t->name = s;
	t->token = v;
	return true;
}

static int cmd_check(struct ctl *c, int argc, char **argv)
{
	struct lr_grant_token want[64];
	enum lr_grant_result r;
	char err[1024];
	uint64_t id;

	if (!grant_arg(argv[1], &id))
		return LR_EXIT_USAGE;
	for (int i = 2; i < argc; i++)
		if (!token_arg(argv[i], &want[i - 2]))
			return LR_EXIT_USAGE;
	if (!read_ok(c))
		return LR_EXIT_UNAVAILABLE;
	r = lr_grant_check(c->db, id, c->view, want, (size_t)argc - 2, c->json, c->verbosity < 0,
	                   stdout, err, sizeof(err));
	if (r == LR_GRANT_DBERROR)
		return read_failed(c, err);
	return grant_rc(r, err, false);
}

/*
 * new-epoch: starts a fail-over epoch on the server we are connected to
 * (lr_admin_new_epoch): the step a fail-over tool runs on the server it
 * made the writer. Two round trips.
 */
static int cmd_new_epoch(struct ctl *c, int argc, char **argv)
{
	struct lr_admin_epoch e;
	char err[512];

	(void)argc;
	(void)argv;
	if (!schema_ok(c))
		return LR_EXIT_UNAVAILABLE;
	if (lr_admin_new_epoch(c->db, &e, err, sizeof(err)) != LR_ADMIN_OK) {
		lr_log_error("%s", err);
		return LR_EXIT_UNAVAILABLE;
	}
	if (!e.started) {
		lr_log_error("no new epoch: this server's clock has not passed the end of the "
		             "previous writer's quarantine, %s UTC by that server's clock; it is "
		             "behind that server's, or that server failed during its quarantine; "
		             "grants wait until then",
		             e.until);
		return LR_EXIT_FAILURE;
	}
	if (c->verbosity >= 0)
		printf("epoch %s: no new grants until %s UTC; tokens above %s\n", e.epoch, e.until,
		       e.floor);
	return LR_EXIT_OK;
}

static int cmd_doctor(struct ctl *c, int argc, char **argv)
{
	struct lr_doctor_opts o = {.ttl = c->cfg.lock.ttl,
	                           .clock_warn_s = 2.0,
	                           .json = c->json,
	                           .loop = &c->loop,
	                           .params = &c->cfg.db};
	unsigned problems;

	(void)argc;
	(void)argv;
	if (!lr_doctor_run(c->db, &o, stdout, &problems)) {
		lr_log_error("%s", lr_db_error(c->db));
		return LR_EXIT_UNAVAILABLE;
	}
	return problems ? LR_EXIT_FAILURE : LR_EXIT_OK;
}

/* The commands: arguments, which options apply, and the handler (which
 * gets argv[0] = the command). */
static const struct command {
	const char *name;
	int min, max;
	unsigned opts;
	int (*run)(struct ctl *c, int argc, char **argv);
} commands[] = {
    {"init", 0, 0, 0, cmd_init},
    {"set", 2, 2, 0, cmd_set},
    {"max-ttl", 0, 1, O_JSON | O_FORMAT, cmd_max_ttl},
    {"status", 0, 1, O_JSON | O_FORMAT, cmd_status},
    {"list", 0, 1, O_JSON | O_FORMAT | O_NAMES, cmd_list},
    {"delete", 1, 1, 0, cmd_change},
    {"pause", 1, 1, O_REASON, cmd_change},
    {"resume", 1, 1, 0, cmd_change},
    {"history", 0, 1, O_JSON | O_FORMAT | O_SINCE | O_LIMIT, cmd_history},
    {"timeline", 0, 64, O_SINCE | O_UNTIL | O_OUTPUT, cmd_timeline},
    {"sweep", 0, 0, O_JSON | O_FORMAT | O_RETENTION, cmd_sweep},
    {"release", 1, 1, O_JSON | O_FORMAT | O_REASON, cmd_release},
    {"check", 1, 65, O_JSON | O_FORMAT, cmd_check},
    {"doctor", 0, 0, O_JSON | O_FORMAT, cmd_doctor},
    {"new-epoch", 0, 0, 0, cmd_new_epoch},
};

static const char *const opt_names[] = {"--json",   "--since", "--limit", "--retention", "--reason",
                                        "--format", "--names", "--until", "--output"};

/* Checks the argument count of a command before anything connects. */
static bool arity(const char *cmd, int have, int min, int max)
{
	if (have >= min && have <= max)
		return true;
	if (max == 0)
		lr_log_error("'%s' takes no arguments (see 'lockrunctl --help')", cmd);
	else if (min == max)
		lr_log_error("'%s' takes exactly %d argument%s (see 'lockrunctl --help')", cmd, max,
		             max == 1 ? "" : "s");
	else if (have < min)
		lr_log_error("'%s' takes at least %d argument (see 'lockrunctl --help')", cmd, min);
	else
		lr_log_error("'%s' takes at most %d argument%s (see 'lockrunctl --help')", cmd, max,
		             max == 1 ? "" : "s");
	return false;
}

/* Characters (not bytes) of UTF-8 text. */
static size_t utf8_chars(const char *s)
{
	size_t n = 0;

	for (; *s; s++)
		n += ((unsigned char)*s & 0xC0) != 0x80;
	return n;
}

/* Everything about the command line that can be checked before
 * connecting: the command exists, takes these options and this many
 * arguments, and its names and numbers are well-formed. */
static const struct command *command_ok(struct ctl *c, int argc, char **argv)
{
	const struct command *cmd = NULL;
	unsigned extra;
	size_t chars;

	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (strcmp(argv[0], commands[i].name) == 0)
			cmd = &commands[i];
	if (!cmd) {
		lr_log_error("unknown command '%s' (see 'lockrunctl --help')", argv[0]);
		return NULL;
	}
	if ((extra = c->given & ~cmd->opts)) {
		for (size_t b = 0; b < sizeof(opt_names) / sizeof(opt_names[0]); b++)
			if (extra & (1u << b)) {
				lr_log_error("option '%s' does not apply to '%s' (see 'lockrunctl "
				             "--help')",
				             opt_names[b], cmd->name);
				return NULL;
			}
	}
	/* --format=json is --json, for every command that prints JSON; only
	 * status speaks Prometheus; and two options that disagree are an
	 * error, not a silent choice. */
	if ((c->given & O_FORMAT) && c->asked == LR_STATUS_PROMETHEUS &&
	    strcmp(cmd->name, "status") != 0) {
		lr_log_error(
		    "--format=prometheus applies to 'status' only; '%s' prints text or json",
		    cmd->name);
		return NULL;
	}
	if ((c->given & O_FORMAT) && (c->given & O_JSON) && c->asked != LR_STATUS_JSON) {
		lr_log_error("--json and --format=%s disagree; give one of them",
		             c->asked == LR_STATUS_TEXT ? "text" : "prometheus");
		return NULL;
	}
	if (!arity(cmd->name, argc - 1, cmd->min, cmd->max))
		return NULL;
	if (strcmp(cmd->name, "set") == 0) {
		unsigned cap;
		if (!lr_name_valid(argv[1])) {
			name_arg(argv[1]);
			return NULL;
		}
		if (!parse_capacity(argv[2], &cap)) {
			lr_log_error("invalid capacity '%s': use a whole number 1-1000000",
			             argv[2]);
			return NULL;
		}
		/* Capacity 0 made every run fail as a usage error (64); to
		 * stop new runs for a while, they should wait instead. */
		if (cap == 0) {
			lr_log_error("capacity 0 would make every run of '%s' fail; to hold new "
			             "runs back (they wait), use 'lockrunctl pause %s'",
			             argv[1], argv[1]);
			return NULL;
		}
	} else if (strcmp(cmd->name, "max-ttl") == 0 && argc > 1) {
		char err[512];
		double s;
		if (!lr_duration_arg("max-ttl", argv[1], 1, 86400, &s, err, sizeof(err))) {
			lr_log_error("%s", err);
			return NULL;
		}
	} else if ((strcmp(cmd->name, "status") == 0 || strcmp(cmd->name, "delete") == 0 ||
	            strcmp(cmd->name, "history") == 0 || strcmp(cmd->name, "pause") == 0 ||
	            strcmp(cmd->name, "resume") == 0) &&
	           argc > 1 && !name_arg(argv[1])) {
		return NULL;
	} else if (strcmp(cmd->name, "list") == 0 && argc > 1 &&
	           strcmp(argv[1], "semaphore") != 0 && strcmp(argv[1], "mutex") != 0 &&
	           strcmp(argv[1], "rwlock") != 0 && strcmp(argv[1], "key") != 0) {
		lr_log_error("list: unknown kind '%s': use semaphore, mutex, rwlock or key",
		             argv[1]);
		return NULL;
	} else if (strcmp(cmd->name, "timeline") == 0) {
		for (int i = 1; i < argc; i++)
			if (!name_arg(argv[i]))
				return NULL;
		if ((c->given & O_SINCE) && c->until >= c->since) {
			lr_log_error("--until must be less long ago than --since");
			return NULL;
		}
		if (!(c->given & O_SINCE) && c->until >= 3600) {
			lr_log_error("--until must be less long ago than --since (default 1h)");
			return NULL;
		}
	} else if (strcmp(cmd->name, "release") == 0) {
		const char *r = c->reason;
		if (!r || !r[strspn(r, " \t\n")]) {
			lr_log_error("release needs --reason TEXT: why the grant is released, for "
			             "the lock log");
			return NULL;
		}
	}
	/* The lock log keeps 255 characters of a reason. */
	if (c->reason && (chars = utf8_chars(c->reason)) > 255) {
		lr_log_error("--reason is %zu characters long; at most 255", chars);
		return NULL;
	}
	return cmd;
}

/* A DURATION option in whole seconds (a fraction rounds up), at most
 * max_s; zero only if allowed (else a millisecond at least). */
static bool whole_seconds(const char *opt, const char *arg, double max_s, bool zero,
                          unsigned long long *out)
{
	char err[512];
	double d;

	if (!lr_duration_arg(opt, arg, zero ? 0 : 0.001, max_s, &d, err, sizeof(err))) {
		lr_log_error("%s", err);
		return false;
	}
	*out = lr_duration_ceil(d);
	return true;
}

/* Command options: values are checked here, before anything connects. */
static bool take_option(struct ctl *c, int opt, const char *arg)
{
	/* 100 years: beyond any retention, and far from overflow. */
	const double max_s = 100.0 * 365 * 86400;
	unsigned long long v;

	switch (opt) {
	case 'j':
		c->given |= O_JSON;
		c->json = true;
		c->format = LR_STATUS_JSON;
		return true;
	case 'S':
		c->given |= O_SINCE;
		return whole_seconds("--since", arg, max_s, false, &c->since);
	case 'R':
		c->given |= O_RETENTION;
		return whole_seconds("--retention", arg, max_s, true, &c->retention);
	case 'L':
		c->given |= O_LIMIT;
		if (parse_count(arg, 1000000, &v)) {
			c->limit = (unsigned long)v;
			return true;
		}
		lr_log_error("--limit: invalid count '%s': use a whole number 1-1000000", arg);
		return false;
	case 'r':
		c->given |= O_REASON;
		c->reason = arg;
		return true;
	case 'N':
		c->given |= O_NAMES;
		c->names = true;
		return true;
	case 'U':
		c->given |= O_UNTIL;
		return whole_seconds("--until", arg, max_s, true, &c->until);
	case 'o':
		c->given |= O_OUTPUT;
		c->output = arg;
		return true;
	default: /* 'F' */
		c->given |= O_FORMAT;
		if (strcmp(arg, "text") == 0)
			c->format = LR_STATUS_TEXT;
		else if (strcmp(arg, "json") == 0)
			c->format = LR_STATUS_JSON;
		else if (strcmp(arg, "prometheus") == 0)
			c->format = LR_STATUS_PROMETHEUS;
		else {
			lr_log_error("--format: unknown format '%s': use text, json or prometheus",
			             arg);
			return false;
		}
		c->asked = c->format;
		c->json = c->format == LR_STATUS_JSON || (c->given & O_JSON);
		if (c->given & O_JSON)
			c->format = LR_STATUS_JSON;
		return true;
	}
}

/*
 * Whether s is a negative number ("-1", "-0.5"): getopt would read it as
 * options, but lockrunctl has no digit options, so it is an argument, and
 * the command's own check names it ("invalid capacity '-1'").
 */
static bool negative_number(const char *s)
{
	return s[0] == '-' && s[1] >= '0' && s[1] <= '9';
}

/*
 * The session every lockrunctl command runs in, whatever the server's
 * global settings (doc/production.md, "Server settings"): autocommit on,
 * so that what init and the operator verbs write is committed (under a
 * global autocommit = 0 init's record of the routines was never, and
 * every later init applied them again); the server's own default
 * sql_mode, which the routines keep from the session that creates them
 * (ANSI_QUOTES or PIPES_AS_CONCAT would change what their text means,
 * '' would make a too-long value a silent truncation); and no statement
 * time limit, so that init's DDL is not cut off half-way. Folded into
 * the one SET each command already sent: no round trip of its own.
 */
static const char *session_settings(lr_db *db)
{
	return lr_db_is_mysql(db)
	           ? "SET SESSION time_zone = '+00:00', SESSION innodb_lock_wait_timeout = 5, "
	             "SESSION autocommit = 1, SESSION max_execution_time = 0, SESSION sql_mode = "
	             "'ONLY_FULL_GROUP_BY,STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,"
	             "ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION'"
	           : "SET SESSION time_zone = '+00:00', SESSION innodb_lock_wait_timeout = 5, "
	             "SESSION autocommit = 1, SESSION max_statement_time = 0, SESSION sql_mode = "
	             "'STRICT_TRANS_TABLES,ERROR_FOR_DIVISION_BY_ZERO,NO_AUTO_CREATE_USER,"
	             "NO_ENGINE_SUBSTITUTION'";
}

/*
 * Reads the options, wherever they stand, into c, and the command with its
 * arguments, in their order, into c->args (getopt in RETURN_IN_ORDER mode,
 * "-" in front of the option letters: nothing is permuted). Returns -1 to
 * go on, else the exit status: help, version, or a usage error, said in
 * one line that names the culprit. No system calls but the output.
 */
static int read_args(struct ctl *c, int argc, char **argv)
{
	char err[512];
	bool mid = false; /* getopt is inside a cluster like "-vq" */
	int opt, at;

	opterr = 0;
	for (;;) {
		if (!mid && optind < argc && negative_number(argv[optind])) {
			c->args[c->nargs++] = argv[optind++];
			continue;
		}
		at = optind;
		if ((opt = getopt_long(argc, argv, "-:c:jvqhVo:", longopts, NULL)) == -1)
			break;
		mid = optind == at;
		switch (opt) {
		case 1:
			c->args[c->nargs++] = optarg;
			break;
		case 'c':
			c->config = optarg;
			break;
		case 'j':
		case 'S':
		case 'L':
		case 'R':
		case 'r':
		case 'F':
		case 'N':
		case 'U':
		case 'o':
			if (!take_option(c, opt, optarg))
				return LR_EXIT_USAGE;
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
		default:
			lr_cli_bad_option(longopts, argv, at, opt, err, sizeof(err));
			lr_log_error("%s (see 'lockrunctl --help')", err);
			return LR_EXIT_USAGE;
		}
	}
	while (optind < argc) /* after "--" */
		c->args[c->nargs++] = argv[optind++];
	return -1;
}

/*
 * Which configuration file lockrunctl reads: -c, else $LOCKRUN_CONFIG,
 * else the operator's file when this user may read it (root, as it is
 * installed), else lr_config_load's default, /etc/lockrun.conf. lockrun
 * itself never reads the operator's file. One access(2).
 */
static const char *config_path(const struct ctl *c)
{
	const char *env = getenv("LOCKRUN_CONFIG");

	if (c->config || (env && *env))
		return c->config;
	return access(LR_OPERATOR_CONFIG, R_OK) == 0 ? LR_OPERATOR_CONFIG : NULL;
}

static int run(struct ctl *c, int argc, char **argv)
{
	const struct command *cmd;
	int rc;

	if (!(c->args = calloc((size_t)argc + 1, sizeof(*c->args)))) {
		lr_log_error("out of memory");
		return LR_EXIT_SOFTWARE;
	}
	if ((rc = read_args(c, argc, argv)) >= 0)
		return rc;
	lr_log_init("lockrunctl", c->verbosity < 0    ? LR_LOG_QUIET
	                          : c->verbosity == 0 ? LR_LOG_NORMAL
	                          : c->verbosity == 1 ? LR_LOG_VERBOSE
	                                              : LR_LOG_DEBUG);
	if (!c->nargs) {
		lr_log_error("no command given (see 'lockrunctl --help')");
		return LR_EXIT_USAGE;
	}
	if (!(cmd = command_ok(c, c->nargs, c->args)))
		return LR_EXIT_USAGE;
	if (!lr_config_load(&c->cfg, config_path(c))) {
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
	/* The doctor reports on any server, an unsupported one included. */
	if (cmd->run == cmd_doctor)
		lr_db_allow_any_server(c->db);
	if (!lr_db_connect(c->db)) {
		char hint[1024];

		lr_log_error("cannot connect to %s%s", lr_db_error(c->db),
		             lr_hint_connect(lr_db_errno(c->db), &c->cfg, hint, sizeof(hint)));
		return LR_EXIT_UNAVAILABLE;
	}
	/* An unsupported server (only the doctor is connected to one): no
	 * session set-up, which it may not understand; the doctor says what
	 * it is. */
	if (!lr_db_supported(c->db))
		return cmd->run(c, c->nargs, c->args);
	/* UTC, so NOW(6) is the procedures' UTC_TIMESTAMP(6); a short lock
	 * wait, so a hot row costs a retry, not a hang; READ COMMITTED, as
	 * the procedures use, so range scans take no gap locks. And the
	 * settings a server's global values would otherwise decide
	 * (session_settings). */
	if (!lr_db_query(c->db, session_settings(c->db)) ||
	    !lr_db_query(c->db, "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")) {
		lr_log_error("%s", lr_db_error(c->db));
		return LR_EXIT_UNAVAILABLE;
	}
	return cmd->run(c, c->nargs, c->args);
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
	free(c.args);
	return rc;
}
