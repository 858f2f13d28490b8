/* The SQL of administering resources: capacities and their audit,
 * pausing and resuming, listing, and deleting a resource (keeping its
 * fence as a floor); and starting a fail-over epoch by hand. Uses db, txn
 * and report.
 *
 * May use: db, lease, report, strbuf, txn.
 */
#ifndef LR_ADMIN_H
#define LR_ADMIN_H

#include <stdbool.h>
#include <stdio.h>

#include "db.h"

enum lr_admin_result {
	LR_ADMIN_OK,
	LR_ADMIN_INVALID, /* refused: the wrong kind of resource */
	LR_ADMIN_MISSING, /* no such resource */
	LR_ADMIN_BUSY,    /* refused: held or waited on */
	LR_ADMIN_ERROR,   /* the database failed us */
};

enum lr_admin_result lr_admin_set_capacity(lr_db *db, const char *name, unsigned capacity,
                                           const char *os_user, const char *host, long *old_cap,
                                           char *err, size_t errlen);
enum lr_admin_format { LR_ADMIN_TABLE, LR_ADMIN_JSON, LR_ADMIN_NAMES };
bool lr_admin_list(lr_db *db, enum lr_admin_format fmt, const char *kind, bool view, FILE *out,
                   char *err, size_t errlen);
enum lr_admin_result lr_admin_pause(lr_db *db, const char *name, bool pause, const char *reason,
                                    const char *os_user, const char *host, bool *changed, char *err,
                                    size_t errlen);
enum lr_admin_result lr_admin_delete(lr_db *db, const char *name, const char *os_user,
                                     const char *host, unsigned long long *fence, char *err,
                                     size_t errlen);

/* A fail-over epoch started by lr_admin_new_epoch: its number, the end of
 * its quarantine and its tokens' floor; started is false when this
 * server's clock has not passed the previous epoch's quarantine yet
 * (then until is that end). */
struct lr_admin_epoch {
	bool started;
	char epoch[16], until[32], floor[24];
};
enum lr_admin_result lr_admin_new_epoch(lr_db *db, struct lr_admin_epoch *e, char *err,
                                        size_t errlen);

#endif
