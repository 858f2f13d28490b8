/*
 * The driver of a database connection: what to send and how cheaply.
 * Runs Connector/C's non-blocking API on the libuv loop (each operation
 * looks synchronous to its caller but runs the loop while it waits, under
 * a deadline), sends statements and CALLs (prepared, or as text on MySQL),
 * reads and keeps their answers, and names errors. It knows nothing of
 * where to connect (dbconn.c) nor of locks. Internal to the db module:
 * dbio.c and dbconn.c include this header; the rest of lockrun uses
 * db.h, which declares the public functions defined here too.
 *
 * Of the libraries beside Connector/C and libuv, it touches only OpenSSL's
 * error queue (tls_errors_clear in dbio.c says why).
 *
 * May use: db (its types and what dbio.c defines), log, strbuf.
 */
#ifndef LR_DBIO_H
#define LR_DBIO_H

#include "db.h"

/* The oldest servers the schema installs on: MariaDB 10.6 (JSON_TABLE, which
 * the routines keep a request's items in) and MySQL 8.4, the oldest MySQL
 * release line still maintained (roles, JSON_TABLE, SKIP LOCKED and the
 * redo and replication names of the server seam, sql/routines/05-server.sql;
 * only 9.7 is tested). */
#define LR_DBIO_MIN_MARIADB 100600UL
#define LR_DBIO_MIN_MYSQL   80400UL

/* One handle: the driver's part, then the connecting part, which only
 * dbconn.c reads or writes. Opaque outside the db module. */
struct lr_db {
	uv_loop_t *loop;
	MYSQL *m; /* NULL when not connected */

	uv_poll_t *poll; /* watches poll_fd; replaced when the socket changes */
	int poll_fd;
	uv_timer_t *wait_timer; /* the connector's MYSQL_WAIT_TIMEOUT */
	uv_timer_t *deadline;   /* our bound on the whole operation */
	int fired;              /* MYSQL_WAIT_* events seen in the current wait */
	bool expired;
	bool aborting;
	bool connecting; /* a non-blocking connect runs (lr_dbio_socket) */

	MYSQL *ret_conn;
	int ret_int;
	my_bool ret_bool;
	MYSQL_RES *ret_res;
	MYSQL_RES *res;

	/* Prepared CALLs of this connection (lr_db_call), by their text, and
	 * the answer of the last one, held as strings. */
	struct lr_dbio_stmt {
		const char *sql; /* the caller's string, compared by content */
		MYSQL_STMT *st;
	} stmts[LR_DB_STMTS];
	MYSQL_STMT *cur; /* the statement being run, for the cont_ functions */
	struct lr_dbio_rows {
		char **cells; /* nrows * ncols, row by row; NULL is SQL NULL */
		char **names; /* ncols column names */
		size_t nrows, ncols, next;
	} rows;
	bool quiet; /* this connection's statements are kept out of the slow log */

	const volatile bool *cancel;
	unsigned op_timeout_ms;
	void (*idle_fn)(void *arg); /* the idle connection became readable */
	void *idle_arg;
	unsigned generation; /* bumped by every successful connect */
	unsigned err;
	char errmsg[1024];
	char server[300]; /* the connection's label, for messages */

	/* The connecting part (dbconn.c). */
	const struct lr_db_params *p;
	bool probe;          /* check a new connection with SELECT 1 */
	bool multi;          /* log in with multi-statements (lr_db_set_multi_statements) */
	bool any_server;     /* keep a connection to any server (lr_db_allow_any_server) */
	size_t first_host;   /* where the next connect starts in the host list */
	size_t cur_host;     /* the host of the current connection */
	char cur_ip[64];     /* its address, "" for the unix socket */
	int galera;          /* the hosts are Galera nodes: -1 not known yet, 0 no, 1 yes */
	bool following;      /* connecting to the Galera writer (follow_writer) */
	uint64_t checked_ms; /* when follow_writer last asked (monotonic ms) */
	uint64_t *passed;    /* per configured host, until when it is no writer (ms) */
	size_t suspect;      /* 1 + the writer that let a statement run out of time, or 0 */
	bool probing;        /* this connect is a probe of a Galera writer (GALERA_PROBE_MS) */
	bool sibling;        /* starts at its parent's host and asks no writer */
	int group; /* a Group Replication member: -1 not known, 0 members not readable, 1 yes */
	char **host_ips; /* per configured host, its addresses joined by spaces, or NULL */
};

/* Continues a non-blocking operation after the events in status. */
typedef int (*lr_dbio_cont)(lr_db *db, int status);

bool lr_dbio_init(lr_db *db, uv_loop_t *loop);
void lr_dbio_finish(lr_db *db);
void lr_dbio_free_handle(uv_handle_t *h);
void lr_dbio_set_error(lr_db *db, unsigned err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void lr_dbio_take_error(lr_db *db, const char *what, unsigned timeout_ms);
void lr_dbio_drive(lr_db *db, int status, lr_dbio_cont cont, unsigned timeout_ms);
void lr_dbio_start_deadline(lr_db *db, unsigned timeout_ms);
void lr_dbio_stop_deadline(lr_db *db);
void lr_dbio_shut(lr_db *db);
int lr_dbio_socket(MYSQL *m, bool connecting);
void lr_dbio_drop_poll(lr_db *db);
void lr_dbio_watch_idle(lr_db *db);
bool lr_dbio_query(lr_db *db, const char *sql, const char *shown, unsigned timeout_ms);
bool lr_dbio_call(lr_db *db, const char *sql, const char *const *params, unsigned nparams,
                  unsigned timeout_ms);

#endif
