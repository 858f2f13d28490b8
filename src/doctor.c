#include "doctor.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <mysqld_error.h>

#include "duration.h"
#include "report.h"
#include "schema.h"
#include "strbuf.h"
#include "text.h"

/* The result version the procedures must report (lockcall.c's API_VERSION). */
#define DOCTOR_API   3
#define MAX_FINDINGS 40
#define MAX_SHOWN    10 /* accounts and resources named, at most */
#define RTT_PROBES   5

enum sev { SEV_OK, SEV_INFO, SEV_WARN, SEV_FAIL };
static const char *const sev_word[] = {"ok", "info", "WARN", "FAIL"};
static const char *const sev_json[] = {"ok", "info", "warning", "problem"};

struct finding {
	const char *check;
	enum sev sev;
	char text[1024];
};

/* The server variables doctor reads, all in one statement. */
enum {
	V_VERSION,
	V_COMMENT,
	V_READ_ONLY,
	V_SUPER_RO,
	V_WAIT,
	V_TZ,
	V_SYS_TZ,
	V_WSREP,
	V_GENERAL_LOG,
	V_SQL_MODE,
	V_LOG_BIN,
	V_BINLOG_FORMAT,
	V_AUTOCOMMIT,
	V_INIT_CONNECT,
	V_MAX_STMT,
	NVARS
};
static const char *const var_names[NVARS] = {
    "version",   "version_comment",  "read_only",  "super_read_only", "wait_timeout",
    "time_zone", "system_time_zone", "wsrep_on",   "general_log",     "sql_mode",
    "log_bin",   "binlog_format",    "autocommit", "init_connect",    "max_statement_time"};

struct doctor {
	lr_db *db;
	const struct lr_doctor_opts *o;
	const char *dbname; /* the database, "" when none */
	struct finding f[MAX_FINDINGS];
	size_t n;
	char *var[NVARS];
	bool mysql;    /* the server is MySQL, not MariaDB */
	bool operator; /* table rights but no EXECUTE: an operator's account */
};

__attribute__((format(printf, 4, 5))) static void say(struct doctor *d, const char *check,
                                                      enum sev sev, const char *fmt, ...)
{
	va_list ap;
	struct finding *f;

	if (d->n == MAX_FINDINGS)
		return;
	f = &d->f[d->n++];
	f->check = check;
	f->sev = sev;
	va_start(ap, fmt);
	vsnprintf(f->text, sizeof(f->text), fmt, ap);
	va_end(ap);
}

