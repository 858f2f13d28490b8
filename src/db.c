#include "db.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <errmsg.h>
#include <mysqld_error.h>
#ifdef LR_CONNECTOR_PVIO
/* The connector's own view of a connection's TLS handle (on_pvio); its
 * headers declare it only where the connector was built with TLS, as
 * Debian's is, and use a type that they define after its first use.
 * Where the header is not usable (meson.build), read_names is not built. */
#define HAVE_TLS 1
typedef unsigned char uchar;
#include <ma_pvio.h>
#endif

/* Exported by Connector/C (3.0 and later), declared in no header it
 * installs: registers a callback of its I/O layer (on_pvio). */
int ma_pvio_register_callback(my_bool register_callback,
                              void (*callback_function)(int mode, MYSQL *mysql,
                                                        const unsigned char *buffer,
                                                        size_t length));
#include <openssl/crypto.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "log.h"
#include "strbuf.h"
#include "writer.h"

/* The oldest servers the schema installs on: MariaDB 10.6 (JSON_TABLE, which
 * the routines keep a request's items in) and MySQL 8.4, the oldest MySQL
 * release line still maintained (roles, JSON_TABLE, SKIP LOCKED and the
 * redo and replication names of the server seam, sql/routines/05-server.sql;
 * only 9.7 is tested). */
/* The authentication plugins that never send the password itself, nor
 * encrypt it with a key that nobody verified: MariaDB's and MySQL's
 * scramble (a hash of a hash, salted), ed25519, PARSEC and Kerberos. And
 * those that encrypt it with the server's RSA key. */
#define SAFE_AUTH_PLUGINS "mysql_native_password,client_ed25519,parsec,auth_gssapi_client"
#define RSA_AUTH_PLUGINS  "caching_sha2_password,sha256_password"

#define MIN_MARIADB 100600UL
#define MIN_MYSQL   80400UL

/* Galera, with the writer chosen (follow_writer): a move to the writer,
 * or a reconnect to one that let a statement run out of time, gives it
 * this long to greet us; a statement's answer is awaited at most this
 * long unless its caller set a bound of its own (a frozen or blocked
 * writer costs this and a reconnect, not read_timeout); a node passed over stays
 * so at least this long, so that a node that is back is taken again
 * once, not on and off; the writer is asked again at most this often
 * (lr_db_follow). */
#define GALERA_PROBE_MS  2000
#define GALERA_ANSWER_MS 3000
#define GALERA_PASS_MS   5000
#define GALERA_FOLLOW_MS 2000

struct lr_db {
	uv_loop_t *loop;
	const struct lr_db_params *p;
	MYSQL *m; /* NULL when not connected */

	uv_poll_t *poll; /* watches poll_fd; replaced when the socket changes */
	int poll_fd;
	uv_timer_t *wait_timer; /* the connector's MYSQL_WAIT_TIMEOUT */
	uv_timer_t *deadline;   /* our bound on the whole operation */
	int fired;              /* MYSQL_WAIT_* events seen in the current wait */
	bool expired;
	bool aborting;

	MYSQL *ret_conn;
	int ret_int;
	my_bool ret_bool;
	MYSQL_RES *ret_res;
	MYSQL_RES *res;

	/* Prepared CALLs of this connection (lr_db_call), by their text, and
	 * the answer of the last one, held as strings. */
	struct stmt_slot {
		const char *sql; /* the caller's string, compared by content */
		MYSQL_STMT *st;
	} stmts[LR_DB_STMTS];
	MYSQL_STMT *cur; /* the statement being run, for the cont_ functions */
	struct rows {
		char **cells; /* nrows * ncols, row by row; NULL is SQL NULL */
		char **names; /* ncols column names */
		size_t nrows, ncols, next;
	} rows;
	bool quiet; /* this connection's statements are kept out of the slow log */

	const volatile bool *cancel;
	unsigned op_timeout_ms;
	void (*idle_fn)(void *arg); /* the idle connection became readable */
	void *idle_arg;

	bool probe;           /* check a new connection with SELECT 1 */
	bool any_server;      /* keep a connection to any server (lr_db_allow_any_server) */
	size_t first_host;    /* where the next connect starts in the host list */
	size_t cur_host;      /* the host of the current connection */
	char cur_ip[64];      /* its address, "" for the unix socket */
	int galera;           /* the hosts are Galera nodes: -1 not known yet, 0 no, 1 yes */
	bool following;       /* connecting to the Galera writer (follow_writer) */
	uint64_t checked_ms;  /* when follow_writer last asked (monotonic ms) */
	uint64_t *passed;     /* per configured host, until when it is no writer (ms) */
	size_t suspect;       /* 1 + the writer that let a statement run out of time, or 0 */
	bool probing;         /* this connect is a probe of a Galera writer (GALERA_PROBE_MS) */
	bool sibling;         /* starts at its parent's host and asks no writer */
	char **host_ips;      /* per configured host, its addresses joined by spaces, or NULL */
	const char *tls_name; /* the configured name the certificate must carry, while connecting */
	bool named;           /* tls_name was put in place before the certificate was checked */
	bool reading_names;   /* connecting to read what the certificate names (read_names) */
	char plugin[64];      /* the plugin the server last asked to switch to, while connecting */
	unsigned generation;  /* bumped by every successful connect */
	unsigned err;
	char errmsg[1024];
	char server[300];
};

typedef int (*cont_fn)(lr_db *db, int status);

static void free_rows(struct rows *r);
static void close_stmts(lr_db *db);
static void on_pvio(int mode, MYSQL *m, const unsigned char *buf, size_t len);

static void free_handle(uv_handle_t *h)
{
	free(h);
}

