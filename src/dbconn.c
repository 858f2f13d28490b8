/*
 * Where to connect and how securely, and the handles and statements of
 * the rest of lockrun (db.h): the configured hosts in order, name lookups
 * on libuv's pool, the connector's options (TLS, which authentication
 * plugins may run), checking the certificate against the configured name,
 * the errors of a failed login in lockrun's words, and on a Galera
 * cluster the writer node every client moves to. Statements go through
 * the driver (dbio.h) with the bound this part sets, and what a failure
 * means for the next connect (a read-only server, a node that did not
 * answer) is decided here.
 *
 * May use: db, dbio, log, strbuf, writer.
 */
#include "db.h"
#include "dbio.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

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

/* The authentication plugins that never send the password itself, nor
 * encrypt it with a key that nobody verified: MariaDB's and MySQL's
 * scramble (a hash of a hash, salted), ed25519, PARSEC and Kerberos. And
 * those that encrypt it with the server's RSA key. */
#define SAFE_AUTH_PLUGINS "mysql_native_password,client_ed25519,parsec,auth_gssapi_client"
#define RSA_AUTH_PLUGINS  "caching_sha2_password,sha256_password"

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

static void on_pvio(int mode, MYSQL *m, const unsigned char *buf, size_t len);
static bool ask(lr_db *db, const char *sql);
static void start_tls_library(const struct lr_db_params *p);

/* Sets up the connecting part of a new handle: the parameters (owned by
 * the caller, kept until lr_db_destroy), defaults, and once per process
 * the TLS library (start_tls_library) and the connector's I/O hook
 * (on_pvio). Local work. */
static void conn_init(lr_db *db, const struct lr_db_params *params)
{
	static bool hooked;

	start_tls_library(params);
	if (!hooked) /* once per process: the list is the connector's, global */
		hooked = ma_pvio_register_callback(1, on_pvio) == 0;
	db->p = params;
	db->probe = true;
	db->galera = -1;
	db->group = -1;
}

/* Makes db a sibling of parent (lr_db_create_sibling): it knows whether
 * the hosts are Galera nodes, starts at the parent's host, and asks no
 * writer. */
static void conn_adopt(lr_db *db, const lr_db *parent)
{
	db->probe = parent->probe;
	db->galera = parent->galera;
	db->group = parent->group;
	db->first_host = parent->cur_host;
	db->sibling = true;
}

/* Frees what the connecting part keeps per handle. */
static void conn_finish(lr_db *db)
{
	if (db->host_ips)
		for (size_t h = 0; h < db->p->nhosts; h++)
			free(db->host_ips[h]);
	free(db->host_ips);
	free(db->passed);
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

/*
 * One login in progress: what on_pvio needs while the connector runs it
 * (the name the certificate must carry, what the server asked for), and,
 * when it runs on a thread of its own (login_on_thread), what that thread
 * needs: copies of the credentials, since a login given up on outlives
 * the wait for it, and the handle is then the thread's to close.
 */
struct login {
	MYSQL *m;
	char *tls_name;      /* the configured name the certificate must carry, or NULL */
	bool named;          /* tls_name was put in place before the certificate was checked */
	bool reading_names;  /* a login only to read what the certificate names */
	unsigned long flags; /* the connector's client flags for the login */
	char plugin[64];     /* the plugin the server last asked to switch to */
	char names[256];     /* what the certificate names (reading_names) */

	char *ip, *user, *password, *database; /* for the thread */
	unsigned port;
	MYSQL *ret;
	atomic_int state; /* LOGIN_RUNNING, LOGIN_DONE or LOGIN_ABANDONED */
	uv_async_t *wake;
};

enum { LOGIN_RUNNING, LOGIN_DONE, LOGIN_ABANDONED };

#ifdef LR_CONNECTOR_PVIO

/* Puts the certificate's subjectAltNames (else its common name) into
 * l->names. Local work. */
static void note_names(struct login *l, X509 *cert)
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
	snprintf(l->names, sizeof(l->names), "%s", sb.oom ? "" : lr_sb_str(&sb));
	lr_sb_finish(&sb);
}

/* At the first read after the TLS handshake of a read_names connection:
 * what the certificate names. Local work. */
