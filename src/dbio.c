/* The driver of a database connection: dbio.h says what it does. */
#include "dbio.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <errmsg.h>
#include <mysqld_error.h>
#include <openssl/err.h>

#include "log.h"
#include "strbuf.h"

static void free_rows(struct lr_dbio_rows *r);
static void close_stmts(lr_db *db);

/*
 * Called before each operation of the connector's: empties this thread's
 * OpenSSL error queue. The connector tells a TLS read or write that would
 * block from a failed one with SSL_get_error(), which reads that queue,
 * and it leaves there what a lost TLS connection put in. Logins that may
 * start TLS run on threads of their own (dbconn.c), so nothing else
 * empties this thread's queue: one entry left by a lost connection made
 * every later wait for an answer on a TLS connection fail as a lost
 * connection, and a holder whose connection was cut could not renew on
 * the next one. Local work.
 */
static void tls_errors_clear(void)
{
	ERR_clear_error();
}

/*
 * The socket of connection m, or -1 when it has none. Connector/C's
 * mysql_get_socket() answers for a connection without one (net.pvio
 * NULL: not open yet, or closed by the connector after a read or write
 * failed) with the socket its last non-blocking connect opened, which it
 * keeps after the connect, also once that socket is closed: freed memory
 * then, whose descriptor number may be another file's. So that answer is
 * taken only while a connect runs (connecting), the one time it is the
 * only way to the socket. Local work.
 */
int lr_dbio_socket(MYSQL *m, bool connecting)
{
	return m && (m->net.pvio || connecting) ? (int)mysql_get_socket(m) : -1;
}

/*
 * Holds back (on) or lets go (off) what is written to the connection's
 * TCP socket, so that statements sent one after another without waiting
 * leave in one segment: the server then has them all when it reads the
 * first, and nothing can answer the first before the next one left
 * (which a preempted client would otherwise let happen between two
 * writes). Not TCP (a Unix socket): nothing to do. One setsockopt.
 */
static void cork(MYSQL *m, bool on)
{
	int fd = lr_dbio_socket(m, false), v = on;

	if (fd >= 0)
		(void)setsockopt(fd, IPPROTO_TCP, TCP_CORK, &v, sizeof(v));
}

/* Sets up the driver's part of a zeroed handle: its two timers on loop.
 * False when out of memory (nothing is left to free). */
bool lr_dbio_init(lr_db *db, uv_loop_t *loop)
{
	db->loop = loop;
	db->poll_fd = -1;
	db->wait_timer = malloc(sizeof(*db->wait_timer));
	db->deadline = malloc(sizeof(*db->deadline));
	if (!db->wait_timer || !db->deadline) {
		free(db->wait_timer);
		free(db->deadline);
		return false;
	}
	uv_timer_init(loop, db->wait_timer);
	uv_timer_init(loop, db->deadline);
	db->wait_timer->data = db;
	db->deadline->data = db;
	return true;
}

/* uv_close's callback for a handle of its own allocation. */
void lr_dbio_free_handle(uv_handle_t *h)
{
	free(h);
}

/* Closes the handle's timers (after lr_db_disconnect). Closing libuv
 * handles completes on a later loop iteration; the owner runs the loop
 * once more before uv_loop_close() so the memory is returned. */
void lr_dbio_finish(lr_db *db)
{
	uv_close((uv_handle_t *)db->wait_timer, lr_dbio_free_handle);
	uv_close((uv_handle_t *)db->deadline, lr_dbio_free_handle);
}

void lr_dbio_set_error(lr_db *db, unsigned err, const char *fmt, ...)
{
	va_list ap;

	db->err = err;
	va_start(ap, fmt);
	vsnprintf(db->errmsg, sizeof(db->errmsg), fmt, ap);
	va_end(ap);
}

/* An idle connection has nothing to read unless the server is closing it
 * (KILL, shutdown, a crash). Only a hint: the owner checks with a query,
 * from its own code, never from this callback. */
static void on_idle_readable(uv_poll_t *h, int status, int events)
{
	lr_db *db = h->data;

	uv_poll_stop(h);
	if (db->idle_fn)
		db->idle_fn(db->idle_arg);
	uv_stop(h->loop);
}

void lr_dbio_watch_idle(lr_db *db)
{
	if (db->idle_fn && db->poll && db->m)
		uv_poll_start(db->poll, UV_READABLE | UV_DISCONNECT, on_idle_readable);
}

void lr_dbio_drop_poll(lr_db *db)
{
	if (db->poll) {
		uv_close((uv_handle_t *)db->poll, lr_dbio_free_handle);
		db->poll = NULL;
	}
	db->poll_fd = -1;
}

static void on_poll(uv_poll_t *h, int status, int events)
{
	lr_db *db = h->data;

	/* On a poll error let the connector find out what is wrong by trying. */
	if (status < 0)
		db->fired |= MYSQL_WAIT_READ | MYSQL_WAIT_WRITE;
	if (events & UV_READABLE)
		db->fired |= MYSQL_WAIT_READ;
	if (events & UV_WRITABLE)
		db->fired |= MYSQL_WAIT_WRITE;
	if (events & UV_PRIORITIZED)
		db->fired |= MYSQL_WAIT_EXCEPT;
	uv_stop(h->loop);
}

static void on_wait_timer(uv_timer_t *t)
{
	lr_db *db = t->data;
	db->fired |= MYSQL_WAIT_TIMEOUT;
	uv_stop(t->loop);
}

static void on_deadline(uv_timer_t *t)
{
	lr_db *db = t->data;
	db->expired = true;
	uv_stop(t->loop);
}

/* Arms the handle's deadline for a wait that is not the connector's (a
 * name lookup): db->expired is set, and the loop stopped, when it passes. */
void lr_dbio_start_deadline(lr_db *db, unsigned timeout_ms)
{
	db->expired = false;
	uv_timer_start(db->deadline, on_deadline, timeout_ms, 0);
}

