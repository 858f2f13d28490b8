#include "lockwait.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "lockcall.h"
#include "log.h"
#include "strbuf.h"

/* Single server: the head sleeps on its doorbell this long per CALL (a
 * lost ring costs at most this), the others block on the wake-up lock of
 * the waiter ahead at most this long. Both stay under the heartbeat: a
 * queue place lives 10 s unless lockrun_poll or lockrun_sleep renews it,
 * and either runs at least every HEARTBEAT_MS. */
#define HEAD_SLEEP_MS 1000
#define CHAIN_WAIT_MS 2000
#define HEARTBEAT_MS  3000
/* Without a wake-up lock to block on (the one ahead is gone, or fired
 * already), and after a failed doorbell. */
#define STALE_POLL_MS 500
#define BELL_RETRY_MS 200
_Static_assert(HEAD_SLEEP_MS < HEARTBEAT_MS && CHAIN_WAIT_MS < HEARTBEAT_MS &&
                   STALE_POLL_MS * 3 / 2 < HEARTBEAT_MS,
               "a waiter must renew its places at least every HEARTBEAT_MS");
/* Galera: the same wake-ups work between clients on one node, which the
 * writer node (writer.h) makes the usual case; a release on another node
 * cannot ring, so the head's sleep is shorter there (a hand-off across
 * nodes costs at most this, at 4 calls/s). A waiter with no wake-up lock
 * to block on (the one ahead waits on another node) polls: the next two
 * in line every 25-50 ms, the rest every 250-500 ms. */
#define GALERA_SLEEP_MS 250
#define GALERA_NEAR     2
/* A failed lockrun_host_queue is tried again this much later. */
#define HOST_RETRY_MS 10000
/* --named alone: nothing to be woken by; attempts at a growing interval. */
#define NAMED_MIN_MS 40
#define NAMED_MAX_MS 500

static unsigned least(unsigned a, uint64_t b)
{
	return b < a ? (unsigned)b : a;
}

/* The pause before a Galera waiter's next poll, when it has nothing to
 * block on. */
static unsigned galera_pace(const struct lr_request *lk)
{
	if (lk->ahead <= GALERA_NEAR)
		return 13 + lr_request_jitter(25); /* [25, 50) */
	return 125 + lr_request_jitter(250);       /* [250, 500) */
}

/* How much longer than its own wait a sleep or a GET_LOCK may take to
 * answer: on Galera less, as a frozen or blocked writer node is left for
 * the next one after it (db.h, lr_db_follow). */
static unsigned answer_slack(const struct lr_request *lk)
{
	return lk->galera ? 2000 : 5000;
}

enum bell { BELL_WOKEN, BELL_SLEPT, BELL_FAILED };

/*
 * The head waiter's wait on one server: CALL lockrun_sleep on the second
 * connection, opened on first use (one handshake per contended run) and
 * kept until the wait ends. The release that frees room KILLs the sleep,
 * so the head learns of it at database speed; a release on another server
 * is seen within HEAD_SLEEP_MS. One round trip per ring or per ms.
 */
static enum bell doorbell(struct lr_request *lk, unsigned ms)
{
	bool woken = false;
	enum lr_call r;

	/* The doorbell rings on one node only: after the main connection
	 * moved (a Galera writer change), the bell moves with it. */
	if (lk->bell && lk->bell_gen != lr_db_generation(lk->db))
		lr_wait_close(lk);
	if (!lk->bell) {
		lk->bell_gen = lr_db_generation(lk->db);
		lk->bell = lr_db_create_sibling(lk->db);
		if (!lk->bell)
			return BELL_FAILED;
		lr_db_set_cancel(lk->bell, lk->cancel);
	}
	if (!lr_db_connected(lk->bell) && !lr_db_connect(lk->bell)) {
		lr_log_debug("no doorbell connection, polling: %s", lr_db_error(lk->bell));
		return BELL_FAILED;
	}
	lr_db_set_op_timeout(lk->bell, ms + answer_slack(lk));
	r = lr_call_sleep(lk, lk->bell, ms, &woken);
	if (r != LR_CALL_OK) {
		lr_log_debug("doorbell: %s", lk->err);
		/* A frozen Galera writer: the main connection is on the same
		 * node, and leaves it now rather than after its own bound. */
		if (lr_db_errno(lk->bell) == LR_DB_ETIMEDOUT)
			lr_db_unanswered(lk->db);
		return BELL_FAILED;
	}
	return woken || !lk->queued ? BELL_WOKEN : BELL_SLEPT;
}

