/*
 * Taking, keeping and giving back locks: the life of one request (see
 * request.h), whose items are granted together or not at all. The
 * protocol itself runs in the database (the lockrun_* procedures, sql/);
 * this module composes the parts that talk to it: lockcall sends the CALLs
 * and reads their answers, lockwait waits for a turn, named takes --named
 * locks. Lease times are the server's; the client's clock only paces
 * waiting. No process code here.
 *
 * May use: lockcall, lockwait, named, request, item, db, btimer, duration,
 * log.
 */
#ifndef LR_LOCK_H
#define LR_LOCK_H

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "db.h"
#include "request.h"

enum lr_acquire {
	LR_ACQ_GRANTED,
	LR_ACQ_BUSY,     /* not available (and waiting ran out or was not wanted) */
	LR_ACQ_KEY_BUSY, /* the idempotency key is held by a live grant */
	LR_ACQ_DONE,     /* --once-per: the key's window already has a successful run */
	LR_ACQ_INVALID,  /* cannot ever be granted: unknown semaphore, count > capacity */
	LR_ACQ_FULL,     /* the server stayed full (too many connections) until the wait ran out */
	LR_ACQ_CANCELED, /* the cancel flag was raised while waiting */
	LR_ACQ_ERROR,    /* the database failed us */
};

bool lr_lock_init(struct lr_request *lk, uv_loop_t *loop, lr_db *db, const struct lr_owner *owner,
                  unsigned ttl_ms);
void lr_lock_finish(struct lr_request *lk);
/* After a grant, once the command runs: drops what only the wait needed
 * (the doorbell connection). lr_lock_finish does it too. */
void lr_lock_end_wait(struct lr_request *lk);
void lr_lock_set_cancel(struct lr_request *lk, const volatile bool *flag);
/* How to count the runs of this host waiting behind this one for the
 * same locks (the host queue), so the database's queue counts them. */
void lr_lock_set_host_queue(struct lr_request *lk, unsigned (*behind)(void *arg), void *arg);
void lr_lock_set_once(struct lr_request *lk, uint64_t period_ms, uint64_t offset_ms);

bool lr_lock_connect(struct lr_request *lk, double *wait_s, enum lr_acquire *why);
enum lr_acquire lr_lock_acquire(struct lr_request *lk, double wait_s);
bool lr_lock_renew(struct lr_request *lk, bool *lost);

void lr_lock_prepare_release(struct lr_request *lk);
bool lr_lock_release(struct lr_request *lk, enum lr_end how, int status);

#endif