void lr_dbio_stop_deadline(lr_db *db)
{
	uv_timer_stop(db->deadline);
}

/* Arms the poll and timer for what the connector waits on. The socket is
 * re-read every time: it changes while connecting. */
static void watch(lr_db *db, int status)
{
	int fd = lr_dbio_socket(db->m, db->connecting);
	int ev = 0;

	if (status & MYSQL_WAIT_READ)
		ev |= UV_READABLE;
	if (status & MYSQL_WAIT_WRITE)
		ev |= UV_WRITABLE;
	if (status & MYSQL_WAIT_EXCEPT)
		ev |= UV_PRIORITIZED;
	if (fd != db->poll_fd) {
		lr_dbio_drop_poll(db);
		if (fd >= 0) {
			db->poll = malloc(sizeof(*db->poll));
			if (db->poll && uv_poll_init(db->loop, db->poll, fd) == 0) {
				db->poll->data = db;
				db->poll_fd = fd;
			} else {
				free(db->poll);
				db->poll = NULL;
			}
		}
	}
	if (db->poll && ev)
		uv_poll_start(db->poll, ev, on_poll);
	if (status & MYSQL_WAIT_TIMEOUT)
		uv_timer_start(db->wait_timer, on_wait_timer, mysql_get_timeout_value_ms(db->m), 0);
}

static void unwatch(lr_db *db)
{
	if (db->poll)
		uv_poll_stop(db->poll);
	uv_timer_stop(db->wait_timer);
}

/* Shutting the socket down makes the connector's next read or write fail at
 * once, which is the only safe way to abandon an operation in flight. */
void lr_dbio_shut(lr_db *db)
{
	int fd = lr_dbio_socket(db->m, db->connecting);

	if (fd >= 0)
		shutdown(fd, SHUT_RDWR);
}

/*
 * A note on the loop: every callback that sets a flag one of our
 * `while (!flag) uv_run(UV_RUN_ONCE)` loops waits on also calls uv_stop().
 * libuv (1.44 at least) runs timers that are already due before it polls,
 * then polls with no timeout if no timer is left: without uv_stop() the
 * flag would be set but uv_run() would not return until something else
 * happened, which might be never.
 *
 * Runs one non-blocking operation to completion: waits for the events the
 * connector asks for by running the loop, then continues it. If the deadline
 * passes or the cancel flag is raised, the socket is shut down and the
 * operation is driven on until the connector gives up (it does so at once).
 * Costs one loop iteration per wait; never blocks the loop.
 */
void lr_dbio_drive(lr_db *db, int status, lr_dbio_cont cont, unsigned timeout_ms)
{
	int spins = 0;

	db->expired = false;
	db->aborting = false;
	uv_timer_start(db->deadline, on_deadline, timeout_ms, 0);
	while (status) {
		db->fired = 0;
		if (!db->aborting)
			watch(db, status);
		while (!db->fired && !db->aborting) {
			if (db->expired || (db->cancel && *db->cancel)) {
				db->aborting = true;
				break;
			}
			uv_run(db->loop, UV_RUN_ONCE);
		}
		unwatch(db);
		if (db->aborting) {
			lr_dbio_shut(db);
			db->fired =
			    status & (MYSQL_WAIT_READ | MYSQL_WAIT_WRITE | MYSQL_WAIT_TIMEOUT);
			if (!db->fired || ++spins > 1000)
				db->fired = MYSQL_WAIT_TIMEOUT;
		}
		status = cont(db, db->fired);
	}
	uv_timer_stop(db->deadline);
}

static int cont_query(lr_db *db, int st)
{
	return mysql_real_query_cont(&db->ret_int, db->m, st);
}

static int cont_store(lr_db *db, int st)
{
	return mysql_store_result_cont(&db->ret_res, db->m, st);
}

static int cont_next(lr_db *db, int st)
{
	return mysql_next_result_cont(&db->ret_int, db->m, st);
}

static int cont_close(lr_db *db, int st)
{
	return mysql_close_cont(db->m, st);
}

static int cont_execute(lr_db *db, int st)
{
	return mysql_stmt_execute_cont(&db->ret_int, db->cur, st);
}

static int cont_stmt_store(lr_db *db, int st)
{
	return mysql_stmt_store_result_cont(&db->ret_int, db->cur, st);
}

static int cont_stmt_next(lr_db *db, int st)
{
	return mysql_stmt_next_result_cont(&db->ret_int, db->cur, st);
}

/* Why an operation ended, in our terms: a deadline or a cancel overrides
 * whatever the connector made of the shut-down socket. */
void lr_dbio_take_error(lr_db *db, const char *what, unsigned timeout_ms)
{
	if (db->expired)
		lr_dbio_set_error(db, LR_DB_ETIMEDOUT, "%s: no answer within %.1f s", db->server,
		                  timeout_ms / 1000.0);
	else if (db->aborting)
		lr_dbio_set_error(db, LR_DB_ECANCELED, "%s: %s interrupted", db->server, what);
	else if (mysql_errno(db->m) == 0)
		/* Failed without a reason: where the protocol stands is unknown,
		 * so the connection is as good as lost. */
		lr_dbio_set_error(db, CR_UNKNOWN_ERROR,
		                  "%s: %s failed without an error from the server", db->server,
		                  what);
	else
		lr_dbio_set_error(db, mysql_errno(db->m), "%s: %s (%u)", db->server,
		                  mysql_error(db->m), mysql_errno(db->m));
}

static void free_result(lr_db *db)
{
	if (db->res) {
		mysql_free_result(db->res);
		db->res = NULL;
	}
	free_rows(&db->rows);
}

/* Closes the connection. A healthy one says goodbye without blocking; a
 * broken one is shut first so that mysql_close() cannot wait on it. A
 * goodbye that runs out of time is cut short by lr_dbio_drive(), which shuts the
 * socket before the connector's last step; that step frees the handle, so
 * nothing may touch db->m after it. */
