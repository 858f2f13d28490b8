#include "lockcall.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mysqld_error.h>

#include "strbuf.h"
#include "text.h"

/* The API version these calls are written for: every answer row says its
 * own in the `api` column, so the first CALL is also the schema check. */
#define API_VERSION   3
#define WAIT_LOCK     "lockrun.wait."
#define HOLDERS_SHOWN 4
#define HOLDER_COLS   120
#define MESSAGE_COLS  300

static const char *schema_hint = "the lockrun schema is missing or outdated; run 'lockrunctl init'";

/* The item's kind as the API spells it. */
static const char *api_kind(enum lr_kind k)
{
	switch (k) {
	case LR_KIND_SEMAPHORE:
		return "semaphore";
	case LR_KIND_READ:
		return "read";
	case LR_KIND_WRITE:
		return "write";
	case LR_KIND_KEY:
		return "key";
	default:
		return "mutex";
	}
}

/*
 * A CALL as lockrun sends it: constant text with a '?' for every argument,
 * and the arguments apart (lr_db_call). The ids are the request's secrets
 * and the command is the user's; as parameters they never appear in the
 * statement text that other sessions of the same account can read in the
 * process list. Numbers are formatted into num[], the items into items.
 */
struct stmt {
	const char *sql;
	const char *param[LR_DB_PARAMS];
	char num[LR_DB_PARAMS][24];
	unsigned n;
	struct lr_sb items;
};

static void stmt_init(struct stmt *st, const char *sql)
{
	st->sql = sql;
	st->n = 0;
	lr_sb_init(&st->items);
}

static void stmt_finish(struct stmt *st)
{
	lr_sb_finish(&st->items);
}

/* The next argument: a string that outlives the call, or NULL. */
static void arg(struct stmt *st, const char *v)
{
	if (st->n < LR_DB_PARAMS)
		st->param[st->n++] = v;
}

static void arg_num(struct stmt *st, long long v)
{
	if (st->n < LR_DB_PARAMS) {
		snprintf(st->num[st->n], sizeof(st->num[0]), "%lld", v);
		arg(st, st->num[st->n]);
	}
}

/* 'kind:name[:count],...': every table item. Names are checked by
 * lr_name_valid, so they never contain ',' or ':'. A once-per key is
 * 'once:KEY:PERIOD_MS:OFFSET_MS'. */
static void add_items(struct lr_request *lk, struct stmt *st)
{
	struct lr_sb *items = &st->items;
	bool first = true;

	for (size_t i = 0; i < lk->nitems; i++) {
		const struct lr_item *it = &lk->items[i];
		if (it->kind == LR_KIND_NAMED)
			continue;
		bool once = it->kind == LR_KIND_KEY && lk->once_per_ms;
		lr_sb_printf(items, "%s%s:%s", first ? "" : ",", once ? "once" : api_kind(it->kind),
		             lr_item_display_name(it));
		if (it->kind == LR_KIND_SEMAPHORE)
			lr_sb_printf(items, ":%u", it->count);
		if (once)
			lr_sb_printf(items, ":%llu:%llu", (unsigned long long)lk->once_per_ms,
			             (unsigned long long)lk->once_offset_ms);
		first = false;
	}
	arg(st, lr_sb_str(items));
}

/*
 * Judges a failed CALL. A missing or older procedure is the version check
 * (1305 no such procedure, 1318 other arguments, 1146/1054 older tables,
 * 1644 for a once item).
 * acquire says whether the CALL could have granted: then a lost answer is
 * an unknown outcome, to be settled, never simply repeated.
 */
static enum lr_call judge(struct lr_request *lk, lr_db *db, bool acquire)
{
	unsigned e = lr_db_errno(db);