static void peer_read(struct login *l)
{
	MARIADB_PVIO *pvio = l->m->net.pvio;
	X509 *cert;

	if (pvio && pvio->ctls && pvio->ctls->ssl && !l->names[0] &&
	    (cert = SSL_get1_peer_certificate(pvio->ctls->ssl))) {
		note_names(l, cert);
		X509_free(cert);
	}
}
#else
static void peer_read(struct login *l)
{
	(void)l;
}
#endif

/* The login this thread runs, for on_pvio: each thread runs at most one
 * at a time (the loop's thread, or a login_on_thread's). */
static _Thread_local struct login *connecting;

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
 * back to the non-blocking API (hence login_on_thread), so that write is
 * the last moment lockrun has. It sends no SNI: the server cannot pick a
 * certificate by name.
 * Local work, no system call.
 */
static void on_name(struct login *l, MYSQL *m)
{
	char *name;

	if (!l->tls_name || l->named || !m->host)
		return;
	if (strcmp(m->host, l->tls_name) != 0) {
		if (!(name = strdup(l->tls_name)))
			return;
		free(m->host);
		m->host = name;
	}
	l->named = true;
}

/* The callback of the connector's I/O layer: on_name while connecting,
 * and when lockrun reads what a certificate names (read_names), notes
 * them at the first read after the TLS handshake. Local work. */
static void on_pvio(int mode, MYSQL *m, const unsigned char *buf, size_t len)
{
	struct login *l = connecting;

	if (!l || l->m != m)
		return;
	if (!l->reading_names) {
		on_name(l, m);
		/* The server's request to switch plugins (0xFE, the name, NUL),
		 * at the start of a read: the plugin set_options may refuse,
		 * which the connector's error misnames. */
		if (mode == 0 && (ssize_t)len > 5 && buf[4] == 0xFE && memchr(buf + 5, 0, len - 5))
			snprintf(l->plugin, sizeof(l->plugin), "%s", (const char *)buf + 5);
	} else if (mode == 0) {
		peer_read(l);
	}
}

static int cont_connect(lr_db *db, int st)
{
	return mysql_real_connect_cont(&db->ret_conn, db->m, st);
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
	lr_dbio_set_error(
	    db, LR_DB_ETOOOLD,
	    "%s: server version %s is not supported; lockrun needs MariaDB 10.6 or newer, "
	    "or MySQL 8.4 or newer",
	    db->server, info ? info : "unknown");
	return false;
}

/* Frees the handle of a connect that did not succeed, without waiting
 * on its socket. */
static void drop_handle(lr_db *db)
{
	if (!db->m)
		return;
	lr_dbio_shut(db);
	mysql_close(db->m);
	db->m = NULL;
	lr_dbio_drop_poll(db);
}

/* After a login, whatever its outcome. Connector/C 3.3 never frees the
 * server_public_key it keeps per handle (44 bytes or so per connection,
 * a leak); setting it to nothing frees it. */
static void login_over(const struct lr_db_params *p, MYSQL *m)
{
	if (p->server_public_key)
		mysql_options(m, MYSQL_SERVER_PUBLIC_KEY, NULL);
}

/* Frees a login (its handle is no longer its own), the password's copy
 * wiped first. Accepts NULL. Local work. */
static void login_destroy(struct login *l)
{
	if (!l)
		return;
	if (l->password)
		explicit_bzero(l->password, strlen(l->password));
	free(l->tls_name);
	free(l->ip);
	free(l->user);
	free(l->password);
	free(l->database);
	free(l);
}

/* A new login for the configured name (NULL: the address is checked as
 * itself), with copies of what a thread of its own needs; NULL when out
 * of memory. Local work. */
static struct login *login_create(const char *name, const char *ip, const char *user,
                                  const char *password, const char *database, unsigned port)
{
	struct login *l = calloc(1, sizeof(*l));

	if (!l)
		return NULL;
	l->port = port;
	atomic_init(&l->state, LOGIN_RUNNING);
	if ((name && !(l->tls_name = strdup(name))) || (ip && !(l->ip = strdup(ip))) ||
	    (user && !(l->user = strdup(user))) ||
	    (password && !(l->password = strdup(password))) ||
	    (database && !(l->database = strdup(database)))) {
		login_destroy(l);
		return NULL;
	}
	return l;
}

