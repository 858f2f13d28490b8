/*
 * The configuration file (INI, read with inih): [database] says where the
 * locks live, [lock] sets site defaults for lockrun's own options.
 * Lookup: the -c file, else $LOCKRUN_CONFIG, else /etc/lockrun.conf; with
 * none at all, the local server's socket as the current OS user.
 *
 * A server_public_key file is checked (pubkey), to refuse one that holds
 * no RSA public key before the connector would silently ask the server for
 * its own.
 *
 * May use: db, duration, log, lr_build (generated), pubkey.
 */
#ifndef LR_CONFIG_H
#define LR_CONFIG_H

#include <stdbool.h>

#include "db.h"

enum lr_on_lost { LR_ON_LOST_KILL, LR_ON_LOST_IGNORE };

/* The ranges of the DURATION settings, in seconds, on the command line
 * and in [lock] alike. */
#define LR_TTL_MIN_S        1.0
#define LR_TTL_MAX_S        86400.0    /* 1d */
#define LR_WAIT_MAX_S       31536000.0 /* 365d */
#define LR_KILL_AFTER_MAX_S 3600.0     /* 1h */

/* Policy defaults a site may set once in [lock]; command-line flags win. */
struct lr_lock_defaults {
	double ttl;        /* seconds */
	double wait;       /* seconds; < 0: wait forever */
	double kill_after; /* seconds between SIGTERM and SIGKILL */
	int conflict_exit; /* exit status when not acquired */
	int done_exit;     /* exit status when --once-per finds the window done */
	enum lr_on_lost on_lost;
	bool local_queue;      /* waiters queue on this host first (prequeue.h) */
	char *local_queue_dir; /* NULL: the default directory */
};

struct lr_config {
	struct lr_db_params db;
	struct lr_lock_defaults lock;
	char *path;          /* the file read, or NULL when none was found */
	char *password_from; /* where the password came from, for hints; NULL: none */
	char err[512];
};

void lr_config_init(struct lr_config *cfg);
void lr_config_finish(struct lr_config *cfg);
bool lr_config_load(struct lr_config *cfg, const char *explicit_path);
bool lr_config_load_file(struct lr_config *cfg, const char *path);

#endif