void lr_db_disconnect(lr_db *db)
{
	free_result(db);
	tls_errors_clear();
	if (db->m) {
		if (db->err == 0 || !lr_db_error_is_connection(db->err)) {
			int st = mysql_close_start(db->m);
			if (st)
				lr_dbio_drive(db, st, cont_close, 1000);
		} else {
			lr_dbio_shut(db);
			mysql_close(db->m);
		}
		db->m = NULL;
		close_stmts(db);
		db->quiet = false;
	}
	lr_dbio_drop_poll(db);
}

bool lr_db_connected(const lr_db *db)
{
	return db->m != NULL;
}

/* Changes whenever a new connection replaces the old one: session state
 * (settings, named locks) belongs to one generation. */
unsigned lr_db_generation(const lr_db *db)
{
	return db->m ? db->generation : 0;
}

/*
 * Reads the rest of a multi-result answer: a CALL of a procedure sends its
 * result sets, then a final OK, and the next statement fails with 2014
 * ("Commands out of sync") unless all of it was read. Further result sets
 * are stored and dropped (the first one is the answer); an error in any
 * part fails the whole statement with that error. No extra round trip: the
 * parts arrive with the first.
 */
static bool drain(lr_db *db, unsigned timeout_ms)
{
	MYSQL_RES *extra;
	int st;

	while (mysql_more_results(db->m)) {
		st = mysql_next_result_start(&db->ret_int, db->m);
		if (st)
			lr_dbio_drive(db, st, cont_next, timeout_ms);
		if (db->ret_int > 0 || db->aborting)
			return false;
		if (db->ret_int < 0)
			break;
		if (mysql_field_count(db->m) == 0)
			continue;
		db->ret_res = NULL;
		st = mysql_store_result_start(&db->ret_res, db->m);
		if (st)
			lr_dbio_drive(db, st, cont_store, timeout_ms);
		extra = db->ret_res;
		if (db->aborting || (!extra && mysql_errno(db->m)))
			return false;
		/* NULL without an error: there was no result set after all
		 * (the field count can be left over from the previous part). */
		if (extra)
			mysql_free_result(extra);
	}
	return true;
}

/*
 * After a statement failed with db->err set: its partial answer is
 * dropped, and a broken connection is closed. What the failure means for
 * the next connect (another host) is dbconn.c's, which
 * lr_db_query and lr_db_call apply after this. Local work.
 */
static void io_failed(lr_db *db)
{
	free_result(db);
	if (lr_db_error_is_connection(db->err)) {
		lr_log_debug("dropping connection to %s: %s", db->server, db->errmsg);
		lr_db_disconnect(db);
	}
}

/*
 * Sends one statement and, if it returns rows, stores them all (so the next
 * statement can go at once). For a CALL the first result set is the answer
 * and the rest of the reply is read too (drain). The debug log shows shown
 * instead of sql. With set_first, sql is quiet_sql's SET and a CALL in one
 * text (multi-statements): the SET's answer comes first and is passed
 * over; if the SET fails, the server runs nothing after it. The answer is
 * awaited at most timeout_ms. One round trip plus the result transfer.
 */
static bool run_query(lr_db *db, bool set_first, const char *sql, const char *shown,
                      unsigned timeout_ms)
{
	int st;

	free_result(db);
	if (!db->m) {
		lr_dbio_set_error(db, LR_DB_ENOTCONN, "not connected");
		return false;
	}
	lr_log_debug("%s: %s", db->server, shown);
	db->expired = db->aborting = false;
	tls_errors_clear();
	st = mysql_real_query_start(&db->ret_int, db->m, sql, strlen(sql));
	if (st)
		lr_dbio_drive(db, st, cont_query, timeout_ms);
	if (db->ret_int != 0 || db->aborting)
		goto fail;
	if (set_first) {
		db->quiet = true;
		st = mysql_next_result_start(&db->ret_int, db->m);
		if (st)
			lr_dbio_drive(db, st, cont_next, timeout_ms);
		if (db->ret_int != 0 || db->aborting)
			goto fail;
	}
	if (mysql_field_count(db->m) > 0) {
		st = mysql_store_result_start(&db->ret_res, db->m);
		if (st)
			lr_dbio_drive(db, st, cont_store, timeout_ms);
		if (!db->ret_res || db->aborting)
			goto fail;
		db->res = db->ret_res;
	}
	if (!drain(db, timeout_ms))
		goto fail;
	db->err = 0;
	lr_dbio_watch_idle(db);
	return true;
fail:
	lr_dbio_take_error(db, "query", timeout_ms);
	io_failed(db);
	return false;
}

bool lr_dbio_query(lr_db *db, const char *sql, const char *shown, unsigned timeout_ms)
{
	return run_query(db, false, sql, shown, timeout_ms);
}

static void free_rows(struct lr_dbio_rows *r)
{
	if (r->cells)
		for (size_t i = 0; i < r->nrows * r->ncols; i++)
			free(r->cells[i]);
	if (r->names)
		for (size_t i = 0; i < r->ncols; i++)
			free(r->names[i]);
	free(r->cells);
	free(r->names);
	*r = (struct lr_dbio_rows){0};
}

/* Frees the connection's prepared statements, after mysql_close(): it
 * detached them, so this is local work (the server dropped them with the
 * session). */
static void close_stmts(lr_db *db)
{
	for (size_t i = 0; i < LR_DB_STMTS; i++) {
		if (db->stmts[i].st)
			mysql_stmt_close(db->stmts[i].st);
		db->stmts[i] = (struct lr_dbio_stmt){0};
	}
	db->cur = NULL;
}