static bool on(const char *v)
{
	return v && (strcmp(v, "ON") == 0 || strcmp(v, "1") == 0);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static bool read_vars(struct doctor *d)
{
	MYSQL_ROW row;

	/* Global values: what a new session of lockrun starts with. */
	if (!lr_db_query(d->db, "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('version', "
	                        "'version_comment', 'read_only', 'super_read_only', "
	                        "'wait_timeout', 'time_zone', 'system_time_zone', 'wsrep_on', "
	                        "'general_log', 'sql_mode', 'log_bin', 'binlog_format', "
	                        "'autocommit', 'init_connect', 'max_statement_time')"))
		return false;
	while ((row = lr_db_fetch(d->db)))
		for (int i = 0; i < NVARS; i++)
			if (strcmp(row[0], var_names[i]) == 0 && row[1])
				d->var[i] = strdup(row[1]);
	return true;
}

/* Flavour and version: the schema needs MariaDB 10.6 or later (JSON_TABLE),
 * or MySQL 8.4 or later, of which only 9.7 is tested. (An older one never
 * gets here: the connection refuses it.) */
static void check_server(struct doctor *d)
{
	const char *v = d->var[V_VERSION] ? d->var[V_VERSION] : "?";
	const char *comment = d->var[V_COMMENT] ? d->var[V_COMMENT] : "?";
	unsigned major = 0, minor = 0;

	sscanf(v, "%u.%u", &major, &minor);
	if (!d->mysql)
		say(d, "server", SEV_OK, "MariaDB %s (%s)", v, comment);
	else if (major == 9 && minor == 7)
		say(d, "server", SEV_OK, "MySQL %s (%s)", v, comment);
	else
		say(d, "server", SEV_WARN,
		    "MySQL %s (%s): lockrun's SQL is written for MySQL 8.4 and later, but is "
		    "tested on MySQL 9.7 only",
		    v, comment);
}

/* max-ttl as text ("5m"), or why it is unknown: what a fail-over's
 * quarantine costs, plus 5 s. One query. */
static void max_ttl_text(struct doctor *d, char *buf, size_t len)
{
	MYSQL_ROW row;

	snprintf(buf, len, "not readable by this account");
	if (lr_db_query(d->db, "SELECT value / 1000 FROM lr_settings WHERE name = 'max_ttl_ms'") &&
	    (row = lr_db_fetch(d->db)) && row[0])
		lr_duration_format(strtod(row[0], NULL), buf, len);
}

/*
 * MySQL Group Replication (doc/production.md): a member of a single-primary
 * group takes locks on its primary, a multi-primary one none (its
 * routines refuse it: 1290, sql/routines/05-server.sql); the consistency
 * level decides whether a change of primary is a fail-over (EVENTUAL: a
 * quarantine each time) or costs nothing; and whether the account may read
 * replication_group_members, which says which member is the primary. The
 * group's variables come from performance_schema.global_variables, which
 * any account may read and which has them only where the plugin is loaded.
 * Two queries, three on a member at EVENTUAL.
 */
static void check_group(struct doctor *d)
{
	MYSQL_ROW row;
	char name[64] = "", mode[8] = "", level[40] = "?", self[24] = "", role[24] = "",
	     online[16] = "?", primary[300] = "", ttl[48];

	if (lr_db_query(d->db, "SELECT MAX(IF(VARIABLE_NAME = 'group_replication_group_name', "
	                       "VARIABLE_VALUE, NULL)), "
	                       "MAX(IF(VARIABLE_NAME = 'group_replication_single_primary_mode', "
	                       "VARIABLE_VALUE, NULL)), "
	                       "MAX(IF(VARIABLE_NAME = 'group_replication_consistency', "
	                       "VARIABLE_VALUE, NULL)) FROM performance_schema.global_variables "
	                       "WHERE VARIABLE_NAME LIKE 'group\\_replication\\_%'") &&
	    (row = lr_db_fetch(d->db))) {
		snprintf(name, sizeof(name), "%s", row[0] ? row[0] : "");
		snprintf(mode, sizeof(mode), "%s", row[1] ? row[1] : "");
		snprintf(level, sizeof(level), "%s", row[2] ? row[2] : "?");
	}
	if (!*name) {
		say(d, "galera", SEV_OK,
		    "MySQL, not in a Group Replication group: --named locks (GET_LOCK) are usable");
		return;
	}
	if (!lr_db_query(d->db, "SELECT MAX(IF(MEMBER_ID = @@server_uuid, MEMBER_STATE, NULL)), "
	                        "MAX(IF(MEMBER_ID = @@server_uuid, MEMBER_ROLE, NULL)), "
	                        "SUM(MEMBER_STATE = 'ONLINE'), "
	                        "MAX(IF(MEMBER_ROLE = 'PRIMARY' AND MEMBER_STATE = 'ONLINE', "
	                        "CONCAT(MEMBER_HOST, ':', MEMBER_PORT), NULL)) "
	                        "FROM performance_schema.replication_group_members")) {
		say(d, "group", SEV_WARN,
		    "this account may not read performance_schema.replication_group_members "
		    "(error %u): lockrun cannot ask which member is the primary, and tries the "
		    "listed "
		    "hosts in order, each secondary refusing (1290), one connect each; grant it: "
		    "GRANT SELECT ON performance_schema.replication_group_members TO lockrun_api "
		    "(sql/grant.sql)",
		    lr_db_errno(d->db));
	} else if ((row = lr_db_fetch(d->db))) {
		snprintf(self, sizeof(self), "%s", row[0] ? row[0] : "?");
		snprintf(role, sizeof(role), "%s", row[1] && *row[1] ? row[1] : "no role");
		snprintf(online, sizeof(online), "%s", row[2] ? row[2] : "0");
		snprintf(primary, sizeof(primary), "%s", row[3] ? row[3] : "none");
	}
	if (strcmp(mode, "ON") != 0) {
		say(d, "galera", SEV_FAIL,
		    "a member of a MySQL Group Replication group in multi-primary mode (%s "
		    "online): lockrun does not support that mode and takes no lock here; switch "
		    "the group to single-primary mode "
		    "(group_replication_switch_to_single_primary_mode())",
		    online);
		return;
	}
	if (*self && strcmp(self, "ONLINE") != 0 && strcmp(self, "?") != 0 &&
	    !on(d->var[V_READ_ONLY]) && !on(d->var[V_SUPER_RO]))
		say(d, "galera", SEV_FAIL,
		    "configured for a MySQL Group Replication group but %s, not in it, and "
		    "writable: lockrun takes it for a server of its own (a new epoch) and grants "
		    "here beside the group; keep a member out of its group super_read_only (as "
		    "MySQL leaves an expelled or stopped one, and starts one with "
		    "group_replication_start_on_boot) until it rejoins",
		    self);
	else if (*self)
		say(d, "galera", SEV_OK,
		    "a member of a single-primary MySQL Group Replication group (%s online), "
		    "itself %s %s; the primary is %s: lockrun writes on the primary only, and "
		    "refuses --named locks here (GET_LOCK is local to a member)",
		    online, self, role, primary);
	else
		say(d, "galera", SEV_OK,
		    "configured for a single-primary MySQL Group Replication group: lockrun "
		    "writes on the primary only, and refuses --named locks here (GET_LOCK is "
		    "local to a member)");
	if (strcmp(level, "EVENTUAL") == 0) {
		max_ttl_text(d, ttl, sizeof(ttl));
		say(d, "group", SEV_WARN,
		    "group_replication_consistency is EVENTUAL: a new primary answers reads "
		    "before it has applied the old one's last commits, so lockrun takes each "
		    "change of primary for a fail-over: a new epoch, whose grants wait max-ttl "
		    "(%s) plus 5 s; set it to BEFORE_ON_PRIMARY_FAILOVER (the default since "
		    "MySQL 8.4), which costs nothing until a change of primary",
		    ttl);
	} else {
		say(d, "group", SEV_OK,
		    "group_replication_consistency is %s: a new primary applies everything the "
		    "group certified before it answers, so a change of primary costs lockrun no "
		    "quarantine",
		    level);
	}
}

/* With more than one host listed: whether this configuration reaches the
 * Galera cluster's single writer node, the first member the cluster
 * reports (src/writer.h), and if not, why and what to change. One query. */
static void check_writer(struct doctor *d, const struct lr_db_params *p)
{
	struct lr_db_writer w;

	if (!p->galera_writer) {
		say(d, "galera", SEV_WARN,
		    "galera_writer = false: lockrun writes on the first of the %zu hosts that "
		    "answers, and clients that list them in another order write the same rows "
		    "on other nodes, which under contention can stall the whole cluster; remove "
		    "the setting so that all clients write on the writer node",
		    p->nhosts);
		return;
	}
	if (!lr_db_galera_writer(d->db, &w)) {
		say(d, "galera", SEV_INFO, "the cluster's members could not be read: %s",
		    lr_db_error(d->db));
	} else if (w.pick < 0) {
		say(d, "galera", SEV_WARN,
		    "[database] host lists %zu hosts, and none is a member the cluster reports "
		    "(%s, port %u): proxies or other addresses, so lockrun cannot tell which is "
		    "the writer node, and clients write where they are sent, on several nodes at "
		    "once; list the nodes themselves, by the addresses the cluster reports or "
		    "names that resolve to them, or have the proxies send every lockrun "
		    "connection to one node",
		    p->nhosts, w.members[0] ? w.members : "none", p->port ? p->port : 3306);
	} else if (w.writer < 0) {
		say(d, "galera", SEV_WARN,
		    "[database] host does not list the cluster's writer node, its first member "
		    "%s: lockrun writes on %s instead, while clients that list it write there, "
		    "so two nodes write the same rows; add %s to host",
		    w.first, p->hosts[w.pick], w.first);
	} else {
		say(d, "galera", SEV_OK,
		    "[database] host lists %zu nodes and the cluster's writer node, %s (the "
		    "first member, %s): lockrun sends its lock calls there, as every client "
		    "that lists it does, and to the next member while it is not Synced or does "
		    "not answer",
		    p->nhosts, p->hosts[w.writer], w.first);
	}
}

/* Galera: the table locks are safe (every grant writes the rows it
 * decides on, and certification aborts all but one writer); GET_LOCK is
 * local to a node, so --named is refused there. Contended lock rows
 * written on several nodes meet a flaw of the server: an applier that
 * needs a row a local COMMIT holds, while flow control keeps that COMMIT
 * from replicating, waits for its lock wait timeout, and the whole cluster
 * with it (doc/production.md, "Galera"). lockrun sends its lock calls to
 * the cluster's writer node (src/writer.h) when its configuration lists
 * more than one node; with one, it writes where it is told, and clients
 * told other nodes write beside it: that is what is warned about. */
static void check_galera(struct doctor *d)
{
	MYSQL_ROW row;
	char size[32] = "?", state[64] = "?";
	bool ready = false;
	const struct lr_db_params *p = d->o->params;

	if (d->mysql) {
		check_group(d);
		return;
	}
	if (!on(d->var[V_WSREP])) {
		say(d, "galera", SEV_OK, "not a Galera node: --named locks (GET_LOCK) are usable");
		return;
	}
	if (lr_db_query(d->db, "SHOW STATUS WHERE Variable_name IN ('wsrep_cluster_size', "
	                       "'wsrep_local_state_comment', 'wsrep_ready')")) {
		while ((row = lr_db_fetch(d->db))) {
			if (!row[1])
				continue;
			if (strcmp(row[0], "wsrep_cluster_size") == 0)
				snprintf(size, sizeof(size), "%s", row[1]);
			else if (strcmp(row[0], "wsrep_local_state_comment") == 0)
				snprintf(state, sizeof(state), "%s", row[1]);
			else if (strcmp(row[0], "wsrep_ready") == 0)
				ready = on(row[1]);
		}
	}
	if (!ready)
		say(d, "galera", SEV_FAIL,
		    "Galera node not ready (state %s, cluster size %s): it refuses queries; "
		    "list other nodes in [database] hosts",
		    state, size);
	else
		say(d, "galera", SEV_OK,
		    "Galera node (state %s, cluster size %s): locks are safe across the "
		    "cluster; --named locks are node-local, so lockrun refuses them here",
		    state, size);
	if (p && p->nhosts > 1)
		check_writer(d, p);
	else if (strcmp(size, "1") != 0)
		say(d, "galera", SEV_WARN,
		    "[database] host names one node: lockrun writes there, and clients that name "
		    "other nodes write the same rows beside it, which under contention can stall "
		    "the whole cluster; list every node, so that all clients write on the writer "
		    "node (doc/production.md, Galera)");
}

/*
 * Where this server stands in a replication topology, and what lockrun
 * guarantees there (doc/production.md): a Galera node loses no commit; a
 * primary's replica, promoted after a crash, may lack its last commits, so
 * lockrun quarantines after a fail-over (max-ttl plus 5 s); a replica,
 * writable or not, takes no lock (a FAIL). Also binary logging and
 * log_bin_trust_function_creators, which no longer matter to init (no
 * trigger, no function). Four queries; a part the account may not see
 * (SHOW ALL SLAVES STATUS or SHOW REPLICA STATUS needs REPLICATION CLIENT or more) is said to be
 * unknown.
 */
static void check_topology(struct doctor *d)
{
	MYSQL_ROW row;
	char binlog[8] = "?", trust[8] = "?", gtid_strict[8] = "?", master_of[400] = "";
	char semi[8] = "OFF", semi_clients[16] = "0", slaves[16] = "?", max_ttl[48];
	bool slave_known = false;

	if (on(d->var[V_WSREP])) {
		say(d, "topology", SEV_OK,
		    "Galera cluster: synchronous, it loses no commit; a change of node is no "
		    "fail-over and costs nothing");
		return;
	}
	if (lr_db_query(d->db, d->mysql ? "SELECT @@log_bin, @@log_bin_trust_function_creators, "
	                                  "@@gtid_mode = 'ON'"
	                                : "SELECT @@log_bin, @@log_bin_trust_function_creators, "
	                                  "@@gtid_strict_mode") &&
	    (row = lr_db_fetch(d->db))) {
		snprintf(binlog, sizeof(binlog), "%s", on(row[0]) ? "on" : "off");
		snprintf(trust, sizeof(trust), "%s", row[1] ? row[1] : "?");
		snprintf(gtid_strict, sizeof(gtid_strict), "%s", on(row[2]) ? "on" : "off");
	}
	/* The replicas attached (MySQL counts them in its list of replicas,
	 * which needs REPLICATION SLAVE), and semi-sync, by either server's
	 * names. */
	if (d->mysql && lr_db_query(d->db, "SHOW REPLICAS"))
		snprintf(slaves, sizeof(slaves), "%llu", (unsigned long long)lr_db_num_rows(d->db));
	if (lr_db_query(d->db, "SHOW GLOBAL STATUS WHERE Variable_name IN ('Slaves_connected', "
	                       "'Rpl_semi_sync_master_status', 'Rpl_semi_sync_master_clients', "
	                       "'Rpl_semi_sync_source_status', 'Rpl_semi_sync_source_clients')"))
		while ((row = lr_db_fetch(d->db))) {
			if (!row[1])
				continue;
			if (strcmp(row[0], "Slaves_connected") == 0)
				snprintf(slaves, sizeof(slaves), "%s", row[1]);
			else if (strncmp(row[0], "Rpl_semi_sync_", 14) == 0 &&
			         strstr(row[0], "_status"))
				snprintf(semi, sizeof(semi), "%s", row[1]);
			else if (strncmp(row[0], "Rpl_semi_sync_", 14) == 0 &&
			         strstr(row[0], "_clients"))
				snprintf(semi_clients, sizeof(semi_clients), "%s", row[1]);
		}
	/* Every replication connection (multi-source included), running or
	 * only configured: a stopped one may be started again any time. */
	if (lr_db_query(d->db, d->mysql ? "SHOW REPLICA STATUS" : "SHOW ALL SLAVES STATUS")) {
		int host = lr_db_column(d->db, d->mysql ? "Source_Host" : "Master_Host"),
		    port = lr_db_column(d->db, d->mysql ? "Source_Port" : "Master_Port"),
		    io = lr_db_column(d->db, d->mysql ? "Replica_IO_Running" : "Slave_IO_Running"),
		    sql =
		        lr_db_column(d->db, d->mysql ? "Replica_SQL_Running" : "Slave_SQL_Running");
		slave_known = true;
		if ((row = lr_db_fetch(d->db)) && host >= 0 && row[host])
			snprintf(master_of, sizeof(master_of),
			         "%s:%s (IO thread %s, SQL thread %s)", row[host],
			         port >= 0 && row[port] ? row[port] : "?",
			         io >= 0 && row[io] ? row[io] : "?",
			         sql >= 0 && row[sql] ? row[sql] : "?");
	}
	max_ttl_text(d, max_ttl, sizeof(max_ttl));
	say(d, "topology", SEV_INFO,
	    "binary log %s, %s %s, log_bin_trust_function_creators %s: init "
	    "needs none of them (it creates no trigger and no function)",
	    binlog, d->mysql ? "gtid_mode" : "gtid_strict_mode", gtid_strict, trust);
	/* A FAIL whatever read_only says: a writable replica would grant
	 * what its primary grants too (lr_epoch refuses while its threads
	 * run; a stopped one it cannot see). */
	if (*master_of)
		say(d, "topology", SEV_FAIL,
		    "a replica of %s: lockrun cannot lock here, writable or not, until it is "
		    "promoted (%s); then it holds new grants back for max-ttl (%s) plus 5 s, as "
		    "it may lack the old primary's last commits",
		    master_of,
		    d->mysql ? "STOP REPLICA; RESET REPLICA ALL" : "STOP SLAVE; RESET SLAVE ALL",
		    max_ttl);
	else if (strcmp(slaves, "0") != 0 && strcmp(slaves, "?") != 0)
		say(d, "topology", SEV_INFO,
		    "a primary with %s replica(s) attached, semi-sync %s (%s client(s)): if one is "
		    "promoted after this server fails, it holds new grants back for max-ttl (%s) "
		    "plus 5 s and its tokens start above this server's; the fail-over must fence "
		    "this server (read-only or down), or both would grant",
		    slaves, semi, semi_clients, max_ttl);
	else
		say(d, "topology", SEV_INFO,
		    "no replica attached%s: a dump of it loaded on another server holds new "
		    "grants back there for max-ttl (%s) plus 5 s",
		    slave_known ? "" : " (replica status not visible to this account)", max_ttl);
}

/* A read-only server (a replica) refuses the procedures' writes. */
static void check_read_only(struct doctor *d)
{
	if (on(d->var[V_READ_ONLY]) || on(d->var[V_SUPER_RO]))
		say(d, "read_only", SEV_FAIL,
		    "%s is ON: a replica or a read-only server; lockrun cannot take locks "
		    "here: point it at the primary",
		    on(d->var[V_SUPER_RO]) ? "super_read_only" : "read_only");
	else
		say(d, "read_only", SEV_OK, "the server accepts writes");
}

/*
 * The global settings of a managed server that lockrun's sessions meet
 * (doc/production.md, "Server settings"): the two under which it cannot
 * work, which init refuses too (lr_schema_settings), are FAILs; a global
 * autocommit = 0, which lockrun and lockrunctl turn on in their own
 * sessions, is said. No query: the values are read_vars'.
 */
static void check_settings(struct doctor *d)
{
	const char *mode = d->var[V_SQL_MODE] ? d->var[V_SQL_MODE] : "?";
	const char *fmt = d->var[V_BINLOG_FORMAT] ? d->var[V_BINLOG_FORMAT] : "?";
	const char *ic = d->var[V_INIT_CONNECT] ? d->var[V_INIT_CONNECT] : "";

	if (d->mysql && strstr(mode, "ANSI_QUOTES"))
		say(d, "sql_mode", SEV_FAIL,
		    "the global sql_mode has ANSI_QUOTES (%s): a session that logs in under it "
		    "leaves MySQL's cache of an account's privileges without its roles', so "
		    "lockrun's runtime account is denied its database (1044) and the procedures "
		    "(1370), and stays denied after the mode is changed back: take ANSI_QUOTES out "
		    "of the global sql_mode (and the server's configuration), then run FLUSH "
		    "PRIVILEGES",
		    mode);
	else
		say(d, "sql_mode", SEV_OK,
		    "global sql_mode '%s': no effect, lockrunctl sets its own and the routines "
		    "keep the one they were created with",
		    mode);
	if (on(d->var[V_LOG_BIN]) && strcasecmp(fmt, "STATEMENT") == 0)
		say(d, "binlog_format", SEV_FAIL,
		    "binlog_format is STATEMENT with the binary log on: the server refuses every "
		    "write of lockrun's routines (1665, as they run at READ COMMITTED); set "
		    "binlog_format = ROW (or MIXED), in the server's configuration too");
	else if (on(d->var[V_LOG_BIN]))
		say(d, "binlog_format", SEV_OK, "binlog_format %s: lockrun's writes are logged",
		    fmt);
	if (!on(d->var[V_AUTOCOMMIT]) || strstr(ic, "autocommit") || strstr(ic, "AUTOCOMMIT"))
		say(d, "autocommit", SEV_INFO,
		    "%s: lockrun and lockrunctl turn autocommit on in their own sessions, and the "
		    "routines commit what they write; an application's own statements around the "
		    "SQL API stay in its transaction",
		    on(d->var[V_AUTOCOMMIT]) ? "init_connect sets autocommit"
		                             : "autocommit is OFF globally");
	/* MariaDB's limit reaches every statement, a CALL included (MySQL's
	 * max_execution_time only a SELECT). */
	if (d->var[V_MAX_STMT] && strtod(d->var[V_MAX_STMT], NULL) > 0)
		say(d, "max_statement_time", SEV_WARN,
		    "max_statement_time is %s s: lockrun and lockrunctl turn it off in their own "
		    "sessions, but an application's CALL of the SQL API that runs longer is cut "
		    "off (1969): such an application must run its CALLs with "
		    "SET STATEMENT max_statement_time = 0 FOR CALL ...",
		    d->var[V_MAX_STMT]);
}

/*
 * With the general query log on, the server writes the parameters of a
 * prepared statement into its text, which every session of the same
 * account reads in the process list: the leases and request ids lockrun
 * sends as parameters would be there for any of them to replay. The slow
 * log lockrun turns off for its own session; this one a session cannot.
 * MySQL writes them into the text in every case (measured on 9.7, with
 * the binary, general and slow logs all off): there only separate
 * accounts keep the leases apart.
 */
static void check_general_log(struct doctor *d)
{
	if (d->mysql)
		say(d, "general_log", SEV_WARN,
		    "MySQL shows every statement's parameters in the process list, so every "
		    "session of lockrun's account can read the leases of the others and release "
		    "or renew grants that are not theirs: give each host, and each application, "
		    "its own account");
	else if (on(d->var[V_GENERAL_LOG]))
		say(d, "general_log", SEV_WARN,
		    "general_log is ON: the server writes every statement's parameters into "
		    "its text, so other sessions of lockrun's account can read leases in the "
		    "process list and release or renew grants that are not theirs; turn it "
		    "off, or give each host its own account");
	else
		say(d, "general_log", SEV_OK,
		    "general_log is OFF: leases and request ids stay out of the process list");
}

/*
 * lockrun's connection is idle between renewals, a third of the ttl: if
 * wait_timeout is shorter the server drops it every time (a reconnect
 * per renewal, and --named locks die with the connection). Shorter than
 * the ttl is survivable but leaves little room.
 */
static void check_wait_timeout(struct doctor *d)
{
	double w = d->var[V_WAIT] ? strtod(d->var[V_WAIT], NULL) : 0;
	double ttl = d->o->ttl;

	if (w <= ttl / 3.0 + 1)
		say(d, "wait_timeout", SEV_FAIL,
		    "wait_timeout is %.0f s, no longer than lockrun's renewal interval "
		    "(ttl %g s / 3): the server drops its connection between renewals "
		    "and --named locks are lost",
		    w, ttl);
	else if (w < ttl)
		say(d, "wait_timeout", SEV_WARN,
		    "wait_timeout is %.0f s, shorter than the lease (ttl %g s); it works "
		    "(renewals come every ttl/3) but a longer --ttl would not",
		    w, ttl);
	else
		say(d, "wait_timeout", SEV_OK,
		    "wait_timeout %.0f s is longer than the lease (%g s)", w, ttl);
}

static void check_time_zone(struct doctor *d)
{
	say(d, "time_zone", SEV_OK,
	    "time_zone %s (system %s): no effect, lockrun reads UTC_TIMESTAMP() and lockrunctl "
	    "sets +00:00",
	    d->var[V_TZ] ? d->var[V_TZ] : "?", d->var[V_SYS_TZ] ? d->var[V_SYS_TZ] : "?");
}

/*
 * The server's clock against ours, measured at the middle of a round
 * trip (error up to half of it). Leases never use our clock; the figure
 * matters for reading logs side by side.
 */
static void check_clock(struct doctor *d)
{
	double t0 = now_s(), t1, server, off;
	MYSQL_ROW row;

	if (!lr_db_query(d->db, "SELECT UNIX_TIMESTAMP(NOW(6))") || !(row = lr_db_fetch(d->db)) ||
	    !row[0]) {
		say(d, "clock", SEV_WARN, "cannot read the server's clock: %s", lr_db_error(d->db));
		return;
	}
	t1 = now_s();
	server = strtod(row[0], NULL);
	off = server - (t0 + t1) / 2;
	say(d, "clock", fabs(off) > d->o->clock_warn_s ? SEV_WARN : SEV_OK,
	    "the server's clock is %.3f s %s this host's (+/- %.3f s; warned past %g s); "
	    "leases use only the server's",
	    fabs(off), off >= 0 ? "ahead of" : "behind", (t1 - t0) / 2, d->o->clock_warn_s);
}

/* Privileges, by the kind of use: one bit each. */
enum {
	P_EXECUTE = 1,
	P_SELECT = 2,
	P_INSERT = 4,
	P_UPDATE = 8,
	P_DELETE = 16,
	P_CREATE = 32,
	P_ALTER = 64,
	P_INDEX = 128,
	P_CREATE_ROUTINE = 256,
	P_ALTER_ROUTINE = 512,
	P_TRIGGER = 1024,
	P_CREATE_USER = 2048,
	P_GRANT = 4096,
	P_SET_USER = 8192,
	P_SUPER = 16384
};
static const struct {
	const char *name;
	unsigned bit;
} privs[] = {{"EXECUTE", P_EXECUTE},
             {"SELECT", P_SELECT},
             {"INSERT", P_INSERT},
             {"UPDATE", P_UPDATE},
             {"DELETE", P_DELETE},
             {"CREATE", P_CREATE},
             {"ALTER", P_ALTER},
             {"INDEX", P_INDEX},
             {"CREATE ROUTINE", P_CREATE_ROUTINE},
             {"ALTER ROUTINE", P_ALTER_ROUTINE},
             {"TRIGGER", P_TRIGGER},
             {"CREATE USER", P_CREATE_USER},
             {"GRANT OPTION", P_GRANT},
             {"SET USER", P_SET_USER},
             {"SET_ANY_DEFINER", P_SET_USER},
             {"SUPER", P_SUPER}};
#define NPRIVS  (sizeof(privs) / sizeof(privs[0]))
#define P_ADMIN (P_SELECT | P_INSERT | P_UPDATE | P_DELETE)
#define P_INIT                                                                                     \
	(P_CREATE | P_ALTER | P_INDEX | P_CREATE_ROUTINE | P_ALTER_ROUTINE | P_CREATE_USER |       \
	 P_GRANT)

static const char *const procedures[] = {
    "lockrun_acquire", "lockrun_check",   "lockrun_dequeue", "lockrun_host_queue", "lockrun_poll",
    "lockrun_release", "lockrun_renew",   "lockrun_settle",  "lockrun_sleep",      "lockrun_status",
    "lockrun_list",    "lockrun_history", "lockrun_grant"};
#define NPROCS (sizeof(procedures) / sizeof(procedures[0]))

/* On MySQL, whose information_schema does not show a routine to an
 * account that may only execute it: the public procedures (bit i for
 * procedures[i]) that SHOW GRANTS, which lists the active roles' grants
 * too, lets the account execute. One round trip. */
static unsigned procedures_granted(struct doctor *d)
{
	MYSQL_ROW row;
	unsigned mask = 0;

	if (!lr_db_query(d->db, "SHOW GRANTS"))
		return 0;
	while ((row = lr_db_fetch(d->db)))
		for (size_t i = 0; row[0] && i < NPROCS; i++) {
			char want[120];
			snprintf(want, sizeof(want), "EXECUTE ON PROCEDURE `%s`.`%s` TO", d->dbname,
			         procedures[i]);
			if (strstr(row[0], want))
				mask |= 1u << i;
		}
	return mask;
}

/* The public procedures the account sees (bit i for procedures[i]) in
 * information_schema, which shows it only those it has a privilege on:
 * all of them when EXECUTE comes through a role (sql/grant.sql) or
 * routine grants rather than the database. MySQL's shows them only to
 * accounts that may do more: there SHOW GRANTS completes the answer
 * (procedures_granted). False, with the error set, when information_schema
 * cannot be read. One round trip, two on MySQL. */
static bool procedures_seen(struct doctor *d, unsigned *mask)
{
	MYSQL_ROW row;

	*mask = 0;
	if (!lr_db_query(d->db, "SELECT ROUTINE_NAME FROM information_schema.ROUTINES WHERE "
	                        "ROUTINE_SCHEMA = DATABASE() AND ROUTINE_TYPE = 'PROCEDURE' "
	                        "AND ROUTINE_NAME LIKE 'lockrun\\_%'"))
		return false;
	while ((row = lr_db_fetch(d->db)))
		for (size_t i = 0; row[0] && i < NPROCS; i++)
			if (strcmp(row[0], procedures[i]) == 0)
				*mask |= 1u << i;
	if (d->mysql && *mask != (1u << NPROCS) - 1)
		*mask |= procedures_granted(d);
	return true;
}

/* The names of the bits of `want` missing from `have`, comma-separated. */
static const char *missing(unsigned have, unsigned want, char *buf, size_t len)
{
	size_t used = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < NPRIVS; i++)
		if ((want & privs[i].bit) && !(have & privs[i].bit))
			used += (size_t)snprintf(buf + used, used < len ? len - used : 0, "%s%s",
			                         used ? ", " : "", privs[i].name);
	return buf;
}

