/*
 * lockrun: takes locks kept in MariaDB, runs a command while renewing
 * them, and gives them back when it ends. This file wires the modules:
 * cli and config decide what to do, db connects, lock takes and keeps the
 * locks, supervisor runs the child.
 *
 * May use: btimer, cli, config, db, duration, exitcodes, hint, item, lease, lock,
 * request, log, prequeue, strbuf, supervisor, text, lr_build (generated).
 */
#include <errno.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <uv.h>

#include "btimer.h"
#include "cli.h"
#include "config.h"
#include "db.h"
#include "duration.h"
#include "exitcodes.h"
#include "hint.h"
#include "lease.h"
#include "lock.h"
#include "log.h"
#include "lr_build.h"
#include "prequeue.h"
#include "strbuf.h"
#include "supervisor.h"
#include "text.h"

/* Allowed error in the rate of our clock against the server's, and time
 * for a SIGKILL to take effect: both come off the lease before it runs
 * out at the server. */
#define CLOCK_RATE_ERROR 0.01
#define KILL_MARGIN_MS   250
/* How long the command runs before its release is prepared: longer than a
 * wrapped `true` takes, so that such a run sends nothing more. */
#define PREPARE_MS 20

struct run {
	uv_loop_t *loop;
	struct lr_cli cli;
	struct lr_config cfg;
	lr_db *db;
	lr_sup *sup;
	struct lr_request lock;
	bool lock_ready;
	volatile bool stop; /* a terminating signal arrived before the child ran */
	int stop_signal;
	volatile bool child_done;
	uv_timer_t *beat;
	uv_timer_t *prep;    /* PREPARE_MS into the command: lr_lock_prepare_release */
	lr_btimer *deadline; /* fires at term_at_ms even while a renewal hangs */
	bool renew_due;
	bool prepare_due;
	double ttl, kill_after;
	uint64_t term_at_ms;    /* boottime: stop the child if not renewed by then */
	uint64_t hold_until_ms; /* boottime: --min-hold keeps the lease until then */
	lr_btimer *hold;        /* wakes the loop when the min-hold is over */
	bool holding;           /* the command ended; kept for --min-hold */
	int child_rc;           /* the exit status, as it was when the command ended */
	bool lost;              /* acted upon: no more renewals */
	bool warned;            /* --on-lost=ignore: told that the lease may be gone */
	bool loop_ready;
};

static void on_signal(int signo, void *arg)
{
	struct run *r = arg;

	if (signo == SIGTERM || signo == SIGINT || signo == SIGHUP || signo == SIGQUIT) {
		if (!r->stop)
			r->stop_signal = signo;
		r->stop = true;
	}
}

static void on_beat(uv_timer_t *t)
{
	struct run *r = t->data;
	r->renew_due = true;
	uv_stop(t->loop);
}

static void on_prepare(uv_timer_t *t)
{
	struct run *r = t->data;
	r->prepare_due = true;
	uv_stop(t->loop);
}

/* The server is dropping our connection: check (and reconnect) now rather
 * than at the next beat. Matters most for named locks, which the server
 * frees the moment the connection goes. */
static void on_connection_stirred(void *arg)
{
	struct run *r = arg;
	r->renew_due = true;
}

static void free_handle(uv_handle_t *h)
{
	free(h);
}

/*
 * The lease arithmetic. A lease renewed by a statement sent at local time
 * t0 lasts at the server until at least t0 + ttl. Allowing our clock to
 * run CLOCK_RATE_ERROR slow, the child must be dead by
 * t0 + ttl*(1-err) - KILL_MARGIN: SIGTERM goes kill_after before that.
 * Renewals run every ttl/3, so the stop must not come before two of them
 * had their chance. Returns the SIGTERM offset from t0 in ms, 0 if unsafe.
 */
static uint64_t term_offset_ms(double ttl, double kill_after)
{
	double safe =
	    ttl * (1.0 - CLOCK_RATE_ERROR) * 1000.0 - KILL_MARGIN_MS - kill_after * 1000.0;

	return safe >= ttl * 1000.0 * 2.0 / 3.0 ? (uint64_t)safe : 0;
}

/*
 * The command line as the lock log records it: the arguments joined by
 * spaces, escaped by lr_text_record() so that any bytes store as valid
 * utf8mb4 and read back exactly (\xHH, \\), cut to the 1024 characters of
 * lr_grants.command and lr_waiters.command with a "\..." mark. Only the
 * record changes: the child runs with argv as it is. NULL when out of
 * memory. Once per run; no system calls.
 */