/* The error of statement st, in our terms (see take_error). */
static void take_stmt_error(lr_db *db, MYSQL_STMT *st, const char *what, unsigned timeout_ms)
{
	if (db->expired || db->aborting || mysql_stmt_errno(st) == 0)
		lr_dbio_take_error(db, what, timeout_ms);
	else
		lr_dbio_set_error(db, mysql_stmt_errno(st), "%s: %s (%u)", db->server,
		                  mysql_stmt_error(st), mysql_stmt_errno(st));
}

/*
 * The statement that keeps this connection's statements out of the slow
 * query log, or NULL once the connection ran it: sent once per
 * connection, with its first CALL, so it costs no round trip of its own
 * (MariaDB: ahead of the prepare in the same send, run_direct; MySQL: in
 * the same query, call_text). A prepared statement's
 * parameters never travel in its text, but MariaDB writes them into it
 * (and so into what SHOW PROCESSLIST shows every session of the same
 * account) when the statement may be logged, and decides that when it
 * prepares it: always with the general log on, and with the slow log on
 * for the session. The variable is log_slow_query from MariaDB 10.11,
 * sql_log_slow before. The same statement makes the session independent
 * of two global settings a managed server may have: autocommit (an
 * init_connect may turn it off; the routines commit what they write
 * either way, but a statement of lockrun's own would begin a transaction
 * that stays open) and MariaDB's max_statement_time, which cuts off every
 * statement, a CALL that waits for a wake-up among them. Whether the slow
 * log is on cannot be known without asking, so it is always sent; the
 * server runs what it is sent in order, so the prepare behind it is
 * decided under it. The prepared statement cannot carry it instead: SET
 * STATEMENT ... FOR applies at the execute, after the prepare decided,
 * and inside BEGIN NOT ATOMIC the process list shows the inner statement
 * with the values in. MySQL shows every parameter in the process list
 * anyway (lr_db_call sends its CALLs as text there), but its slow log is
 * read by more people than the sessions of lockrun's account (log
 * shippers, a managed service's console), and a waiter's CALL outlasts a
 * short long_query_time: so MySQL gets the same statement, with its own
 * names (long_query_time; max_execution_time, which limits SELECTs such
 * as lockwait's GET_LOCK). On MariaDB the CALL sent behind the SET runs
 * even if the SET fails, and its effect stands (a grant lapses with its
 * lease), though the run reports the SET's error: the SET needs no
 * privilege and names only variables this server's version has, so a
 * server that refused it would refuse it on every connection, and no run
 * would get further. On MySQL nothing after a failed SET runs.
 */
static const char *quiet_sql(lr_db *db)
{
	if (db->quiet)
		return NULL;
	return lr_db_is_mysql(db) ? "SET SESSION long_query_time = 31536000, "
	                            "SESSION autocommit = 1, "
	                            "SESSION max_execution_time = 0"
	       : mysql_get_server_version(db->m) >= 101100
	           ? "SET SESSION log_slow_query = 0, SESSION autocommit = 1, "
	             "SESSION max_statement_time = 0"
	           : "SET SESSION sql_log_slow = 0, SESSION autocommit = 1, "
	             "SESSION max_statement_time = 0";
}

/* The statement of sql that this connection prepared before, or NULL. */
static MYSQL_STMT *kept_stmt(lr_db *db, const char *sql)
{
	for (size_t i = 0; i < LR_DB_STMTS; i++)
		if (db->stmts[i].st && strcmp(db->stmts[i].sql, sql) == 0)
			return db->stmts[i].st;
	return NULL;
}

/* A new statement handle for sql, kept in a free slot (the oldest one's
 * when all are taken: it is closed, which sends a message and waits for
 * no answer), or NULL with the error set. Not prepared yet. */
static MYSQL_STMT *new_stmt(lr_db *db, const char *sql)
{
	struct lr_dbio_stmt *slot = NULL;
	MYSQL_STMT *st;

	for (size_t i = 0; i < LR_DB_STMTS && !slot; i++)
		if (!db->stmts[i].st)
			slot = &db->stmts[i];
	if (!slot) {
		mysql_stmt_close(db->stmts[0].st);
		memmove(&db->stmts[0], &db->stmts[1], sizeof(db->stmts[0]) * (LR_DB_STMTS - 1));
		slot = &db->stmts[LR_DB_STMTS - 1];
	}
	*slot = (struct lr_dbio_stmt){0};
	if (!(st = mysql_stmt_init(db->m))) {
		lr_dbio_set_error(db, CR_OUT_OF_MEMORY, "out of memory");
		return NULL;
	}
	slot->sql = sql;
	slot->st = st;
	return st;
}

/* Forgets the statement of sql (after its first run failed: whether the
 * server kept it is not known), closing its handle. */
static void drop_stmt(lr_db *db, MYSQL_STMT *st)
{
	for (size_t i = 0; i < LR_DB_STMTS; i++)
		if (db->stmts[i].st == st) {
			mysql_stmt_close(st);
			db->stmts[i] = (struct lr_dbio_stmt){0};
		}
	db->cur = NULL;
}

/* What the thread of run_direct hands back. */
struct direct {
	MYSQL_STMT *st;
	const char *sql;
	const char *before; /* a statement sent ahead of the prepare, or NULL */
	int ret;
	bool before_ok; /* the server accepted before */
	unsigned err;   /* the first failure of the sends with before */
	char msg[512];
	atomic_bool done;
	uv_async_t *wake;
};

/* Keeps the connection's (or st's) error as d's first failure: the
 * answers read after it would overwrite it. */
static void keep_error(struct direct *d, MYSQL *m, MYSQL_STMT *st)
{
	if (d->err)
		return;
	if (st && mysql_stmt_errno(st)) {
		d->err = mysql_stmt_errno(st);
		snprintf(d->msg, sizeof(d->msg), "%s", mysql_stmt_error(st));
	} else if (mysql_errno(m)) {
		d->err = mysql_errno(m);
		snprintf(d->msg, sizeof(d->msg), "%s", mysql_error(m));
	} else {
		d->err = CR_UNKNOWN_ERROR;
		snprintf(d->msg, sizeof(d->msg),
		         "the call failed without an error from the server");
	}
}

