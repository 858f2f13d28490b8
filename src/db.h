/*
 * MariaDB connections driven by a libuv loop through Connector/C's
 * non-blocking API. Each call looks synchronous to its caller but runs the
 * loop while it waits, so signal, timer and child-exit callbacks keep being
 * served; callbacks must therefore never call into this module themselves.
 * Every operation has a deadline; a hung server costs at most that long.
 * This module knows nothing about locks.
 *
 * Two files make it, calling one way: dbconn.c (where to connect and how
 * securely: hosts, name lookups, TLS, the Galera writer; the handles, and
 * the statements of the rest of lockrun with the bound it sets and its
 * reading of their failures) uses dbio.c (the driver: what to send and
 * how cheaply; the functions below on results, errors and session
 * settings), never the other way. Their first comments say what each may
 * use; this header itself uses nothing of lockrun's.
 *
 * May use: nothing of lockrun's.
 */
#ifndef LR_DB_H
#define LR_DB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <mysql.h>
#include <uv.h>

struct lr_sb;

/* Where and how to connect; filled by the config module, owned by the caller. */
struct lr_db_params {
	char **hosts; /* tried in order; none, or "localhost", means the unix socket */
	size_t nhosts;
	unsigned port; /* 0: the server default, 3306 */
	char *socket;  /* NULL: the connector's default socket */
	char *user;
	char *password;
	char *database;
	char *ssl_ca;
	char *ssl_capath; /* a directory of CA certificates (c_rehash names) */
	char *ssl_cert;
	char *ssl_key;
	char *ssl_fingerprint; /* the server certificate's SHA-1 (or, 3.4+, SHA-256) */
	char *tls_versions;    /* the connector's list, from the lowest version allowed */
	bool ssl_verify_server_cert;
	char *server_public_key;         /* PEM file of the server's RSA key */
	bool allow_public_key_retrieval; /* may take the RSA key from the server */
	bool galera_writer;       /* on Galera, move to the cluster's writer node (writer.h) */
	unsigned connect_timeout; /* seconds, all > 0 */
	unsigned read_timeout;
	unsigned write_timeout;
	char *option_file; /* my.cnf-style file and group, read by the connector */
	char *option_group;
};

/* Our own error codes, outside the server's and the connector's ranges. */
enum {
	LR_DB_ETIMEDOUT = 9001, /* the operation's deadline passed */
	LR_DB_ECANCELED = 9002, /* the cancel flag was raised */
	LR_DB_ETOOOLD = 9003,   /* not MariaDB 10.6 or newer */
	LR_DB_ENOTCONN = 9004,  /* no connection */
	LR_DB_EREADONLY = 9005, /* a read-only server (1290) while other hosts are listed */
};

/* MySQL Group Replication's "Error on observer while running replication
 * hook 'before_commit'" (ER_RUN_HOOK_ERROR): a member that was expelled
 * while it was frozen or cut off fails its commits with it (nothing
 * committed). Not in the connector's header. */
#define LR_DB_EGROUPHOOK 3100

typedef struct lr_db lr_db;

/* How many distinct statements lr_db_call keeps prepared per connection,
 * and the most parameters one may have. */
#define LR_DB_STMTS  12
#define LR_DB_PARAMS 16

lr_db *lr_db_create(uv_loop_t *loop, const struct lr_db_params *params);
lr_db *lr_db_create_sibling(const lr_db *db);
void lr_db_destroy(lr_db *db);

bool lr_db_connect(lr_db *db);
bool lr_db_follow(lr_db *db);
void lr_db_unanswered(lr_db *db);
void lr_db_disconnect(lr_db *db);
bool lr_db_connected(const lr_db *db);
unsigned lr_db_generation(const lr_db *db);

/* A CALL's whole reply is read; its first result set is the answer
 * (procedures return their counts in rows, not as affected rows). */
bool lr_db_query(lr_db *db, const char *sql);
bool lr_db_queryf(lr_db *db, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
bool lr_db_call(lr_db *db, const char *sql, const char *const *params, unsigned nparams);
void lr_db_allow_any_server(lr_db *db);
const char *lr_db_server_info(const lr_db *db);
bool lr_db_is_mysql(const lr_db *db);
bool lr_db_supported(const lr_db *db);
MYSQL_ROW lr_db_fetch(lr_db *db);
uint64_t lr_db_num_rows(const lr_db *db);
uint64_t lr_db_affected_rows(const lr_db *db);
int lr_db_column(const lr_db *db, const char *name);

void lr_db_sb_quote(lr_db *db, struct lr_sb *sb, const char *s);
void lr_db_set_cancel(lr_db *db, const volatile bool *flag);
void lr_db_set_idle_watch(lr_db *db, void (*fn)(void *arg), void *arg);
void lr_db_set_op_timeout(lr_db *db, unsigned ms);
void lr_db_set_probe(lr_db *db, bool on);
void lr_db_set_multi_statements(lr_db *db, bool on);

/* How the current connection is made, for lockrunctl doctor. */
struct lr_db_link {
	const char *host;        /* the configured host; NULL: the unix socket */
	const char *address;     /* the address connected to ("" for the socket) */
	bool loopback;           /* the address is 127.0.0.0/8 or ::1 */
	const char *tls_version; /* NULL: not encrypted */
	const char *cipher;
	bool verified; /* the certificate's chain and name were checked, against host */
	bool pinned;   /* the certificate's fingerprint was checked */
};
bool lr_db_link(const lr_db *db, struct lr_db_link *l);

/* A Galera cluster as this configuration sees it (lr_db_galera_writer). */
struct lr_db_writer {
	char members[1024]; /* wsrep_incoming_addresses: "address:port,..." */
	char first[256];    /* its first member's address: the writer while it is Synced */
	long writer;        /* the configured host that is the first member; -1: none */
	long pick;          /* the configured host lockrun writes on; -1: none is a member */
};
bool lr_db_galera_writer(lr_db *db, struct lr_db_writer *w);

unsigned lr_db_errno(const lr_db *db);
const char *lr_db_error(const lr_db *db);
const char *lr_db_server(const lr_db *db);
bool lr_db_error_is_conflict(unsigned err);
bool lr_db_error_is_retryable(unsigned err);
bool lr_db_error_is_connection(unsigned err);
bool lr_db_error_is_busy(unsigned err);

#endif