/*
 * The account's privileges on this database (global and database-level
 * grants, as information_schema shows them to the account itself; grants
 * on single tables and through roles are not counted, except EXECUTE on
 * the public procedures, which is what sql/grant.sql's role gives),
 * against what each use needs: lockrun EXECUTE; lockrunctl's admin
 * commands SELECT, INSERT, UPDATE, DELETE; init the DDL, CREATE ROUTINE,
 * CREATE USER and GRANT OPTION (it creates no trigger and no function, so
 * binary logging does not matter), and with SET USER (SUPER before
 * MariaDB 10.5; on MySQL SET_ANY_DEFINER, counted as the same bit) it
 * names 'lockrun_owner'@'localhost' as the routines' definer, else this
 * account: said before init, so a managed database's
 * master account knows it will work. Only a missing EXECUTE is a problem:
 * that is what lockrun itself runs with. One round trip, two when EXECUTE
 * is not a database grant.
 */
static void check_privileges(struct doctor *d)
{
	unsigned have = 0, seen;
	char m1[256], m2[256], m3[256];
	MYSQL_ROW row;
	bool by_routine = false;

	if (!lr_db_query(d->db,
	                 "SELECT PRIVILEGE_TYPE FROM information_schema.USER_PRIVILEGES "
	                 "WHERE GRANTEE = @lr_me := CONCAT('''', SUBSTRING_INDEX(CURRENT_USER(), "
	                 "'@', 1), '''@''', SUBSTRING_INDEX(CURRENT_USER(), '@', -1), '''') "
	                 "UNION SELECT PRIVILEGE_TYPE FROM information_schema.SCHEMA_PRIVILEGES "
	                 "WHERE GRANTEE = @lr_me AND DATABASE() LIKE TABLE_SCHEMA "
	                 "UNION SELECT 'GRANT OPTION' FROM information_schema.SCHEMA_PRIVILEGES "
	                 "WHERE GRANTEE = @lr_me AND DATABASE() LIKE TABLE_SCHEMA "
	                 "AND IS_GRANTABLE = 'YES' UNION SELECT 'GRANT OPTION' FROM "
	                 "information_schema.USER_PRIVILEGES WHERE GRANTEE = @lr_me "
	                 "AND IS_GRANTABLE = 'YES'")) {
		say(d, "privileges", SEV_WARN, "cannot read them: %s", lr_db_error(d->db));
		return;
	}
	while ((row = lr_db_fetch(d->db)))
		for (size_t i = 0; i < NPRIVS; i++)
			if (row[0] && strcmp(row[0], privs[i].name) == 0)
				have |= privs[i].bit;
	if (have & P_SUPER)
		have |= P_SET_USER;
	if (!(have & P_EXECUTE) && procedures_seen(d, &seen) && seen == (1u << NPROCS) - 1) {
		have |= P_EXECUTE;
		by_routine = true;
	}
	missing(have, P_EXECUTE, m1, sizeof(m1));
	missing(have, P_ADMIN, m2, sizeof(m2));
	missing(have, P_INIT, m3, sizeof(m3));
	/* An operator's account (the table rights of lockrunctl's admin
	 * commands, sql/grant.sql) is not lockrun's: it rightly lacks the
	 * role, and that is no problem of the install. */
	d->operator= !(have & P_EXECUTE) && !*m2;
	say(d, "privileges",
	    (have & P_EXECUTE) ? SEV_OK
	    : d->operator      ? SEV_INFO
	                       : SEV_FAIL,
	    "lockrun (EXECUTE): %s; lockrunctl admin commands (SELECT, INSERT, UPDATE, DELETE): "
	    "%s%s; lockrunctl init (DDL, CREATE ROUTINE, CREATE USER, GRANT OPTION): %s%s%s",
	    d->operator  ? "no, an operator's account; lockrun runs with an account that has the "
	                   "role (sql/grant.sql)"
	    : * m1       ? "missing, lockrun cannot lock with this account"
	    : by_routine ? "yes, on the public procedures (a role or routine grants)"
	                 : "yes",
	    *m2 ? "missing " : "yes", m2, *m3 ? "missing " : "yes", m3,
	    *m3                   ? ""
	    : (have & P_SET_USER) ? ", with 'lockrun_owner'@'localhost' as the routines' definer"
	    : d->mysql ? ", with this account as the routines' definer (no SET_ANY_DEFINER)"
	               : ", with this account as the routines' definer (no SET USER)");
	if ((have & P_ADMIN) && (have & P_EXECUTE))
		say(d, "privileges", SEV_INFO,
		    "this account can also write lockrun's tables directly; lockrun itself needs "
		    "only EXECUTE on the public procedures (sql/grant.sql)");
}