/*
 * run_direct's steps when a statement must go ahead of the prepare (the
 * session's SET, quiet_sql): the statement, the prepare and an execute
 * that names "the statement just prepared" are all sent before any answer
 * is read, then the three answers are read in their order. The server
 * runs them in that order, so the prepare is decided under the SET.
 * mariadb_stmt_execute_direct cannot take a statement ahead (it would read
 * its answer as the prepare's), so this takes its steps itself, in the
 * connector's own way: its option to send without reading
 * (MARIADB_OPT_SKIP_READ_RESPONSE), the statement marked prepared under
 * the id -1 as execute_direct marks it, and the readers of the methods
 * table mysql.h publishes (as the connector's own test of that option
 * uses them). Every answer is read even after a failure, so the
 * connection stays in step; the first failure is the one reported. On
 * the thread of run_direct; one round trip.
 */
static int direct_after(struct direct *d)
{
	MYSQL_STMT *st = d->st;
	MYSQL *m = st->mysql;
	my_bool skip = 1;
	bool prepared = false, executed = false;

	cork(m, true);
	if (mysql_send_query(m, d->before, (unsigned long)strlen(d->before))) {
		cork(m, false);
		keep_error(d, m, NULL);
		return 1;
	}
	mysql_optionsv(m, MARIADB_OPT_SKIP_READ_RESPONSE, &skip);
	if (mysql_stmt_prepare(st, d->sql, (unsigned long)strlen(d->sql)) == 0) {
		prepared = true;
		st->state = MYSQL_STMT_PREPARED;
		st->stmt_id = (unsigned long)-1;
		executed = mysql_stmt_execute(st) == 0;
	}
	skip = 0;
	mysql_optionsv(m, MARIADB_OPT_SKIP_READ_RESPONSE, &skip);
	cork(m, false);
	if (mysql_read_query_result(m))
		keep_error(d, m, NULL);
	else
		d->before_ok = true;
	if (!prepared || !executed) {
		keep_error(d, m, st);
		/* A prepare sent without its execute has an answer to read. */
		if (prepared && m->methods->db_read_prepare_response(st))
			st->state = MYSQL_STMT_INITTED;
		return 1;
	}
	if (m->methods->db_read_prepare_response(st)) {
		keep_error(d, m, NULL);
		st->state = MYSQL_STMT_INITTED;
		/* The execute's answer: an error, as nothing was prepared. */
		m->methods->db_stmt_flush_unbuffered(st);
		return 1;
	}
	if (m->methods->db_read_execute_response(st)) {
		keep_error(d, m, st);
		return 1;
	}
	return d->err ? 1 : 0;
}

static void *direct_main(void *arg)
{
	struct direct *d = arg;

	d->ret = d->before ? direct_after(d)
	                   : mariadb_stmt_execute_direct(d->st, d->sql, strlen(d->sql));
	atomic_store(&d->done, true);
	uv_async_send(d->wake);
	return NULL;
}

static void on_direct_done(uv_async_t *a)
{
	uv_stop(a->loop);
}

/*
 * Prepares sql on st and runs it with the bound parameters in one round
 * trip: MariaDB (10.2 and later) takes the prepare and an execute that
 * names "the statement just prepared" in one send, and answers both
 * (mariadb_stmt_execute_direct). The connector has no non-blocking form
 * of it, so it runs on a thread of its own while this one runs the loop,
 * as lr_dbio_drive() does: signals, timers and child exits are served, and the
 * deadline or the cancel flag shuts the socket down, which makes the
 * thread's wait end at once. The connection is not touched here until the
 * thread is done: not even to find its socket, which the connector frees
 * when a read fails or runs out of its read_timeout (as it may at our
 * deadline), so the socket is shut through a descriptor of our own, a
 * duplicate taken before the thread starts. With before, that statement
 * goes first in the same round trip (direct_after), and db->quiet says
 * whether the server took it. Costs one round trip, a thread start (two
 * sigprocmasks around it), the duplicate and its close, and after it a
 * fcntl (the connector leaves the socket blocking).
 */
static bool run_direct(lr_db *db, MYSQL_STMT *st, const char *sql, const char *before,
                       unsigned timeout_ms)
{
	struct direct d = {.st = st, .sql = sql, .before = before, .ret = 1};
	int fd = lr_dbio_socket(db->m, false), fl;
	/* Without a duplicate (no descriptor left), the number itself: the
	 * thread may close it, but nothing here opens another meanwhile. */
	int own = fd >= 0 ? fcntl(fd, F_DUPFD_CLOEXEC, 0) : -1;
	sigset_t all, old;
	pthread_t t;
	bool ok = false, started;

	if (!(d.wake = malloc(sizeof(*d.wake))) ||
	    uv_async_init(db->loop, d.wake, on_direct_done)) {
		free(d.wake);
		lr_dbio_set_error(db, CR_OUT_OF_MEMORY, "out of memory");
		return false;
	}
	atomic_init(&d.done, false);
	unwatch(db);
	db->expired = db->aborting = false;
	/* Signals stay with this thread, whose loop serves them: the new
	 * one starts with all of them blocked. */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	started = pthread_create(&t, NULL, direct_main, &d) == 0;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (!started) {
		lr_dbio_set_error(db, CR_OUT_OF_MEMORY, "%s: could not start a thread", db->server);
		goto out;
	}
	uv_timer_start(db->deadline, on_deadline, timeout_ms, 0);
	while (!atomic_load(&d.done)) {
		if (!db->aborting && (db->expired || (db->cancel && *db->cancel))) {
			db->aborting = true;
			if (fd >= 0)
				shutdown(own >= 0 ? own : fd, SHUT_RDWR);
		}
		uv_run(db->loop, UV_RUN_ONCE);
	}
	uv_timer_stop(db->deadline);
	pthread_join(t, NULL);
	/* The handle is ours again; its socket, if it still has one. */
	fd = lr_dbio_socket(db->m, false);
	if (fd >= 0 && (fl = fcntl(fd, F_GETFL)) >= 0)
		fcntl(fd, F_SETFL, fl | O_NONBLOCK);
	if (d.before_ok)
		db->quiet = true;
	ok = d.ret == 0 && !db->aborting;
	if (!ok && (db->expired || db->aborting || !d.err))
		take_stmt_error(db, st, "call", timeout_ms);
	else if (!ok)
		lr_dbio_set_error(db, d.err, "%s: %s (%u)", db->server, d.msg, d.err);
out:
	if (own >= 0)
		close(own);
	uv_close((uv_handle_t *)d.wake, lr_dbio_free_handle);
	return ok;
}

