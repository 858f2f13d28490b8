/*
 * Waiting for a turn in the queue, between acquire attempts. On one server
 * the head of the queue sleeps in lockrun_sleep on a second connection,
 * which a release rings (KILL QUERY); the others block in GET_LOCK on the
 * wake-up lock of the waiter right ahead. On Galera both are local to a
 * node, and work between the clients of the writer node (writer.h); the
 * head sleeps less long there, and a waiter whose wake-up lock is on
 * another node polls, the next in line fast, the rest slowly. Every waiter
 * keeps its queue places alive by calling lockrun_poll or lockrun_sleep at
 * least every 3 s.
 *
 * May use: lockcall, request, item, db, log, strbuf.
 */
#ifndef LR_LOCKWAIT_H
#define LR_LOCKWAIT_H

#include <stdint.h>

#include "request.h"

enum lr_wait {
	LR_WAIT_TRY,      /* attempt now: it could succeed, or something changed */
	LR_WAIT_TIMEOUT,  /* the deadline came */
	LR_WAIT_CANCELED, /* the cancel flag was raised */
};

enum lr_wait lr_wait_turn(struct lr_request *lk, uint64_t deadline);
void lr_wait_announce(struct lr_request *lk);
void lr_wait_end(struct lr_request *lk);
void lr_wait_close(struct lr_request *lk);

#endif
