#include "lock.h"

#include <stdio.h>
#include <string.h>

#include "btimer.h"
#include "duration.h"
#include "lockcall.h"
#include "lockwait.h"
#include "log.h"
#include "named.h"

/* Tries of one attempt, or of a settlement, through deadlocks, lock wait
 * timeouts and lost connections (jittered backoff from 5 ms to 1 s). */
#define TX_RETRIES 12
/* Tries to leave the queue after a lost conflict (dequeue). */
#define DEQUEUE_TRIES 3
/* Past the end of the wait, tries go on only this long: one that failed
 * at once (a deadlock) is still tried again, but a database that keeps
 * failing (a 2 s lock wait per try, a connect timeout) holds the run
 * about this much past its --wait, not a dozen tries longer. */
#define RETRY_GRACE_MS 2000
/* Attempts that follow a wait ending within SPIN_MS and find no room: a
 * few are a race lost, more a spin, paced from 5 ms up to 500 ms. */
#define SPIN_MS    5
#define SPINS_FREE 3

/* Pace of connection attempts to a server that is full: each try costs it
 * a login, so back off to one every 2 s (jittered) rather than add to the
 * crowd. */
#define FULL_BACKOFF_MIN_MS 50
#define FULL_BACKOFF_MAX_MS 2000

/* Called once per run, before anything is added. Costs two getrandom
 * calls and one allocation; nothing is sent. */
bool lr_lock_init(struct lr_request *lk, uv_loop_t *loop, lr_db *db, const struct lr_owner *owner,
                  unsigned ttl_ms)
{
	/* The first CALL is the probe of a new connection (and the schema
	 * check): no SELECT 1 before it. */
	lr_db_set_probe(db, false);
	/* On MySQL the first CALL goes with the session's SET, as one query. */
	lr_db_set_multi_statements(db, true);
	return lr_request_init(lk, loop, db, owner, ttl_ms);
}

/* Leaves any queue, closes the doorbell connection and frees the request.
 * Costs a round trip only if waiter rows may still exist. */
void lr_lock_finish(struct lr_request *lk)
{
	lr_wait_end(lk);
	lr_wait_close(lk);
	lr_request_finish(lk);
}

void lr_lock_end_wait(struct lr_request *lk)
{
	lr_wait_close(lk);
}

/* The flag also interrupts a statement in flight (a GET_LOCK or a
 * doorbell sleep), on either connection. */
void lr_lock_set_cancel(struct lr_request *lk, const volatile bool *flag)
{
	lk->cancel = flag;
	lr_db_set_cancel(lk->db, flag);
	if (lk->bell)
		lr_db_set_cancel(lk->bell, flag);
}

void lr_lock_set_host_queue(struct lr_request *lk, unsigned (*behind)(void *arg), void *arg)
{
	lk->host_behind = behind;
	lk->host_behind_arg = arg;
}

/*
 * Makes the request's key (--id) a once-per key: granted at most once per
 * window of period_ms (starting offset_ms after the epoch, by the
 * server's clock) unless a run failed, and waited for like a mutex while a
 * run holds it, as its outcome decides whether this run is needed at all.
 */
void lr_lock_set_once(struct lr_request *lk, uint64_t period_ms, uint64_t offset_ms)
{
	lk->once_per_ms = period_ms;
	lk->once_offset_ms = offset_ms;
}

/* The connect error in lk->err; a full server is named as such, and
 * remembered, as it makes a wait that runs out "not acquired". */
static void take_connect_error(struct lr_request *lk)
{
	lk->server_full = lr_db_error_is_busy(lr_db_errno(lk->db));
	snprintf(lk->err, sizeof(lk->err), "%s%s",
	         lk->server_full ? "the database server is full: " : "", lr_db_error(lk->db));
}

/* Connected, reconnecting if need be, and on a Galera cluster on the
 * writer node now (lr_db_follow: a renewal or release goes where the
 * others write). Nothing to set up on a new connection: the procedures
 * set what they need themselves. Costs a handshake after a lost
 * connection, one query every few seconds on Galera, nothing otherwise. */