/* Copies the stored result set of st into db->rows, every value as a
 * string (the connector converts numbers and times). Local work only:
 * the rows arrived with the result. */
static bool keep_rows(lr_db *db, MYSQL_STMT *st)
{
	MYSQL_RES *meta = mysql_stmt_result_metadata(st);
	MYSQL_FIELD *f;
	MYSQL_BIND *b = NULL;
	unsigned long *len = NULL;
	my_bool *null = NULL;
	char **cells;
	size_t n = 0, cap = 0;
	bool ok = false;
	int r;

	if (!meta)
		goto out;
	n = mysql_num_fields(meta);
	f = mysql_fetch_fields(meta);
	db->rows.ncols = n;
	if (!(db->rows.names = calloc(n ? n : 1, sizeof(char *))) ||
	    !(b = calloc(n ? n : 1, sizeof(*b))) || !(len = calloc(n ? n : 1, sizeof(*len))) ||
	    !(null = calloc(n ? n : 1, sizeof(*null))))
		goto out;
	for (size_t i = 0; i < n; i++) {
		if (!(db->rows.names[i] = strdup(f[i].name)))
			goto out;
		b[i].buffer_type = MYSQL_TYPE_STRING;
		b[i].buffer_length = 256;
		if (!(b[i].buffer = malloc(b[i].buffer_length)))
			goto out;
		b[i].length = &len[i];
		b[i].is_null = &null[i];
	}
	if (mysql_stmt_bind_result(st, b))
		goto out;
	while ((r = mysql_stmt_fetch(st)) == 0 || r == MYSQL_DATA_TRUNCATED) {
		if (db->rows.nrows == cap) {
			cap = cap ? 2 * cap : 4;
			if (!(cells = realloc(db->rows.cells, cap * (n ? n : 1) * sizeof(char *))))
				goto out;
			db->rows.cells = cells;
		}
		cells = &db->rows.cells[db->rows.nrows * n];
		for (size_t i = 0; i < n; i++)
			cells[i] = NULL;
		db->rows.nrows++;
		for (size_t i = 0; i < n; i++) {
			if (null[i])
				continue;
			if (!(cells[i] = malloc(len[i] + 1)))
				goto out;
			if (len[i] < b[i].buffer_length) {
				memcpy(cells[i], b[i].buffer, len[i]);
			} else {
				/* Longer than the fetch buffer: the whole value again,
				 * straight into its cell. */
				MYSQL_BIND whole = b[i];
				whole.buffer = cells[i];
				whole.buffer_length = len[i] + 1;
				if (mysql_stmt_fetch_column(st, &whole, (unsigned)i, 0))
					goto out;
			}
			cells[i][len[i]] = '\0';
		}
	}
	if (r != MYSQL_NO_DATA)
		goto out;
	if (!db->rows.cells && !(db->rows.cells = calloc(1, sizeof(char *))))
		goto out;
	ok = true;
out:
	if (b)
		for (size_t i = 0; i < n; i++)
			free(b[i].buffer);
	free(b);
	free(len);
	free(null);
	if (meta)
		mysql_free_result(meta);
	if (!ok) {
		free_rows(&db->rows);
		lr_dbio_set_error(db, CR_OUT_OF_MEMORY, "%s: could not read the answer",
		                  db->server);
	}
	return ok;
}

/*
 * On MySQL, runs sql with each '?' replaced by its parameter as a quoted
 * literal, over the text protocol: MySQL writes the parameters of a
 * prepared statement into the text that its process list shows anyway,
 * so preparing would hide nothing and cost a round trip per statement and
 * connection. The debug log shows sql with its '?'. With before (the
 * connection's first CALL), that statement goes in the same text, ahead,
 * when the login got multi-statements (lr_db_set_multi_statements) and
 * the server or proxy granted them; else it costs a round trip of its
 * own first. One query: not two sent ahead of their answers, which MySQL
 * Router passes on wrong in its PASSTHROUGH mode ("Unknown command").
 * One round trip.
 */
static bool call_text(lr_db *db, const char *before, const char *sql, const char *const *params,
                      unsigned nparams, unsigned timeout_ms)
{
	struct lr_sb sb;
	unsigned i = 0;
	bool ok, together = before && (db->m->client_flag & CLIENT_MULTI_STATEMENTS) &&
	                    (db->m->server_capabilities & CLIENT_MULTI_STATEMENTS);

	if (before && !together) {
		if (!lr_dbio_query(db, before, before, timeout_ms))
			return false;
		db->quiet = true;
	}
	lr_sb_init(&sb);
	if (together) {
		lr_log_debug("%s: %s", db->server, before);
		lr_sb_puts(&sb, before);
		lr_sb_puts(&sb, "; ");
	}
	for (const char *c = sql; *c; c++) {
		if (*c == '?' && i < nparams)
			lr_db_sb_quote(db, &sb, params[i++]);
		else
			lr_sb_add(&sb, c, 1);
	}
	if (sb.oom) {
		lr_sb_finish(&sb);
		lr_dbio_set_error(db, CR_OUT_OF_MEMORY, "out of memory");
		return false;
	}
	ok = run_query(db, together, lr_sb_str(&sb), sql, timeout_ms);
	lr_sb_finish(&sb);
	return ok;
}