static char *join_command(char **argv)
{
	enum { COMMAND_CHARS = 1024 };
	struct lr_sb sb;
	char *cmd = NULL;

	lr_sb_init(&sb);
	for (size_t i = 0; argv[i]; i++) {
		if (i)
			lr_sb_puts(&sb, " ");
		lr_sb_puts(&sb, argv[i]);
	}
	if (!sb.oom)
		cmd = lr_text_record(lr_sb_str(&sb), COMMAND_CHARS);
	lr_sb_finish(&sb);
	return cmd;
}

/* LOCKRUN_FENCE (one lock, or only the --id key), LOCKRUN_FENCES,
 * LOCKRUN_LEASE (the grant's secret, for CALL lockrun_check), LOCKRUN_GRANT
 * (its public number) and with --once-per LOCKRUN_WINDOW, as "NAME=value"
 * strings for the child. Named locks have no token (the server keeps no
 * counter for them) and no lease row. */
static char **lock_env(const struct lr_request *lk)
{
	struct lr_sb fences, one, lease, grant, window;
	char **env = calloc(6, sizeof(*env));
	size_t nres = 0, ntok = 0, k = 0;
	const struct lr_item *single = NULL;

	if (!env)
		return NULL;
	lr_sb_init(&fences);
	lr_sb_init(&one);
	lr_sb_init(&lease);
	lr_sb_init(&grant);
	lr_sb_init(&window);
	for (size_t i = 0; i < lk->nitems; i++)
		if (lk->items[i].kind != LR_KIND_KEY && lk->items[i].kind != LR_KIND_NAMED)
			nres++;
	lr_sb_puts(&fences, "LOCKRUN_FENCES=");
	for (size_t i = 0; i < lk->nitems; i++) {
		const struct lr_item *it = &lk->items[i];
		if (it->kind == LR_KIND_NAMED || (nres && it->kind == LR_KIND_KEY))
			continue;
		lr_sb_printf(&fences, "%s%s=%llu", ntok ? " " : "", it->name,
		             (unsigned long long)it->fence);
		single = it;
		ntok++;
	}
	if (ntok == 1) {
		lr_sb_printf(&one, "LOCKRUN_FENCE=%llu", (unsigned long long)single->fence);
		env[k++] = one.buf;
	}
	env[k++] = fences.buf;
	if (lk->grant_id) {
		lr_sb_printf(&lease, "LOCKRUN_LEASE=%s", lk->lease);
		env[k++] = lease.buf;
		lr_sb_printf(&grant, "LOCKRUN_GRANT=%llu", (unsigned long long)lk->grant_id);
		env[k++] = grant.buf;
	}
	if (lk->once_window[0]) {
		/* 'YYYY-MM-DD HH:MM:SS[.fff]' as ISO 8601: the window this run
		 * is for. */
		lr_sb_printf(&window, "LOCKRUN_WINDOW=%.10sT%sZ", lk->once_window,
		             lk->once_window + 11);
		env[k++] = window.buf;
	}
	return env;
}

static void free_env(char **env)
{
	for (size_t i = 0; env && env[i]; i++)
		free(env[i]);
	free(env);
}

static void lease_lost(struct run *r, const char *why, bool confirmed);

/*
 * The lease deadline, on CLOCK_BOOTTIME: it fires on time while the loop's
 * own (CLOCK_MONOTONIC) timers are late, and at once after a resume from
 * suspend, during which the lease ran on at the server but the monotonic
 * clock stood still. The check is a guard only: an absolute boottime timer
 * does not fire early.
 */
static void on_deadline(void *arg)
{
	struct run *r = arg;

	if (lr_btimer_now_ms() >= r->term_at_ms)
		lease_lost(r, "not renewed in time", false);
	else if (!lr_btimer_arm(r->deadline, r->term_at_ms))
		lease_lost(r, "cannot arm the deadline timer", false);
}

/*
 * Starts the lease clock from a statement sent at t0 (boottime ms). The
 * deadline timer runs on the loop, so it fires in the middle of a renewal
 * that hangs, or a reconnect that takes long: the child is stopped on time
 * whatever the database does.
 */