static void set_error(lr_db *db, unsigned err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_error(lr_db *db, unsigned err, const char *fmt, ...)
{
	va_list ap;

	db->err = err;
	va_start(ap, fmt);
	vsnprintf(db->errmsg, sizeof(db->errmsg), fmt, ap);
	va_end(ap);
}

/* TLS is required: asked for by a CA, a certificate, a pinned fingerprint
 * or verification. */
static bool tls_required(const struct lr_db_params *p)
{
	return p->ssl_ca || p->ssl_capath || p->ssl_cert || p->ssl_fingerprint ||
	       p->ssl_verify_server_cert;
}

/* TLS may be used: asked for here, or possibly in an option file that the
 * connector reads (any of its ssl-* options). */
static bool tls_possible(const struct lr_db_params *p)
{
	return tls_required(p) || p->ssl_key || p->option_file || p->option_group;
}

/*
 * Starts OpenSSL before the connector does. The connector's first
 * mysql_init() starts it even for a unix socket without TLS, and OpenSSL
 * then reads its configuration, loads its error strings and registers
 * every cipher and digest by name: a third of a run's instructions and
 * 1.8 MiB of its peak RSS, none of it used without TLS. Each part runs
 * once per process, so turning it off first makes the connector's later
 * request a no-op. With TLS possible, OpenSSL starts as usual (its
 * configuration may set the protocols and ciphers). In both cases its
 * clean-up at exit is skipped: exit frees everything. Once per process;
 * costs no system call.
 */
static void start_tls_library(const struct lr_db_params *p)
{
	static bool started;
	uint64_t opts = OPENSSL_INIT_NO_ATEXIT;

	if (started)
		return;
	started = true;
	if (!tls_possible(p))
		opts |= OPENSSL_INIT_NO_LOAD_CONFIG | OPENSSL_INIT_NO_LOAD_CRYPTO_STRINGS |
		        OPENSSL_INIT_NO_ADD_ALL_CIPHERS | OPENSSL_INIT_NO_ADD_ALL_DIGESTS;
	OPENSSL_init_crypto(opts, NULL);
}

lr_db *lr_db_create(uv_loop_t *loop, const struct lr_db_params *params)
{
	static bool hooked;
	lr_db *db = calloc(1, sizeof(*db));

	if (!db)
		return NULL;
	start_tls_library(params);
	if (!hooked) /* once per process: the list is the connector's, global */
		hooked = ma_pvio_register_callback(1, on_pvio) == 0;
	db->loop = loop;
	db->p = params;
	db->poll_fd = -1;
	db->probe = true;
	db->galera = -1;
	db->wait_timer = malloc(sizeof(*db->wait_timer));
	db->deadline = malloc(sizeof(*db->deadline));
	if (!db->wait_timer || !db->deadline) {
		free(db->wait_timer);
		free(db->deadline);
		free(db);
		return NULL;
	}
	uv_timer_init(loop, db->wait_timer);
	uv_timer_init(loop, db->deadline);
	db->wait_timer->data = db;
	db->deadline->data = db;
	return db;
}

/* A second, unconnected handle on the same loop and parameters: for a
 * statement that must run on a connection of its own (one that may be
 * KILLed, say). Settings (cancel flag, probe) and whether the hosts are
 * Galera nodes are copied; the idle watch is not. It connects to the host
 * its parent is on first, and stays there: a wake-up that is local to a
 * server (a doorbell) must be on the same Galera node as the parent's. */
lr_db *lr_db_create_sibling(const lr_db *db)
{
	lr_db *s = lr_db_create(db->loop, db->p);

	if (s) {
		s->cancel = db->cancel;
		s->probe = db->probe;
		s->galera = db->galera;
		s->first_host = db->cur_host;
		s->sibling = true;
	}
	return s;
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

static void watch_idle(lr_db *db)
{
	if (db->idle_fn && db->poll && db->m)
		uv_poll_start(db->poll, UV_READABLE | UV_DISCONNECT, on_idle_readable);
}

/* Closing libuv handles completes on a later loop iteration; the owner runs
 * the loop once more before uv_loop_close() so the memory is returned. */
void lr_db_destroy(lr_db *db)
{
	if (!db)
		return;
	lr_db_disconnect(db);
	uv_close((uv_handle_t *)db->wait_timer, free_handle);
	uv_close((uv_handle_t *)db->deadline, free_handle);
	if (db->host_ips)
		for (size_t h = 0; h < db->p->nhosts; h++)
			free(db->host_ips[h]);
	free(db->host_ips);
	free(db->passed);
	free(db);
}

static void drop_poll(lr_db *db)
{
	if (db->poll) {
		uv_close((uv_handle_t *)db->poll, free_handle);
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

/* Arms the poll and timer for what the connector waits on. The socket is
 * re-read every time: it changes while connecting. */
static void watch(lr_db *db, int status)
{
	int fd = (int)mysql_get_socket(db->m);
	int ev = 0;

	if (status & MYSQL_WAIT_READ)
		ev |= UV_READABLE;
	if (status & MYSQL_WAIT_WRITE)
		ev |= UV_WRITABLE;
	if (status & MYSQL_WAIT_EXCEPT)
		ev |= UV_PRIORITIZED;
	if (fd != db->poll_fd) {
		drop_poll(db);
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
static void shut_socket(lr_db *db)
{
	int fd = db->m ? (int)mysql_get_socket(db->m) : -1;

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
static void drive(lr_db *db, int status, cont_fn cont, unsigned timeout_ms)
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
			shut_socket(db);
			db->fired =
			    status & (MYSQL_WAIT_READ | MYSQL_WAIT_WRITE | MYSQL_WAIT_TIMEOUT);
			if (!db->fired || ++spins > 1000)
				db->fired = MYSQL_WAIT_TIMEOUT;
		}
		status = cont(db, db->fired);
	}
	uv_timer_stop(db->deadline);
}

/* The names the server's certificate carries (read_names), for the error
 * that says it names another host. One buffer: the process connects one
 * handle at a time. */
static char peer_names[256];

#ifdef LR_CONNECTOR_PVIO

/* Puts the certificate's subjectAltNames (else its common name) into
 * peer_names. Local work. */
static void note_names(X509 *cert)
{
	GENERAL_NAMES *gens = X509_get_ext_d2i(cert, NID_subject_alt_name, NULL, NULL);
	struct lr_sb sb;
	char buf[256];

	lr_sb_init(&sb);
	for (int i = 0; gens && i < sk_GENERAL_NAME_num(gens); i++) {
		const GENERAL_NAME *g = sk_GENERAL_NAME_value(gens, i);
		const unsigned char *d = g->type == GEN_DNS || g->type == GEN_IPADD
		                             ? ASN1_STRING_get0_data(g->d.ia5)
		                             : NULL;
		int n = d ? ASN1_STRING_length(g->d.ia5) : 0;

		if (g->type == GEN_DNS)
			lr_sb_printf(&sb, "%sDNS:%.*s", sb.len ? ", " : "", n, (const char *)d);
		else if (g->type == GEN_IPADD && (n == 4 || n == 16) &&
		         uv_inet_ntop(n == 4 ? AF_INET : AF_INET6, d, buf, sizeof(buf)) == 0)
			lr_sb_printf(&sb, "%sIP:%s", sb.len ? ", " : "", buf);
	}
	GENERAL_NAMES_free(gens);
	if (!sb.len && X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, buf,
	                                         sizeof(buf)) > 0)
		lr_sb_printf(&sb, "CN=%s", buf);
	snprintf(peer_names, sizeof(peer_names), "%s", sb.oom ? "" : lr_sb_str(&sb));
	lr_sb_finish(&sb);
}

/* At the first read after the TLS handshake of a read_names connection:
 * what the certificate names. Local work. */
static void peer_read(MYSQL *m)
{
	MARIADB_PVIO *pvio = m->net.pvio;
	X509 *cert;

	if (pvio && pvio->ctls && pvio->ctls->ssl && !peer_names[0] &&
	    (cert = SSL_get1_peer_certificate(pvio->ctls->ssl))) {
		note_names(cert);
		X509_free(cert);
	}
}
#else
static void peer_read(MYSQL *m)
{
	(void)m;
}
#endif

/* The handle being connected, for on_pvio: the process connects one
 * handle at a time. */
static lr_db *connecting;

/*
 * Makes the connector check the server's certificate against the
 * configured host name rather than the address lockrun resolved it to
 * (resolve() runs on libuv's pool: the connector's own lookup would block
 * the loop). The connector keeps the host it connected to in m->host,
 * copied once the server's greeting is read, and checks the certificate
 * against it right after the TLS handshake, before it sends anything of
 * the password. Between the two it writes one packet, the request to
 * start TLS: the connector calls on_pvio after that write (as after every
 * read and write of every connection), and the name takes the address's
 * place (the connector frees m->host with free()). An address in the
 * config stays an address, and is checked as one. Connector/C 3.3 and
 * 3.4 run the handshake itself in blocking reads, with no wait handed
 * back to the non-blocking API, so that write is the last moment lockrun
 * has. It sends no SNI: the server cannot pick a certificate by name.
 * Local work, no system call.
 */
static void on_name(lr_db *db, MYSQL *m)
{
	char *name;

	if (!db->tls_name || db->named || !m->host)
		return;
	if (strcmp(m->host, db->tls_name) != 0) {
		if (!(name = strdup(db->tls_name)))
			return;
		free(m->host);
		m->host = name;
	}
	db->named = true;
}

/* The callback of the connector's I/O layer: on_name while connecting,
 * and when lockrun reads what a certificate names (read_names), notes
 * them at the first read after the TLS handshake. Local work. */
static void on_pvio(int mode, MYSQL *m, const unsigned char *buf, size_t len)
{
	lr_db *db = connecting;

	if (!db || db->m != m)
		return;
	if (!db->reading_names) {
		on_name(db, m);
		/* The server's request to switch plugins (0xFE, the name, NUL),
		 * at the start of a read: the plugin set_options may refuse,
		 * which the connector's error misnames. */
		if (mode == 0 && (ssize_t)len > 5 && buf[4] == 0xFE && memchr(buf + 5, 0, len - 5))
			snprintf(db->plugin, sizeof(db->plugin), "%s", (const char *)buf + 5);
	} else if (mode == 0) {
		peer_read(m);
	}
}

static int cont_connect(lr_db *db, int st)
{
	return mysql_real_connect_cont(&db->ret_conn, db->m, st);
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
static void take_error(lr_db *db, const char *what, unsigned timeout_ms)
{
	if (db->expired)
		set_error(db, LR_DB_ETIMEDOUT, "%s: no answer within %.1f s", db->server,
		          timeout_ms / 1000.0);
	else if (db->aborting)
		set_error(db, LR_DB_ECANCELED, "%s: %s interrupted", db->server, what);
	else if (mysql_errno(db->m) == 0)
		/* Failed without a reason: where the protocol stands is unknown,
		 * so the connection is as good as lost. */
		set_error(db, CR_UNKNOWN_ERROR, "%s: %s failed without an error from the server",
		          db->server, what);
	else
		set_error(db, mysql_errno(db->m), "%s: %s (%u)", db->server, mysql_error(db->m),
		          mysql_errno(db->m));
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
 * goodbye that runs out of time is cut short by drive(), which shuts the
 * socket before the connector's last step; that step frees the handle, so
 * nothing may touch db->m after it. */
void lr_db_disconnect(lr_db *db)
{
	free_result(db);
	if (db->m) {
		if (db->err == 0 || !lr_db_error_is_connection(db->err)) {
			int st = mysql_close_start(db->m);
			if (st)
				drive(db, st, cont_close, 1000);
		} else {
			shut_socket(db);
			mysql_close(db->m);
		}
		db->m = NULL;
		close_stmts(db);
		db->quiet = false;
	}
	drop_poll(db);
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

static void set_options(lr_db *db, MYSQL *m, bool tcp)
{
	const struct lr_db_params *p = db->p;
	unsigned proto = tcp ? MYSQL_PROTOCOL_TCP : MYSQL_PROTOCOL_SOCKET;
	my_bool no = 0, yes = 1;
	unsigned t;
	const struct {
		enum mysql_option opt;
		const char *v;
	} strs[] = {
	    {MYSQL_READ_DEFAULT_FILE, p->option_file},
	    {MYSQL_READ_DEFAULT_GROUP, p->option_group},
	    {MYSQL_OPT_SSL_CA, p->ssl_ca},
	    {MYSQL_OPT_SSL_CAPATH, p->ssl_capath},
	    {MYSQL_OPT_SSL_CERT, p->ssl_cert},
	    {MYSQL_OPT_SSL_KEY, p->ssl_key},
	    {MARIADB_OPT_TLS_PEER_FP, p->ssl_fingerprint},
	    {MARIADB_OPT_TLS_VERSION, p->tls_versions},
	    {MYSQL_SERVER_PUBLIC_KEY, p->server_public_key},
	};

	mysql_options(m, MYSQL_OPT_NONBLOCK, 0);
	t = p->connect_timeout;
	mysql_options(m, MYSQL_OPT_CONNECT_TIMEOUT, &t);
	t = p->read_timeout;
	mysql_options(m, MYSQL_OPT_READ_TIMEOUT, &t);
	t = p->write_timeout;
	mysql_options(m, MYSQL_OPT_WRITE_TIMEOUT, &t);
	mysql_options(m, MYSQL_OPT_RECONNECT, &no);
	mysql_options(m, MYSQL_OPT_LOCAL_INFILE, &no);
	mysql_options(m, MYSQL_OPT_PROTOCOL, &proto);
	mysql_options(m, MYSQL_SET_CHARSET_NAME, "utf8mb4");
	for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++)
		if (strs[i].v)
			mysql_options(m, strs[i].opt, strs[i].v);
	/* Asking for a CA or a certificate means TLS is required, not optional. */
	if (tls_required(p))
		mysql_options(m, MYSQL_OPT_SSL_ENFORCE, &yes);
	mysql_options(m, MYSQL_OPT_SSL_VERIFY_SERVER_CERT, p->ssl_verify_server_cert ? &yes : &no);
	/* Over TCP without TLS, only plugins that never expose the password
	 * may run: not mysql_clear_password nor dialog (PAM), which send it
	 * as it is, and not caching_sha2_password nor sha256_password, which
	 * end by encrypting it with the server's RSA key, and which the
	 * connector, with no key file, asks the server for: whoever sits in
	 * the path hands over its own. Those two are allowed once a key file
	 * or the user's opt-in says how the key is trusted. The connector
	 * checks the server's first choice too, so without them the first
	 * answer is sent as mysql_native_password, MariaDB's default: no
	 * extra round trip there; MySQL asks to switch, and is refused. */
	if (tcp && !tls_required(p)) {
		bool rsa = p->server_public_key || p->allow_public_key_retrieval;
		mysql_options(m, MARIADB_OPT_RESTRICTED_AUTH,
		              rsa ? SAFE_AUTH_PLUGINS "," RSA_AUTH_PLUGINS : SAFE_AUTH_PLUGINS);
		if (!rsa)
			mysql_options(m, MYSQL_DEFAULT_AUTH, "mysql_native_password");
	}
}

static bool check_version(lr_db *db)
{
	const char *info = mysql_get_server_info(db->m);

	if (lr_db_supported(db))
		return true;
	set_error(db, LR_DB_ETOOOLD,
	          "%s: server version %s is not supported; lockrun needs MariaDB 10.6 or newer, "
	          "or MySQL 8.4 or newer",
	          db->server, info ? info : "unknown");
	return false;
}

/* After a connect, whatever its outcome: the login is over. Connector/C
 * 3.3 never frees the server_public_key it keeps per handle (44 bytes
 * or so per connection, a leak); setting it to nothing frees it. */
static void connected(lr_db *db)
{
	connecting = NULL;
	if (db->p->server_public_key)
		mysql_options(db->m, MYSQL_SERVER_PUBLIC_KEY, NULL);
}

/* Frees the handle of a connect that did not succeed, without waiting
 * on its socket. */
static void drop_handle(lr_db *db)
{
	shut_socket(db);
	mysql_close(db->m);
	db->m = NULL;
	drop_poll(db);
}

#ifdef LR_CONNECTOR_PVIO
/*
 * After the server's certificate was found not to name the configured
 * host: what it names, for the error. A second connection to the same
 * address, with TLS as configured but the name left unchecked, logs in
 * as no user with no password (nothing for anyone in the path to read);
 * on_pvio notes the certificate at its first read after the handshake.
 * Only on that failure; costs a connect.
 */
static void read_names(lr_db *db, const char *ip, unsigned timeout_ms)
{
	my_bool no = 0;
	int st;

	if (!(db->m = mysql_init(NULL)))
		return;
	set_options(db, db->m, true);
	mysql_options(db->m, MYSQL_OPT_SSL_VERIFY_SERVER_CERT, &no);
	db->reading_names = true;
	connecting = db;
	st = mysql_real_connect_start(&db->ret_conn, db->m, ip, "", NULL, NULL, db->p->port, NULL,
	                              0);
	if (st)
		drive(db, st, cont_connect, timeout_ms);
	connected(db);
	db->reading_names = false;
	drop_handle(db);
}
#endif

/* Says why a connect failed, in our terms (take_error), and in lockrun's
 * own words where the connector's would not say what to do: a plugin
 * refused by set_options, a certificate that names another host (then
 * with read_names: costs a connect). Closes the failed handle. */
static void connect_failed(lr_db *db, const char *ip, unsigned timeout_ms)
{
	const char *msg = mysql_error(db->m);
	bool other_name;

	take_error(db, "connect", timeout_ms);
	/* Connector/C 3.3's words, then 3.4's. */
	other_name = db->err == CR_SSL_CONNECTION_ERROR && db->named &&
	             (strstr(msg, "Validation of SSL server certificate failed") ||
	              strstr(msg, "Hostname verification failed"));
	if (db->err == CR_PLUGIN_NOT_ALLOWED)
		set_error(db, CR_PLUGIN_NOT_ALLOWED,
		          "%s: the account logs in with %s, which over TCP without TLS %s (%u)",
		          db->server,
		          *db->plugin ? db->plugin : "a plugin lockrun does not allow there",
		          *db->plugin && strstr(RSA_AUTH_PLUGINS, db->plugin)
		              ? "sends the password under an RSA key nobody verified; set ssl_ca "
		                "(TLS), server_public_key, or allow_public_key_retrieval = true"
		              : "could expose the password; set ssl_ca (TLS)",
		          CR_PLUGIN_NOT_ALLOWED);
	drop_handle(db);
	if (other_name && !(db->cancel && *db->cancel)) {
		peer_names[0] = '\0';
#ifdef LR_CONNECTOR_PVIO
		read_names(db, ip, timeout_ms);
		set_error(db, CR_SSL_CONNECTION_ERROR,
		          "%s: the server's certificate does not name %s; it names %s (%u)",
		          db->server, db->tls_name, peer_names[0] ? peer_names : "no host name",
		          CR_SSL_CONNECTION_ERROR);
#else
		set_error(db, CR_SSL_CONNECTION_ERROR,
		          "%s: the server's certificate does not name %s (%u)", db->server,
		          db->tls_name, CR_SSL_CONNECTION_ERROR);
#endif
	}
}

/*
 * One connection attempt to one address (ip NULL: the unix socket), for
 * the configured host name (the certificate must name it; NULL or the
 * address itself: the address). On success the handle is kept and its
 * socket marked close-on-exec, so a child never inherits it. Costs the
 * connector's handshake round trips (and a connect more when the
 * certificate names another host: connect_failed).
 */
static bool try_connect(lr_db *db, const char *ip, const char *name, const char *label)
{
	const struct lr_db_params *p = db->p;
	unsigned timeout_ms = p->connect_timeout * 1000;
	int st, fd;

	/* A move to the Galera writer is a probe: a node that does not
	 * greet us within it (frozen, overloaded) is passed over. */
	if (db->probing && timeout_ms > GALERA_PROBE_MS)
		timeout_ms = GALERA_PROBE_MS;

	snprintf(db->server, sizeof(db->server), "%s", label);
	db->expired = db->aborting = false;
	db->tls_name = name && ip && strcmp(name, ip) != 0 ? name : NULL;
	db->named = false;
	db->plugin[0] = '\0';
	db->m = mysql_init(NULL);
	if (!db->m) {
		set_error(db, CR_OUT_OF_MEMORY, "out of memory");
		return false;
	}
	set_options(db, db->m, ip != NULL);
	connecting = db;
	st = mysql_real_connect_start(&db->ret_conn, db->m, ip, p->user, p->password, p->database,
	                              p->port, ip ? NULL : p->socket, CLIENT_FOUND_ROWS);
	if (st)
		drive(db, st, cont_connect, timeout_ms);
	connected(db);
	if (!db->ret_conn) {
		connect_failed(db, ip, timeout_ms);
		db->tls_name = NULL;
		return false;
	}
	snprintf(db->cur_ip, sizeof(db->cur_ip), "%s", ip ? ip : "");
	db->tls_name = NULL;
	fd = (int)mysql_get_socket(db->m);
	if (fd >= 0)
		fcntl(fd, F_SETFD, fcntl(fd, F_GETFD) | FD_CLOEXEC);
	/* Connector/C 3.3 may fall back to plain text when the server offers
	 * no TLS; asking for a CA or certificate means we will not. */
	if (ip && tls_required(p) && !mysql_get_ssl_cipher(db->m)) {
		set_error(db, CR_SSL_CONNECTION_ERROR,
		          "%s: TLS is required (ssl_ca, ssl_cert or ssl_verify_server_cert) but "
		          "the server did not offer it",
		          db->server);
		lr_db_disconnect(db);
		return false;
	}
	if (!db->any_server && !check_version(db)) {
		lr_db_disconnect(db);
		return false;
	}
	/* A server may accept logins before it serves queries (a Galera node
	 * still joining answers 1047): find out now, while other hosts can
	 * still be tried. One round trip, unless the owner's first statement
	 * serves as the probe (see lr_db_set_probe). Not on an unsupported
	 * server: only the doctor stays connected to one, to report on it. */
	if (db->probe && lr_db_supported(db) && !lr_db_query(db, "SELECT 1")) {
		lr_db_disconnect(db);
		return false;
	}
	db->err = 0;
	db->generation++;
	watch_idle(db);
	return true;
}

/* A name lookup on libuv's thread pool. It lives on the heap: one we stop
 * waiting for (deadline, cancel) but that is already running cannot be
 * recalled, and frees itself when it finishes. */
struct resolve {
	uv_getaddrinfo_t req;
	bool done;
	bool abandoned;
	int status;
	struct addrinfo *res;
};

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
	struct resolve *r = req->data;

	if (r->abandoned) {
		uv_freeaddrinfo(res);
		free(r);
		return;
	}
	uv_stop(req->loop);
	r->done = true;
	r->status = status;
	r->res = res;
}

/* Resolves a host name on libuv's thread pool (the connector's own lookup
 * would block the loop). Waits at most connect_timeout; the cancel flag
 * ends the wait too. An address needs no lookup: it is converted at once,
 * without starting the pool's four threads. */
static bool resolve(lr_db *db, const char *host, struct addrinfo **out)
{
	struct addrinfo hints;
	struct resolve *r;
	bool ok = false, gave_up = false;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICHOST; /* never blocks: no name service */
	if (getaddrinfo(host, NULL, &hints, out) == 0)
		return true;
	hints.ai_flags = 0;
	r = calloc(1, sizeof(*r));
	if (!r) {
		set_error(db, CR_OUT_OF_MEMORY, "out of memory");
		return false;
	}
	r->req.data = r;
	db->expired = false;
	if (uv_getaddrinfo(db->loop, &r->req, on_resolved, host, NULL, &hints) != 0) {
		set_error(db, CR_UNKNOWN_HOST, "%s: cannot resolve host name", host);
		free(r);
		return false;
	}
	uv_timer_start(db->deadline, on_deadline, db->p->connect_timeout * 1000, 0);
	while (!r->done) {
		if (db->expired || (db->cancel && *db->cancel)) {
			gave_up = true;
			if (uv_cancel((uv_req_t *)&r->req) != 0)
				break; /* running already: leave it to free itself */
			/* cancelled: the callback still runs, with UV_EAI_CANCELED */
		}
		uv_run(db->loop, UV_RUN_ONCE);
	}
	uv_timer_stop(db->deadline);
	if (!r->done) {
		r->abandoned = true;
	} else if (r->status == 0 && !gave_up) {
		*out = r->res;
		ok = true;
	} else if (r->status == 0) {
		uv_freeaddrinfo(r->res);
	}
	if (!ok && gave_up)
		set_error(db, db->expired ? LR_DB_ETIMEDOUT : LR_DB_ECANCELED, "%s: name lookup %s",
		          host, db->expired ? "timed out" : "interrupted");
	else if (!ok)
		set_error(db, CR_UNKNOWN_HOST, "%s: cannot resolve host name: %s", host,
		          uv_strerror(r->status));
	if (r->done)
		free(r);
	return ok;
}

static bool is_socket_host(const char *h)
{
	return !h || !*h || strcmp(h, "localhost") == 0;
}

/* A resolved address as text into buf (64 bytes); false for a family
 * other than IPv4 and IPv6. */
static bool addr_text(const struct addrinfo *a, char *buf, size_t len)
{
	const void *addr;

	if (a->ai_family == AF_INET)
		addr = &((struct sockaddr_in *)(void *)a->ai_addr)->sin_addr;
	else if (a->ai_family == AF_INET6)
		addr = &((struct sockaddr_in6 *)(void *)a->ai_addr)->sin6_addr;
	else
		return false;
	return uv_inet_ntop(a->ai_family, addr, buf, len) == 0;
}

/* Tries every address of one configured host, in the resolver's order. */
static bool connect_host(lr_db *db, const char *host)
{
	struct addrinfo *ai = NULL, *a;
	unsigned port = db->p->port ? db->p->port : 3306;
	char ip[64], label[300];
	bool ok = false;

	if (is_socket_host(host)) {
		snprintf(label, sizeof(label), "%s",
		         db->p->socket ? db->p->socket : "the local server's socket");
		return try_connect(db, NULL, NULL, label);
	}
	if (!resolve(db, host, &ai))
		return false;
	for (a = ai; a && !ok; a = a->ai_next) {
		if (!addr_text(a, ip, sizeof(ip)))
			continue;
		if (strcmp(host, ip) == 0)
			snprintf(label, sizeof(label),
			         a->ai_family == AF_INET6 ? "[%s]:%u" : "%s:%u", host, port);
		else
			snprintf(label, sizeof(label), "%s:%u (%s)", host, port, ip);
		ok = try_connect(db, ip, host, label);
		if (db->cancel && *db->cancel)
			break;
	}
	uv_freeaddrinfo(ai);
	return ok;
}

/* Whether configured host H has the address IP: its name is IP, or one
 * of the addresses it resolves to, looked up once per handle (a failed
 * lookup is tried again next time). For lr_writer_pick. */
static bool host_has_ip(size_t h, const char *ip, void *arg)
{
	lr_db *db = arg;
	const char *host = db->p->hosts[h];
	struct addrinfo *ai = NULL, *a;
	struct lr_sb ips;
	char buf[64];
	unsigned err = db->err;
	char errmsg[sizeof(db->errmsg)];

	if (is_socket_host(host))
		return false;
	if (strcmp(host, ip) == 0)
		return true;
	if (!db->host_ips && !(db->host_ips = calloc(db->p->nhosts, sizeof(char *))))
		return false;
	if (!db->host_ips[h]) {
		memcpy(errmsg, db->errmsg, sizeof(errmsg));
		if (resolve(db, host, &ai)) {
			lr_sb_init(&ips);
			for (a = ai; a; a = a->ai_next)
				if (addr_text(a, buf, sizeof(buf)))
					lr_sb_printf(&ips, " %s ", buf);
			uv_freeaddrinfo(ai);
			db->host_ips[h] = ips.oom ? NULL : strdup(lr_sb_str(&ips));
			lr_sb_finish(&ips);
		}
		/* A lookup that failed is no error of the connection's. */
		db->err = err;
		memcpy(db->errmsg, errmsg, sizeof(errmsg));
	}
	if (!db->host_ips[h])
		return false;
	snprintf(buf, sizeof(buf), " %s ", ip);
	return strstr(db->host_ips[h], buf) != NULL;
}

static uint64_t mono_ms(void)
{
	return uv_hrtime() / 1000000;
}

/* Whether this handle chooses a Galera writer at all: asked for, more
 * than one host, not a doorbell sibling (it stays with its parent), not
 * MySQL (no Galera). Local work. */
static bool writer_choice(const lr_db *db)
{
	return db->p->galera_writer && db->p->nhosts > 1 && !db->sibling && !lr_db_is_mysql(db);
}

/* Whether configured host H is passed over as writer now. Local work. */
static bool passed_over(const lr_db *db, size_t h)
{
	return db->passed && db->passed[h] > mono_ms();
}

/* Passes configured host H over as writer for GALERA_PASS_MS, saying why
 * at -vv. Local work. */
static void pass_over(lr_db *db, size_t h, const char *why)
{
	if (!db->passed && !(db->passed = calloc(db->p->nhosts, sizeof(*db->passed))))
		return;
	db->passed[h] = mono_ms() + GALERA_PASS_MS;
	lr_log_debug("%s: passed over as the Galera writer for %u s: %s", db->p->hosts[h],
	             GALERA_PASS_MS / 1000, why);
}

/* After a statement got no answer in time (failed), on a Galera node
 * chosen as writer: the reconnect tries it again, as a probe (a node that
 * is only slow greets us, answers, and stays the writer: clients do not
 * split over one slow statement); a second time in a row, or a probe
 * that fails (lr_db_connect), passes it over, and the reconnect starts
 * at the next host. A frozen writer costs a statement's bound and a
 * probe, not read_timeout per client per try. */
static void writer_silent(lr_db *db)
{
	if (db->galera != 1 || !writer_choice(db))
		return;
	if (db->suspect != db->cur_host + 1) {
		db->suspect = db->cur_host + 1;
		db->first_host = db->cur_host;
		return;
	}
	db->suspect = 0;
	pass_over(db, db->cur_host, "no answer in time");
	db->first_host = (db->cur_host + 1) % db->p->nhosts;
}

/*
 * Another connection to the node this one is on (a waiter's doorbell) got
 * no answer in time: on a Galera node chosen as writer, taken as this
 * connection's own (writer_silent), and the connection is dropped, so
 * that the next statement reconnects (and probes the node) at once
 * rather than after a bound of its own. No round trip.
 */
void lr_db_unanswered(lr_db *db)
{
	if (!db->m || db->galera != 1 || !writer_choice(db))
		return;
	writer_silent(db);
	lr_log_debug("dropping connection to %s: its node did not answer another connection",
	             db->server);
	lr_db_disconnect(db);
}

/* How long a statement may take: the caller's bound, else read_timeout;
 * on a Galera node chosen as writer at most GALERA_ANSWER_MS of it. */
static unsigned op_budget(const lr_db *db)
{
	unsigned ms = db->op_timeout_ms ? db->op_timeout_ms : db->p->read_timeout * 1000;

	if (!db->op_timeout_ms && db->galera == 1 && writer_choice(db) && ms > GALERA_ANSWER_MS)
		ms = GALERA_ANSWER_MS;
	return ms;
}

/* What a Galera node says of itself and of the cluster. */
struct view {
	const char *status;  /* wsrep_cluster_status: Primary, non-Primary, Disconnected */
	const char *state;   /* wsrep_local_state_comment: Synced, Donor/Desynced, ... */
	const char *ready;   /* wsrep_ready: ON when it serves queries */
	const char *members; /* wsrep_incoming_addresses */
};

/* Asks the connected node its view: one query of its global status. The
 * strings live until the next statement. False if the query failed (the
 * connection may be gone with it). */
static bool ask_view(lr_db *db, struct view *v)
{
	MYSQL_ROW row;

	memset(v, 0, sizeof(*v));
	if (!lr_db_query(db, "SELECT VARIABLE_NAME, VARIABLE_VALUE FROM "
	                     "information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME IN "
	                     "('WSREP_CLUSTER_STATUS', 'WSREP_LOCAL_STATE_COMMENT', "
	                     "'WSREP_READY', 'WSREP_INCOMING_ADDRESSES')"))
		return false;
	db->checked_ms = mono_ms();
	if (db->suspect == db->cur_host + 1) /* it answers after all */
		db->suspect = 0;
	while ((row = lr_db_fetch(db))) {
		if (!row[0] || !row[1])
			continue;
		if (strcmp(row[0], "WSREP_CLUSTER_STATUS") == 0)
			v->status = row[1];
		else if (strcmp(row[0], "WSREP_LOCAL_STATE_COMMENT") == 0)
			v->state = row[1];
		else if (strcmp(row[0], "WSREP_READY") == 0)
			v->ready = row[1];
		else
			v->members = row[1];
	}
	return true;
}

/* The writer among MEMBERS (lr_writer_pick), passing over the hosts
 * passed over now; -1 if none. Local work (and host_has_ip's lookups). */
static long pick(lr_db *db, const char *members)
{
	bool *skip = calloc(db->p->nhosts, sizeof(*skip));
	long w;

	if (!skip)
		return -1;
	for (size_t h = 0; h < db->p->nhosts; h++)
		skip[h] = passed_over(db, h);
	w = lr_writer_pick(members, db->p->nhosts, db->p->port ? db->p->port : 3306, skip,
	                   host_has_ip, db);
	free(skip);
	return w;
}

/*
 * On a Galera cluster, moves the connection to the cluster's writer node
 * (writer.h says why and which), when more than one host is configured
 * and the writer is another of them: every lockrun of the cluster then
 * sends its lock calls to one node. A node is the writer only if it says
 * it is Synced, ready and in the primary component: one that is not (a
 * state-transfer donor, which rsync and mysqldump block for the whole
 * copy; a joiner) is passed over for the next member, as is one that did
 * not answer in time; every client asks the same node, so they pass it
 * over alike. Asked after each new connection, so that when the writer
 * leaves the cluster, the reconnect that follows finds the next one, and
 * by lr_db_follow on a long-lived one. Nothing here decides correctness:
 * clients that briefly disagree are kept safe by certification. Costs one
 * query (none once a server said it is not a Galera node, none on MySQL),
 * plus a connect and a query per move; a name lookup per configured host
 * the first time. A failure to ask keeps the connection; a writer that
 * does not answer is passed over for the next host in order, as by any
 * connect.
 */
static void follow_writer(lr_db *db)
{
	struct view v;
	long w;

	if (!writer_choice(db) || db->galera == 0 || db->following)
		return;
	db->following = true;
	for (size_t tries = 0; tries <= db->p->nhosts && db->m; tries++) {
		if (!ask_view(db, &v)) {
			/* Still connected: the first real statement meets the
			 * error (a node not ready, 1047) and is retried as ever.
			 * A lost connection keeps its error. */
			if (db->m)
				db->err = 0;
			break;
		}
		/* MariaDB without Galera reports the status too, as
		 * Disconnected. */
		db->galera = v.status && strcmp(v.status, "Disconnected") != 0;
		if (!db->galera || !v.status || !v.members || strcmp(v.status, "Primary") != 0)
			break;
		if (!v.state || strcmp(v.state, "Synced") != 0 || !v.ready ||
		    strcmp(v.ready, "ON") != 0)
			pass_over(db, db->cur_host, v.state ? v.state : "no state");
		w = pick(db, v.members);
		if (w < 0 || (size_t)w == db->cur_host)
			break;
		lr_log_debug("%s: the Galera cluster's writer node is %s: moving there", db->server,
		             db->p->hosts[w]);
		db->first_host = (size_t)w;
		if (!lr_db_connect(db)) {
			lr_log_debug("could not move to the writer node: %s", db->errmsg);
			break;
		}
		if (db->cur_host != (size_t)w)
			pass_over(db, (size_t)w, "no answer to the move");
	}
	db->following = false;
}

/*
 * What this configuration makes of the Galera cluster it is connected to,
 * for lockrunctl doctor: the members the node reports, the first of them
 * (the writer while it is Synced), the configured host that is that
 * member, and the one lockrun writes on (the first member the
 * configuration names). False if the node did not answer. One query, and
 * a name lookup per configured host the first time.
 */
bool lr_db_galera_writer(lr_db *db, struct lr_db_writer *w)
{
	struct view v;
	unsigned port = db->p->port ? db->p->port : 3306;
	char *colon;
	size_t n;

	memset(w, 0, sizeof(*w));
	w->writer = w->pick = -1;
	if (!ask_view(db, &v))
		return false;
	snprintf(w->members, sizeof(w->members), "%s", v.members ? v.members : "");
	n = strcspn(w->members, ",");
	snprintf(w->first, sizeof(w->first), "%.*s", (int)(n < sizeof(w->first) ? n : 0),
	         w->members);
	if (db->p->nhosts) {
		w->writer = lr_writer_pick(w->first, db->p->nhosts, port, NULL, host_has_ip, db);
		w->pick = lr_writer_pick(w->members, db->p->nhosts, port, NULL, host_has_ip, db);
	}
	/* The address alone, as a host list names it. */
	if ((colon = strrchr(w->first, ':')))
		*colon = '\0';
	if (w->first[0] == '[' && (n = strlen(w->first)) > 1 && w->first[n - 1] == ']') {
		w->first[n - 1] = '\0';
		memmove(w->first, w->first + 1, n - 1);
	}
	return true;
}

/*
 * For a long-lived connection (a holder renewing, a waiter polling): on a
 * Galera cluster, at most every GALERA_FOLLOW_MS, asks the node again
 * which member is the writer and moves there if it is another one (the
 * membership changed, or a node became or stopped being a donor), so
 * that no client writes on a node the others left for long. Returns true
 * when it moved (a new connection: session state is gone). Costs nothing
 * between checks, one query per check, a connect per move.
 */
bool lr_db_follow(lr_db *db)
{
	unsigned gen = db->generation;

	if (!db->m || db->galera != 1 || !writer_choice(db) ||
	    mono_ms() - db->checked_ms < GALERA_FOLLOW_MS)
		return false;
	follow_writer(db);
	return db->generation != gen;
}

/*
 * Connects to the first configured host that answers, in order. On failure
 * the error names every host tried and why each failed. Costs one name
 * lookup per host plus the handshake; at most connect_timeout per address.
 * On a Galera cluster, it then moves to the writer node (follow_writer).
 */
bool lr_db_connect(lr_db *db)
{
	struct lr_sb why;
	size_t i, n = db->p->nhosts ? db->p->nhosts : 1;
	unsigned first_err = 0;
	bool ok = false;

	lr_db_disconnect(db);
	db->err = 0;
	lr_sb_init(&why);
	for (i = 0; i < 2 * n && !ok; i++) {
		size_t h = (db->first_host + i) % n;
		/* Hosts passed over as Galera writer go last (the second
		 * round), the others first (the first round). */
		if (passed_over(db, h) != (i >= n))
			continue;
		db->probing = db->following || db->suspect == h + 1;
		ok = connect_host(db, db->p->nhosts ? db->p->hosts[h] : NULL);
		db->probing = false;
		if (!ok && db->suspect == h + 1) {
			db->suspect = 0;
			pass_over(db, h, "no answer to the probe");
		}
		if (ok) {
			db->cur_host = h;
			break;
		}
		/* The error that stands for all: a full host over any other (the
		 * database is there, only busy), then the first that is not a
		 * timeout (it says more). */
		if (!first_err || first_err == LR_DB_ETIMEDOUT ||
		    (lr_db_error_is_busy(db->err) && !lr_db_error_is_busy(first_err)))
			first_err = db->err;
		if (why.len)
			lr_sb_puts(&why, "; ");
		lr_sb_puts(&why, db->errmsg);
		if (db->cancel && *db->cancel)
			break;
	}
	if (!ok && n > 1)
		set_error(db, first_err, "any database host: %s", lr_sb_str(&why));
	lr_sb_finish(&why);
	if (ok) {
		lr_log_debug("connected to %s", db->server);
		follow_writer(db);
		ok = db->m != NULL;
	}
	return ok;
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
			drive(db, st, cont_next, timeout_ms);
		if (db->ret_int > 0 || db->aborting)
			return false;
		if (db->ret_int < 0)
			break;
		if (mysql_field_count(db->m) == 0)
			continue;
		db->ret_res = NULL;
		st = mysql_store_result_start(&db->ret_res, db->m);
		if (st)
			drive(db, st, cont_store, timeout_ms);
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
 * dropped; a node that is not ready (Galera, 1047), or a read-only server
 * (a replica, or an old primary the fail-over fenced: 1290, before
 * anything was written), is passed over by the next connect, as another
 * host may serve; a broken connection is closed. For lr_db_query and
 * lr_db_call alike.
 */
static void failed(lr_db *db)
{
	free_result(db);
	if (db->err == ER_OPTION_PREVENTS_STATEMENT && db->p->nhosts > 1)
		db->err = LR_DB_EREADONLY;
	if ((db->err == ER_UNKNOWN_COM_ERROR || db->err == LR_DB_EREADONLY) && db->p->nhosts > 1)
		db->first_host = (db->cur_host + 1) % db->p->nhosts;
	if (db->err == LR_DB_ETIMEDOUT)
		writer_silent(db);
	if (lr_db_error_is_connection(db->err)) {
		lr_log_debug("dropping connection to %s: %s", db->server, db->errmsg);
		lr_db_disconnect(db);
	}
}

/*
 * Sends one statement and, if it returns rows, stores them all (so the next
 * statement can go at once). For a CALL the first result set is the answer
 * and the rest of the reply is read too (drain). The debug log shows shown
 * instead of sql. One round trip plus the result transfer.
 */
static bool query(lr_db *db, const char *sql, const char *shown)
{
	unsigned timeout_ms = op_budget(db);
	int st;

	free_result(db);
	if (!db->m) {
		set_error(db, LR_DB_ENOTCONN, "not connected");
		return false;
	}
	lr_log_debug("%s: %s", db->server, shown);
	db->expired = db->aborting = false;
	st = mysql_real_query_start(&db->ret_int, db->m, sql, strlen(sql));
	if (st)
		drive(db, st, cont_query, timeout_ms);
	if (db->ret_int != 0 || db->aborting)
		goto fail;
	if (mysql_field_count(db->m) > 0) {
		st = mysql_store_result_start(&db->ret_res, db->m);
		if (st)
			drive(db, st, cont_store, timeout_ms);
		if (!db->ret_res || db->aborting)
			goto fail;
		db->res = db->ret_res;
	}
	if (!drain(db, timeout_ms))
		goto fail;
	db->err = 0;
	watch_idle(db);
	return true;
fail:
	take_error(db, "query", timeout_ms);
	failed(db);
	return false;
}

bool lr_db_query(lr_db *db, const char *sql)
{
	return query(db, sql, sql);
}

bool lr_db_queryf(lr_db *db, const char *fmt, ...)
{
	char *sql = NULL;
	va_list ap;
	int n;
	bool ok;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || !(sql = malloc((size_t)n + 1))) {
		set_error(db, CR_OUT_OF_MEMORY, "out of memory");
		return false;
	}
	va_start(ap, fmt);
	vsnprintf(sql, (size_t)n + 1, fmt, ap);
	va_end(ap);
	ok = lr_db_query(db, sql);
	free(sql);
	return ok;
}

static void free_rows(struct rows *r)
{
	if (r->cells)
		for (size_t i = 0; i < r->nrows * r->ncols; i++)
			free(r->cells[i]);
	if (r->names)
		for (size_t i = 0; i < r->ncols; i++)
			free(r->names[i]);
	free(r->cells);
	free(r->names);
	*r = (struct rows){0};
}

/* Frees the connection's prepared statements, after mysql_close(): it
 * detached them, so this is local work (the server dropped them with the
 * session). */
static void close_stmts(lr_db *db)
{
	for (size_t i = 0; i < LR_DB_STMTS; i++) {
		if (db->stmts[i].st)
			mysql_stmt_close(db->stmts[i].st);
		db->stmts[i] = (struct stmt_slot){0};
	}
	db->cur = NULL;
}

/* The error of statement st, in our terms (see take_error). */
static void take_stmt_error(lr_db *db, MYSQL_STMT *st, const char *what, unsigned timeout_ms)
{
	if (db->expired || db->aborting || mysql_stmt_errno(st) == 0)
		take_error(db, what, timeout_ms);
	else
		set_error(db, mysql_stmt_errno(st), "%s: %s (%u)", db->server, mysql_stmt_error(st),
		          mysql_stmt_errno(st));
}

/*
 * Keeps this connection's statements out of the slow query log, once per
 * connection, before its first prepare. A prepared statement's parameters
 * never travel in its text, but MariaDB writes them into it (and so into
 * what SHOW PROCESSLIST shows every session of the same account) when the
 * statement may be logged, and decides that when it prepares it: always
 * with the general log on, and with the slow log on for the session. The
 * variable is log_slow_query from MariaDB 10.11, sql_log_slow before. The
 * same statement makes the session independent of two global settings a
 * managed server may have: autocommit (an init_connect may turn it off;
 * the routines commit what they write either way, but a statement of
 * lockrun's own would begin a transaction that stays open) and MariaDB's
 * max_statement_time, which cuts off every statement, a CALL that waits
 * for a wake-up among them. One round trip, on MariaDB only: whether the
 * slow log is on cannot be known without asking, and the connector cannot
 * send the statement ahead of the prepare without waiting for its answer
 * (MYSQL_INIT_COMMAND too waits, after the login's). Neither does the
 * prepared statement carry it: SET STATEMENT ... FOR applies at the
 * execute, after the prepare decided, and inside BEGIN NOT ATOMIC the
 * process list shows the inner statement with the values in.
 * MySQL shows every parameter in the process list anyway (lr_db_call
 * sends its CALLs as text there), but its slow log is read by more people
 * than the sessions of lockrun's account (log shippers, a managed
 * service's console), and a waiter's CALL outlasts a short
 * long_query_time: so MySQL gets the same round trip, with its own names
 * (long_query_time; max_execution_time, which limits SELECTs such as
 * lockwait's GET_LOCK).
 */
static bool quiet_session(lr_db *db)
{
	if (db->quiet)
		return true;
	if (!lr_db_query(db, lr_db_is_mysql(db) ? "SET SESSION long_query_time = 31536000, "
	                                          "SESSION autocommit = 1, "
	                                          "SESSION max_execution_time = 0"
	                     : mysql_get_server_version(db->m) >= 101100
	                         ? "SET SESSION log_slow_query = 0, SESSION autocommit = 1, "
	                           "SESSION max_statement_time = 0"
	                         : "SET SESSION sql_log_slow = 0, SESSION autocommit = 1, "
	                           "SESSION max_statement_time = 0"))
		return false;
	db->quiet = true;
	return true;
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
	struct stmt_slot *slot = NULL;
	MYSQL_STMT *st;

	for (size_t i = 0; i < LR_DB_STMTS && !slot; i++)
		if (!db->stmts[i].st)
			slot = &db->stmts[i];
	if (!slot) {
		mysql_stmt_close(db->stmts[0].st);
		memmove(&db->stmts[0], &db->stmts[1], sizeof(db->stmts[0]) * (LR_DB_STMTS - 1));
		slot = &db->stmts[LR_DB_STMTS - 1];
	}
	*slot = (struct stmt_slot){0};
	if (!(st = mysql_stmt_init(db->m))) {
		set_error(db, CR_OUT_OF_MEMORY, "out of memory");
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
			db->stmts[i] = (struct stmt_slot){0};
		}
	db->cur = NULL;
}

/* What the thread of run_direct hands back. */
struct direct {
	MYSQL_STMT *st;
	const char *sql;
	int ret;
	atomic_bool done;
	uv_async_t *wake;
};

static void *direct_main(void *arg)
{
	struct direct *d = arg;

	d->ret = mariadb_stmt_execute_direct(d->st, d->sql, strlen(d->sql));
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
 * as drive() does: signals, timers and child exits are served, and the
 * deadline or the cancel flag shuts the socket down, which makes the
 * thread's wait end at once. The connection is not touched here until the
 * thread is done. Costs one round trip, a thread start (two sigprocmasks
 * around it) and, after it, a fcntl (the connector leaves the socket
 * blocking).
 */
static bool run_direct(lr_db *db, MYSQL_STMT *st, const char *sql, unsigned timeout_ms)
{
	struct direct d = {.st = st, .sql = sql, .ret = 1};
	int fd = (int)mysql_get_socket(db->m), fl;
	sigset_t all, old;
	pthread_t t;
	bool ok = false, started;

	if (!(d.wake = malloc(sizeof(*d.wake))) ||
	    uv_async_init(db->loop, d.wake, on_direct_done)) {
		free(d.wake);
		set_error(db, CR_OUT_OF_MEMORY, "out of memory");
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
		set_error(db, CR_OUT_OF_MEMORY, "%s: could not start a thread", db->server);
		goto out;
	}
	uv_timer_start(db->deadline, on_deadline, timeout_ms, 0);
	while (!atomic_load(&d.done)) {
		if (!db->aborting && (db->expired || (db->cancel && *db->cancel))) {
			db->aborting = true;
			shut_socket(db);
		}
		uv_run(db->loop, UV_RUN_ONCE);
	}
	uv_timer_stop(db->deadline);
	pthread_join(t, NULL);
	if (fd >= 0 && (fl = fcntl(fd, F_GETFL)) >= 0)
		fcntl(fd, F_SETFL, fl | O_NONBLOCK);
	ok = d.ret == 0 && !db->aborting;
	if (!ok)
		take_stmt_error(db, st, "call", timeout_ms);
out:
	uv_close((uv_handle_t *)d.wake, free_handle);
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
		set_error(db, CR_OUT_OF_MEMORY, "%s: could not read the answer", db->server);
	}
	return ok;
}

/*
 * On MySQL, runs sql with each '?' replaced by its parameter as a quoted
 * literal, over the text protocol: MySQL writes the parameters of a
 * prepared statement into the text that its process list shows anyway,
 * so preparing would hide nothing and cost a round trip per statement and
 * connection. The debug log shows sql with its '?'. One round trip.
 */
static bool call_text(lr_db *db, const char *sql, const char *const *params, unsigned nparams)
{
	struct lr_sb sb;
	unsigned i = 0;
	bool ok;

	lr_sb_init(&sb);
	for (const char *c = sql; *c; c++) {
		if (*c == '?' && i < nparams)
			lr_db_sb_quote(db, &sb, params[i++]);
		else
			lr_sb_add(&sb, c, 1);
	}
	if (sb.oom) {
		lr_sb_finish(&sb);
		set_error(db, CR_OUT_OF_MEMORY, "out of memory");
		return false;
	}
	ok = query(db, lr_sb_str(&sb), sql);
	lr_sb_finish(&sb);
	return ok;
}

/*
 * Runs sql, a statement with a '?' for each of params (strings; NULL is
 * SQL NULL), as a prepared statement: the values travel apart from the
 * text, so other sessions of the same account, which can read every
 * statement's text in the process list, see only the '?' (quiet_session
 * says when the server would write them in). The first result set is the
 * answer (lr_db_fetch, lr_db_column), the rest of the reply is read and
 * dropped, as lr_db_query does. Costs one round trip plus the result: the
 * first time a connection runs sql, the prepare goes in the same send
 * (run_direct); once per connection, quiet_session's. On MySQL, as text
 * (call_text).
 */
bool lr_db_call(lr_db *db, const char *sql, const char *const *params, unsigned nparams)
{
	unsigned timeout_ms = op_budget(db);
	MYSQL_BIND b[LR_DB_PARAMS];
	unsigned long len[LR_DB_PARAMS], n = nparams;
	MYSQL_STMT *st = NULL;
	bool fresh = false;
	int status;

	free_result(db);
	if (!db->m) {
		set_error(db, LR_DB_ENOTCONN, "not connected");
		return false;
	}
	if (nparams > LR_DB_PARAMS) {
		set_error(db, CR_UNKNOWN_ERROR, "%s: too many parameters", db->server);
		return false;
	}
	if (!quiet_session(db))
		return false;
	if (lr_db_is_mysql(db))
		return call_text(db, sql, params, nparams);
	lr_log_debug("%s: %s", db->server, sql);
	db->expired = db->aborting = false;
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
		if (!run_direct(db, st, sql, timeout_ms))
			goto fail;
	} else {
		status = mysql_stmt_execute_start(&db->ret_int, st);
		if (status)
			drive(db, status, cont_execute, timeout_ms);
		if (db->ret_int != 0 || db->aborting)
			goto stmt_fail;
	}
	/* Each result set: the first kept, the others stored and dropped;
	 * the last part of a CALL's reply is its status, without fields. */
	for (bool first = true;; first = false) {
		if (mysql_stmt_field_count(st) > 0) {
			status = mysql_stmt_store_result_start(&db->ret_int, st);
			if (status)
				drive(db, status, cont_stmt_store, timeout_ms);
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
			drive(db, status, cont_stmt_next, timeout_ms);
		if (db->ret_int > 0 || db->aborting)
			goto stmt_fail;
		if (db->ret_int < 0)
			break;
	}
	db->err = 0;
	watch_idle(db);
	return true;
stmt_fail:
	take_stmt_error(db, st, "call", timeout_ms);
fail:
	failed(db);
	/* A statement whose first run failed is prepared again next time. */
	if (fresh && st && db->m)
		drop_stmt(db, st);
	return false;
}

/* For a caller that reports on the server itself (lockrunctl doctor):
 * keep a connection to any server, however old or whatever it is, rather
 * than refuse it as unsupported. */
void lr_db_allow_any_server(lr_db *db)
{
	db->any_server = true;
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
	return mysql_get_server_version(db->m) >= (lr_db_is_mysql(db) ? MIN_MYSQL : MIN_MARIADB);
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
		watch_idle(db);
	else if (db->poll)
		uv_poll_stop(db->poll);
}

/* Whether a new connection is checked with a SELECT 1 (default: yes). An
 * owner whose first statement after connecting can play that part (and
 * handles its errors) saves the round trip. */
void lr_db_set_probe(lr_db *db, bool on)
{
	db->probe = on;
}

void lr_db_set_op_timeout(lr_db *db, unsigned ms)
{
	db->op_timeout_ms = ms;
}

/*
 * How the current connection is made: where to, whether encrypted, and
 * what of the server's certificate was checked (what set_options asked
 * for: the connector refuses a connection whose check fails). False when
 * not connected. Local work.
 */
bool lr_db_link(const lr_db *db, struct lr_db_link *l)
{
	const struct lr_db_params *p = db->p;
	const char *v = NULL;

	memset(l, 0, sizeof(*l));
	if (!db->m)
		return false;
	l->host =
	    p->nhosts && !is_socket_host(p->hosts[db->cur_host]) ? p->hosts[db->cur_host] : NULL;
	l->address = db->cur_ip;
	l->loopback = strncmp(db->cur_ip, "127.", 4) == 0 || strcmp(db->cur_ip, "::1") == 0 ||
	              strncmp(db->cur_ip, "::ffff:127.", 11) == 0;
	l->cipher = mysql_get_ssl_cipher(db->m);
	if (l->cipher && mariadb_get_infov(db->m, MARIADB_CONNECTION_TLS_VERSION, &v) == 0)
		l->tls_version = v;
	l->verified = l->cipher && p->ssl_verify_server_cert;
	l->pinned = l->cipher && p->ssl_fingerprint;
	return true;
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
	 * as useless as a dead one until it is, so try another. */
	return (err >= CR_MIN_ERROR && err <= CR_MAX_ERROR) || err == LR_DB_ETIMEDOUT ||
	       err == ER_UNKNOWN_COM_ERROR || err == LR_DB_ECANCELED || err == LR_DB_ENOTCONN ||
	       err == LR_DB_EREADONLY || err == ER_SERVER_SHUTDOWN || err == ER_CONNECTION_KILLED;
}