/* The privileges that reach a database's objects when granted on *.* or
 * on the database, in the order GRANT lists them; all of them at one
 * level is shown as ALL. */
static const char *const object_privs[] = {
    "SELECT",        "INSERT",     "UPDATE",      "DELETE",        "CREATE",
    "DROP",          "REFERENCES", "INDEX",       "ALTER",         "CREATE TEMPORARY TABLES",
    "LOCK TABLES",   "EXECUTE",    "CREATE VIEW", "SHOW VIEW",     "CREATE ROUTINE",
    "ALTER ROUTINE", "EVENT",      "TRIGGER",     "DELETE HISTORY"};
#define NOBJPRIVS (sizeof(object_privs) / sizeof(object_privs[0]))

/* The columns of check_accounts' answer. */
enum { A_GRANTEE, A_MORE, A_NGLOBAL, A_GLOBAL, A_NDB, A_DB, A_TABLES, A_TOTAL, A_TOTAL_MORE };

/* One account's line: what it holds where, in GRANT's words. A role
 * ('name'@'') is marked as one (MySQL's roles look like accounts). All of
 * the object privileges is ALL; MySQL has no DELETE HISTORY, the last. */
static void say_account(struct doctor *d, MYSQL_ROW row)
{
	struct lr_sb sb;
	const char *sep = "";
	bool more = row[A_MORE] && strcmp(row[A_MORE], "0") != 0;
	size_t len = strlen(row[A_GRANTEE]);
	const unsigned long all = NOBJPRIVS - (d->mysql ? 1 : 0);

	lr_sb_init(&sb);
	if (row[A_GLOBAL]) {
		lr_sb_printf(&sb, "%s on *.*",
		             strtoul(row[A_NGLOBAL], NULL, 10) == all ? "ALL" : row[A_GLOBAL]);
		sep = "; ";
	}
	if (row[A_DB]) {
		lr_sb_printf(&sb, "%s%s on %s.*", sep,
		             strtoul(row[A_NDB], NULL, 10) == all ? "ALL" : row[A_DB], d->dbname);
		sep = "; ";
	}
	if (row[A_TABLES])
		lr_sb_printf(&sb, "%s%s", sep, row[A_TABLES]);
	if (len > 3 && strcmp(row[A_GRANTEE] + len - 3, "@''") == 0)
		lr_sb_puts(&sb, " (a role: so does every account granted it)");
	if (more)
		say(d, "accounts", SEV_INFO, "%s: %s", row[A_GRANTEE], lr_sb_str(&sb));
	else
		say(d, "accounts", SEV_INFO,
		    "%s: %s, the grant before API 3, which reaches the internal routines too: "
		    "give it the role %s_api instead (sql/grant.sql)",
		    row[A_GRANTEE], lr_sb_str(&sb), d->dbname);
	lr_sb_finish(&sb);
}