static void lease_renewed(struct run *r, uint64_t t0)
{
	bool kill = r->cfg.lock.on_lost == LR_ON_LOST_KILL;

	/* With --on-lost=ignore nothing is stopped: the deadline only says
	 * when the lease may be over at the server. */
	r->term_at_ms = t0 + (kill ? term_offset_ms(r->ttl, r->kill_after)
	                           : (uint64_t)(r->ttl * (1.0 - CLOCK_RATE_ERROR) * 1000.0));
	r->warned = false;
	/* Without a deadline nothing would stop the child in time. */
	if (!lr_btimer_arm(r->deadline, r->term_at_ms))
		lease_lost(r, "cannot arm the deadline timer", false);
}

/*
 * The lease is gone (confirmed: the server said so) or may be (the local
 * deadline passed). By default either stops the command. With
 * --on-lost=ignore it is only said, and renewing goes on until the server
 * confirms the loss, as a late renewal may still find the lease alive.
 */
static void lease_lost(struct run *r, const char *why, bool confirmed)
{
	if (r->lost)
		return;
	if (r->cfg.lock.on_lost == LR_ON_LOST_IGNORE) {
		if (confirmed) {
			r->lost = true;
			lr_log_error("lock lost (%s); --on-lost=ignore: the command keeps running",
			             why);
		} else if (!r->warned) {
			r->warned = true;
			lr_log_error("lock may be lost (%s); --on-lost=ignore: the command keeps "
			             "running",
			             why);
		}
		return;
	}
	/* Act first, log after: stderr may be a pipe nobody reads. */
	r->lost = true;
	lr_sup_terminate(r->sup, (unsigned)lr_duration_round(r->kill_after * 1000));
	lr_log_error("lock lost (%s); stopping the command", why);
}

static int exit_status_of(struct run *r);

static void on_hold_over(void *arg)
{
	(void)arg; /* the loop turns, and lease_wanted() sees the time */
}

/*
 * Whether the lease is still wanted: while the child runs, and after it
 * until --min-hold is over, unless lockrun is told to stop (the command
 * is done: nothing is left to protect but the gap, and a stop must not
 * wait for it) or the lease is lost. On the child's end it records the
 * exit status (a loss during the hold does not change it), and a
 * renewal in flight is from then on abandoned only on a stop.
 */
static bool lease_wanted(struct run *r)
{
	if (!lr_sup_done(r->sup))
		return true;
	if (!r->holding) {
		r->child_rc = exit_status_of(r);
		if (r->lost || r->stop || lr_btimer_now_ms() >= r->hold_until_ms)
			return false;
		r->holding = true;
		lr_lock_set_cancel(&r->lock, &r->stop);
		if (!lr_btimer_arm(r->hold, r->hold_until_ms))
			return false;
		lr_log_info("command ended; keeping grant %llu for %.1f s more (--min-hold)",
		            (unsigned long long)r->lock.grant_id,
		            (double)(r->hold_until_ms - lr_btimer_now_ms()) / 1000.0);
	}
	return !r->lost && !r->stop && lr_btimer_now_ms() < r->hold_until_ms;
}

/*
 * Runs the loop until the child has exited (and --min-hold is over),
 * renewing every ttl/3. Before each renewal (and after any pause of ours,
 * e.g. SIGSTOP) the local deadline is checked first: past it the lease
 * may be gone, so the child is stopped without asking the server.
 */
