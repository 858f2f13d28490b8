#include "schema.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <mysqld_error.h>

#include "log.h"
#include "strbuf.h"

static unsigned latest(void)
{
	return lr_migrations[lr_migrations_count - 1].version;
}

/* Reads the recorded schema version; a database without our tables is at
 * version 0. One query. */
bool lr_schema_version(lr_db *db, unsigned *version, char *err, size_t errlen)
{
	MYSQL_ROW row;

	*version = 0;
	if (!lr_db_query(db, "SELECT COALESCE(MAX(version), 0) FROM lr_schema")) {
		if (lr_db_errno(db) == ER_NO_SUCH_TABLE)
			return true;
		snprintf(err, errlen, "%s", lr_db_error(db));
		return false;
	}
	row = lr_db_fetch(db);
	if (row && row[0])
		*version = (unsigned)strtoul(row[0], NULL, 10);
	return true;
}

/* lockrun's start-up check: the schema exists and is one we understand. */
bool lr_schema_check(lr_db *db, char *err, size_t errlen)
{
	unsigned v;

	if (!lr_schema_version(db, &v, err, errlen))
		return false;
	if (v == 0) {
		snprintf(err, errlen, "%s: database has no lockrun schema; run 'lockrunctl init'",
		         lr_db_server(db));
		return false;
	}
	if (v < latest()) {
		snprintf(err, errlen,
		         "%s: lockrun schema is at version %u, this lockrun needs %u; "
		         "run 'lockrunctl init'",
		         lr_db_server(db), v, latest());
		return false;
	}
	if (v > latest())
		lr_log_debug("schema version %u is newer than ours (%u)", v, latest());
	return true;
}

/*
 * init's refusal of the global server settings under which lockrun cannot
 * work, before it writes anything, with what to change; called before
 * lr_schema_migrate. On MySQL, ANSI_QUOTES in the global sql_mode: a
 * session that logs in under it leaves the server's cache of an account's
 * privileges without those of its roles (measured on 9.7), so the runtime
 * account, whose privileges come through <database>_api, is denied its
 * database (1044) and the procedures (1370), and stays denied after the
 * mode is changed back, until FLUSH PRIVILEGES. On either server, with
 * the binary log on, binlog_format STATEMENT, under which the server
 * refuses every write of the routines (1665: they run at READ COMMITTED).
 * One query.
 */
bool lr_schema_settings(lr_db *db, char *err, size_t errlen)
{
	MYSQL_ROW row;

	if (!lr_db_query(db,
	                 "SELECT @@global.sql_mode, @@global.log_bin, @@global.binlog_format") ||
	    !(row = lr_db_fetch(db))) {
		snprintf(err, errlen, "%s", lr_db_error(db));
		return false;
	}
	if (lr_db_is_mysql(db) && row[0] && strstr(row[0], "ANSI_QUOTES")) {
		snprintf(
		    err, errlen,
		    "%s: the global sql_mode has ANSI_QUOTES, under which MySQL denies the "
		    "runtime account the privileges of its role (1044) until FLUSH PRIVILEGES: "
		    "take ANSI_QUOTES out of the global sql_mode, run FLUSH PRIVILEGES, then "
		    "init again; nothing was installed",
		    lr_db_server(db));
		return false;
	}
	if (row[1] && strcmp(row[1], "1") == 0 && row[2] && strcasecmp(row[2], "STATEMENT") == 0) {
		snprintf(err, errlen,
		         "%s: binlog_format is STATEMENT, under which the server refuses lockrun's "
		         "writes (1665): set binlog_format = ROW (or MIXED), then init again; "
		         "nothing was installed",
		         lr_db_server(db));
		return false;
	}
	return true;
}

/* "DELIMITER xx" on a line of its own, as the mariadb client reads it:
 * copies xx to delim (at most 7 bytes) and returns true. */
static bool delimiter_line(const char *t, size_t n, char *delim)
{
	size_t k = 0;

	if (n < 10 || strncasecmp(t, "DELIMITER", 9) != 0 || (t[9] != ' ' && t[9] != '\t'))
		return false;
	t += 10;
	n -= 10;
	while (n && (*t == ' ' || *t == '\t'))
		t++, n--;
	while (n && (t[n - 1] == ' ' || t[n - 1] == '\t' || t[n - 1] == '\r'))
		n--;
	if (n == 0 || n > 7)
		return false;
	for (; k < n; k++)
		delim[k] = t[k];
	delim[k] = '\0';
	return true;
}