	lr_request_set_db_error(lk, db);
	/* Procedures from before once items refuse the kind by name. */
	if (e == ER_SP_DOES_NOT_EXIST || e == ER_SP_WRONG_NO_OF_ARGS || e == ER_NO_SUCH_TABLE ||
	    e == ER_BAD_FIELD_ERROR ||
	    (e == ER_SIGNAL_EXCEPTION && strstr(lr_db_error(db), "invalid kind 'once'"))) {
		snprintf(lk->err, sizeof(lk->err), "%s: %s", lr_db_server(db), schema_hint);
		return LR_CALL_SCHEMA;
	}
	/* A grant a release handed us while we waited ran out before we
	 * claimed it (we were stopped, say), or a sweep or a force release
	 * ended it before we came back ("used already": a lease id is never
	 * granted twice): it is ended; queue again under a new lease id.
	 * Nothing else of ours meets that refusal: a lost answer is settled,
	 * which replaces the lease id, before any new attempt. */
	if (acquire && e == ER_SIGNAL_EXCEPTION &&
	    (strstr(lr_db_error(db), "expired before it was claimed") ||
	     strstr(lr_db_error(db), "this lease id was used already"))) {
		lk->lease_spent = true;
		return LR_CALL_RETRY;
	}
	/* 1047 or a read-only server: the node refused it; ENOTCONN: it was
	 * never sent. */
	if (acquire && ((lr_db_error_is_connection(e) && e != ER_UNKNOWN_COM_ERROR &&
	                 e != LR_DB_ENOTCONN && e != LR_DB_EREADONLY) ||
	                e == ER_QUERY_INTERRUPTED))
		return LR_CALL_UNKNOWN;
	if (lr_db_error_is_retryable(e) || lr_db_error_is_busy(e))
		return LR_CALL_RETRY;
	/* A lease longer than the database allows (`lockrunctl max-ttl`): a
	 * usage error, with the server's message, which names the limit. */
	if (e == ER_SIGNAL_EXCEPTION && strstr(lr_db_error(db), "ttl_ms must be"))
		return LR_CALL_INVALID;
	return LR_CALL_FAIL;
}

/* Sends a CALL; on success the answer is the current result. One without
 * arguments goes as plain text. */
static enum lr_call call(struct lr_request *lk, lr_db *db, struct stmt *st, bool acquire)
{
	if (st->items.oom) {
		snprintf(lk->err, sizeof(lk->err), "out of memory");
		return LR_CALL_FAIL;
	}
	if (!(st->n ? lr_db_call(db, st->sql, st->param, st->n) : lr_db_query(db, st->sql)))
		return judge(lk, db, acquire);
	return LR_CALL_OK;
}

/* Column positions of an answer, looked up by name: the procedures may add
 * columns, and the order is theirs. */
struct cols {
	int outcome, grant_id, resource, state, fence, ticket, head, at_head, ahead, fits, wait_for,
	    holder, message, galera, api, places, woken, holds, renewed, used, capacity, permits,
	    once_window, paused, ended;
};

static void find_cols(lr_db *db, struct cols *c)
{
	c->outcome = lr_db_column(db, "outcome");
	c->grant_id = lr_db_column(db, "grant_id");
	c->resource = lr_db_column(db, "resource");
	c->state = lr_db_column(db, "state");
	c->fence = lr_db_column(db, "fence");
	c->ticket = lr_db_column(db, "ticket");
	c->head = lr_db_column(db, "head");
	c->at_head = lr_db_column(db, "at_head");
	c->ahead = lr_db_column(db, "ahead");
	c->fits = lr_db_column(db, "fits");
	c->wait_for = lr_db_column(db, "wait_for");
	c->holder = lr_db_column(db, "holder");
	c->message = lr_db_column(db, "message");
	c->galera = lr_db_column(db, "galera");
	c->api = lr_db_column(db, "api");
	c->places = lr_db_column(db, "places");
	c->woken = lr_db_column(db, "woken");
	c->holds = lr_db_column(db, "holds");
	c->renewed = lr_db_column(db, "renewed");
	c->used = lr_db_column(db, "used");
	c->capacity = lr_db_column(db, "capacity");
	c->permits = lr_db_column(db, "permits");
	c->once_window = lr_db_column(db, "once_window");
	c->paused = lr_db_column(db, "paused");
	c->ended = lr_db_column(db, "ended");
}

