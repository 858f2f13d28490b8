/*
 * One grant, by its public number (LOCKRUN_LEASE, lr_grants.id), as an
 * operator sees it: is it live (and with which tokens), and releasing it
 * by force when its holder is stuck or gone.
 *
 * May use: db, duration, report, strbuf, txn.
 */
#ifndef LR_GRANT_H
#define LR_GRANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "db.h"

/* An expected token: NAME=TOKEN on the command line. */
struct lr_grant_token {
	const char *name;
	uint64_t token;
};

enum lr_grant_result {
	LR_GRANT_OK,      /* live (check) / released (release) */
	LR_GRANT_NOT,     /* not live / not released: nothing to do */
	LR_GRANT_DBERROR, /* the database failed us */
};

enum lr_grant_result lr_grant_check(lr_db *db, uint64_t id, bool view,
                                    const struct lr_grant_token *want, size_t nwant, bool json,
                                    bool quiet, FILE *out, char *err, size_t errlen);

/* Who forces a release, for the lock log. */
struct lr_grant_releaser {
	const char *os_user, *host, *reason; /* escaped for the record (text.h) */
};

enum lr_grant_result lr_grant_release(lr_db *db, uint64_t id, const struct lr_grant_releaser *by,
                                      bool json, bool quiet, FILE *out, char *err, size_t errlen);

#endif