/*
 * The accounts that hold more on this database than the SQL API's
 * EXECUTE, except the routines' definer lockrun_owner, which must:
 * global privileges on database objects, database privileges other than
 * EXECUTE, privileges on its tables or their columns. Such an account
 * can read and write lockrun's tables, and can create a temporary table
 * named like one of them in its own session, which lockrun's routines
 * called from that session then read and write instead of the real one:
 * the SQL API's checks do not bind it. Also the accounts with EXECUTE on
 * the whole database, the grant before API 3, which reaches the internal
 * routines as well. Notes, not warnings: administrators are expected
 * among them. Roles show under their own names (GRANTEE 'role'@''), not
 * their members'. information_schema shows every account's grants only
 * to an account with SELECT on the mysql database, and the account's own
 * to any other: then it says so. Two round trips over the server's
 * in-memory grant tables; names the first MAX_SHOWN accounts.
 */
static void check_accounts(struct doctor *d)
{
	struct lr_sb sb, in;
	MYSQL_ROW row;
	unsigned long total = 0, more = 0;

	if (!*d->dbname)
		return;
	if (!lr_db_query(d->db, "SELECT COUNT(DISTINCT GRANTEE) FROM "
	                        "information_schema.USER_PRIVILEGES") ||
	    !(row = lr_db_fetch(d->db)) || !row[0]) {
		say(d, "accounts", SEV_WARN, "cannot read the grants: %s", lr_db_error(d->db));
		return;
	}
	if (strtoul(row[0], NULL, 10) < 2) {
		say(d, "accounts", SEV_INFO,
		    "this account sees only its own grants (seeing every account's needs SELECT on "
		    "the mysql database): run doctor as an administrator to list the accounts that "
		    "hold more than EXECUTE on this database");
		return;
	}
	lr_sb_init(&sb);
	lr_sb_init(&in);
	for (size_t i = 0; i < NOBJPRIVS; i++)
		lr_sb_printf(&in, "%s'%s'", i ? ", " : "", object_privs[i]);
	/* Grantee by grantee: how many and which object privileges on *.*
	 * (w 0), on the database or a pattern matching it (w 1), and which on
	 * its tables (w 2, column grants marked); the window functions count
	 * all accounts before the LIMIT. */
	lr_sb_printf(
	    &sb,
	    "SELECT grantee, more, ng, g, nd, dl, tl, COUNT(*) OVER (), SUM(more) OVER () FROM ("
	    "SELECT grantee, MAX(p <> 'EXECUTE') AS more, "
	    "COUNT(DISTINCT IF(w = 0, p, NULL)) AS ng, "
	    "GROUP_CONCAT(DISTINCT IF(w = 0, p, NULL) ORDER BY FIELD(p, %s) SEPARATOR ', ') AS g, "
	    "COUNT(DISTINCT IF(w = 1, p, NULL)) AS nd, "
	    "GROUP_CONCAT(DISTINCT IF(w = 1, p, NULL) ORDER BY FIELD(p, %s) SEPARATOR ', ') AS dl, "
	    "GROUP_CONCAT(DISTINCT IF(w = 2, CONCAT(p, ' on ', t), NULL) ORDER BY t, FIELD(p, %s) "
	    "SEPARATOR ', ') AS tl FROM ("
	    "SELECT GRANTEE AS grantee, 0 AS w, PRIVILEGE_TYPE AS p, '' AS t "
	    "FROM information_schema.USER_PRIVILEGES WHERE PRIVILEGE_TYPE IN (%s) "
	    "UNION SELECT GRANTEE, 1, PRIVILEGE_TYPE, '' FROM information_schema.SCHEMA_PRIVILEGES "
	    "WHERE DATABASE() LIKE TABLE_SCHEMA AND PRIVILEGE_TYPE <> 'USAGE' "
	    "UNION SELECT GRANTEE, 2, PRIVILEGE_TYPE, CONCAT(TABLE_SCHEMA, '.', TABLE_NAME) "
	    "FROM information_schema.TABLE_PRIVILEGES WHERE TABLE_SCHEMA = DATABASE() "
	    "AND PRIVILEGE_TYPE <> 'USAGE' "
	    "UNION SELECT GRANTEE, 2, PRIVILEGE_TYPE, "
	    "CONCAT(TABLE_SCHEMA, '.', TABLE_NAME, ' (some columns)') "
	    "FROM information_schema.COLUMN_PRIVILEGES WHERE TABLE_SCHEMA = DATABASE()) x "
	    "WHERE grantee <> '''lockrun_owner''@''localhost''' GROUP BY grantee) a "
	    "ORDER BY more DESC, grantee LIMIT %d",
	    lr_sb_str(&in), lr_sb_str(&in), lr_sb_str(&in), lr_sb_str(&in), MAX_SHOWN);
	if (!lr_db_query(d->db, lr_sb_str(&sb))) {
		say(d, "accounts", SEV_WARN, "cannot read the grants: %s", lr_db_error(d->db));
		goto out;
	}
	if ((row = lr_db_fetch(d->db))) {
		total = strtoul(row[A_TOTAL], NULL, 10);
		more = strtoul(row[A_TOTAL_MORE], NULL, 10);
	}
	if (!total)
		say(d, "accounts", SEV_OK,
		    "no account but the routines' definer 'lockrun_owner'@'localhost' holds more "
		    "on "
		    "this database than EXECUTE on its public procedures");
	if (more)
		say(d, "accounts", SEV_INFO,
		    "%lu account%s besides 'lockrun_owner'@'localhost' hold%s more than EXECUTE on "
		    "this database%s: expected of administrators; anyone else is not bound by the "
		    "SQL API: such an account can read and write lockrun's tables, or create a "
		    "temporary table named like one of them in its own session, which lockrun's "
		    "routines called from that session then read and write instead",
		    more, more == 1 ? "" : "s", more == 1 ? "s" : "",
		    total > MAX_SHOWN ? " (the first accounts below)" : "");
	if (total > more)
		say(d, "accounts", SEV_INFO,
		    "%lu account%s ha%s EXECUTE on the whole database and no more%s: that reaches "
		    "lockrun's internal routines too, not only the SQL API; 'lockrunctl init' "
		    "moves "
		    "such accounts to the role %s_api unless they have another default role",
		    total - more, total - more == 1 ? "" : "s", total - more == 1 ? "s" : "ve",
		    total > MAX_SHOWN ? " (some of them below)" : "", d->dbname);
	for (; row; row = lr_db_fetch(d->db))
		say_account(d, row);
out:
	lr_sb_finish(&sb);
	lr_sb_finish(&in);
}