static bool ensure_connected(struct lr_request *lk)
{
	if (lr_db_connected(lk->db) && !lk->nnamed)
		lr_db_follow(lk->db);
	if (lr_db_connected(lk->db))
		return true;
	if (!lr_db_connect(lk->db)) {
		take_connect_error(lk);
		return false;
	}
	lk->server_full = false;
	lk->db_trouble = false;
	return true;
}

/*
 * Connects for a request that may wait *wait_s seconds (< 0: forever, 0:
 * one try), before anything is asked of the lock tables. A server that
 * turns us away only because it is full (lr_db_error_is_busy: too many
 * connections, a per-account limit or quota) is tried again after a
 * jittered backoff, FULL_BACKOFF_MIN_MS doubling to FULL_BACKOFF_MAX_MS,
 * until it lets us in or the wait runs out: a full database is waited
 * through like a busy lock. Any other failure (refused port, name lookup,
 * login, missing database) ends it at once. Says so once (a warning, and
 * the plan at -v), not per try. On return *wait_s is what is left of the
 * wait (never below 0). False with *why LR_ACQ_FULL (still full when the
 * wait ran out), LR_ACQ_CANCELED or LR_ACQ_ERROR, and lk->err saying why.
 * Costs one connection attempt per try; a full server is asked nothing
 * else.
 */
bool lr_lock_connect(struct lr_request *lk, double *wait_s, enum lr_acquire *why)
{
	double wait = *wait_s;
	uint64_t start = lr_request_now_ms(), now;
	uint64_t deadline = wait < 0 ? UINT64_MAX : start + lr_duration_round(wait * 1000.0);
	unsigned backoff = FULL_BACKOFF_MIN_MS, ms;
	bool ok;

	for (;;) {
		ok = lr_db_connect(lk->db);
		if (ok || lr_request_canceled(lk) || !lr_db_error_is_busy(lr_db_errno(lk->db)))
			break;
		now = lr_request_now_ms();
		if (now >= deadline)
			break;
		if (!lk->db_trouble) {
			lr_log_warn("database server full, still trying: %s", lr_db_error(lk->db));
			if (wait < 0)
				lr_log_info(
				    "retrying the connection every %u ms to %u s (jittered) "
				    "until the server lets us in",
				    FULL_BACKOFF_MIN_MS, FULL_BACKOFF_MAX_MS / 1000);
			else
				lr_log_info(
				    "retrying the connection every %u ms to %u s (jittered) "
				    "for up to %g s",
				    FULL_BACKOFF_MIN_MS, FULL_BACKOFF_MAX_MS / 1000, wait);
			lk->db_trouble = true;
		}
		ms = lr_request_jitter(backoff);
		lr_request_nap(lk, now + ms > deadline ? (unsigned)(deadline - now) + 1 : ms);
		backoff = backoff * 2 > FULL_BACKOFF_MAX_MS ? FULL_BACKOFF_MAX_MS : backoff * 2;
	}
	now = lr_request_now_ms();
	if (wait > 0)
		*wait_s = now >= deadline ? 0 : (double)(deadline - now) / 1000.0;
	if (ok) {
		if (lk->db_trouble)
			lr_log_info("connected after %.1f s of a full server",
			            (now - start) / 1000.0);
		lk->db_trouble = false;
		return true;
	}
	take_connect_error(lk);
	if (lr_request_canceled(lk)) {
		*why = LR_ACQ_CANCELED;
	} else if (lk->server_full) {
		*why = LR_ACQ_FULL;
		if (wait > 0)
			snprintf(lk->err, sizeof(lk->err),
			         "the database server was still full after %.1f s: %s",
			         (now - start) / 1000.0, lr_db_error(lk->db));
	} else {
		*why = LR_ACQ_ERROR;
		snprintf(lk->err, sizeof(lk->err), "cannot connect to %s", lr_db_error(lk->db));
	}
	return false;
}