/* The thread of login_on_thread: the connector's blocking login, then
 * either a wake-up for the loop that waits for it, or, given up on, the
 * handle closed and the login freed by the thread itself. */
static void *login_main(void *arg)
{
	struct login *l = arg;
	int running = LOGIN_RUNNING;

	connecting = l;
	l->ret = mysql_real_connect(l->m, l->ip, l->user, l->password, l->database, l->port, NULL,
	                            l->flags);
	connecting = NULL;
	if (atomic_compare_exchange_strong(&l->state, &running, LOGIN_DONE)) {
		uv_async_send(l->wake);
		return NULL;
	}
	/* Given up on (login_on_thread): nobody waits for it any more. */
	mysql_options(l->m, MYSQL_SERVER_PUBLIC_KEY, NULL); /* as login_over */
	mysql_close(l->m);
	login_destroy(l);
	return NULL;
}

static void on_login_done(uv_async_t *a)
{
	uv_stop(a->loop);
}

/*
 * Runs login l with the connector's blocking API on a thread of its own,
 * while this one runs the loop, as lr_dbio_drive does: signals, timers
 * and child exits are served. Used where TLS may be started: Connector/C
 * runs the TLS handshake in blocking reads of up to connect_timeout each,
 * even under its non-blocking API, and a server or path that stalls in
 * the middle of it would otherwise hold the loop, and with it the
 * lease's deadline, that long. At timeout_ms or the cancel flag the login
 * is given up: the thread and the handle are left to finish and free
 * themselves, and false is returned with db->m NULL and the error set;
 * so too when no thread can be started (nothing is left running).
 * Otherwise db->m is the handle, with the socket non-blocking again (the
 * connector leaves it blocking), and true means the connector's login
 * succeeded. Costs the login's round trips, a thread start (two
 * sigprocmasks around it) and a fcntl.
 */
static bool login_on_thread(lr_db *db, struct login *l, unsigned timeout_ms, bool *abandoned)
{
	sigset_t all, old;
	pthread_t t;
	int running = LOGIN_RUNNING, fd, fl;
	bool started;

	*abandoned = false;
	if (!(l->wake = malloc(sizeof(*l->wake))) ||
	    uv_async_init(db->loop, l->wake, on_login_done)) {
		free(l->wake);
		l->wake = NULL;
		drop_handle(db);
		lr_dbio_set_error(db, CR_OUT_OF_MEMORY, "out of memory");
		return false;
	}
	/* Signals stay with this thread, whose loop serves them. */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	started = pthread_create(&t, NULL, login_main, l) == 0;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (!started) {
		uv_close((uv_handle_t *)l->wake, lr_dbio_free_handle);
		drop_handle(db);
		lr_dbio_set_error(db, CR_OUT_OF_MEMORY, "%s: could not start a thread", db->server);
		return false;
	}
	lr_dbio_start_deadline(db, timeout_ms);
	while (atomic_load(&l->state) == LOGIN_RUNNING) {
		if ((db->expired || (db->cancel && *db->cancel)) &&
		    atomic_compare_exchange_strong(&l->state, &running, LOGIN_ABANDONED)) {
			*abandoned = true;
			break;
		}
		running = LOGIN_RUNNING;
		uv_run(db->loop, UV_RUN_ONCE);
	}
	lr_dbio_stop_deadline(db);
	if (*abandoned) {
		/* The thread no longer touches l->wake (login_main). */
		uv_close((uv_handle_t *)l->wake, lr_dbio_free_handle);
		pthread_detach(t);
		db->m = NULL;
		if (db->expired)
			lr_dbio_set_error(db, LR_DB_ETIMEDOUT, "%s: no answer within %.1f s",
			                  db->server, timeout_ms / 1000.0);
		else
			lr_dbio_set_error(db, LR_DB_ECANCELED, "%s: connect interrupted",
			                  db->server);
		return false;
	}
	/* Its uv_async_send may still be under way: joined first. */
	pthread_join(t, NULL);
	uv_close((uv_handle_t *)l->wake, lr_dbio_free_handle);
	fd = lr_dbio_socket(l->m, false);
	if (fd >= 0 && (fl = fcntl(fd, F_GETFL)) >= 0)
		fcntl(fd, F_SETFL, fl | O_NONBLOCK);
	login_over(db->p, l->m);
	db->ret_conn = l->ret;
	return l->ret != NULL;
}