static void supervise(struct run *r)
{
	unsigned interval = (unsigned)lr_duration_round(r->ttl * 1000.0 / 3.0);
	uint64_t first = r->lock.valid_from_ms + interval, now = lr_btimer_now_ms();

	/* The first renewal is due an interval after the lease began, not
	 * after the command started. */
	uv_timer_start(r->beat, on_beat, first > now ? first - now : 0, interval);
	/* A command that runs a while gets its release's routines parsed
	 * meanwhile (one CALL), so the release that hands the lock on is
	 * quicker; one that ends at once (a wrapped `true`) costs no more. */
	uv_timer_start(r->prep, on_prepare, PREPARE_MS, 0);
	/* A renewal may take at most half an interval: a hung server must
	 * leave time within the lease to reconnect, to the next host if need
	 * be (the deadline timer covers the child meanwhile). */
	lr_db_set_op_timeout(r->db, interval / 2);
	lr_db_set_idle_watch(r->db, on_connection_stirred, r);
	while (lease_wanted(r)) {
		uv_run(r->loop, UV_RUN_ONCE);
		if (!lease_wanted(r))
			break;
		if (!r->lost && !r->warned && lr_btimer_now_ms() >= r->term_at_ms) {
			lease_lost(r, "not renewed in time", false);
			continue;
		}
		if (r->renew_due && !r->lost) {
			uint64_t t0 = lr_btimer_now_ms();
			bool gone = false;
			r->renew_due = false;
			if (lr_lock_renew(&r->lock, &gone) && !gone) {
				lease_renewed(r, t0);
				lr_log_info("renewed grant %llu",
				            (unsigned long long)r->lock.grant_id);
			} else if (gone) {
				lease_lost(r, r->lock.err, true);
			} else if (r->holding ? !r->stop : !lr_sup_done(r->sup)) {
				/* Try again soon on a fresh connection, not a whole
				 * interval later: the lease is running out. (A stop
				 * during --min-hold abandons the renewal, and so does
				 * the command's end without it: the release follows,
				 * no retry, nothing to warn of.) */
				lr_log_warn("cannot renew the lease: %s", r->lock.err);
				uv_timer_start(r->beat, on_beat, 200 + (unsigned)(t0 % 300),
				               interval);
			}
		}
		if (r->prepare_due && !r->lost) {
			r->prepare_due = false;
			lr_lock_prepare_release(&r->lock);
		}
	}
	lr_db_set_idle_watch(r->db, NULL, NULL);
	uv_timer_stop(r->beat);
	uv_timer_stop(r->prep);
	lr_btimer_disarm(r->deadline);
	lr_btimer_disarm(r->hold);
	lr_db_set_op_timeout(r->db, 0);
}

/* The command's exit status as lockrun reports it; after the command
 * ended (and the lease was kept for --min-hold), the one it had then. */
static int exit_status_of(struct run *r)
{
	struct lr_sup_status st = lr_sup_status(r->sup);

	if (r->holding)
		return r->child_rc;
	if (r->lost && r->cfg.lock.on_lost == LR_ON_LOST_KILL)
		return LR_EXIT_LOCK_LOST;
	if (st.signaled)
		return LR_EXIT_SIGBASE + st.signo;
	return st.code;
}

/* The option that asks for an item of this kind. */
static const char *kind_option(enum lr_kind k)
{
	switch (k) {
	case LR_KIND_SEMAPHORE:
		return "-s";
	case LR_KIND_MUTEX:
		return "-x";
	case LR_KIND_READ:
		return "--read";
	case LR_KIND_WRITE:
		return "--write";
	case LR_KIND_KEY:
		return "--id";
	default:
		return "--named";
	}
}

/*
 * A request that queues for a table resource and also needs a named lock
 * can reach the head of the queue while the named lock is held by some
 * application that lockrun knows nothing of: it then holds back everyone
 * behind it although the resource is free. So --named may only go with
 * table locks in a request that never waits (and so never queues); keys
 * (--id) never queue and may always go with it, unless --once-per makes
 * the key wait for its holder. Returns false with a
 * message naming the options when the request mixes them.
 */
static bool mixing_ok(const struct lr_cli *c, double wait, char *err, size_t errlen)
{
	const struct lr_item *named = NULL, *queued = NULL;

	for (size_t i = 0; i < c->nitems; i++) {
		if (c->items[i].kind == LR_KIND_NAMED)
			named = named ? named : &c->items[i];
		else if (c->items[i].kind != LR_KIND_KEY || c->once_per_ms)
			queued = queued ? queued : &c->items[i];
	}
	if (!named || !queued || wait == 0)
		return true;
	snprintf(err, errlen,
	         "--named %s cannot be combined with %s %s in a request that waits: use -n "
	         "or --wait 0, or take the named lock in a lockrun of its own",
	         named->name, kind_option(queued->kind), queued->name);
	return false;
}

/* Merges the command line into the configuration's defaults and checks the
 * result. Returns 0, or the exit status (usage or configuration error)
 * with a message in err that names the culprit. */