#define OWNER "DEFINER = 'lockrun_owner'@'localhost'"

/* Copies s to out with every `from` replaced by `to`. */
static void swap_all(struct lr_sb *out, const char *s, const char *from, const char *to)
{
	const char *hit;

	while ((hit = strstr(s, from))) {
		lr_sb_add(out, s, (size_t)(hit - s));
		lr_sb_puts(out, to);
		s = hit + strlen(from);
	}
	lr_sb_puts(out, s);
}

/*
 * The install's seam between the servers: the files are written in
 * MariaDB's DDL, and this is MySQL's spelling of a statement of theirs.
 * MySQL has no CREATE OR REPLACE for routines: the routine is dropped
 * first (into pre; its EXECUTE grants go with it, and the access step of
 * the routines, 90-access.sql, grants them again). Nor IF NOT EXISTS for
 * ADD COLUMN and ADD INDEX: the words are dropped, and the caller counts
 * a column or index that exists already (1060, 1061) as added, which is
 * right because MySQL's DDL is atomic: a statement was applied wholly or
 * not at all. The files spell these in capitals, as this matches them.
 */
static void to_mysql(const char *s, struct lr_sb *out, struct lr_sb *pre)
{
	static const char cor[] = "CREATE OR REPLACE ";
	struct lr_sb tmp;

	lr_sb_init(&tmp);
	while (*s == ' ' || *s == '\t' || *s == '\n')
		s++;
	if (strncmp(s, cor, strlen(cor)) == 0) {
		const char *kind = "PROCEDURE", *at = strstr(s, " PROCEDURE ");
		const char *fn = strstr(s, " FUNCTION ");
		if (!at || (fn && fn < at))
			at = fn, kind = "FUNCTION";
		if (at) {
			const char *name = at + strlen(kind) + 2;
			size_t n = strcspn(name, " (\n");
			lr_sb_printf(pre, "DROP %s IF EXISTS %.*s", kind, (int)n, name);
		}
		lr_sb_puts(&tmp, "CREATE ");
		lr_sb_puts(&tmp, s + strlen(cor));
		s = lr_sb_str(&tmp);
	}
	struct lr_sb cols;
	lr_sb_init(&cols);
	swap_all(&cols, s, "ADD COLUMN IF NOT EXISTS ", "ADD COLUMN ");
	swap_all(out, lr_sb_str(&cols), "ADD INDEX IF NOT EXISTS ", "ADD INDEX ");
	lr_sb_finish(&cols);
	lr_sb_finish(&tmp);
}

/* MySQL's ER_CANNOT_USER_REFERENCED_AS_DEFINER, which MariaDB's header
 * does not have (its 4006 is another error). */
#define LR_MYSQL_USER_IS_DEFINER 4006

/* Whether MySQL's answer to the statement counts as done: a column or
 * index that exists (to_mysql), and an account that CREATE USER IF NOT
 * EXISTS names which is the definer of stored routines. MySQL refuses
 * (4006) even that statement, whose account exists and would be left as
 * it is, to an account without SET_ANY_DEFINER: a managed MySQL's master
 * account installing a second database whose definer another
 * administrator's install already named. */
static bool mysql_done(lr_db *db, const char *stmt)
{
	unsigned e = lr_db_errno(db);

	while (*stmt == ' ' || *stmt == '\t' || *stmt == '\n')
		stmt++;
	return e == ER_DUP_FIELDNAME || e == ER_DUP_KEYNAME ||
	       (e == LR_MYSQL_USER_IS_DEFINER &&
	        strncmp(stmt, "CREATE USER IF NOT EXISTS ", 26) == 0);
}

/* Sends one statement of a script; with own_definer, every routine it
 * defines as 'lockrun_owner'@'localhost' is defined by the connected
 * account instead (may_name_owner). On MySQL, in its spelling (to_mysql):
 * one more round trip for a routine. */