enum tx { TX_OK, TX_BUSY, TX_KEY_BUSY, TX_DONE, TX_INVALID, TX_RETRY, TX_FAIL };

/* What a failed CALL means for the attempt. An unknown outcome is marked,
 * to be settled before anything else. */
static enum tx from_call(struct lr_request *lk, enum lr_call c)
{
	switch (c) {
	case LR_CALL_OK:
		return TX_OK;
	case LR_CALL_RETRY:
		if (lk->lease_spent) {
			lr_log_info("%s", lk->err);
			lr_request_new_lease(lk);
			lk->lease_spent = false;
			lk->queued = false;
		}
		return TX_RETRY;
	case LR_CALL_UNKNOWN:
		lk->unsettled = true;
		return TX_RETRY;
	case LR_CALL_INVALID:
		return TX_INVALID;
	default:
		return TX_FAIL;
	}
}

/*
 * Settles an acquire whose answer was lost (lr_call_settle). Granted: the
 * grant is ours, adopted with its fences. Otherwise we are queued (with the
 * tickets it found) or not, and the lease id, now a tombstone, is replaced.
 * TX_RETRY with lk->unsettled still set: not settled yet, try again. One
 * round trip.
 */
static enum tx settle(struct lr_request *lk)
{
	enum lr_outcome o = LR_OUT_NONE;
	enum lr_call c = lr_call_settle(lk, &o);

	if (c != LR_CALL_OK)
		return c == LR_CALL_RETRY ? TX_RETRY : TX_FAIL;
	lk->unsettled = false;
	if (o == LR_OUT_GRANTED) {
		lr_log_info("adopted grant %llu after a lost answer",
		            (unsigned long long)lk->grant_id);
		return TX_OK;
	}
	/* The lost answer was "the window is done": it stays done. */
	if (o == LR_OUT_DONE)
		return TX_DONE;
	lr_request_new_lease(lk);
	return TX_RETRY;
}

/*
 * One try: the named locks (one statement, if any), then the table items
 * (one CALL lockrun_acquire, queueing when may_enqueue). All or nothing:
 * named locks taken for a request whose tables are busy are given back.
 */
static enum tx try_once(struct lr_request *lk, bool may_enqueue)
{
	enum lr_outcome o = LR_OUT_NONE;
	enum tx r;

	lk->valid_from_ms = lr_btimer_now_ms();
	switch (lr_named_take(lk)) {
	case LR_NAMED_OK:
		break;
	case LR_NAMED_BUSY:
		return TX_BUSY;
	case LR_NAMED_GALERA:
		return TX_INVALID;
	default:
		return lr_db_error_is_retryable(lr_db_errno(lk->db)) ? TX_RETRY : TX_FAIL;
	}
	if (!lk->ntable)
		return TX_OK;
	r = from_call(lk, lr_call_acquire(lk, may_enqueue, &o));
	if (r == TX_OK) {
		switch (o) {
		case LR_OUT_GRANTED:
			lk->queued = false;
			return TX_OK;
		case LR_OUT_QUEUED:
		case LR_OUT_BUSY:
			r = TX_BUSY;
			break;
		case LR_OUT_KEY_BUSY:
			r = TX_KEY_BUSY;
			break;
		case LR_OUT_DONE:
			r = TX_DONE;
			break;
		case LR_OUT_INVALID:
			r = TX_INVALID;
			break;
		default:
			snprintf(lk->err, sizeof(lk->err), "%s: lockrun_acquire gave no outcome",
			         lr_db_server(lk->db));
			r = TX_FAIL;
		}
	}
	lr_named_release(lk);
	return r;
}

/* After adopting a grant through settlement: the named locks of a mixed
 * request went with the lost connection. Take them again, or give the
 * grant back: it is useless without them, and giving it back must not end
 * our wait's interruptibility. */