/*
 * Runs sql, a statement with a '?' for each of params (strings; NULL is
 * SQL NULL), as a prepared statement: the values travel apart from the
 * text, so other sessions of the same account, which can read every
 * statement's text in the process list, see only the '?' (quiet_sql
 * says when the server would write them in). The first result set is the
 * answer (lr_db_fetch, lr_db_column), the rest of the reply is read and
 * dropped, as lr_dbio_query does. Each answer is awaited at most
 * timeout_ms. Costs one round trip plus the result: the
 * first time a connection runs sql, the prepare goes in the same send
 * (run_direct), and before a connection's first CALL, quiet_sql's SET
 * too. On MySQL, as text (call_text), with that SET in the same query.
 */
bool lr_dbio_call(lr_db *db, const char *sql, const char *const *params, unsigned nparams,
                  unsigned timeout_ms)
{
	MYSQL_BIND b[LR_DB_PARAMS];
	unsigned long len[LR_DB_PARAMS], n = nparams;
	MYSQL_STMT *st = NULL;
	const char *before;
	bool fresh = false;
	int status;

	free_result(db);
	if (!db->m) {
		lr_dbio_set_error(db, LR_DB_ENOTCONN, "not connected");
		return false;
	}
	if (nparams > LR_DB_PARAMS) {
		lr_dbio_set_error(db, CR_UNKNOWN_ERROR, "%s: too many parameters", db->server);
		return false;
	}
	before = quiet_sql(db);
	if (lr_db_is_mysql(db))
		return call_text(db, before, sql, params, nparams, timeout_ms);
	if (before)
		lr_log_debug("%s: %s", db->server, before);
	lr_log_debug("%s: %s", db->server, sql);
	db->expired = db->aborting = false;
	tls_errors_clear();
	/* A statement is kept only after a first run that the SET went ahead
	 * of (a failed SET drops it), so a kept one never needs the SET. */
	if (!(st = kept_stmt(db, sql))) {
		if (!(st = new_stmt(db, sql)))
			goto fail;
		fresh = true;
		/* Bound before the prepare, which would have said how many. */
		mysql_stmt_attr_set(st, STMT_ATTR_PREBIND_PARAMS, &n);
	}
	memset(b, 0, sizeof(b));
	for (unsigned i = 0; i < nparams; i++) {
		if (!params[i]) {
			b[i].buffer_type = MYSQL_TYPE_NULL;
			continue;
		}
		len[i] = (unsigned long)strlen(params[i]);
		b[i].buffer_type = MYSQL_TYPE_STRING;
		b[i].buffer = (void *)params[i];
		b[i].buffer_length = len[i];
		b[i].length = &len[i];
	}
	db->cur = st;
	if (mysql_stmt_bind_param(st, b)) {
		take_stmt_error(db, st, "call", timeout_ms);
		goto fail;
	}
	if (fresh) {
		if (!run_direct(db, st, sql, before, timeout_ms))
			goto fail;
	} else {
		status = mysql_stmt_execute_start(&db->ret_int, st);
		if (status)
			lr_dbio_drive(db, status, cont_execute, timeout_ms);
		if (db->ret_int != 0 || db->aborting)
			goto stmt_fail;
	}
	/* Each result set: the first kept, the others stored and dropped;
	 * the last part of a CALL's reply is its status, without fields. */
	for (bool first = true;; first = false) {
		if (mysql_stmt_field_count(st) > 0) {
			status = mysql_stmt_store_result_start(&db->ret_int, st);
			if (status)
				lr_dbio_drive(db, status, cont_stmt_store, timeout_ms);
			if (db->ret_int != 0 || db->aborting)
				goto stmt_fail;
			if (first && !db->rows.cells && !keep_rows(db, st))
				goto fail;
			mysql_stmt_free_result(st);
		}
		if (!mysql_stmt_more_results(st))
			break;
		status = mysql_stmt_next_result_start(&db->ret_int, st);
		if (status)
			lr_dbio_drive(db, status, cont_stmt_next, timeout_ms);
		if (db->ret_int > 0 || db->aborting)
			goto stmt_fail;
		if (db->ret_int < 0)
			break;
	}
	db->err = 0;
	lr_dbio_watch_idle(db);
	return true;
stmt_fail:
	take_stmt_error(db, st, "call", timeout_ms);
fail:
	io_failed(db);
	/* A statement whose first run failed is prepared again next time. */
	if (fresh && st && db->m)
		drop_stmt(db, st);
	return false;
}

/* The server's version as its handshake said it ("10.11.6-MariaDB-..."),
 * or NULL when not connected. */
const char *lr_db_server_info(const lr_db *db)
{
	return db->m ? mysql_get_server_info(db->m) : NULL;
}

/* Whether the server is MySQL rather than MariaDB (whose handshake
 * version names it), for the few statements whose spelling differs. */
bool lr_db_is_mysql(const lr_db *db)
{
	const char *info = lr_db_server_info(db);

	return info && !strstr(info, "MariaDB");
}

/* Whether the server is one lockrun supports: MariaDB 10.6 or later, or
 * MySQL 8.4 or later. */
bool lr_db_supported(const lr_db *db)
{
	if (!db->m)
		return false;
	return mysql_get_server_version(db->m) >=
	       (lr_db_is_mysql(db) ? LR_DBIO_MIN_MYSQL : LR_DBIO_MIN_MARIADB);
}

MYSQL_ROW lr_db_fetch(lr_db *db)
{
	if (db->rows.cells)
		return db->rows.next < db->rows.nrows
		           ? &db->rows.cells[db->rows.ncols * db->rows.next++]
		           : NULL;
	return db->res ? mysql_fetch_row(db->res) : NULL;
}