static bool send_stmt(lr_db *db, struct lr_sb *stmt, bool own_definer, char *err, size_t errlen)
{
	struct lr_sb swapped, spelled, pre;
	bool ok, mysql = lr_db_is_mysql(db);

	lr_sb_init(&swapped);
	lr_sb_init(&spelled);
	lr_sb_init(&pre);
	if (own_definer)
		swap_all(&swapped, lr_sb_str(stmt), OWNER, "DEFINER = CURRENT_USER");
	else
		lr_sb_puts(&swapped, lr_sb_str(stmt));
	if (mysql)
		to_mysql(lr_sb_str(&swapped), &spelled, &pre);
	else
		lr_sb_puts(&spelled, lr_sb_str(&swapped));
	ok = !swapped.oom && !spelled.oom && !pre.oom;
	if (ok && pre.len)
		ok = lr_db_query(db, lr_sb_str(&pre));
	if (ok)
		ok = lr_db_query(db, lr_sb_str(&spelled)) ||
		     (mysql && mysql_done(db, lr_sb_str(&spelled)));
	if (!ok)
		snprintf(err, errlen, "%s",
		         swapped.oom || spelled.oom || pre.oom ? "out of memory" : lr_db_error(db));
	/* A statement may answer with notes for the administrator (the
	 * access step moves accounts to the role). */
	int col = ok ? lr_db_column(db, "note") : -1;
	for (MYSQL_ROW row; col >= 0 && (row = lr_db_fetch(db));)
		if (row[col])
			lr_log_warn("%s", row[col]);
	lr_sb_finish(&pre);
	lr_sb_finish(&spelled);
	lr_sb_finish(&swapped);
	return ok;
}

/*
 * Runs a migration file statement by statement, the way the mariadb
 * client would, so one file serves `lockrunctl init` and a DBA alike: a
 * statement ends with the delimiter (';' unless a "DELIMITER xx" line
 * changed it, as routine bodies need) at the end of a line, and '--'
 * lines are comments. One round trip per statement.
 */
static bool run_script(lr_db *db, const char *sql, bool own_definer, char *err, size_t errlen)
{
	struct lr_sb stmt;
	const char *p = sql;
	char delim[8] = ";";
	bool ok = true;

	lr_sb_init(&stmt);
	while (*p && ok) {
		const char *nl = strchr(p, '\n');
		size_t n = nl ? (size_t)(nl - p) : strlen(p);
		size_t dl = strlen(delim);
		const char *t = p;
		while (t < p + n && (*t == ' ' || *t == '\t'))
			t++;
		if (delimiter_line(t, (size_t)(p + n - t), delim)) {
			/* nothing to send */
		} else if (!(t + 1 < p + n && t[0] == '-' && t[1] == '-')) {
			while (n && (p[n - 1] == ' ' || p[n - 1] == '\r' || p[n - 1] == '\t'))
				n--;
			if (n >= dl && memcmp(p + n - dl, delim, dl) == 0) {
				lr_sb_add(&stmt, p, n - dl);
				ok = send_stmt(db, &stmt, own_definer, err, errlen);
				lr_sb_reset(&stmt);
			} else {
				lr_sb_add(&stmt, p, n);
				lr_sb_puts(&stmt, "\n");
			}
		}
		p = nl ? nl + 1 : p + strlen(p);
	}
	lr_sb_finish(&stmt);
	return ok;
}

/*
 * The role <database>_api that the access step (sql/routines/90-access.sql)
 * grants the public procedures to, created here on MySQL, which cannot
 * prepare CREATE ROLE (1295) as that step does on MariaDB. Two queries.
 */
static bool create_role(lr_db *db, char *err, size_t errlen)
{
	struct lr_sb q;
	MYSQL_ROW row;
	bool ok = false;

	lr_sb_init(&q);
	if (!lr_db_query(db, "SELECT CONCAT(DATABASE(), '_api')") || !(row = lr_db_fetch(db)) ||
	    !row[0]) {
		snprintf(err, errlen, "%s",
		         lr_db_errno(db) ? lr_db_error(db) : "no database chosen");
		goto out;
	}
	lr_sb_puts(&q, "CREATE ROLE IF NOT EXISTS ");
	lr_db_sb_quote(db, &q, row[0]);
	if (q.oom || !lr_db_query(db, lr_sb_str(&q))) {
		snprintf(err, errlen, "%s", q.oom ? "out of memory" : lr_db_error(db));
		goto out;
	}
	ok = true;
out:
	lr_sb_finish(&q);
	return ok;
}

/*
 * Applies the routines (the files of sql/routines, concatenated in order)
 * when the database last got another text of them (lr_routines keeps the
 * SHA-256 compiled in here), so a changed routine reaches every database
 * on the next `lockrunctl init`. Never over a newer schema: its routines
 * may be newer than ours. Two queries when nothing changed; one per
 * statement of the files otherwise.
 */
