/* lockrunctl history: what ran under a resource, from the lock log. */
#ifndef LR_HISTORY_H
#define LR_HISTORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "db.h"

struct lr_history_query {
	const char *name;         /* a resource (a key by its name or "id:KEY"), or NULL: all */
	unsigned long long since; /* seconds back; 0: no limit */
	unsigned long limit;      /* runs at most */
};

bool lr_history_print(lr_db *db, const struct lr_history_query *q, bool json, FILE *out,
                      size_t *shown, char *err, size_t errlen);

#endif