/*
 * Runs login l on its handle db->m, to ip (NULL: the unix socket): on the
 * loop with the connector's non-blocking API, or on a thread of its own
 * where TLS may be started over TCP (login_on_thread). True when the
 * connector logged in. On false, db->m is the failed handle, or NULL
 * when the login was given up on (*abandoned: l and the handle now
 * belong to its thread). Costs the login's round trips.
 */
static bool login(lr_db *db, struct login *l, const char *ip, unsigned timeout_ms, bool *abandoned)
{
	const struct lr_db_params *p = db->p;
	int st;

	*abandoned = false;
	l->m = db->m;
	/* Multi-statements only where the owner sends its own two at once
	 * (lr_db_set_multi_statements): a text of one's own quoting is all
	 * that ever goes with them. */
	l->flags =
	    l->reading_names ? 0 : CLIENT_FOUND_ROWS | (db->multi ? CLIENT_MULTI_STATEMENTS : 0);
	if (ip && tls_possible(p))
		return login_on_thread(db, l, timeout_ms, abandoned);
	db->expired = db->aborting = false;
	connecting = l;
	db->connecting = true;
	st = mysql_real_connect_start(&db->ret_conn, db->m, ip, l->user, l->password, l->database,
	                              l->port, ip ? NULL : p->socket, l->flags);
	if (st)
		lr_dbio_drive(db, st, cont_connect, timeout_ms);
	db->connecting = false;
	connecting = NULL;
	login_over(p, db->m);
	return db->ret_conn != NULL;
}

#ifdef LR_CONNECTOR_PVIO
/*
 * After the server's certificate was found not to name the configured
 * host: what it names, into names (256 bytes), for the error. A second
 * connection to the same address, with TLS as configured but the name
 * left unchecked, logs in as no user with no password (nothing for
 * anyone in the path to read); on_pvio notes the certificate at its first
 * read after the handshake. Only on that failure; costs a connect.
 */
static void read_names(lr_db *db, const char *ip, unsigned timeout_ms, char *names)
{
	struct login *l = login_create(NULL, ip, "", NULL, NULL, db->p->port);
	my_bool no = 0;
	bool abandoned = false;

	if (!l || !(db->m = mysql_init(NULL)))
		goto out;
	set_options(db, db->m, true);
	mysql_options(db->m, MYSQL_OPT_SSL_VERIFY_SERVER_CERT, &no);
	l->reading_names = true;
	login(db, l, ip, timeout_ms, &abandoned);
	if (!abandoned)
		snprintf(names, 256, "%s", l->names);
	drop_handle(db);
out:
	if (!abandoned)
		login_destroy(l);
}
#endif

/* Says why a connect failed, in our terms (take_error), and in lockrun's
 * own words where the connector's would not say what to do: a plugin
 * refused by set_options, a certificate that names another host (then
 * with read_names: costs a connect). Closes the failed handle. */