static int merge_options(struct run *r, char *err, size_t errlen)
{
	struct lr_lock_defaults *d = &r->cfg.lock;
	struct lr_cli *c = &r->cli;

	if (c->ttl >= 0)
		d->ttl = c->ttl;
	if (c->kill_after >= 0)
		d->kill_after = c->kill_after;
	if (c->wait >= 0)
		d->wait = c->wait;
	if (c->nonblock)
		d->wait = 0;
	if (c->conflict_exit >= 0)
		d->conflict_exit = c->conflict_exit;
	if (c->done_exit >= 0)
		d->done_exit = c->done_exit;
	if (c->on_lost >= 0)
		d->on_lost = (enum lr_on_lost)c->on_lost;
	if (c->local_queue >= 0)
		d->local_queue = c->local_queue;
	r->ttl = d->ttl;
	r->kill_after = d->kill_after;
	if (d->on_lost == LR_ON_LOST_KILL && !term_offset_ms(r->ttl, r->kill_after)) {
		/* Blame the command line if it set either value, else the file. */
		bool from_cli = c->ttl >= 0 || c->kill_after >= 0;
		bool file = !from_cli && r->cfg.path;
		snprintf(err, errlen,
		         "%s%sttl %g with kill-after %g cannot be safe: the command could outlive "
		         "its lease; use a ttl of at least %.0f s or a shorter kill-after",
		         file ? r->cfg.path : "", file ? ": " : "", r->ttl, r->kill_after,
		         (double)lr_duration_ceil((r->kill_after + KILL_MARGIN_MS / 1000.0) /
		                                  (1.0 / 3.0 - CLOCK_RATE_ERROR)));
		return from_cli ? LR_EXIT_USAGE : LR_EXIT_CONFIG;
	}
	/* The items are always the command line's. */
	if (!mixing_ok(c, d->wait, err, errlen))
		return LR_EXIT_USAGE;
	return 0;
}

/* Who runs this: host and user as the lock log records them, escaped
 * like the command line (any bytes fit) and cut to the widths of the
 * host and os_user columns. The caller frees o->host and o->os_user. */
static void owner_of(struct lr_owner *o, char *cmd)
{
	struct passwd *pw = getpwuid(geteuid());
	char host[256];

	if (gethostname(host, sizeof(host)) != 0)
		snprintf(host, sizeof(host), "unknown");
	host[sizeof(host) - 1] = '\0';
	o->host = lr_text_record(host, 255);
	o->os_user = lr_text_record(pw ? pw->pw_name : "unknown", 64);
	o->command = cmd;
	o->pid = getpid();
}

/* A database error that ends the run, with what to do next when lockrun
 * knows it (hint.h). */
static void connect_error(const char *err, const lr_db *db, const struct lr_config *cfg)
{
	char hint[1024];

	lr_log_error("%s%s", err, lr_hint_connect(lr_db_errno(db), cfg, hint, sizeof(hint)));
}

static int acquire_failed(struct run *r, enum lr_acquire a)
{
	switch (a) {
	case LR_ACQ_BUSY:
	case LR_ACQ_KEY_BUSY:
		/* Who holds it (host:pid, account, for how long), as the last
		 * attempt found it. */
		if (r->cli.verbosity >= 0)
			lr_log_error("not acquired: %s%s", r->lock.err, r->lock.holders);
		return r->cfg.lock.conflict_exit;
	case LR_ACQ_FULL:
		/* Not acquired in time, like a busy lock (and -E applies), but
		 * said even with -q: the cause is the database, not a holder. */
		lr_log_error("not acquired: %s", r->lock.err);
		return r->cfg.lock.conflict_exit;
	case LR_ACQ_INVALID:
		lr_log_error("%s", r->lock.err);
		return LR_EXIT_USAGE;
	case LR_ACQ_DONE:
		lr_log_info("not run: %s", r->lock.err);
		return r->cfg.lock.done_exit;
	case LR_ACQ_CANCELED:
		lr_log_info("interrupted while waiting; nothing held");
		return LR_EXIT_SIGBASE + r->stop_signal;
	default:
		connect_error(r->lock.err, r->db, &r->cfg);
		return LR_EXIT_UNAVAILABLE;
	}
}

/* The one line for a --wait that ran out in this host's queue: it names
 * the locks, as the run ahead is the one to look for (holding them or
 * waiting for them at the database), and where to see it. */