static enum tx adopt(struct lr_request *lk)
{
	const volatile bool *cancel = lk->cancel;
	enum tx r = TX_OK;

	if (!lk->nnamed || (lk->named_held && lk->named_gen == lr_db_generation(lk->db)))
		return TX_OK;
	switch (lr_named_take(lk)) {
	case LR_NAMED_OK:
		return TX_OK;
	case LR_NAMED_BUSY:
		r = TX_BUSY;
		break;
	case LR_NAMED_GALERA:
		r = TX_INVALID;
		break;
	default:
		r = TX_FAIL;
	}
	lr_lock_release(lk, LR_END_ABORTED, 0);
	lr_lock_set_cancel(lk, cancel);
	lk->grant_id = 0;
	lr_request_new_lease(lk);
	return r;
}

/* Whether the wait, and the grace after it, are over. */
static bool past_wait(const struct lr_request *lk)
{
	uint64_t now = lr_request_now_ms();

	return now >= lk->wait_until && now - lk->wait_until >= RETRY_GRACE_MS;
}

/* One attempt, tried again on deadlocks, lock wait timeouts, certification
 * failures and dropped connections (bounded, jittered backoff, and no
 * longer than RETRY_GRACE_MS past the wait); an unknown outcome is settled
 * first. Round trips: one CALL per try, plus named locks and settlements. */
static enum tx attempt(struct lr_request *lk, bool may_enqueue)
{
	enum tx r = TX_RETRY;
	unsigned backoff = 5;

	for (int i = 0; i < TX_RETRIES && !lr_request_canceled(lk); i++) {
		if (!ensure_connected(lk)) {
			/* Retrying on regardless (a wait is a wait); but say why it
			 * is taking long, once until the database is back. */
			if (!lk->db_trouble)
				lr_log_warn("database trouble, still trying: %s", lk->err);
			lk->db_trouble = true;
			r = TX_RETRY;
			/* Full past the end of the wait: that is "not acquired",
			 * and more tries would only cost the server logins. */
			if (lk->server_full && lr_request_now_ms() >= lk->wait_until)
				break;
		} else if (lk->unsettled) {
			r = settle(lk);
			if (r == TX_OK)
				return adopt(lk);
			if (r == TX_FAIL || r == TX_DONE)
				return r;
			if (!lk->unsettled) {
				i--; /* settled: that was no attempt */
				continue;
			}
		} else {
			r = try_once(lk, may_enqueue);
			if (r != TX_RETRY)
				return r;
			if (lk->unsettled)
				continue; /* settle at once */
			if (i == 0 && lr_db_connected(lk->db))
				continue; /* a first deadlock: straight again */
		}
		if (past_wait(lk))
			break;
		lr_log_debug("retrying: %s", lk->err);
		lr_request_nap(lk, lr_request_jitter(backoff));
		backoff = backoff * 2 > 1000 ? 1000 : backoff * 2;
	}
	return r;
}

/* Leaves the queue: on giving up, on a signal, on an error. Also when an
 * acquire's answer was lost and could not be settled: it may have queued
 * us. Best effort, but a lost conflict (deadlock, lock wait timeout,
 * snapshot conflict) is tried again, as every transaction is: rows left
 * behind expire only after 10 s, and until then they stand at the head of
 * the queue, while a burst of waiters leaving and joining is when such
 * conflicts come. lk->err keeps the acquire's own reason, which is what
 * the run reports. One round trip a try, at most DEQUEUE_TRIES, each
 * bounded by the server's lock wait of 2 s (lr_enter). */
static void dequeue(struct lr_request *lk)
{
	char why[sizeof(lk->err)];
	unsigned backoff = 20;

	if (!lk->ever_queued && !lk->unsettled)
		return;
	memcpy(why, lk->err, sizeof(why));
	for (int i = 0; i < DEQUEUE_TRIES && ensure_connected(lk); i++) {
		if (lr_call_dequeue(lk) != LR_CALL_RETRY ||
		    !lr_db_error_is_retryable(lr_db_errno(lk->db)))
			break;
		lr_request_nap(lk, lr_request_jitter(backoff));
		backoff *= 4;
	}
	memcpy(lk->err, why, sizeof(why));
	lk->queued = false;
}