/*
 * A waiter behind another one, on one server: blocks in GET_LOCK on the
 * wake-up lock of the waiter right ahead, which that waiter's session holds
 * while it waits and gives up when it is granted or leaves (or dies). Got
 * it: let go of it at once (same statement), and never block on it again,
 * as a lock nobody holds would return at once. MySQL rounds GET_LOCK's
 * timeout to whole seconds: there it waits the whole seconds of ms, and
 * naps instead when there are none. One round trip.
 */
static void chain(struct lr_request *lk, unsigned ms)
{
	struct lr_sb sb;
	MYSQL_ROW row;

	if (lr_db_is_mysql(lk->db)) {
		if (ms < 1000) {
			lr_request_nap(lk, ms);
			return;
		}
		ms -= ms % 1000;
	}
	lr_sb_init(&sb);
	lr_sb_printf(&sb, "SELECT GET_LOCK('%s', %u.%03u), RELEASE_LOCK('%s')", lk->wait_for,
	             ms / 1000, ms % 1000, lk->wait_for);
	lr_db_set_op_timeout(lk->db, ms + answer_slack(lk));
	if (!sb.oom && lr_db_query(lk->db, lr_sb_str(&sb)) && (row = lr_db_fetch(lk->db)) &&
	    row[0] && strcmp(row[0], "1") == 0)
		snprintf(lk->stale_wait, sizeof(lk->stale_wait), "%s", lk->wait_for);
	lr_db_set_op_timeout(lk->db, 0);
	lr_sb_finish(&sb);
}

/*
 * The head of the host queue tells the database how many runs of its host
 * wait behind it, when that changed, so status and metrics count them.
 * Only a figure for operators: a failed CALL is not the wait's business
 * (the next poll meets any trouble of the connection); it is tried again
 * HOST_RETRY_MS later, and a database without the procedure (routines
 * installed by an older lockrunctl) is not asked again. Costs a count of
 * the host's file locks at most once a second, and one round trip per
 * change.
 */
static void tell_host_queue(struct lr_request *lk)
{
	char err[sizeof(lk->err)];
	uint64_t ticket = 0;
	unsigned n;
	enum lr_call r;

	if (!lk->host_behind || lk->host_told_off || lr_request_now_ms() < lk->host_retry_at)
		return;
	for (size_t i = 0; i < lk->nitems; i++)
		ticket += lk->items[i].ticket; /* 0 for what does not queue */
	n = lk->host_behind(lk->host_behind_arg);
	/* New places (ours were swept and made again: new tickets, so a
	 * new sum) start at 0, whatever the old ones were told. */
	if (n == (lk->host_told_ticket == ticket ? lk->host_told : 0))
		return;
	memcpy(err, lk->err, sizeof(err));
	r = lr_call_host_queue(lk, n);
	if (r == LR_CALL_OK) {
		lk->host_told = n;
		lk->host_told_ticket = ticket;
	} else if (r == LR_CALL_SCHEMA) {
		lr_log_debug("the database does not count the host queue: %s", lk->err);
		lk->host_told_off = true;
	} else {
		/* Passing trouble (a fail-over, a node that refuses writes)
		 * or a refusal: try again later, not on every poll. */
		lk->host_retry_at = lr_request_now_ms() + HOST_RETRY_MS;
	}
	memcpy(lk->err, err, sizeof(err));
}

/*
 * Waits until an attempt could succeed (LR_WAIT_TRY), the deadline, or the
 * cancel flag, which also ends a statement in flight on either connection.
 * A request of named locks only has no queue: it naps, growing from
 * NAMED_MIN_MS to NAMED_MAX_MS. A queued one waits as the file comment
 * says, then asks lockrun_poll whether it could succeed. Costs per wake-up
 * one CALL (poll or sleep) plus one GET_LOCK for a waiter behind another.
 */