/* The columns of check_used's answer. */
enum { U_NAME, U_USED, U_HELD, U_TOTAL, U_LOW };

/*
 * Each resource's `used`, the permits in use that the triggers on
 * lr_holds keep, against the sum of its hold rows. It drifts only when
 * someone edits the tables by hand, or through a past bug. Too high, a
 * resource looks busier than it is (a warning); too low, lockrun may
 * grant more than its capacity (a problem). 'lockrunctl sweep' sets it
 * right. One statement, so one consistent snapshot: a grant or release
 * committing meanwhile is never taken for drift. Needs SELECT on the
 * tables (says so without); reads every resource row and an index range
 * of holds per resource; names the first MAX_SHOWN resources.
 */
static void check_used(struct doctor *d)
{
	struct lr_sb sb;
	MYSQL_ROW row;
	unsigned long total = 0, low = 0;
	char why[160] = "";

	if (!lr_db_queryf(
	        d->db,
	        "SELECT name, used, held, COUNT(*) OVER (), SUM(used < held) OVER () "
	        "FROM (SELECT r.name, r.used, (SELECT COALESCE(SUM(h.permits), 0) "
	        "FROM lr_holds h WHERE h.resource = r.name) AS held FROM lr_resources r) x "
	        "WHERE used <> held ORDER BY name LIMIT %d",
	        MAX_SHOWN)) {
		if (lr_db_errno(d->db) == ER_TABLEACCESS_DENIED_ERROR)
			say(d, "used", SEV_INFO,
			    "this account may not read lockrun's tables; run doctor as an operator "
			    "to compare each resource's used count with its hold rows");
		else if (lr_db_errno(d->db) != ER_NO_SUCH_TABLE &&
		         lr_db_errno(d->db) != ER_BAD_FIELD_ERROR) /* the schema finding says */
			say(d, "used", SEV_WARN, "cannot compare the counts with the hold rows: %s",
			    lr_db_error(d->db));
		return;
	}
	lr_sb_init(&sb);
	while ((row = lr_db_fetch(d->db))) {
		total = strtoul(row[U_TOTAL], NULL, 10);
		low = strtoul(row[U_LOW], NULL, 10);
		lr_sb_printf(&sb, "%s%s (used %s, holds %s)", sb.len ? ", " : "", row[U_NAME],
		             row[U_USED], row[U_HELD]);
	}
	if (!total) {
		say(d, "used", SEV_OK, "every resource's used count matches its hold rows");
		goto out;
	}
	if (low)
		snprintf(why, sizeof(why), "%lu too low: lockrun may grant more than the capacity",
		         low);
	if (total > low)
		snprintf(why + strlen(why), sizeof(why) - strlen(why),
		         "%s%lu too high: looks busier than it is", low ? "; " : "", total - low);
	if (total == 1)
		say(d, "used", low ? SEV_FAIL : SEV_WARN,
		    "1 resource's used count disagrees with its hold rows (%s); 'lockrunctl "
		    "sweep' repairs it: %s",
		    why, lr_sb_str(&sb));
	else
		say(d, "used", low ? SEV_FAIL : SEV_WARN,
		    "%lu resources' used counts disagree with their hold rows (%s); 'lockrunctl "
		    "sweep' repairs them: %s%s",
		    total, why, lr_sb_str(&sb), total > MAX_SHOWN ? ", ..." : "");
out:
	lr_sb_finish(&sb);
}

/*
 * When `lockrunctl sweep` last ran (it records that in lr_settings): a
 * WARN when none ran for two days while the lock log is older than that,
 * as when the sweep timer is not enabled or its account may not write the
 * tables. Needs SELECT on the tables (silent without: check_used says
 * so). One query, by primary keys.
 */
static void check_sweep(struct doctor *d)
{
	MYSQL_ROW row;

	if (!lr_db_query(d->db,
	                 "SELECT DATE_FORMAT(s.changed_at, '%Y-%m-%dT%H:%i:%SZ'), "
	                 "s.changed_at < UTC_TIMESTAMP(6) - INTERVAL 2 DAY, "
	                 "(SELECT acquired_at FROM lr_grants ORDER BY id LIMIT 1) < "
	                 "UTC_TIMESTAMP(6) - INTERVAL 2 DAY "
	                 "FROM (SELECT 1) one LEFT JOIN lr_settings s ON s.name = 'last_sweep'") ||
	    !(row = lr_db_fetch(d->db)))
		return;
	if (row[0] && strcmp(row[1], "1") == 0)
		say(d, "sweep", SEV_WARN,
		    "the last 'lockrunctl sweep' ran at %s, more than 2 days ago: enable "
		    "lockrun-sweep.timer (or the cron file) on one host, with the operator's "
		    "account in /etc/lockrun/operator.conf",
		    row[0]);
	else if (row[0])
		say(d, "sweep", SEV_OK, "'lockrunctl sweep' last ran at %s", row[0]);
	else if (row[2] && strcmp(row[2], "1") == 0)
		say(d, "sweep", SEV_WARN,
		    "no 'lockrunctl sweep' has run, and the lock log goes back more than 2 days: "
		    "enable lockrun-sweep.timer (or the cron file) on one host, with the "
		    "operator's account in /etc/lockrun/operator.conf");
	else
		say(d, "sweep", SEV_OK,
		    "no 'lockrunctl sweep' has run yet; the lock log is younger than 2 days");
}