static void connect_failed(lr_db *db, const struct login *l, const char *ip, unsigned timeout_ms)
{
	const char *msg = mysql_error(db->m);
	char names[256] = "";
	bool other_name;

	lr_dbio_take_error(db, "connect", timeout_ms);
	/* Connector/C 3.3's words, then 3.4's. */
	other_name = db->err == CR_SSL_CONNECTION_ERROR && l->named &&
	             (strstr(msg, "Validation of SSL server certificate failed") ||
	              strstr(msg, "Hostname verification failed"));
	if (db->err == CR_PLUGIN_NOT_ALLOWED)
		lr_dbio_set_error(
		    db, CR_PLUGIN_NOT_ALLOWED,
		    "%s: the account logs in with %s, which over TCP without TLS %s (%u)",
		    db->server, *l->plugin ? l->plugin : "a plugin lockrun does not allow there",
		    *l->plugin && strstr(RSA_AUTH_PLUGINS, l->plugin)
		        ? "sends the password under an RSA key nobody verified; set ssl_ca "
		          "(TLS), server_public_key, or allow_public_key_retrieval = true"
		        : "could expose the password; set ssl_ca (TLS)",
		    CR_PLUGIN_NOT_ALLOWED);
	drop_handle(db);
	if (other_name && !(db->cancel && *db->cancel)) {
#ifdef LR_CONNECTOR_PVIO
		read_names(db, ip, timeout_ms, names);
		lr_dbio_set_error(db, CR_SSL_CONNECTION_ERROR,
		                  "%s: the server's certificate does not name %s; it names %s (%u)",
		                  db->server, l->tls_name, names[0] ? names : "no host name",
		                  CR_SSL_CONNECTION_ERROR);
#else
		(void)names;
		lr_dbio_set_error(db, CR_SSL_CONNECTION_ERROR,
		                  "%s: the server's certificate does not name %s (%u)", db->server,
		                  l->tls_name, CR_SSL_CONNECTION_ERROR);
#endif
	}
}

/*
 * One connection attempt to one address (ip NULL: the unix socket), for
 * the configured host name (the certificate must name it; NULL or the
 * address itself: the address). On success the handle is kept and its
 * socket marked close-on-exec, so a child never inherits it. Costs the
 * connector's handshake round trips (and a connect more when the
 * certificate names another host: connect_failed), and with TLS possible
 * a thread start (login_on_thread).
 */