static void queue_timeout_error(const struct run *r, double wait)
{
	struct lr_sb sb;
	size_t i;

	lr_sb_init(&sb);
	for (i = 0; i < r->lock.nitems; i++) {
		const struct lr_item *it = &r->lock.items[i];

		if (it->kind == LR_KIND_KEY || it->kind == LR_KIND_NAMED)
			continue;
		lr_sb_printf(&sb, "%s%s '%s'", sb.len ? ", " : "", lr_kind_name(it->kind),
		             lr_item_display_name(it));
	}
	lr_log_error("not acquired after %g s: another run of this host is ahead in its "
	             "queue for %s (it holds them or waits for them at the database; "
	             "'lockrunctl status' shows who)",
	             wait, sb.oom ? "the same locks" : lr_sb_str(&sb));
	lr_sb_finish(&sb);
}

/*
 * A run that may wait first queues behind the runs of this host that want
 * the same locks, holding no connection (prequeue.h), within its --wait:
 * wait_s is what is left of it after. Returns 0 to go on to the database
 * (at the head of the host's queue, or without one when it cannot be
 * used), else the exit status: the wait ran out (as at the database) or a
 * signal came. A free queue costs a few system calls.
 */
static int local_queue(struct run *r, lr_prequeue **pq, double *wait_s)
{
	char *key = lr_prequeue_key(r->lock.items, r->lock.nitems, &r->cfg.db);
	double wait = *wait_s;
	char err[512];

	if (!key)
		return 0; /* only keys: nothing waits */
	*pq = lr_prequeue_open(r->loop, r->cfg.lock.local_queue_dir, key, err, sizeof(err));
	free(key);
	if (!*pq) {
		lr_log_info("no queue on this host (%s): waiting at the database directly", err);
		return 0;
	}
	switch (lr_prequeue_wait(*pq, wait_s, &r->stop)) {
	case LR_PQ_HEAD:
		if (lr_prequeue_waited_ms(*pq))
			lr_log_info("first in this host's queue after %.3f s",
			            lr_prequeue_waited_ms(*pq) / 1000.0);
		return 0;
	case LR_PQ_TIMEOUT:
		if (r->cli.verbosity >= 0)
			queue_timeout_error(r, wait);
		return r->cfg.lock.conflict_exit;
	case LR_PQ_CANCELED:
		lr_log_info("interrupted while waiting; nothing held");
		return LR_EXIT_SIGBASE + r->stop_signal;
	default:
		lr_log_info("no queue on this host (%s): waiting at the database directly",
		            lr_prequeue_error(*pq));
		lr_prequeue_destroy(*pq);
		*pq = NULL;
		return 0;
	}
}

/* The head's count of the runs queued behind it on this host, for the
 * database's queue (status and metrics count them). */
static unsigned host_behind(void *pq)
{
	return lr_prequeue_behind(pq);
}