enum lr_wait lr_wait_turn(struct lr_request *lk, uint64_t deadline)
{
	for (;;) {
		uint64_t now = lr_request_now_ms(), left;
		bool could = false;

		if (now >= deadline)
			return LR_WAIT_TIMEOUT;
		left = deadline - now;
		if (lk->at_head && !lk->head_since)
			lk->head_since = now;
		if (!lk->ntable) {
			unsigned ms = NAMED_MIN_MS << (lk->polls < 4 ? lk->polls : 4);
			lk->polls++;
			lr_request_nap(
			    lk,
			    least(lr_request_jitter(ms < NAMED_MAX_MS ? ms : NAMED_MAX_MS), left));
			return lr_request_canceled(lk) ? LR_WAIT_CANCELED : LR_WAIT_TRY;
		}
		if (!lk->queued || !lr_db_connected(lk->db)) {
			/* Queue again (our places were swept), or let the
			 * attempt meet the database trouble. */
			lr_request_nap(lk, least(lr_request_jitter(NAMED_MIN_MS), left));
			return lr_request_canceled(lk) ? LR_WAIT_CANCELED : LR_WAIT_TRY;
		}
		/* The Galera writer changed: queue again there (the wake-up
		 * lock and the doorbell are the node's). */
		if (lk->galera && lr_db_follow(lk->db))
			return LR_WAIT_TRY;
		tell_host_queue(lk);
		if (lk->at_head) {
			unsigned ms = lk->galera ? GALERA_SLEEP_MS : HEAD_SLEEP_MS;
			enum bell b = doorbell(lk, least(ms, left));
			if (lr_request_canceled(lk))
				return LR_WAIT_CANCELED;
			if (b == BELL_WOKEN)
				return LR_WAIT_TRY;
			if (b == BELL_SLEPT) {
				/* The sleep renewed our places; -v says now and then
				 * that we still wait (see lr_log_status). */
				lr_log_status(lk->status);
				continue;
			}
			lr_request_nap(lk, least(BELL_RETRY_MS, left));
		} else if (lk->wait_for[0] && strcmp(lk->wait_for, lk->stale_wait) != 0 &&
		           left >= 20) {
			/* On Galera a wake-up lock held on another node is free
			 * here: GET_LOCK returns at once and marks it stale. */
			chain(lk, least(CHAIN_WAIT_MS, left));
		} else if (lk->galera) {
			/* The pace is from poll to poll: a slow CALL (a causal
			 * wait on a busy cluster) counts towards it. */
			unsigned pace = galera_pace(lk);
			uint64_t since = now - lk->last_poll;
			if (since < pace)
				lr_request_nap(lk, least(pace - (unsigned)since, left));
		} else {
			lr_request_nap(lk, least(lr_request_jitter(STALE_POLL_MS), left));
		}
		if (lr_request_canceled(lk))
			return LR_WAIT_CANCELED;
		lk->last_poll = lr_request_now_ms();
		if (lr_call_poll(lk, &could) != LR_CALL_OK || could || !lk->queued)
			return LR_WAIT_TRY;
		lr_log_status(lk->status);
	}
}

/* With -v: what we wait for and who holds it, when waiting starts, from
 * the answer of the attempt that found it busy; it is the status line
 * until a poll says more (so a log shows it again each minute of a long
 * wait at the head, which sleeps instead of polling). No round trip. */
void lr_wait_announce(struct lr_request *lk)
{
	struct lr_sb sb;

	lr_sb_init(&sb);
	lr_sb_printf(&sb, "waiting: %s%s", lk->err, lk->holders);
	snprintf(lk->status, sizeof(lk->status), "%s", sb.oom ? "waiting" : lr_sb_str(&sb));
	lr_sb_finish(&sb);
	lr_log_status(lk->status);
}

/* Closes the doorbell connection (a COM_QUIT and the frees). After a
 * grant the caller does it once the command runs, off the hand-off's
 * critical path, and the request's end does it in any case. */
void lr_wait_close(struct lr_request *lk)
{
	if (lk->bell) {
		lr_db_destroy(lk->bell);
		lk->bell = NULL;
	}
}

/*
 * The wait is over (granted, given up, failed): says at -v how long it
 * took and what it cost the server, the head's poll rate included
 * (Galera). The doorbell connection stays open until lr_wait_close.
 */
void lr_wait_end(struct lr_request *lk)
{
	uint64_t now = lr_request_now_ms();
	double s, head_s;

	if (!lk->wait_start)
		return;
	s = (double)(now - lk->wait_start) / 1000.0;
	head_s = lk->head_since ? (double)(now - lk->head_since) / 1000.0 : 0.0;
	lr_log_info("waited %.3f s: %u polls, %u of them in %.3f s at the head of the queue "
	            "(%.0f/s), %u doorbell sleeps",
	            s, lk->polls, lk->head_polls, head_s,
	            head_s > 0 ? lk->head_polls / head_s : 0.0, lk->sleeps);
	lk->wait_start = lk->head_since = 0;
	lk->polls = lk->head_polls = lk->sleeps = 0;
}
