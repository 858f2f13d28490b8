/*
 * The per-database settings of table lr_settings (migration 7), read and
 * written by lockrunctl: max_ttl_ms, the longest lease a grant or renewal
 * may ask for, which is also how long a fail-over holds grants back. Uses
 * db and txn; knows nothing of the lock protocol beyond that table and
 * the lock log's live grants.
 *
 * May use: db, lease, txn.
 */
#ifndef LR_SETTINGS_H
#define LR_SETTINGS_H

#include <stddef.h>
#include <stdint.h>

#include "db.h"

enum lr_settings_result {
	LR_SETTINGS_OK,
	LR_SETTINGS_REFUSED, /* a live grant has a longer lease */
	LR_SETTINGS_ERROR,   /* the database failed us, or no such table */
};

enum lr_settings_result lr_settings_max_ttl(lr_db *db, uint64_t *ms, char *err, size_t errlen);
enum lr_settings_result lr_settings_set_max_ttl(lr_db *db, uint64_t ms, uint64_t *old_ms,
                                                char *grant_until, size_t gulen, char *err,
                                                size_t errlen);

#endif
