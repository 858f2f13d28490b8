/*
 * The host's queue in front of the database's. Runs on one host that ask
 * for the same locks wait here first, on an OFD lock of one file per set
 * of locks asked for, holding no database connection; only the file's
 * holder, the head of the host's queue, connects and waits in the
 * database's queue, and it leaves the host's queue once it is granted
 * (or gives up). The database alone decides who holds a lock: this
 * module only bounds how many waiters of one host stand in the database's
 * queue at once. No SQL and no lock semantics here.
 *
 * May use: db, duration, item, log, strbuf.
 */
#ifndef LR_PREQUEUE_H
#define LR_PREQUEUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <uv.h>

#include "db.h"
#include "item.h"

typedef struct lr_prequeue lr_prequeue;

enum lr_pq_wait {
	LR_PQ_HEAD,     /* at the head of the host's queue: go to the database */
	LR_PQ_TIMEOUT,  /* the deadline came first */
	LR_PQ_CANCELED, /* the cancel flag was raised */
	LR_PQ_FAILED,   /* the file lock failed: wait at the database instead */
};

char *lr_prequeue_key(const struct lr_item *items, size_t nitems, const struct lr_db_params *db);
lr_prequeue *lr_prequeue_open(uv_loop_t *loop, const char *dir, const char *key, char *err,
                              size_t errlen);
enum lr_pq_wait lr_prequeue_wait(lr_prequeue *pq, double *wait_s, const volatile bool *cancel);
uint64_t lr_prequeue_waited_ms(const lr_prequeue *pq);
unsigned lr_prequeue_behind(lr_prequeue *pq);
unsigned lr_prequeue_count_blocked(FILE *f, const char *id);
const char *lr_prequeue_error(const lr_prequeue *pq);
void lr_prequeue_destroy(lr_prequeue *pq);

#endif
