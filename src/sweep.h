/*
 * The lock log's upkeep, run by `lockrunctl sweep` from a timer: repairs
 * `used` counts that disagree with the hold rows, ends the grants whose
 * leases expired (as an acquirer of their resource would), and deletes
 * what the retention no longer keeps. Nothing depends on it having run;
 * it only keeps the log true and small.
 *
 * May use: db, lease, log, strbuf, txn.
 */
#ifndef LR_SWEEP_H
#define LR_SWEEP_H

#include <stdbool.h>
#include <stddef.h>

#include "db.h"

#define LR_SWEEP_BATCH        1000           /* rows per transaction, at most */
#define LR_SWEEP_AUDIT_DAYS   30             /* capacity-audit rows are kept this long */
#define LR_SWEEP_DEFAULT_KEEP (7ULL * 86400) /* lock-log retention, seconds */
#define LR_SWEEP_SHOWN        10             /* repaired resources named in the log */

struct lr_sweep_counts {
	unsigned long long recounted;      /* resources whose `used` was set to their holds' */
	unsigned long long expired;        /* grants ended as expired (their holds lapsed) */
	unsigned long long holds;          /* expired hold rows deleted */
	unsigned long long waiters;        /* dead queue places deleted */
	unsigned long long orphans;        /* open grants without any hold, ended */
	unsigned long long grants_deleted; /* finished log entries past the retention */
	unsigned long long items_deleted;  /* their lr_grant_items rows */
	unsigned long long audit_deleted;  /* capacity-audit rows past 30 days */
	unsigned long long once_deleted;   /* --once-per completions past their use */
	unsigned long long transactions;
};

bool lr_sweep_run(lr_db *db, unsigned long long retention_s, struct lr_sweep_counts *c, char *err,
                  size_t errlen);

#endif