static const char *str(MYSQL_ROW row, int col)
{
	return col >= 0 && row[col] ? row[col] : "?";
}

static const char *get(MYSQL_ROW row, int col)
{
	return col >= 0 ? row[col] : NULL;
}

static unsigned long long num(MYSQL_ROW row, int col)
{
	const char *v = get(row, col);
	return v ? strtoull(v, NULL, 10) : 0;
}

static bool flag(MYSQL_ROW row, int col)
{
	return num(row, col) != 0;
}

/* Every row must say it speaks our API version: an older schema's
 * procedures of the same name would mean something else. */
static bool api_ok(struct lr_request *lk, lr_db *db, const struct cols *c, MYSQL_ROW row)
{
	if (c->api >= 0 && num(row, c->api) >= API_VERSION)
		return true;
	snprintf(lk->err, sizeof(lk->err), "%s: %s", lr_db_server(db), schema_hint);
	return false;
}

/* Sends a CALL whose answer is one row, and finds that row and its
 * columns. */
static enum lr_call call_row(struct lr_request *lk, lr_db *db, struct stmt *st, struct cols *c,
                             MYSQL_ROW *row)
{
	enum lr_call r = call(lk, db, st, false);

	if (r != LR_CALL_OK)
		return r;
	find_cols(db, c);
	*row = lr_db_fetch(db);
	if (!*row || !api_ok(lk, db, c, *row))
		return LR_CALL_SCHEMA;
	return LR_CALL_OK;
}

/* A wake-up lock name from the database goes back into SQL only if it is
 * one of ours: 'lockrun.wait.' and 32 lowercase hex digits. */
