/*
 * The CALLs of lockrun's SQL API (the lockrun_* procedures in sql/, API
 * version 3) and the reading of their answers into a struct lr_request. Every lock
 * operation is one CALL, one round trip; this is all the SQL text the lock
 * modules send besides named locks and the GET_LOCK wake-up chain.
 *
 * May use: request, item, db, strbuf, text.
 */
#ifndef LR_LOCKCALL_H
#define LR_LOCKCALL_H

#include <stdbool.h>

#include "db.h"
#include "request.h"

/* How a CALL went, and so what the caller does next. */
enum lr_call {
	LR_CALL_OK,
	LR_CALL_RETRY,   /* rolled back, or never ran: CALL again */
	LR_CALL_UNKNOWN, /* an acquire whose answer was lost: settle it */
	LR_CALL_SCHEMA,  /* no procedures, or older ones: run lockrunctl init */
	LR_CALL_INVALID, /* the database refused the request as asked (a ttl above its max-ttl) */
	LR_CALL_FAIL,    /* anything else; lk->err says what */
};

/* What lockrun_acquire or lockrun_settle decided. */
enum lr_outcome {
	LR_OUT_GRANTED,
	LR_OUT_QUEUED,
	LR_OUT_BUSY,
	LR_OUT_KEY_BUSY,
	LR_OUT_INVALID,
	LR_OUT_DONE, /* --once-per: the window has a successful run; nothing taken */
	LR_OUT_NONE, /* settle: neither granted nor queued */
};

enum lr_call lr_call_acquire(struct lr_request *lk, bool enqueue, enum lr_outcome *out);
enum lr_call lr_call_settle(struct lr_request *lk, enum lr_outcome *out);
enum lr_call lr_call_poll(struct lr_request *lk, bool *could);
enum lr_call lr_call_sleep(struct lr_request *lk, lr_db *db, unsigned ms, bool *woken);
enum lr_call lr_call_dequeue(struct lr_request *lk);
enum lr_call lr_call_host_queue(struct lr_request *lk, unsigned behind);
enum lr_call lr_call_renew(struct lr_request *lk, bool *lost);
enum lr_call lr_call_release(struct lr_request *lk, enum lr_end how, int status);
enum lr_call lr_call_prepare_release(struct lr_request *lk);

#endif