/* Takes the locks, runs the child under them, gives them back. */
static int run_locked(struct run *r)
{
	char err[1024], *cmd = join_command(r->cli.command);
	lr_prequeue *pq = NULL;
	struct lr_owner owner;
	enum lr_acquire a;
	char **env = NULL;
	double wait;
	int rc;

	owner_of(&owner, cmd);
	if (!cmd || !owner.host || !owner.os_user ||
	    !lr_lock_init(&r->lock, r->loop, r->db, &owner,
	                  (unsigned)lr_duration_round(r->ttl * 1000))) {
		lr_log_error("out of memory");
		rc = LR_EXIT_SOFTWARE;
		goto out;
	}
	r->lock_ready = true;
	for (size_t i = 0; i < r->cli.nitems; i++) {
		if (!lr_request_add(&r->lock, &r->cli.items[i], err, sizeof(err))) {
			lr_log_error("%s", err);
			rc = LR_EXIT_USAGE;
			goto out;
		}
	}
	/* A full server is waited for within --wait; what is left of it is
	 * for the locks. */
	if (r->cli.once_per_ms)
		lr_lock_set_once(&r->lock, r->cli.once_per_ms, r->cli.once_offset_ms);
	lr_lock_set_cancel(&r->lock, &r->stop);
	wait = r->cfg.lock.wait;
	if (wait != 0 && r->cfg.lock.local_queue && (rc = local_queue(r, &pq, &wait)) != 0)
		goto out;
	if (pq)
		lr_lock_set_host_queue(&r->lock, host_behind, pq);
	if (!lr_lock_connect(&r->lock, &wait, &a)) {
		rc = acquire_failed(r, a);
		goto out;
	}
	/* No schema check of its own: the first CALL is one (named locks
	 * alone need no schema at all). */
	a = lr_lock_acquire(&r->lock, wait);
	if (a != LR_ACQ_GRANTED) {
		rc = acquire_failed(r, a);
		goto out;
	}
	/* The min-hold runs from the grant's reply: the grant is older. */
	r->hold_until_ms = r->cli.min_hold_ms ? lr_btimer_now_ms() + r->cli.min_hold_ms : 0;
	lease_renewed(r, r->lock.valid_from_ms);
	if (r->lock.once_window[0])
		lr_log_info("acquired grant %llu for the window from %s UTC",
		            (unsigned long long)r->lock.grant_id, r->lock.once_window);
	else
		lr_log_info("acquired grant %llu", (unsigned long long)r->lock.grant_id);
	if (r->cfg.lock.on_lost == LR_ON_LOST_KILL &&
	    (r->lost || lr_btimer_now_ms() >= r->term_at_ms)) {
		/* Granted, but so slowly that the lease could be over before the
		 * command even started: do not start it. */
		lr_log_error("lock lost (the lease ran out before the command could start)");
		lr_lock_release(&r->lock, LR_END_LOST, 0);
		rc = LR_EXIT_LOCK_LOST;
		goto out;
	}
	if (r->stop) {
		/* Asked to stop between the grant and the spawn: give it back. */
		lr_lock_release(&r->lock, LR_END_ABORTED, 0);
		rc = LR_EXIT_SIGBASE + r->stop_signal;
		goto out;
	}
	env = lock_env(&r->lock);
	if (!env) {
		lr_log_error("out of memory");
		lr_lock_release(&r->lock, LR_END_SPAWN_FAILED, 0);
		rc = LR_EXIT_SOFTWARE;
		goto out;
	}
	rc = lr_sup_spawn(r->sup, r->cli.command, env, err, sizeof(err));
	/* Only now, off the hand-off's critical path: the next run of this
	 * host may go to the database (so a semaphore's local holders run
	 * together), and the doorbell connection goes. */
	lr_lock_set_host_queue(&r->lock, NULL, NULL);
	lr_prequeue_destroy(pq);
	pq = NULL;
	lr_lock_end_wait(&r->lock);
	if (rc != 0) {
		lr_log_error("%s", err);
		lr_lock_release(&r->lock, LR_END_SPAWN_FAILED, 0);
		goto out;
	}
	/* The exec is confirmed, but a slow PATH lookup or fork, or a freeze
	 * since the check above, may have taken it past the deadline: then
	 * stop the command now, before it does anything, not on some later
	 * turn of the loop. */
	if (lr_btimer_now_ms() >= r->term_at_ms)
		lease_lost(r, "the lease ran out while the command was starting", false);
	/* From here a renewal in flight is abandoned as soon as the child is
	 * gone: the release that follows matters more. */
	lr_lock_set_cancel(&r->lock, lr_sup_done_flag(r->sup));
	supervise(r);
	rc = exit_status_of(r);
	/* Lost during --min-hold: the command had ended under the lease,
	 * and its end is what the log (and a once-per window) records. */
	if (r->lost && !r->holding) {
		struct lr_sup_status st = lr_sup_status(r->sup);
		lr_sup_kill_group(r->sup);
		lr_lock_release(&r->lock, LR_END_LOST, st.signaled ? st.signo : 0);
	} else {
		struct lr_sup_status st = lr_sup_status(r->sup);
		/* With --once-per, a success the database was not told of
		 * does not close the window: say so, as the next attempt in
		 * it will run. A release that got no answer may still land
		 * (sent, held by the network, delivered once it heals) while
		 * the grant lives, and then it does record the success: that
		 * outcome is not known here. */
		bool success = r->cli.once_per_ms && !st.signaled && st.code == 0;
		const char *open_window =
		    success ? ", and its window stays open: the success was not recorded" : "";
		const char *maybe_open =
		    success ? ", and its window stays open unless the release, sent but not "
		              "answered, still reaches the database by then: the success may "
		              "not be recorded"
		            : "";
		if (lr_lock_release(&r->lock, st.signaled ? LR_END_SIGNALED : LR_END_EXITED,
		                    st.signaled ? st.signo : st.code))
			lr_log_info("released grant %llu", (unsigned long long)r->lock.grant_id);
		else if (r->lock.ended_before)
			lr_log_warn(
			    "could not release grant %llu (%s): the lock log does not record "
			    "how the command ended%s",
			    (unsigned long long)r->lock.grant_id, r->lock.err, open_window);
		else
			lr_log_warn(
			    "could not release grant %llu (%s); it is free again within %g s%s",
			    (unsigned long long)r->lock.grant_id, r->lock.err,
			    r->ttl + LR_SWEEP_GRACE_MS / 1000.0, maybe_open);
	}
out:
	lr_prequeue_destroy(pq);
	free_env(env);
	free(cmd);
	free((char *)owner.host);
	free((char *)owner.os_user);
	return rc;
}