static bool wait_lock_valid(const char *s)
{
	size_t n = strlen(WAIT_LOCK), i;

	if (strncmp(s, WAIT_LOCK, n) != 0)
		return false;
	for (i = n; s[i]; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return i == n + 32;
}

static void note_wait_for(struct lr_request *lk, const char *v)
{
	if (!lk->wait_for[0] && v && wait_lock_valid(v))
		snprintf(lk->wait_for, sizeof(lk->wait_for), "%s", v);
}

/* The once-per window start from the server, 'YYYY-MM-DD HH:MM:SS[.ffffff]'
 * UTC: kept only if it looks like one (it goes into the child's
 * environment), with the fraction's trailing zeros dropped, and the
 * fraction with them if it is all zeros. A window can start inside a
 * second (--once-offset 0.25s): its start must then say so, or two
 * windows of one second would look alike. */
static void note_window(struct lr_request *lk, const char *v)
{
	size_t n = v ? strlen(v) : 0;

	if (n < 19 || n >= sizeof(lk->once_window) || strspn(v, "0123456789-: .") != n ||
	    (n > 19 && (v[19] != '.' || strspn(v + 20, "0123456789") != n - 20)))
		return;
	while (n > 20 && v[n - 1] == '0')
		n--;
	if (n == 20)
		n = 19;
	snprintf(lk->once_window, sizeof(lk->once_window), "%.*s", (int)n, v);
}

static enum lr_outcome outcome_of(const char *s)
{
	if (!s)
		return LR_OUT_NONE;
	if (strcmp(s, "granted") == 0)
		return LR_OUT_GRANTED;
	if (strcmp(s, "queued") == 0)
		return LR_OUT_QUEUED;
	if (strcmp(s, "busy") == 0)
		return LR_OUT_BUSY;
	if (strcmp(s, "key_busy") == 0)
		return LR_OUT_KEY_BUSY;
	if (strcmp(s, "invalid") == 0)
		return LR_OUT_INVALID;
	if (strcmp(s, "done") == 0)
		return LR_OUT_DONE;
	return LR_OUT_NONE;
}

/* The message of the row that decided: a held key or a done window over
 * anything else (neither is waited for), then the first row in name order
 * that is not ok. Server text: shown escaped. */
static void take_message(struct lr_request *lk, const char *msg, const char *state, bool *have)
{
	struct lr_sb sb;
	bool key = state && (strcmp(state, "key_busy") == 0 || strcmp(state, "done") == 0);

	if (!msg || (*have && !key))
		return;
	lr_sb_init(&sb);
	lr_text_show(&sb, msg, MESSAGE_COLS);
	if (!sb.oom)
		snprintf(lk->err, sizeof(lk->err), "%s", lr_sb_str(&sb));
	lr_sb_finish(&sb);
	*have = true;
}

/* "; 'x' held by host:pid (command)", for -v; host and command are
 * whatever another client stored, so shown escaped. */
static void add_holder(struct lr_sb *sb, struct lr_item *it, const char *resource,
                       const char *holder, unsigned *n)
{
	if (!holder || *n >= HOLDERS_SHOWN)
		return;
	lr_sb_puts(sb, *n ? ", '" : "; '");
	if (it)
		lr_sb_puts(sb, lr_item_display_name(it));
	else
		lr_text_show(sb, resource, 80);
	lr_sb_puts(sb, "' held by ");
	lr_text_show(sb, holder, HOLDER_COLS);
	(*n)++;
}

/*
 * One acquire attempt: CALL lockrun_acquire, which sweeps a bounded number
 * of expired rows, decides, and grants, queues (enqueue) or does nothing,
 * all in one transaction in the database. Reads the grant (grant_id and
 * fences), our queue tickets, whether we are at the head, the wake-up lock
 * of the waiter right ahead, the message and holders for the user, and
 * whether the server is a Galera node. One round trip. On an error the
 * outcome is unknown only if the answer was lost (LR_CALL_UNKNOWN).
 */
enum lr_call lr_call_acquire(struct lr_request *lk, bool enqueue, enum lr_outcome *out)
{
	struct lr_sb holders;
	struct stmt sb;
	struct cols c;
	MYSQL_ROW row;
	enum lr_call r;
	size_t rows = 0, tickets = 0;
	unsigned nholders = 0;
	bool have_msg = false, head = true;

	stmt_init(&sb, "CALL lockrun_acquire(?,?,?,?,?,?,?,?,?)");
	lr_sb_init(&holders);
	add_items(lk, &sb);
	arg(&sb, lk->request_id);
	arg(&sb, lk->lease);
	arg_num(&sb, lk->ttl_ms);
	arg_num(&sb, enqueue ? 1 : 0);
	arg(&sb, lk->owner.host);
	arg_num(&sb, (long)lk->owner.pid);
	arg(&sb, lk->owner.os_user);
	arg(&sb, lk->owner.command);
	r = call(lk, lk->db, &sb, true);
	if (r != LR_CALL_OK)
		goto out;
	find_cols(lk->db, &c);
	*out = LR_OUT_NONE;
	lk->wait_for[0] = '\0';
	lk->err[0] = '\0';
	lk->grant_id = 0;
	lk->followed = false;
	while ((row = lr_db_fetch(lk->db))) {
		struct lr_item *it =
		    lr_request_find(lk, get(row, c.resource) ? row[c.resource] : "");
		if (!api_ok(lk, lk->db, &c, row)) {
			r = LR_CALL_SCHEMA;
			goto out;
		}
		rows++;
		*out = outcome_of(get(row, c.outcome));
		lk->galera = flag(row, c.galera);
		if (!flag(row, c.at_head))
			head = false;
		note_wait_for(lk, get(row, c.wait_for));
		note_window(lk, get(row, c.once_window));
		take_message(lk, get(row, c.message), get(row, c.state), &have_msg);
		add_holder(&holders, it, get(row, c.resource), get(row, c.holder), &nholders);
		if (!it)
			continue;
		if (*out == LR_OUT_GRANTED) {
			lk->grant_id = num(row, c.grant_id);
			it->fence = num(row, c.fence);
			if (get(row, c.head))
				lk->followed = true;
		}
		if (get(row, c.ticket)) {
			it->ticket = num(row, c.ticket);
			tickets++;
		}
	}
	if (rows == 0) {
		snprintf(lk->err, sizeof(lk->err), "%s: %s", lr_db_server(lk->db), schema_hint);
		r = LR_CALL_SCHEMA;
		goto out;
	}
	lk->at_head = head;
	lk->queued = *out != LR_OUT_GRANTED && tickets == lk->ntable;
	if (lk->queued)
		lk->ever_queued = true;
	if (*out == LR_OUT_GRANTED && !lk->grant_id) {
		snprintf(lk->err, sizeof(lk->err), "%s: a grant without a grant id",
		         lr_db_server(lk->db));
		r = LR_CALL_FAIL;
	}
	snprintf(lk->holders, sizeof(lk->holders), "%s", holders.oom ? "" : lr_sb_str(&holders));
out:
	stmt_finish(&sb);
	lr_sb_finish(&holders);
	return r;
}

/*
 * After an acquire whose answer was lost: CALL lockrun_settle, on a fresh
 * connection. It first writes every resource row, so it waits for (or, on
 * Galera, conflicts in certification with) the CALL that may still be in
 * flight, then reads the lease and our queue places and commits: what it
 * answers is final. Not granted, it leaves a tombstone for the lease, so a
 * CALL still on its way fails instead of granting: the next attempt needs
 * a new lease id. One round trip; 1205/1213 mean settle again.
 */
enum lr_call lr_call_settle(struct lr_request *lk, enum lr_outcome *out)
{
	struct stmt sb;
	struct cols c;
	MYSQL_ROW row;
	enum lr_call r;
	size_t rows = 0, fences = 0, tickets = 0;
	uint64_t gid = 0;
	bool have_msg = false;

	stmt_init(&sb, "CALL lockrun_settle(?,?,?)");
	add_items(lk, &sb);
	arg(&sb, lk->request_id);
	arg(&sb, lk->lease);
	r = call(lk, lk->db, &sb, false);
	if (r != LR_CALL_OK)
		goto out;
	find_cols(lk->db, &c);
	*out = LR_OUT_NONE;
	while ((row = lr_db_fetch(lk->db))) {
		struct lr_item *it =
		    lr_request_find(lk, get(row, c.resource) ? row[c.resource] : "");
		if (!api_ok(lk, lk->db, &c, row)) {
			r = LR_CALL_SCHEMA;
			goto out;
		}
		rows++;
		*out = outcome_of(get(row, c.outcome));
		note_window(lk, get(row, c.once_window));
		if (*out == LR_OUT_DONE)
			take_message(lk, get(row, c.message), "done", &have_msg);
		if (!it)
			continue;
		if (*out == LR_OUT_GRANTED && get(row, c.fence)) {
			gid = num(row, c.grant_id);
			it->fence = num(row, c.fence);
			fences++;
		}
		if (get(row, c.ticket)) {
			it->ticket = num(row, c.ticket);
			tickets++;
		}
	}
	/* Anything short of the whole request is not what we asked for. */
	if (*out == LR_OUT_GRANTED && (fences != lk->ntable || !gid)) {
		snprintf(lk->err, sizeof(lk->err), "%s: settlement found a partial grant",
		         lr_db_server(lk->db));
		r = LR_CALL_FAIL;
		goto out;
	}
	if (*out == LR_OUT_QUEUED && tickets != lk->ntable)
		*out = LR_OUT_NONE;
	if (rows == 0)
		*out = LR_OUT_NONE;
	lk->grant_id = *out == LR_OUT_GRANTED ? gid : 0;
	lk->queued = *out == LR_OUT_QUEUED;
	/* An acquire whose answer was lost may have queued us: the places
	 * are ours to leave (dequeue) as much as any the answer named. */
	if (lk->queued)
		lk->ever_queued = true;
out:
	stmt_finish(&sb);
	return r;
}

/*
 * The status line of a wait, from a poll's row of the resource it waits
 * for: use, holder or pause, place in the queue. Stored text is escaped.
 */
static void poll_status(struct lr_request *lk, const struct lr_item *it, const struct cols *c,
                        MYSQL_ROW row)
{
	struct lr_sb sb;

	lr_sb_init(&sb);
	lr_sb_printf(&sb, "waiting for '%s': ", lr_item_display_name(it));
	if (get(row, c->paused)) {
		lr_text_show(&sb, get(row, c->paused), MESSAGE_COLS);
		lr_sb_puts(&sb, ", ");
	}
	lr_sb_printf(&sb, "%s/%s used", str(row, c->used), str(row, c->capacity));
	if (get(row, c->holder)) {
		lr_sb_puts(&sb, ", held by ");
		lr_text_show(&sb, get(row, c->holder), HOLDER_COLS);
	}
	lr_sb_printf(&sb, ", %s%s ahead in the queue", str(row, c->ahead),
	             num(row, c->ahead) >= 10 ? " or more" : "");
	snprintf(lk->status, sizeof(lk->status), "%s", sb.oom ? "waiting" : lr_sb_str(&sb));
	lr_sb_finish(&sb);
}

/*
 * A queued waiter's cheap look: CALL lockrun_poll, which also keeps our
 * queue places alive (the heartbeat). *could: an attempt could succeed now
 * (at the head and room on every resource). No rows: our places were
 * swept, lk->queued is cleared and the next attempt queues again. Sets
 * at_head, the places ahead, the wake-up lock to block on, and the status line.
 * One round trip.
 */
enum lr_call lr_call_poll(struct lr_request *lk, bool *could)
{
	struct stmt sb;
	struct cols c;
	MYSQL_ROW row;
	enum lr_call r;
	size_t rows = 0;
	bool head = true, fits = true, decide = false;
	unsigned ahead = 0;

	stmt_init(&sb, "CALL lockrun_poll(?)");
	arg(&sb, lk->request_id);
	r = call(lk, lk->db, &sb, false);
	if (r != LR_CALL_OK)
		goto out;
	find_cols(lk->db, &c);
	lk->wait_for[0] = '\0';
	lk->polls++;
	if (lk->at_head)
		lk->head_polls++;
	while ((row = lr_db_fetch(lk->db))) {
		const char *res = get(row, c.resource);
		struct lr_item *it = lr_request_find(lk, res ? res : "");
		bool row_head = flag(row, c.at_head), row_fits = flag(row, c.fits);
		if (!api_ok(lk, lk->db, &c, row)) {
			r = LR_CALL_SCHEMA;
			goto out;
		}
		rows++;
		lk->galera = flag(row, c.galera);
		if ((!row_head || !row_fits) && head && fits && it)
			poll_status(lk, it, &c, row);
		head = head && row_head;
		fits = fits && row_fits;
		if (num(row, c.ahead) > ahead)
			ahead = (unsigned)num(row, c.ahead);
		note_wait_for(lk, get(row, c.wait_for));
		/* A held key, or a count the capacity no longer allows, is
		 * decided by an attempt at once: neither is worth waiting for.
		 * A once-per key is: its holder's outcome decides ours. */
		if ((it && it->kind == LR_KIND_KEY && !lk->once_per_ms && !row_fits) ||
		    num(row, c.permits) > num(row, c.capacity))
			decide = true;
		if (c.places >= 0 && num(row, c.places) != lk->ntable)
			rows = 0; /* a place was swept: queue again, all of them */
	}
	lk->at_head = head;
	lk->ahead = ahead;
	*could = rows == 0 || decide || (head && fits);
	if (rows == 0)
		lk->queued = false;
out:
	stmt_finish(&sb);
	return r;
}

/*
 * The head waiter's doorbell: CALL lockrun_sleep on db, a connection of its
 * own that runs nothing else (a release KILL QUERYs the sleep; a KILL that
 * came late must not hit anything else). Returns at once if an attempt
 * could succeed, else after at most ms, earlier when a release on the same
 * server rings. Keeps the queue places alive like a poll. *woken: attempt
 * now. A KILL that lands outside SLEEP() ends the CALL with 1317: woken
 * too. No places left: lk->queued is cleared. One round trip.
 */
enum lr_call lr_call_sleep(struct lr_request *lk, lr_db *db, unsigned ms, bool *woken)
{
	struct stmt sb;
	struct cols c;
	MYSQL_ROW row;
	enum lr_call r;

	stmt_init(&sb, "CALL lockrun_sleep(?,?)");
	arg(&sb, lk->request_id);
	arg_num(&sb, ms);
	*woken = false;
	lk->sleeps++;
	r = call_row(lk, db, &sb, &c, &row);
	/* A ring that lands outside SLEEP() interrupts the CALL instead. A
	 * lost conflict of its registration (deadlock, lock wait timeout,
	 * 1020) means a release was changing our places at that moment,
	 * most likely handing us the lock: attempt now, not after a failed
	 * bell's nap. */
	if (r != LR_CALL_OK &&
	    (lr_db_errno(db) == ER_QUERY_INTERRUPTED || lr_db_error_is_conflict(lr_db_errno(db)))) {
		*woken = true;
		r = LR_CALL_OK;
		goto out;
	}
	if (r != LR_CALL_OK)
		goto out;
	*woken = flag(row, c.woken);
	if (c.places >= 0 && num(row, c.places) != lk->ntable) {
		lk->queued = false;
		*woken = true;
	}
out:
	stmt_finish(&sb);
	return r;
}

/* Leaves the queue: CALL lockrun_dequeue deletes our waiter rows and lets
 * go of our wake-up lock, which wakes the waiter behind us. One round
 * trip. */
enum lr_call lr_call_dequeue(struct lr_request *lk)
{
	struct stmt sb;
	struct cols c;
	MYSQL_ROW row;
	enum lr_call r;

	stmt_init(&sb, "CALL lockrun_dequeue(?)");
	arg(&sb, lk->request_id);
	r = call_row(lk, lk->db, &sb, &c, &row);
	if (r == LR_CALL_OK)
		lk->queued = false;
	stmt_finish(&sb);
	return r;
}

/* CALL lockrun_host_queue: tells the database how many runs of this host
 * wait behind this request in the host queue, holding no connection, so
 * that status and metrics count them. Written on our own queue places
 * only. One round trip; sent only when the count changed. */
enum lr_call lr_call_host_queue(struct lr_request *lk, unsigned behind)
{
	struct stmt sb;
	struct cols c;
	MYSQL_ROW row;
	enum lr_call r;

	stmt_init(&sb, "CALL lockrun_host_queue(?,?)");
	arg(&sb, lk->request_id);
	arg_num(&sb, behind);
	r = call_row(lk, lk->db, &sb, &c, &row);
	stmt_finish(&sb);
	return r;
}

/*
 * CALL lockrun_renew: extends every hold of the lease by the ttl from the
 * server's now, but only holds not yet past the grace (one past it may have
 * been swept and its permits given away). *lost: the server says the lease
 * is gone, i.e. not every table item was renewed. One round trip.
 */
enum lr_call lr_call_renew(struct lr_request *lk, bool *lost)
{
	struct stmt sb;
	struct cols c;
	MYSQL_ROW row;
	enum lr_call r;

	stmt_init(&sb, "CALL lockrun_renew(?,?)");
	arg(&sb, lk->lease);
	arg_num(&sb, lk->ttl_ms);
	*lost = false;
	r = call_row(lk, lk->db, &sb, &c, &row);
	/* The database refuses the lease's own terms now (its ttl is above
	 * max_ttl_ms: lowered, or a fail-over to a server that has a lower
	 * one): no renewal will ever succeed, so the lease ends here, not
	 * after retries until it runs out. */
	if (r == LR_CALL_INVALID) {
		*lost = true;
		snprintf(lk->err, sizeof(lk->err),
		         "the lease of grant %llu was lost: the database refuses to renew it: %s",
		         (unsigned long long)lk->grant_id, lr_db_error(lk->db));
		r = LR_CALL_OK;
		goto out;
	}
	if (r != LR_CALL_OK)
		goto out;
	if (num(row, c.renewed) != lk->ntable || num(row, c.holds) != num(row, c.renewed)) {
		/* Why, if the procedures say (a force release names who and
		 * why): whatever its author stored, so shown escaped. */
		struct lr_sb why;
		lr_sb_init(&why);
		if (get(row, c.ended))
			lr_text_show(&why, get(row, c.ended), MESSAGE_COLS);
		*lost = true;
		snprintf(lk->err, sizeof(lk->err), "the lease of grant %llu was lost: %s",
		         (unsigned long long)lk->grant_id,
		         !why.oom && get(row, c.ended) ? lr_sb_str(&why)
		                                       : "it has expired or was revoked");
		lr_sb_finish(&why);
	}
out:
	stmt_finish(&sb);
	return r;
}

static const char *end_name(enum lr_end how)
{
	switch (how) {
	case LR_END_EXITED:
		return "exited";
	case LR_END_SIGNALED:
		return "signaled";
	case LR_END_LOST:
		return "lost";
	case LR_END_SPAWN_FAILED:
		return "spawn_failed";
	case LR_END_ABORTED:
		return "aborted";
	}
	return "aborted";
}

/*
 * CALL lockrun_release: deletes the lease's holds and closes its lock-log
 * entry in one transaction, then rings the doorbell of each freed
 * resource's head waiter. Idempotent: after any error it is simply called
 * again. If the grant had been swept or force-released before (a release
 * resent after its lease ran out, say), the answer says how: then the
 * call fails with lk->ended_before set and lk->err saying so, as the log
 * does not hold how the command ended. One round trip.
 */
enum lr_call lr_call_release(struct lr_request *lk, enum lr_end how, int status)
{
	struct stmt sb;
	struct cols c;
	MYSQL_ROW row;
	enum lr_call r;

	stmt_init(&sb, "CALL lockrun_release(?,?,?,?)");
	arg(&sb, lk->lease);
	arg(&sb, end_name(how));
	if (how == LR_END_EXITED)
		arg_num(&sb, status);
	else
		arg(&sb, NULL);
	if (how == LR_END_SIGNALED || how == LR_END_LOST)
		arg_num(&sb, status);
	else
		arg(&sb, NULL);
	r = call_row(lk, lk->db, &sb, &c, &row);
	if (r == LR_CALL_OK && get(row, c.ended)) {
		struct lr_sb why;
		lr_sb_init(&why);
		lr_text_show(&why, get(row, c.ended), MESSAGE_COLS);
		lk->ended_before = true;
		snprintf(lk->err, sizeof(lk->err), "it had ended before its release: %s",
		         why.oom ? "swept or released by force" : lr_sb_str(&why));
		lr_sb_finish(&why);
		r = LR_CALL_FAIL;
	}
	stmt_finish(&sb);
	return r;
}

/* CALL lockrun_release with no lease: releases nothing, but the server
 * parses the release's routines for this connection now, while the
 * command runs, so that the real release after a contended grant is not
 * slowed by it. One round trip. */
enum lr_call lr_call_prepare_release(struct lr_request *lk)
{
	struct stmt sb;
	struct cols c;
	MYSQL_ROW row;
	enum lr_call r;

	stmt_init(&sb, "CALL lockrun_release(NULL,NULL,NULL,NULL)");
	r = call_row(lk, lk->db, &sb, &c, &row);
	stmt_finish(&sb);
	return r;
}