static bool apply_routines(lr_db *db, bool own_definer, bool *applied, char *err, size_t errlen)
{
	char q[256];
	MYSQL_ROW row;

	*applied = false;
	if (!lr_db_query(db, "SELECT digest FROM lr_routines WHERE name = 'procedures'")) {
		snprintf(err, errlen, "%s", lr_db_error(db));
		return false;
	}
	row = lr_db_fetch(db);
	if (row && row[0] && strcmp(row[0], lr_routines_digest) == 0)
		return true;
	lr_log_info("applying sql/routines");
	if (lr_db_is_mysql(db) && !create_role(db, err, errlen))
		return false;
	if (!run_script(db, lr_routines_sql, own_definer, err, errlen))
		return false;
	snprintf(q, sizeof(q),
	         "REPLACE INTO lr_routines (name, digest, applied_at) "
	         "VALUES ('procedures', '%s', UTC_TIMESTAMP(6))",
	         lr_routines_digest);
	if (!lr_db_query(db, q)) {
		snprintf(err, errlen, "%s", lr_db_error(db));
		return false;
	}
	*applied = true;
	return true;
}

/*
 * Drops the triggers on lr_holds that lockrun 0.1 kept `used` with, once
 * the routines that keep it themselves are in place; until then the
 * routines count it from the hold rows (lr_fresh, sql/routines/20-sweep.sql),
 * which is right with or without them. Dropping a trigger needs SUPER on a
 * server with binary logging: without it, init says what to run instead
 * and goes on, as the routines are safe either way. One query when there
 * is nothing to drop.
 */
static bool drop_triggers(lr_db *db, char *err, size_t errlen)
{
	char names[3][65];
	size_t n = 0;
	MYSQL_ROW row;

	if (!lr_db_query(db,
	                 "SELECT TRIGGER_NAME FROM information_schema.TRIGGERS "
	                 "WHERE TRIGGER_SCHEMA = DATABASE() AND EVENT_OBJECT_TABLE = 'lr_holds' "
	                 "AND TRIGGER_NAME IN ('lr_holds_ai', 'lr_holds_ad', 'lr_holds_bu')")) {
		snprintf(err, errlen, "%s", lr_db_error(db));
		return false;
	}
	while ((row = lr_db_fetch(db)) && n < 3)
		snprintf(names[n++], sizeof(names[0]), "%s", row[0]);
	for (size_t i = 0; i < n; i++) {
		if (lr_db_queryf(db, "DROP TRIGGER %s", names[i]))
			continue;
		lr_log_warn("could not drop the old trigger %s (%s): until an account with SUPER "
		            "runs the statements in sql/routines/00-start.sql, the routines "
		            "count `used` from the hold rows, which is slower",
		            names[i], lr_db_error(db));
		return true;
	}
	if (!lr_db_query(db, "DELETE FROM lr_routines WHERE name = 'triggers'")) {
		snprintf(err, errlen, "%s", lr_db_error(db));
		return false;
	}
	return true;
}

/*
 * Whether this account may name 'lockrun_owner'@'localhost' as the
 * definer of lockrun's routines: that needs SET USER (SUPER before
 * MariaDB 10.5) on MariaDB, SET_ANY_DEFINER on MySQL, which the master
 * account of a managed database may not have. If not (1227), the routines
 * are defined by the connected account itself: they then run with its
 * rights, which init needs anyway, and the runtime account still may only
 * execute the public ones. The definer is created first, as migration 2
 * does (a failure is that migration's to report): MySQL also refuses
 * (1227) a definer that does not exist yet without ALLOW_NONEXISTENT_DEFINER,
 * which a managed MySQL does not give, and the probe would then answer
 * for that privilege rather than for SET_ANY_DEFINER. Creates and drops an
 * empty procedure: four statements.
 */
static bool may_name_owner(lr_db *db)
{
	lr_db_query(db, "CREATE USER IF NOT EXISTS 'lockrun_owner'@'localhost' ACCOUNT LOCK");
	lr_db_query(db, "DROP PROCEDURE IF EXISTS lr_definer_probe");
	if (lr_db_query(db, "CREATE " OWNER " PROCEDURE lr_definer_probe() BEGIN END")) {
		lr_db_query(db, "DROP PROCEDURE IF EXISTS lr_definer_probe");
		return true;
	}
	return lr_db_errno(db) != ER_SPECIFIC_ACCESS_DENIED_ERROR;
}

/*
 * Whether this MySQL server is a member of a multi-primary Group
 * Replication group, by the question the routines ask (lr_server_state,
 * sql/routines/05-server.sql): is the group_replication_applier channel's
 * applier on, and single_primary_mode off. The routines refuse such a
 * member (1290), the access step of init among them, so init asks first
 * and installs nothing there rather than stop half-way. A single-primary
 * group's primary is a writable server to init (its secondaries are
 * read-only: read_only below). Unknown (false) when the account may not
 * read performance_schema: the routines still refuse. One query; none on
 * MariaDB.
 */