static int run(struct run *r, int argc, char **argv)
{
	char err[1024];
	int rc;

	lr_cli_init(&r->cli);
	lr_config_init(&r->cfg);
	if (!lr_cli_parse(&r->cli, argc, argv, err, sizeof(err))) {
		lr_log_error("%s (see 'lockrun --help')", err);
		return LR_EXIT_USAGE;
	}
	if (r->cli.help) {
		lr_cli_usage(stdout);
		return LR_EXIT_OK;
	}
	if (r->cli.version) {
		printf("lockrun %s\n", LR_VERSION);
		return LR_EXIT_OK;
	}
	lr_log_set_json(r->cli.log_json);
	lr_log_init("lockrun", r->cli.verbosity < 0    ? LR_LOG_QUIET
	                       : r->cli.verbosity == 0 ? LR_LOG_NORMAL
	                       : r->cli.verbosity == 1 ? LR_LOG_VERBOSE
	                                               : LR_LOG_DEBUG);
	if (!lr_config_load(&r->cfg, r->cli.config)) {
		lr_log_error("%s", r->cfg.err);
		return LR_EXIT_CONFIG;
	}
	rc = merge_options(r, err, sizeof(err));
	if (rc != 0) {
		lr_log_error("%s", err);
		return rc;
	}
	r->loop = malloc(sizeof(*r->loop));
	r->beat = malloc(sizeof(*r->beat));
	r->prep = malloc(sizeof(*r->prep));
	if (!r->loop || !r->beat || !r->prep || uv_loop_init(r->loop) != 0) {
		lr_log_error("cannot set up the event loop");
		return LR_EXIT_OSERR;
	}
	uv_timer_init(r->loop, r->beat);
	r->beat->data = r;
	uv_timer_init(r->loop, r->prep);
	r->prep->data = r;
	r->loop_ready = true;
	r->deadline = lr_btimer_create(r->loop, on_deadline, r);
	r->hold = lr_btimer_create(r->loop, on_hold_over, r);
	if (!r->deadline || !r->hold) {
		lr_log_error("cannot set up the lease deadline timer: %s", strerror(errno));
		return LR_EXIT_OSERR;
	}
	r->sup = lr_sup_create(r->loop, on_signal, r);
	r->db = lr_db_create(r->loop, &r->cfg.db);
	if (!r->sup || !r->db) {
		lr_log_error("cannot set up signal handling");
		return LR_EXIT_OSERR;
	}
	rc = run_locked(r);
	return rc;
}

static void cleanup(struct run *r)
{
	if (r->lock_ready)
		lr_lock_finish(&r->lock);
	lr_db_destroy(r->db);
	lr_sup_destroy(r->sup);
	if (r->loop_ready) {
		uv_close((uv_handle_t *)r->beat, free_handle);
		uv_close((uv_handle_t *)r->prep, free_handle);
		lr_btimer_destroy(r->deadline);
		lr_btimer_destroy(r->hold);
		while (uv_run(r->loop, UV_RUN_DEFAULT) != 0)
			; /* a callback's uv_stop() may end a run early */
		uv_loop_close(r->loop);
	} else {
		free(r->beat);
		free(r->prep);
	}
	free(r->loop);
	lr_cli_finish(&r->cli);
	lr_config_finish(&r->cfg);
}

int main(int argc, char **argv)
{
	struct run r;
	int rc;

	memset(&r, 0, sizeof(r));
	/* Before any disposition changes: what the command is to inherit. */
	lr_sup_note_ignored();
	/* A write to a dead database socket must be an error, not a death. */
	signal(SIGPIPE, SIG_IGN);
	lr_log_init("lockrun", LR_LOG_NORMAL);
	rc = run(&r, argc, argv);
	cleanup(&r);
	return rc;
}