uint64_t lr_db_num_rows(const lr_db *db)
{
	if (db->rows.cells)
		return db->rows.nrows;
	return db->res ? mysql_num_rows(db->res) : 0;
}

/* Rows the last INSERT, UPDATE or DELETE changed (not for a CALL). */
uint64_t lr_db_affected_rows(const lr_db *db)
{
	return db->m ? mysql_affected_rows(db->m) : 0;
}

/* The index of the current result's column called name, or -1: lets a
 * caller read a procedure's answer by column names, whatever their order. */
int lr_db_column(const lr_db *db, const char *name)
{
	unsigned n;
	MYSQL_FIELD *f;

	if (db->rows.cells) {
		for (size_t i = 0; i < db->rows.ncols; i++)
			if (strcmp(db->rows.names[i], name) == 0)
				return (int)i;
		return -1;
	}
	if (!db->res)
		return -1;
	n = mysql_num_fields(db->res);
	f = mysql_fetch_fields(db->res);
	for (unsigned i = 0; i < n; i++)
		if (strcmp(f[i].name, name) == 0)
			return (int)i;
	return -1;
}

/* Appends s as a quoted SQL string literal, escaped for the connection's
 * character set. NULL becomes the SQL NULL. */
void lr_db_sb_quote(lr_db *db, struct lr_sb *sb, const char *s)
{
	size_t n;
	char *tmp;

	if (!s) {
		lr_sb_puts(sb, "NULL");
		return;
	}
	n = strlen(s);
	tmp = malloc(2 * n + 1);
	if (!tmp) {
		sb->oom = true;
		return;
	}
	if (db->m)
		n = mysql_real_escape_string(db->m, tmp, s, (unsigned long)n);
	else
		n = mysql_escape_string(tmp, s, (unsigned long)n);
	lr_sb_puts(sb, "'");
	lr_sb_add(sb, tmp, n);
	lr_sb_puts(sb, "'");
	free(tmp);
}

void lr_db_set_cancel(lr_db *db, const volatile bool *flag)
{
	db->cancel = flag;
}

/* Asks to be told (fn(arg), from a loop callback) when the idle
 * connection becomes readable, which means the server is dropping it. */
void lr_db_set_idle_watch(lr_db *db, void (*fn)(void *arg), void *arg)
{
	db->idle_fn = fn;
	db->idle_arg = arg;
	if (fn)
		lr_dbio_watch_idle(db);
	else if (db->poll)
		uv_poll_stop(db->poll);
}

void lr_db_set_op_timeout(lr_db *db, unsigned ms)
{
	db->op_timeout_ms = ms;
}

unsigned lr_db_errno(const lr_db *db)
{
	return db->err;
}

const char *lr_db_error(const lr_db *db)
{
	return db->errmsg;
}

const char *lr_db_server(const lr_db *db)
{
	return db->server;
}

/* Errors of a transaction that lost a conflict with another one: a
 * deadlock (1213), a lock wait timeout (1205: only the statement was
 * undone, so the caller rolls back), or, under snapshot isolation
 * (innodb_snapshot_isolation, on by default from MariaDB 11.6), a row
 * that another transaction changed after this one's snapshot read it
 * (1020). Each is settled by ROLLBACK and the whole transaction again,
 * which reads everything afresh. */
bool lr_db_error_is_conflict(unsigned err)
{
	return err == ER_LOCK_DEADLOCK || err == ER_LOCK_WAIT_TIMEOUT || err == ER_CHECKREAD;
}

/* Errors after which the whole transaction is retried: it lost a
 * conflict (above), or was rolled back (Galera certification, an error
 * at commit), or the node is not ready. */
bool lr_db_error_is_retryable(unsigned err)
{
	return lr_db_error_is_conflict(err) || err == ER_ERROR_DURING_COMMIT ||
	       err == ER_XA_RBDEADLOCK || err == ER_UNKNOWN_COM_ERROR ||
	       err == ER_QUERY_INTERRUPTED || lr_db_error_is_connection(err);
}

/*
 * Errors of a server that is up and would serve us, but not one more
 * connection now: too many connections, in all (1040) or for this
 * account (1203 for the server's max_user_connections; 1226 for the
 * account's own MAX_USER_CONNECTIONS, and also for its hourly quotas of
 * connections and queries, met at login or by the SELECT 1 after it), or
 * no thread or memory for one more (1135, 1041). Each ends by itself: when others disconnect, the
 * load drops, or the hour turns. Not 1047 (a Galera node outside the cluster: another host may
 * serve, and a partition does not heal by waiting) nor 1053 (the server is going away).
 */
bool lr_db_error_is_busy(unsigned err)
{
	return err == ER_CON_COUNT_ERROR || err == ER_TOO_MANY_USER_CONNECTIONS ||
	       err == ER_USER_LIMIT_REACHED || err == ER_CANT_CREATE_THREAD ||
	       err == ER_OUT_OF_RESOURCES;
}

/* Errors that leave the connection unusable: drop it and reconnect. */
bool lr_db_error_is_connection(unsigned err)
{
	/* 1047 is a Galera node that is up but not part of the cluster yet:
	 * as useless as a dead one until it is, so try another; 3100 a
	 * Group Replication member that commits nothing any more (an old
	 * primary, expelled). */
	return (err >= CR_MIN_ERROR && err <= CR_MAX_ERROR) || err == LR_DB_ETIMEDOUT ||
	       err == ER_UNKNOWN_COM_ERROR || err == LR_DB_ECANCELED || err == LR_DB_ENOTCONN ||
	       err == LR_DB_EREADONLY || err == ER_SERVER_SHUTDOWN || err == ER_CONNECTION_KILLED ||
	       err == LR_DB_EGROUPHOOK;
}