/* Which text of sql/routines/ the database runs: init records its
 * SHA-256 in lr_routines. Readable only by accounts that may read tables. */
static void check_routines(struct doctor *d)
{
	MYSQL_ROW row;

	if (!lr_db_query(d->db, "SELECT digest, DATE_FORMAT(applied_at, '%Y-%m-%dT%H:%i:%SZ') "
	                        "FROM lr_routines WHERE name = 'procedures'"))
		return; /* before version 3: the schema finding says so */
	if (!(row = lr_db_fetch(d->db)) || !row[0])
		say(d, "routines", SEV_FAIL,
		    "no record of the stored routines' version: run 'lockrunctl init'");
	else if (strcmp(row[0], lr_routines_digest) != 0)
		say(d, "routines", SEV_WARN,
		    "the stored routines (applied %s) are not the ones this lockrunctl carries: "
		    "another version applied them; run 'lockrunctl init' with the version the "
		    "hosts run",
		    row[1] ? row[1] : "?");
	else
		say(d, "routines", SEV_OK, "the stored routines are this lockrunctl's (applied %s)",
		    row[1] ? row[1] : "?");
}

/*
 * The schema's version (lr_schema, readable only with SELECT, which the
 * runtime account rightly lacks) against the newest migration compiled
 * in, the API procedures present, and one harmless CALL (lockrun_check
 * of grant 0) for the version of their answers.
 */
static void check_schema(struct doctor *d)
{
	unsigned latest = lr_migrations[lr_migrations_count - 1].version, have = 0, mask;
	MYSQL_ROW row;
	char absent[256] = "";
	size_t found = 0, used = 0;
	int api;

	if (lr_db_query(d->db, "SELECT COALESCE(MAX(version), 0) FROM lr_schema")) {
		row = lr_db_fetch(d->db);
		have = row && row[0] ? (unsigned)strtoul(row[0], NULL, 10) : 0;
		if (have < latest)
			say(d, "schema", SEV_FAIL,
			    "version %u, this lockrunctl has migrations up to %u: run 'lockrunctl "
			    "init'",
			    have, latest);
		else if (have > latest)
			say(d, "schema", SEV_WARN,
			    "version %u is newer than this lockrunctl knows (%u): upgrade it", have,
			    latest);
		else
			say(d, "schema", SEV_OK, "version %u, the newest this lockrunctl knows",
			    have);
		check_routines(d);
	} else if (lr_db_errno(d->db) == ER_NO_SUCH_TABLE) {
		say(d, "schema", SEV_FAIL,
		    "no lockrun schema in this database: run 'lockrunctl init'");
		return;
	} else if (lr_db_errno(d->db) == ER_TABLEACCESS_DENIED_ERROR) {
		say(d, "schema", SEV_INFO,
		    "this account may not read lr_schema (right for lockrun's own account, which "
		    "needs only EXECUTE); the procedures are checked instead");
	} else {
		say(d, "schema", SEV_WARN, "cannot read lr_schema: %s", lr_db_error(d->db));
	}
	if (!procedures_seen(d, &mask)) {
		say(d, "procedures", SEV_WARN, "cannot list them: %s", lr_db_error(d->db));
		return;
	}
	for (size_t i = 0; i < NPROCS; i++) {
		if (mask & (1u << i))
			found++;
		else
			used += (size_t)snprintf(absent + used,
			                         used < sizeof(absent) ? sizeof(absent) - used : 0,
			                         "%s%s", used ? ", " : "", procedures[i]);
	}
	if (found < NPROCS && d->operator&& have) {
		/* Its schema and routine record were read above; calling them
		 * is the runtime account's part. */
		say(d, "procedures", SEV_INFO,
		    "not executable by this operator's account; run 'lockrunctl doctor' with "
		    "lockrun's own account to check them");
		return;
	}
	if (found < NPROCS) {
		say(d, "procedures", SEV_FAIL, "missing (or not executable by this account): %s",
		    absent);
		return;
	}
	if (!lr_db_query(d->db, "CALL lockrun_check('00000000000000000000000000000000', NULL)") ||
	    !(row = lr_db_fetch(d->db))) {
		say(d, "procedures", SEV_FAIL, "CALL lockrun_check failed: %s", lr_db_error(d->db));
		return;
	}
	api = lr_db_column(d->db, "api");
	if (api < 0 || !row[api] || atoi(row[api]) < DOCTOR_API)
		say(d, "procedures", SEV_FAIL,
		    "they answer with API version %s, lockrun needs %d: run 'lockrunctl init'",
		    api >= 0 && row[api] ? row[api] : "none", DOCTOR_API);
	else
		say(d, "procedures", SEV_OK, "all %zu present and callable, API version %s", found,
		    row[api]);
}

/* ---- The connection: encryption, certificate, authentication ---- */

/*
 * The account's authentication plugin, from its own SHOW CREATE USER
 * (which every account may run for itself), into buf; "" when unknown.
 * MariaDB writes IDENTIFIED VIA plugin, or IDENTIFIED BY PASSWORD for
 * mysql_native_password; MySQL IDENTIFIED WITH 'plugin'. One round trip.
 */
static void auth_plugin(lr_db *db, char *buf, size_t len)
{
	MYSQL_ROW row;
	const char *s, *p;
	size_t n;

	buf[0] = '\0';
	if (!lr_db_query(db, "SHOW CREATE USER CURRENT_USER()") || !(row = lr_db_fetch(db)) ||
	    !row[0])
		return;
	s = row[0];
	if ((p = strstr(s, "IDENTIFIED WITH '")) || (p = strstr(s, "IDENTIFIED VIA "))) {
		p = strchr(p + 11, p[11] == 'W' ? '\'' : ' ') + 1;
		n = strcspn(p, "' ");
		snprintf(buf, len, "%.*s", (int)(n < len ? n : len - 1), p);
	} else if (strstr(s, "IDENTIFIED BY PASSWORD")) {
		snprintf(buf, len, "mysql_native_password");
	}
}

/*
 * How connection DB is made, as lockrun's are: the host, TLS version and
 * cipher, whether and against which name the certificate was verified,
 * and the account's authentication plugin. Warns when a password crosses
 * a network unencrypted: TCP to an address that is not loopback, without
 * TLS. Called for doctor's own connection, or for each configured host's
 * (check_hosts). One round trip (auth_plugin).
 */
static void check_link(struct doctor *d, lr_db *db)
{
	const struct lr_db_params *p = d->o->params;
	struct lr_db_link l;
	char plugin[64], where[400];
	bool password;

	if (!lr_db_link(db, &l))
		return;
	auth_plugin(db, plugin, sizeof(plugin));
	password = p && ((p->password && *p->password) || p->option_file);
	if (l.host && strcmp(l.host, l.address) != 0)
		snprintf(where, sizeof(where), "%s (%s)", l.host, l.address);
	else if (l.host)
		snprintf(where, sizeof(where), "%s", l.host);
	else
		snprintf(where, sizeof(where), "the unix socket");
	if (!l.host)
		say(d, "connection", SEV_OK, "%s: local, not encrypted (needs no TLS); plugin %s",
		    where, *plugin ? plugin : "unknown");
	else if (!l.cipher)
		say(d, "connection", password && !l.loopback ? SEV_WARN : SEV_OK,
		    "%s: TCP, not encrypted; plugin %s%s", where, *plugin ? plugin : "unknown",
		    password && !l.loopback
		        ? ": the password's proof and every statement cross the network in clear; "
		          "set ssl_ca and ssl_verify_server_cert = true"
		        : "");
	else
		say(d, "connection", l.verified || l.pinned ? SEV_OK : SEV_WARN,
		    "%s: %s, %s; certificate %s%s%s; plugin %s", where,
		    l.tls_version ? l.tls_version : "TLS", l.cipher,
		    l.verified ? "verified against "
		    : l.pinned ? "pinned by fingerprint"
		               : "",
		    l.verified ? l.host : "",
		    l.verified || l.pinned
		        ? ""
		        : "not verified (set ssl_verify_server_cert = true): whoever sits in the "
		          "path may pose as the server",
		    *plugin ? plugin : "unknown");
}

