/* lockrunctl history: what ran under a resource, from the lock log.
 *
 * May use: db, duration, lease, report, strbuf.
 */
#ifndef LR_HISTORY_H
#define LR_HISTORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "db.h"
#include "lease.h"

/* SQL over lr_grants g LEFT JOIN LR_HISTORY_HX hx (each grant's latest
 * hold expiry). A running grant's lease ends when its last hold expires
 * (or, holding nothing, a ttl after its last renewal); past that by the
 * sweep grace it is over, as for every acquirer and for `status`, though
 * no sweep wrote its end yet (LR_HISTORY_LAPSED): shown as expired then,
 * ending at its lease's end (LR_HISTORY_ENDED), as the sweep will record
 * it. */
#define LR_HISTORY_HX "(SELECT grant_id, MAX(expires_at) AS until FROM lr_holds GROUP BY grant_id)"
#define LR_HISTORY_LEASE_END                                                                       \
	"COALESCE(hx.until, COALESCE(g.renewed_at, g.acquired_at) + INTERVAL g.ttl_ms * 1000 "     \
	"MICROSECOND)"
#define LR_HISTORY_LAPSED                                                                          \
	"(g.ended_at IS NULL AND " LR_HISTORY_LEASE_END " <= NOW(6) - " LR_SQL_GRACE ")"
#define LR_HISTORY_ENDED                                                                           \
	"COALESCE(g.ended_at, IF(" LR_HISTORY_LAPSED ", " LR_HISTORY_LEASE_END ", NULL))"

struct lr_history_query {
	const char *name;         /* a resource (a key by its name or "id:KEY"), or NULL: all */
	unsigned long long since; /* seconds back; 0: no limit */
	unsigned long limit;      /* runs at most */
};

/* view: through the procedure lockrun_history (lockrun's own account, which
 * may not read the tables): the same, without commands. */
bool lr_history_print(lr_db *db, const struct lr_history_query *q, bool json, bool view, FILE *out,
                      size_t *shown, char *err, size_t errlen);

#endif