static enum lr_acquire result_of(struct lr_request *lk, enum tx r)
{
	enum lr_acquire a;

	lr_log_status(NULL);
	switch (r) {
	case TX_OK:
		lr_wait_end(lk);
		return LR_ACQ_GRANTED;
	case TX_BUSY:
		a = LR_ACQ_BUSY;
		break;
	case TX_KEY_BUSY:
		a = LR_ACQ_KEY_BUSY;
		break;
	case TX_DONE:
		a = LR_ACQ_DONE;
		break;
	case TX_INVALID:
		a = LR_ACQ_INVALID;
		break;
	default:
		/* A wait that ran out on a full server is a lock not acquired
		 * in time, not a database that is gone. */
		a = lr_request_canceled(lk) ? LR_ACQ_CANCELED
		    : lk->server_full       ? LR_ACQ_FULL
		                            : LR_ACQ_ERROR;
		/* Transient errors until the wait ran out: say that it did,
		 * with the last of them, not only the error. */
		if (a == LR_ACQ_ERROR && r == TX_RETRY) {
			char last[sizeof(lk->err)];

			snprintf(last, sizeof(last), "%s", lk->err);
			snprintf(lk->err, sizeof(lk->err),
			         "not acquired: the database was still failing when the wait ran "
			         "out: %.900s",
			         last);
		}
		break;
	}
	/* Stopped or failed with an acquire's answer lost: it may have
	 * granted. Find out, and give back what we are not going to use. */
	lr_lock_set_cancel(lk, NULL);
	for (int i = 0; i < TX_RETRIES && lk->unsettled && ensure_connected(lk); i++) {
		enum tx s = settle(lk);
		if (s == TX_OK)
			lr_lock_release(lk, LR_END_ABORTED, 0);
		if (s == TX_FAIL)
			break;
		if (lk->unsettled)
			lr_request_nap(lk, lr_request_jitter(200));
	}
	lr_wait_end(lk);
	lr_wait_close(lk);
	dequeue(lk);
	return a;
}

/*
 * Takes every item of the request, waiting up to wait_s seconds (< 0:
 * forever, 0: one attempt). A request that has to wait takes a place in
 * the queue of each of its resources (in the same CALL that found them
 * busy) and is granted only when it is first in all of them and fits;
 * meanwhile it waits as lockwait says, and attempts again only when that
 * says it could succeed. Uncontended: one CALL.
 */
enum lr_acquire lr_lock_acquire(struct lr_request *lk, double wait_s)
{
	uint64_t deadline =
	    wait_s < 0 ? UINT64_MAX : lr_request_now_ms() + lr_duration_round(wait_s * 1000.0);
	bool quick = false; /* the last wait ended within SPIN_MS */
	unsigned spins = 0;
	enum tx r;

	lk->wait_until = deadline;
	for (;;) {
		bool last = lr_request_now_ms() >= deadline;
		uint64_t t;

		r = attempt(lk, !last);
		/* Failing still at the deadline: attempt tried up to the
		 * grace already; no last attempt after it. */
		if (r != TX_BUSY && !(r == TX_RETRY && lr_request_now_ms() < deadline))
			break;
		if (lr_request_canceled(lk)) {
			r = TX_FAIL;
			break;
		}
		if (last)
			break;
		if (r == TX_BUSY && !lk->wait_start) {
			lk->wait_start = lr_request_now_ms();
			if (lr_log_level() >= LR_LOG_VERBOSE)
				lr_wait_announce(lk);
		}
		/* A wait that said "try now" at once, and an attempt that
		 * found no room, again and again: a spin (each attempt sweeps
		 * a bounded number of expired rows, so it ends; meanwhile
		 * spare the server). A wake-up by a release that freed too
		 * little is no spin: it took its time. */
		spins = r == TX_BUSY && quick ? spins + 1 : 0;
		if (spins > SPINS_FREE)
			lr_request_nap(lk, lr_request_jitter(spins < 8 ? 5u << spins : 500));
		t = lr_request_now_ms();
		switch (lr_wait_turn(lk, deadline)) {
		case LR_WAIT_CANCELED:
			return result_of(lk, TX_FAIL);
		case LR_WAIT_TIMEOUT:
		case LR_WAIT_TRY:
			break;
		}
		quick = lr_request_now_ms() - t < SPIN_MS;
	}
	return result_of(lk, r);
}