/*
 * Each configured host, when there are several (a primary and the
 * replicas lockrun fails over to, or a cluster's nodes), on a connection
 * of its own, the account's: how it is made (check_link: every host must
 * be reached as securely as the first), and its clock against this
 * host's: a new epoch's tokens start above its server's clock, and a
 * server whose clock is behind the previous writer's waits until it has
 * passed that one's quarantine (doc/production.md, Fail-over to a
 * replica), so the servers' clocks should agree. A host that does not
 * answer is said to be unknown. Returns false, having done nothing, with
 * one host. One connect and two queries per host.
 */
static bool check_hosts(struct doctor *d)
{
	const struct lr_db_params *p = d->o->params;
	struct lr_sb sb;
	double lo = 0, hi = 0;
	bool any = false;

	if (!p || !d->o->loop || p->nhosts < 2)
		return false;
	lr_sb_init(&sb);
	for (size_t i = 0; i < p->nhosts; i++) {
		struct lr_db_params one = *p;
		lr_db *h;
		MYSQL_ROW row;
		double t0, t1, off;

		one.hosts = &p->hosts[i];
		one.nhosts = 1;
		lr_sb_printf(&sb, "%s%s ", i ? ", " : "", p->hosts[i]);
		if (!(h = lr_db_create(d->o->loop, &one))) {
			lr_sb_puts(&sb, "?");
			continue;
		}
		lr_db_allow_any_server(h);
		t0 = lr_db_connect(h) ? now_s() : 0;
		if (t0 > 0 && lr_db_query(h, "SELECT UNIX_TIMESTAMP(NOW(6))") &&
		    (row = lr_db_fetch(h)) && row[0]) {
			t1 = now_s();
			off = strtod(row[0], NULL) - (t0 + t1) / 2;
			lr_sb_printf(&sb, "%+.3f s", off);
			lo = any && lo < off ? lo : off;
			hi = any && hi > off ? hi : off;
			any = true;
			check_link(d, h);
		} else {
			lr_sb_puts(&sb, "unknown (no answer)");
			say(d, "connection", SEV_WARN, "%s: no answer: %s", p->hosts[i],
			    lr_db_error(h));
		}
		lr_db_destroy(h);
	}
	say(d, "host_clocks", hi - lo > d->o->clock_warn_s ? SEV_WARN : SEV_OK,
	    "against this host's: %s; %.3f s apart (warned past %g s): after a fail-over a "
	    "server whose clock is behind the old primary's grants nothing until it has "
	    "passed that one's quarantine",
	    sb.oom ? "?" : lr_sb_str(&sb), hi - lo, d->o->clock_warn_s);
	lr_sb_finish(&sb);
	return true;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Every lock operation is one round trip: what one costs from here. */
static void check_rtt(struct doctor *d)
{
	double t[RTT_PROBES];

	for (int i = 0; i < RTT_PROBES; i++) {
		double t0 = now_s();
		if (!lr_db_query(d->db, "DO 1")) {
			say(d, "round_trip", SEV_WARN, "%s", lr_db_error(d->db));
			return;
		}
		t[i] = (now_s() - t0) * 1000.0;
	}
	qsort(t, RTT_PROBES, sizeof(t[0]), cmp_double);
	say(d, "round_trip", t[RTT_PROBES / 2] > 50 ? SEV_WARN : SEV_OK,
	    "%.2f ms median, %.2f ms best of %d (each acquire, renewal and release is one)",
	    t[RTT_PROBES / 2], t[0], RTT_PROBES);
}

/* Text in lines of at most 80 columns, the first after a 19-column
 * head, the others indented as far; breaks at spaces. */
static void wrap(FILE *out, const char *text)
{
	const size_t indent = 19, width = 80;
	size_t col = indent;

	while (*text) {
		size_t w = strcspn(text, " ");
		if (col > indent && col + 1 + w > width) {
			fprintf(out, "\n%*s", (int)indent, "");
			col = indent;
		} else if (col > indent) {
			fputc(' ', out);
			col++;
		}
		fwrite(text, 1, w, out);
		col += w;
		text += w;
		text += strspn(text, " ");
	}
	fputc('\n', out);
}

static void print(struct doctor *d, FILE *out, const char *who, const char *dbname,
                  unsigned problems, unsigned warnings)
{
	if (d->o->json) {
		fputs("{\"server\":", out);
		lr_report_json(out, lr_db_server(d->db));
		fputs(",\"account\":", out);
		lr_report_json(out, who);
		fputs(",\"database\":", out);
		lr_report_json_or_null(out, dbname);
		fputs(",\"checks\":[", out);
		for (size_t i = 0; i < d->n; i++) {
			fprintf(out,
			        "%s{\"check\":\"%s\",\"status\":\"%s\",\"detail\":", i ? "," : "",
			        d->f[i].check, sev_json[d->f[i].sev]);
			lr_report_json(out, d->f[i].text);
			fputc('}', out);
		}
		fprintf(out, "],\"problems\":%u,\"warnings\":%u}\n", problems, warnings);
		return;
	}
	fputs("lockrun doctor: ", out);
	lr_report_show(out, lr_db_server(d->db), 60, 0);
	fputs(" as ", out);
	lr_report_show(out, who, 60, 0);
	fputs(", database ", out);
	lr_report_show(out, dbname ? dbname : "(none)", 64, 0);
	fputc('\n', out);
	for (size_t i = 0; i < d->n; i++) {
		struct lr_sb sb;
		lr_sb_init(&sb);
		/* Server text (versions, errors) shown escaped. */
		lr_text_show(&sb, d->f[i].text, SIZE_MAX);
		fprintf(out, "%-4s  %-12s ", sev_word[d->f[i].sev], d->f[i].check);
		wrap(out, lr_sb_str(&sb));
		lr_sb_finish(&sb);
	}
	if (problems)
		fprintf(out, "%u problem%s, %u warning%s: lockrun would fail or be unsafe here\n",
		        problems, problems == 1 ? "" : "s", warnings, warnings == 1 ? "" : "s");
	else
		fprintf(out, "no problems, %u warning%s\n", warnings, warnings == 1 ? "" : "s");
}

/*
 * Runs every check, prints the findings and sets *problems to how many
 * would make lockrun fail or be unsafe. False only when the server
 * cannot even be asked. About twenty round trips.
 */
bool lr_doctor_run(lr_db *db, const struct lr_doctor_opts *o, FILE *out, unsigned *problems)
{
	struct doctor d = {.db = db, .o = o, .mysql = lr_db_is_mysql(db)};
	unsigned warnings = 0;
	char who[400] = "?", dbname[200] = "";
	MYSQL_ROW row;
	bool ok = false;

	*problems = 0;
	/* A server lockrun does not support (lockrunctl connects anyway for
	 * the doctor): that is the report; the other checks would ask it what
	 * it may not even understand. */
	if (!lr_db_supported(db)) {
		say(&d, "server", SEV_FAIL,
		    "%s is not supported: lockrun needs MariaDB 10.6 or later, or MySQL 8.4 "
		    "or later",
		    lr_db_server_info(db) ? lr_db_server_info(db) : "this server");
		*problems = 1;
		print(&d, out, who, NULL, *problems, warnings);
		ok = true;
		goto out;
	}
	if (!lr_db_query(db, "SELECT CURRENT_USER(), DATABASE()") || !(row = lr_db_fetch(db)))
		goto out;
	snprintf(who, sizeof(who), "%s", row[0] ? row[0] : "?");
	snprintf(dbname, sizeof(dbname), "%s", row[1] ? row[1] : "");
	d.dbname = dbname;
	if (!read_vars(&d))
		goto out;
	check_server(&d);
	check_galera(&d);
	check_read_only(&d);
	check_settings(&d);
	check_topology(&d);
	check_wait_timeout(&d);
	check_general_log(&d);
	check_time_zone(&d);
	check_clock(&d);
	check_privileges(&d);
	check_accounts(&d);
	check_schema(&d);
	check_used(&d);
	check_sweep(&d);
	check_rtt(&d);
	if (!check_hosts(&d))
		check_link(&d, db);
	for (size_t i = 0; i < d.n; i++) {
		*problems += d.f[i].sev == SEV_FAIL;
		warnings += d.f[i].sev == SEV_WARN;
	}
	print(&d, out, who, *dbname ? dbname : NULL, *problems, warnings);
	ok = true;
out:
	for (int i = 0; i < NVARS; i++)
		free(d.var[i]);
	return ok;
}