static bool try_connect(lr_db *db, const char *ip, const char *name, const char *label)
{
	const struct lr_db_params *p = db->p;
	unsigned timeout_ms = p->connect_timeout * 1000;
	struct login *l = NULL;
	bool ok = false, abandoned = false;
	int fd;

	/* A move to the Galera writer is a probe: a node that does not
	 * greet us within it (frozen, overloaded) is passed over. */
	if (db->probing && timeout_ms > GALERA_PROBE_MS)
		timeout_ms = GALERA_PROBE_MS;

	snprintf(db->server, sizeof(db->server), "%s", label);
	db->expired = db->aborting = false;
	l = login_create(name && ip && strcmp(name, ip) != 0 ? name : NULL, ip, p->user,
	                 p->password, p->database, p->port);
	if (!l || !(db->m = mysql_init(NULL))) {
		lr_dbio_set_error(db, CR_OUT_OF_MEMORY, "out of memory");
		goto out;
	}
	set_options(db, db->m, ip != NULL);
	if (!login(db, l, ip, timeout_ms, &abandoned)) {
		if (db->m)
			connect_failed(db, l, ip, timeout_ms);
		goto out;
	}
	snprintf(db->cur_ip, sizeof(db->cur_ip), "%s", ip ? ip : "");
	fd = lr_dbio_socket(db->m, false);
	if (fd >= 0)
		fcntl(fd, F_SETFD, fcntl(fd, F_GETFD) | FD_CLOEXEC);
	/* Connector/C 3.3 may fall back to plain text when the server offers
	 * no TLS; asking for a CA or certificate means we will not. */
	if (ip && tls_required(p) && !mysql_get_ssl_cipher(db->m)) {
		lr_dbio_set_error(
		    db, CR_SSL_CONNECTION_ERROR,
		    "%s: TLS is required (ssl_ca, ssl_cert or ssl_verify_server_cert) but "
		    "the server did not offer it",
		    db->server);
		lr_db_disconnect(db);
		goto out;
	}
	if (!db->any_server && !check_version(db)) {
		lr_db_disconnect(db);
		goto out;
	}
	/* A server may accept logins before it serves queries (a Galera node
	 * still joining answers 1047): find out now, while other hosts can
	 * still be tried. One round trip, unless the owner's first statement
	 * serves as the probe (see lr_db_set_probe). Not on an unsupported
	 * server: only the doctor stays connected to one, to report on it. */
	if (db->probe && lr_db_supported(db) && !ask(db, "SELECT 1")) {
		lr_db_disconnect(db);
		goto out;
	}
	db->err = 0;
	db->generation++;
	lr_dbio_watch_idle(db);
	ok = true;
out:
	if (!abandoned)
		login_destroy(l);
	return ok;
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
		lr_dbio_set_error(db, CR_OUT_OF_MEMORY, "out of memory");
		return false;
	}
	r->req.data = r;
	db->expired = false;
	if (uv_getaddrinfo(db->loop, &r->req, on_resolved, host, NULL, &hints) != 0) {
		lr_dbio_set_error(db, CR_UNKNOWN_HOST, "%s: cannot resolve host name", host);
		free(r);
		return false;
	}
	lr_dbio_start_deadline(db, db->p->connect_timeout * 1000);
	while (!r->done) {
		if (db->expired || (db->cancel && *db->cancel)) {
			gave_up = true;
			if (uv_cancel((uv_req_t *)&r->req) != 0)
				break; /* running already: leave it to free itself */
			/* cancelled: the callback still runs, with UV_EAI_CANCELED */
		}
		uv_run(db->loop, UV_RUN_ONCE);
	}
	lr_dbio_stop_deadline(db);
	if (!r->done) {
		r->abandoned = true;
	} else if (r->status == 0 && !gave_up) {
		*out = r->res;
		ok = true;
	} else if (r->status == 0) {
		uv_freeaddrinfo(r->res);
	}
	if (!ok && gave_up)
		lr_dbio_set_error(db, db->expired ? LR_DB_ETIMEDOUT : LR_DB_ECANCELED,
		                  "%s: name lookup %s", host,
		                  db->expired ? "timed out" : "interrupted");
	else if (!ok)
		lr_dbio_set_error(db, CR_UNKNOWN_HOST, "%s: cannot resolve host name: %s", host,
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

/* Passes configured host H over as writer (a Galera writer, a group's
 * primary) for GALERA_PASS_MS: the next connects try it last. Says why at
 * -vv. Local work. */
static void pass_over(lr_db *db, size_t h, const char *why)
{
	if (!db->passed && !(db->passed = calloc(db->p->nhosts, sizeof(*db->passed))))
		return;
	db->passed[h] = mono_ms() + GALERA_PASS_MS;
	lr_log_debug("%s: passed over as the writer for %u s: %s", db->p->hosts[h],
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
static unsigned budget(const lr_db *db)
{
	unsigned ms = db->op_timeout_ms ? db->op_timeout_ms : db->p->read_timeout * 1000;

	if (!db->op_timeout_ms && db->galera == 1 && writer_choice(db) && ms > GALERA_ANSWER_MS)
		ms = GALERA_ANSWER_MS;
	return ms;
}

/*
 * What a statement's failure means for the next connect, after the driver
 * dropped its partial answer (and a broken connection): a node that is
 * not ready (Galera, 1047), or a read-only server (a replica, or an old
 * primary the fail-over fenced: 1290, before anything was written), is
 * passed over by the next connect, as another host may serve; a writer
 * that let the statement run out of time is suspected (writer_silent).
 * For lr_db_query and lr_db_call alike. Local work.
 */
static void failed(lr_db *db)
{
	if (db->err == ER_OPTION_PREVENTS_STATEMENT && db->p->nhosts > 1)
		db->err = LR_DB_EREADONLY;
	if ((db->err == ER_UNKNOWN_COM_ERROR || db->err == LR_DB_EREADONLY) && db->p->nhosts > 1)
		db->first_host = (db->cur_host + 1) % db->p->nhosts;
	if (db->err == LR_DB_ETIMEDOUT)
		writer_silent(db);
	/* A Group Replication member that failed a commit (3100) or let a
	 * statement run out of time: an old primary that was expelled while
	 * frozen, or one cut off from the others, which still calls itself
	 * the primary and stays writable, but commits nothing. It goes last
	 * for the next connects, and its view is not trusted (pick). */
	if ((db->err == LR_DB_EGROUPHOOK || (db->err == LR_DB_ETIMEDOUT && db->group == 1)) &&
	    db->p->nhosts > 1 && !db->sibling) {
		pass_over(db, db->cur_host, "it commits nothing");
		db->first_host = (db->cur_host + 1) % db->p->nhosts;
	}
	if (db->m && lr_db_error_is_connection(db->err)) {
		lr_log_debug("dropping connection to %s: %s", db->server, db->errmsg);
		lr_db_disconnect(db);
	}
}

/* A statement of this module's own (a probe, a Galera node's view), with
 * the same bound and consequences as lr_db_query's. One round trip. */
static bool ask(lr_db *db, const char *sql)
{
	if (lr_dbio_query(db, sql, sql, budget(db)))
		return true;
	failed(db);
	return false;
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
	if (!ask(db, "SELECT VARIABLE_NAME, VARIABLE_VALUE FROM "
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

/* Connects again, starting at configured host W (WHAT names it for -vv);
 * with CHOSEN, W is the writer or primary a server named, passed over if
 * another host answered instead. False if no host answered. A connect. */
static bool move_to(lr_db *db, size_t w, const char *what, bool chosen)
{
	lr_log_debug("%s: %s is %s: moving there", db->server, what, db->p->hosts[w]);
	db->first_host = w;
	if (!lr_db_connect(db)) {
		lr_log_debug("could not move to %s: %s", what, db->errmsg);
		return false;
	}
	if (chosen && db->cur_host != w)
		pass_over(db, w, "no answer to the move");
	return true;
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
		if (!move_to(db, (size_t)w, "the Galera cluster's writer node", true))
			break;
	}
	db->following = false;
}

/* Whether this handle looks for a Group Replication group's primary:
 * MySQL, more than one host, not a doorbell sibling, and not told by a
 * server that the account may not read the members. Local work. */
static bool primary_choice(const lr_db *db)
{
	return db->p->nhosts > 1 && !db->sibling && db->group != 0 && lr_db_is_mysql(db);
}

/*
 * On a MySQL Group Replication group in single-primary mode, moves the
 * connection to the group's primary, when more than one host is
 * configured and the primary is another of them (tests/group/README.md).
 * Asks the member it reached, in one query of
 * performance_schema.replication_group_members (sql/grant.sql grants it),
 * its own state and the ONLINE primary (MEMBER_HOST, report_host, and
 * MEMBER_PORT, matched against the configured hosts as a Galera writer
 * is). A member that is not ONLINE itself is passed over for the next
 * host; a primary the list does not name, or one passed over (it let a
 * statement run out of time or failed a commit: a member's own view can
 * be stale), is not followed, and the routines decide (a secondary is
 * super_read_only: 1290, the next host). Only names of the list are ever
 * connected to. On a member whose group runs at EVENTUAL (the same query
 * says), the session asks for BEFORE_ON_PRIMARY_FAILOVER: a new primary
 * then holds lockrun's reads until it has applied what the group
 * certified, as it does at the group's default. Nothing here decides
 * correctness: a member without a majority commits nothing. Costs one
 * query per connection (none with one host, none on MariaDB, none once
 * the account was refused the table), a SET more at EVENTUAL, and a
 * connect and a query per move.
 */
static void follow_primary(lr_db *db)
{
	MYSQL_ROW row;
	char primary[300];
	bool member, online, eventual;
	long w;

	if (!primary_choice(db) || db->following)
		return;
	db->following = true;
	for (size_t tries = 0; tries <= db->p->nhosts && db->m; tries++) {
		if (!ask(db, "SELECT MEMBER_ID = @@server_uuid, MEMBER_STATE, MEMBER_ROLE, "
		             "MEMBER_HOST, MEMBER_PORT, (SELECT VARIABLE_VALUE FROM "
		             "performance_schema.global_variables WHERE VARIABLE_NAME = "
		             "'group_replication_consistency') "
		             "FROM performance_schema.replication_group_members")) {
			if (db->m && db->err == ER_TABLEACCESS_DENIED_ERROR)
				db->group = 0;
			if (db->m)
				db->err = 0;
			break;
		}
		member = online = eventual = false;
		primary[0] = '\0';
		while ((row = lr_db_fetch(db))) {
			bool on = row[1] && strcmp(row[1], "ONLINE") == 0;

			if (row[0] && strcmp(row[0], "1") == 0) {
				member = row[2] && *row[2];
				online = on;
				eventual = row[5] && strcmp(row[5], "EVENTUAL") == 0;
			}
			if (on && !primary[0] && row[2] && strcmp(row[2], "PRIMARY") == 0 &&
			    row[3] && row[4])
				snprintf(primary, sizeof(primary), "%s:%s", row[3], row[4]);
		}
		if (!member)
			break;
		db->group = 1;
		if (eventual && !ask(db, "SET SESSION group_replication_consistency = "
		                         "'BEFORE_ON_PRIMARY_FAILOVER'")) {
			if (db->m)
				db->err = 0;
			break;
		}
		if (!online) {
			pass_over(db, db->cur_host, "not ONLINE in its group");
			if (!move_to(db, (db->cur_host + 1) % db->p->nhosts, "the next member",
			             false))
				break;
			continue;
		}
		w = primary[0] ? pick(db, primary) : -1;
		if (w < 0 || (size_t)w == db->cur_host ||
		    !move_to(db, (size_t)w, "the group's primary", true))
			break;
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
 * On a Galera cluster, it then moves to the writer node (follow_writer), on
 * a MySQL group to the primary (follow_primary).
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
		lr_dbio_set_error(db, first_err, "any database host: %s", lr_sb_str(&why));
	lr_sb_finish(&why);
	if (ok) {
		lr_log_debug("connected to %s", db->server);
		follow_writer(db);
		follow_primary(db);
		ok = db->m != NULL;
	}
	return ok;
}

/* For a caller that reports on the server itself (lockrunctl doctor):
 * keep a connection to any server, however old or whatever it is, rather
 * than refuse it as unsupported. */
void lr_db_allow_any_server(lr_db *db)
{
	db->any_server = true;
}

/* Whether a new connection is checked with a SELECT 1 (default: yes). An
 * owner whose first statement after connecting can play that part (and
 * handles its errors) saves the round trip. */
void lr_db_set_probe(lr_db *db, bool on)
{
	db->probe = on;
}

/* Whether this owner's logins ask for multi-statements (default: no):
 * on MySQL, lr_db_call then sends a connection's first CALL in one query
 * with the SET that must run before it (dbio.c, quiet_sql). */
void lr_db_set_multi_statements(lr_db *db, bool on)
{
	db->multi = on;
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

/* A new unconnected handle; NULL when out of memory. Local work. */
lr_db *lr_db_create(uv_loop_t *loop, const struct lr_db_params *params)
{
	lr_db *db = calloc(1, sizeof(*db));

	if (!db)
		return NULL;
	if (!lr_dbio_init(db, loop)) {
		free(db);
		return NULL;
	}
	conn_init(db, params);
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
		conn_adopt(s, db);
	}
	return s;
}

/* Closing libuv handles completes on a later loop iteration; the owner runs
 * the loop once more before uv_loop_close() so the memory is returned. */
void lr_db_destroy(lr_db *db)
{
	if (!db)
		return;
	lr_db_disconnect(db);
	lr_dbio_finish(db);
	conn_finish(db);
	free(db);
}

/* Sends sql and keeps its answer (lr_dbio_query), within the bound budget()
 * sets; on failure, what it means for the next connect (failed()). One round trip plus the result.
 */
bool lr_db_query(lr_db *db, const char *sql)
{
	if (lr_dbio_query(db, sql, sql, budget(db)))
		return true;
	failed(db);
	return false;
}

/* lr_db_query of a printf-style text. */
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
		lr_dbio_set_error(db, CR_OUT_OF_MEMORY, "out of memory");
		return false;
	}
	va_start(ap, fmt);
	vsnprintf(sql, (size_t)n + 1, fmt, ap);
	va_end(ap);
	ok = lr_db_query(db, sql);
	free(sql);
	return ok;
}

/* A CALL with its parameters kept out of every other session's view
 * (lr_dbio_call), within the bound and with the failure's meaning applied
 * as for lr_db_query. One round trip plus the result. */
bool lr_db_call(lr_db *db, const char *sql, const char *const *params, unsigned nparams)
{
	if (lr_dbio_call(db, sql, params, nparams, budget(db)))
		return true;
	failed(db);
	return false;
}