static bool multi_primary(lr_db *db)
{
	MYSQL_ROW row;

	return lr_db_is_mysql(db) &&
	       lr_db_query(db,
	                   "SELECT COUNT(*) FROM performance_schema.replication_applier_status a "
	                   "JOIN performance_schema.global_variables v "
	                   "ON v.VARIABLE_NAME = 'group_replication_single_primary_mode' "
	                   "AND v.VARIABLE_VALUE <> 'ON' "
	                   "WHERE a.SERVICE_STATE = 'ON' "
	                   "AND a.CHANNEL_NAME = 'group_replication_applier'") &&
	       (row = lr_db_fetch(db)) && row[0] && strcmp(row[0], "0") != 0;
}

/*
 * Whether the server is read-only: read_only (MariaDB 12 may also say
 * NO_LOCK or NO_LOCK_NO_ADMIN; MySQL's super_read_only sets it too). The
 * routines refuse to write there (1290, lr_server_state), and init is no
 * way around that: an administrator may write on a read-only server, but
 * an old primary the fail-over fenced with read_only must not get a schema
 * or an epoch of its own. Returns its value (NULL: not read-only, or the
 * query failed, which the next statement reports). One query.
 */
static const char *read_only(lr_db *db)
{
	MYSQL_ROW row;

	if (!lr_db_query(db, "SELECT CAST(@@global.read_only AS CHAR)") ||
	    !(row = lr_db_fetch(db)) || !row[0] || !strcmp(row[0], "0") || !strcmp(row[0], "OFF"))
		return NULL;
	return row[0];
}

/*
 * Brings the schema up to the newest migration, then the routines up to
 * this build's. Serialised with a named lock so two concurrent inits do
 * not interleave their DDL; a second run finds nothing to do and changes
 * nothing. Refuses a member of a multi-primary Group Replication group
 * (multi_primary)
 * and a read-only server (read_only) before it writes anything. A few
 * queries per migration.
 */
bool lr_schema_migrate(lr_db *db, unsigned *from, unsigned *to, bool *routines, char *err,
                       size_t errlen)
{
	MYSQL_ROW row;
	const char *ro;
	bool ok = false, own_definer;

	if (!lr_db_query(db, "SELECT GET_LOCK('lockrun.schema', 30)") || !(row = lr_db_fetch(db)) ||
	    !row[0] || strcmp(row[0], "1") != 0) {
		snprintf(err, errlen, "%s",
		         lr_db_errno(db) ? lr_db_error(db)
		                         : "another 'lockrunctl init' is running; try again");
		return false;
	}
	if (multi_primary(db)) {
		snprintf(err, errlen,
		         "%s: this group is in multi-primary mode, which lockrun does not support: "
		         "nothing was installed",
		         lr_db_server(db));
		goto out;
	}
	if ((ro = read_only(db))) {
		snprintf(err, errlen,
		         "%s: the server is read-only (read_only = %s): run init on the primary; "
		         "nothing was installed",
		         lr_db_server(db), ro);
		goto out;
	}
	if (!lr_schema_version(db, from, err, errlen))
		goto out;
	own_definer = !may_name_owner(db);
	*to = *from;
	for (size_t i = 0; i < lr_migrations_count; i++) {
		const struct lr_migration *m = &lr_migrations[i];
		if (m->version <= *from)
			continue;
		lr_log_info("applying migration %s", m->name);
		if (!run_script(db, m->sql, own_definer, err, errlen))
			goto out;
		*to = m->version;
	}
	*routines = false;
	if (*to > latest())
		lr_log_info("schema version %u is newer than this lockrunctl's (%u): "
		            "its routines are left as they are",
		            *to, latest());
	else if (!apply_routines(db, own_definer, routines, err, errlen) ||
	         !drop_triggers(db, err, errlen))
		goto out;
	if (own_definer && (*to != *from || *routines))
		lr_log_warn("this account may not name 'lockrun_owner'@'localhost' as the "
		            "routines' definer (it lacks %s): they are defined by this "
		            "account, and stop working if it is dropped",
		            lr_db_is_mysql(db) ? "SET_ANY_DEFINER" : "SET USER");
	ok = true;
out:
	lr_db_query(db, "DO RELEASE_LOCK('lockrun.schema')");
	return ok;
}
