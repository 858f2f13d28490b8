/*
 * Taking, keeping and giving back locks. A request is a set of items
 * (semaphore permits, mutexes, read or write locks, an idempotency key,
 * server named locks) granted together or not at all. The protocol itself
 * runs in the database (the lockrun_* procedures, sql/002): lockcall sends
 * the CALLs and reads their answers, lockwait waits for a turn, named
 * takes --named locks; this module holds the items and composes the
 * others into acquire, renew and release. Lease times are the server's;
 * the client's clock only paces waiting. No process code here.
 */
#ifndef LR_LOCK_H
#define LR_LOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <uv.h>

#include "db.h"

#define LR_NAME_MAX 64

/*
 * The sweep's grace. A hold or a waiter row is swept (and its permits
 * granted to others) only once it expired more than this long ago by the
 * server's clock; until then it counts as live everywhere (acquire, poll,
 * lockrunctl status), and its owner may still renew it. A forward step of
 * the server's clock (NTP, a VM resumed, a manual `date`) of up to this
 * much therefore ends no lease early: a holder stops its command ttl after
 * its last renewal by its own clock, and nobody else is granted before
 * ttl + grace by the server's. The cost: a crashed holder's lock is free
 * after ttl + grace, not ttl. 5 s is well above what time daemons step by
 * after a short outage and small next to the ttl users choose.
 */
#define LR_SWEEP_GRACE_MS 5000
#define LR_STR_(x)        #x
#define LR_STR(x)         LR_STR_(x)
#define LR_SQL_GRACE      "INTERVAL " LR_STR(LR_SWEEP_GRACE_MS) "000 MICROSECOND"

enum lr_kind {
	LR_KIND_SEMAPHORE,
	LR_KIND_MUTEX,
	LR_KIND_READ,
	LR_KIND_WRITE,
	LR_KIND_KEY,   /* an idempotency key: never waited for */
	LR_KIND_NAMED, /* a server named lock (GET_LOCK); no table rows */
};

struct lr_item {
	enum lr_kind kind;
	char name[LR_NAME_MAX + 4]; /* the resource row's name: keys get an "id:" prefix */
	unsigned count;             /* permits asked for (semaphores); 1 otherwise */
	uint64_t fence;             /* the fencing token, once granted */
	uint64_t ticket;            /* place in the resource's queue, once queued */
};

/* Who holds a grant: written to the lock log for operators. */
struct lr_owner {
	const char *host;
	const char *os_user;
	const char *command;
	pid_t pid;
};

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

struct lr_lock {
	uv_loop_t *loop;
	lr_db *db;
	lr_db *bell;           /* the head waiter's second connection (lockrun_sleep) */
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
	unsigned ahead;      /* places ahead, counted up to 10 (Galera pacing) */
	char wait_for[64];   /* the wake-up lock of the waiter right ahead, checked */
	char stale_wait[64]; /* one that already fired: never blocked on again */
	char holders[512];   /* busy: who holds what, shown escaped (announce) */
	bool named_held;
	unsigned named_gen;  /* the connection the named locks live on */
	bool galera;         /* a Galera node: named locks are node-local, KILL too */
	bool db_trouble;     /* told the user the database is away */
	bool server_full;    /* the last connect failed only because the server is full */
	uint64_t wait_until; /* CLOCK_MONOTONIC ms: when lr_lock_acquire's wait ends */
	uint64_t wait_start; /* CLOCK_MONOTONIC ms: when waiting began */
	uint64_t last_poll;  /* CLOCK_MONOTONIC ms: when the last poll was sent */
	uint64_t head_since; /* CLOCK_MONOTONIC ms: when we first were at the head */
	unsigned polls;      /* lockrun_poll calls while waiting */
	unsigned head_polls; /* of which at the head of the queue */
	unsigned sleeps;     /* lockrun_sleep calls (the doorbell) */
	const volatile bool *cancel;
	uv_timer_t *timer;
	bool timer_fired;
	char status[256]; /* what we wait for, from the last poll */
	char err[1024];
};

bool lr_name_valid(const char *name);
bool lr_item_parse(struct lr_item *it, enum lr_kind kind, const char *arg, char *err,
                   size_t errlen);

bool lr_lock_init(struct lr_lock *lk, uv_loop_t *loop, lr_db *db, const struct lr_owner *owner,
                  unsigned ttl_ms);
void lr_lock_finish(struct lr_lock *lk);
/* After a grant, once the command runs: drops what only the wait needed
 * (the doorbell connection). lr_lock_finish does it too. */
void lr_lock_end_wait(struct lr_lock *lk);
bool lr_lock_add(struct lr_lock *lk, const struct lr_item *it, char *err, size_t errlen);
void lr_lock_set_cancel(struct lr_lock *lk, const volatile bool *flag);
void lr_lock_set_once(struct lr_lock *lk, uint64_t period_ms, uint64_t offset_ms);

bool lr_lock_connect(struct lr_lock *lk, double *wait_s, enum lr_acquire *why);
enum lr_acquire lr_lock_acquire(struct lr_lock *lk, double wait_s);
bool lr_lock_renew(struct lr_lock *lk, bool *lost);

/* How the child ended, for the lock log. */
enum lr_end { LR_END_EXITED, LR_END_SIGNALED, LR_END_LOST, LR_END_SPAWN_FAILED, LR_END_ABORTED };
void lr_lock_prepare_release(struct lr_lock *lk);
bool lr_lock_release(struct lr_lock *lk, enum lr_end how, int status);

const char *lr_kind_name(enum lr_kind k);
const char *lr_lock_display_name(const struct lr_item *it);

/* For the lock modules (lockcall, lockwait, named) only. */
bool lr_lock_canceled(const struct lr_lock *lk);
void lr_lock_nap(struct lr_lock *lk, unsigned ms);
unsigned lr_lock_jitter(unsigned ms);
uint64_t lr_lock_now_ms(void);
bool lr_lock_ensure_connected(struct lr_lock *lk);
struct lr_item *lr_lock_find(struct lr_lock *lk, const char *name);
void lr_lock_take_db_error(struct lr_lock *lk, lr_db *db);

#endif
