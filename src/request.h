/*
 * The state of one request while lock composes its life: its items, who
 * asks, its lease and queue places, its connections, its clocks and
 * pacing, its cancel flag and the text of its last error. The modules lock
 * composes (lockcall, lockwait, named) read and write it and share these
 * helpers; none of them calls up into lock.
 *
 * May use: item, db.
 */
#ifndef LR_REQUEST_H
#define LR_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <uv.h>

#include "db.h"
#include "item.h"

/* Who holds a grant: written to the lock log for operators. */
struct lr_owner {
	const char *host;
	const char *os_user;
	const char *command;
	pid_t pid;
};

/* How the child ended, for the lock log. */
enum lr_end { LR_END_EXITED, LR_END_SIGNALED, LR_END_LOST, LR_END_SPAWN_FAILED, LR_END_ABORTED };
struct lr_request {
	uv_loop_t *loop;
	lr_db *db;
	lr_db *bell;           /* the head waiter's second connection (lockrun_sleep) */
	unsigned bell_gen;     /* the main connection's generation it was opened beside */
	struct lr_item *items; /* sorted by name, no duplicates */
	size_t nitems;
	struct lr_owner owner;
	unsigned ttl_ms;
	char request_id[33]; /* this request's identity in the queue */
	char lease[33];      /* this grant attempt's secret id; new after a settled miss */
	uint64_t grant_id;
	bool unsettled;         /* an acquire CALL's outcome is unknown: settle first */
	bool lease_spent;       /* a grant handed to us expired unclaimed: new lease */
	uint64_t valid_from_ms; /* CLOCK_BOOTTIME ms before the granting CALL was sent */
	uint64_t once_per_ms;   /* --once-per: the key's window length; 0 without */
	uint64_t once_offset_ms;
	char once_window[32]; /* the window the grant (or skip) belongs to, server UTC */
	size_t ntable;        /* items kept in tables: all but named locks */
	size_t nnamed;
	bool queued;         /* our waiter rows exist */
	bool ever_queued;    /* waiter rows may exist: leave the queue when done */
	bool at_head;        /* no other request ahead of us on any resource */
	bool followed;       /* granted with others queued behind: prepare the release */
	bool ended_before;   /* the grant was swept or force-released before its release */
	unsigned ahead;      /* places ahead, counted up to 10 (Galera pacing) */
	char wait_for[64];   /* the wake-up lock of the waiter right ahead, checked */
	char stale_wait[64]; /* one that already fired: never blocked on again */
	char holders[512];   /* busy: who holds what, shown escaped (announce) */
	bool named_held;
	unsigned named_gen;  /* the connection the named locks live on */
	bool galera;         /* a Galera node: named locks are node-local, KILL too */
	bool db_trouble;     /* told the user the database is away */
	bool server_full;    /* the last connect failed only because the server is full */
	uint64_t wait_until; /* CLOCK_MONOTONIC ms: when the acquire's wait ends */
	uint64_t wait_start; /* CLOCK_MONOTONIC ms: when waiting began */
	uint64_t last_poll;  /* CLOCK_MONOTONIC ms: when the last poll was sent */
	uint64_t head_since; /* CLOCK_MONOTONIC ms: when we first were at the head */
	unsigned polls;      /* lockrun_poll calls while waiting */
	unsigned head_polls; /* of which at the head of the queue */
	unsigned sleeps;     /* lockrun_sleep calls (the doorbell) */
	/* The runs of this host queued behind us (the host queue), counted
	 * by the caller's function; NULL without a host queue. */
	unsigned (*host_behind)(void *arg);
	void *host_behind_arg;
	unsigned host_told;        /* the count the database has ... */
	uint64_t host_told_ticket; /* ... on the places of these tickets (their sum; 0: none) */
	bool host_told_off;        /* its routines cannot take one: stop telling */
	uint64_t host_retry_at;    /* CLOCK_MONOTONIC ms: after a failed telling */
	const volatile bool *cancel;
	uv_timer_t *timer;
	bool timer_fired;
	char status[256]; /* what we wait for, from the last poll */
	char err[1024];
};

/* Fills rq for a new request by owner on db, with new random request and
 * lease ids and the nap timer on loop. False if out of memory. */
bool lr_request_init(struct lr_request *rq, uv_loop_t *loop, lr_db *db,
                     const struct lr_owner *owner, unsigned ttl_ms);
/* Frees the items and closes the timer (freed by the loop). */
void lr_request_finish(struct lr_request *rq);
/* Adds an item, kept sorted by name; the same name twice is an error. */
bool lr_request_add(struct lr_request *rq, const struct lr_item *it, char *err, size_t errlen);
void lr_request_new_lease(struct lr_request *rq);
struct lr_item *lr_request_find(struct lr_request *rq, const char *name);
void lr_request_set_db_error(struct lr_request *rq, lr_db *db);

bool lr_request_canceled(const struct lr_request *rq);
void lr_request_nap(struct lr_request *rq, unsigned ms);
uint64_t lr_request_now_ms(void);
unsigned lr_request_jitter(unsigned ms);

#endif