/*
 * Renews the lease: the table items by one CALL lockrun_renew (lost unless
 * every hold was extended), the named locks by their connection being
 * alive (a new connection means they are gone; named only: DO 0). One
 * round trip. Returns false on a database error (the lease is then
 * unknown); *lost is set when the lease is known to be gone.
 */
bool lr_lock_renew(struct lr_request *lk, bool *lost)
{
	uint64_t t0;
	enum lr_call c;

	lr_named_alive(lk, lost);
	if (*lost || !lk->ntable)
		return true;
	if (!ensure_connected(lk))
		return false;
	t0 = lr_btimer_now_ms();
	c = lr_call_renew(lk, lost);
	if (c != LR_CALL_OK) {
		if (lk->nnamed && !lr_db_connected(lk->db)) {
			*lost = true;
			snprintf(lk->err, sizeof(lk->err),
			         "the connection holding the named locks was lost: %s",
			         lr_db_error(lk->db));
			return true;
		}
		return false;
	}
	if (!*lost)
		lk->valid_from_ms = t0;
	return true;
}

/*
 * Called once while the command runs: if others were queued behind us when
 * we were granted, has the server parse the routines of a release that
 * hands the lock on, for this connection now (a connection parses a routine
 * on its first call; about 1 ms for these, more on a cold CPU), so that the
 * release does not spend that time while the next waiter waits. Without
 * waiters the release most likely takes the short way, which needs none of
 * them, so the server is spared the work. Best effort, one round trip; the
 * cancel flag still cuts it short when the command ends. Nothing to do for
 * named locks only.
 */
void lr_lock_prepare_release(struct lr_request *lk)
{
	if (!lk->ntable || !lk->grant_id || !lk->followed || !lr_db_connected(lk->db))
		return;
	if (lr_call_prepare_release(lk) != LR_CALL_OK)
		lr_log_debug("preparing the release: %s", lk->err);
}

/*
 * Gives the grant back and closes its lock-log entry: one CALL
 * lockrun_release, which also rings the next waiter. Idempotent, so after
 * a transient error or a lost answer it is simply called again on a fresh
 * connection, until it is known to have happened or the lease has run out
 * anyway. Then gives back the named locks (one statement).
 */
bool lr_lock_release(struct lr_request *lk, enum lr_end how, int status)
{
	unsigned backoff = 20;
	bool ok = !lk->grant_id;

	lr_lock_set_cancel(lk, NULL);
	for (int i = 0; !ok && (i < 2 || lr_btimer_now_ms() < lk->valid_from_ms + lk->ttl_ms);
	     i++) {
		if (ensure_connected(lk)) {
			enum lr_call c = lr_call_release(lk, how, status);
			if (c == LR_CALL_OK) {
				ok = true;
				break;
			}
			if (c != LR_CALL_RETRY)
				break;
		} else if (!lr_db_error_is_retryable(lr_db_errno(lk->db))) {
			break;
		}
		lr_request_nap(lk, lr_request_jitter(backoff));
		backoff = backoff * 2 > 1000 ? 1000 : backoff * 2;
	}
	if (lr_db_connected(lk->db))
		lr_named_release(lk);
	return ok;
}
