#include "sweep.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "lease.h"
#include "log.h"
#include "strbuf.h"
#include "txn.h"

/* Reads one column of ids (or names) into sb as an SQL list "a, b, c";
 * returns how many. */
static size_t id_list(lr_db *db, struct lr_sb *sb, bool quote)
{
	MYSQL_ROW row;
	size_t n = 0;

	lr_sb_reset(sb);
	while ((row = lr_db_fetch(db))) {
		lr_sb_puts(sb, n ? ", " : "");
		if (quote)
			lr_db_sb_quote(db, sb, row[0]);
		else
			lr_sb_puts(sb, row[0]);
		n++;
	}
	return n;
}

struct recount {
	const char *name;
	bool repaired;
	char was[24], now[24]; /* the count before and after, when repaired */
};

/*
 * Sets one resource's `used` to the permits of its hold rows if the two
 * disagree, under the resource row's lock, which every grant and release
 * takes before it writes holds. The holds are read after that lock is
 * held, by a consistent read (not a locking one, which would deadlock
 * with a release): it counts every hold committed so far, and still
 * counts one whose delete waits in its trigger for our lock, which that
 * trigger takes off once we commit. Three statements.
 */
static enum lr_txn recount_txn(lr_db *db, void *arg)
{
	struct recount *r = arg;
	struct lr_sb q;
	MYSQL_ROW row;
	enum lr_txn ret = LR_TXN_DBERROR;

	r->repaired = false;
	lr_sb_init(&q);
	lr_db_sb_quote(db, &q, r->name);
	if (!lr_db_queryf(db, "SELECT used FROM lr_resources WHERE name = %s FOR UPDATE",
	                  lr_sb_str(&q)))
		goto out;
	if (!(row = lr_db_fetch(db)) || !row[0]) {
		ret = LR_TXN_COMMIT; /* deleted meanwhile */
		goto out;
	}
	snprintf(r->was, sizeof(r->was), "%s", row[0]);
	if (!lr_db_queryf(db, "SELECT COALESCE(SUM(permits), 0) FROM lr_holds WHERE resource = %s",
	                  lr_sb_str(&q)) ||
	    !(row = lr_db_fetch(db)) || !row[0])
		goto out;
	snprintf(r->now, sizeof(r->now), "%s", row[0]);
	if (strcmp(r->was, r->now) != 0) {
		if (!lr_db_queryf(db, "UPDATE lr_resources SET used = %s WHERE name = %s", r->now,
		                  lr_sb_str(&q)))
			goto out;
		r->repaired = true;
	}
	ret = LR_TXN_COMMIT;
out:
	lr_sb_finish(&q);
	return ret;
}

/*
 * Repairs every resource whose `used` disagrees with its hold rows. The
 * triggers on lr_holds keep the count; it drifts only through hand edits
 * of the tables or past bugs, and then a resource looks busy when it is
 * not, or lets more in than its capacity. Runs first, so the deletes of
 * expired holds that follow start from true counts. Finds them a batch
 * of names at a time, in name order (a read of the resource rows and an
 * index range of holds per resource), and repairs each in a transaction
 * of its own; logs a warning naming the first few it repaired.
 */
static bool repair_used(lr_db *db, struct lr_sweep_counts *c, char *err, size_t errlen)
{
	struct lr_sb last, shown;
	MYSQL_ROW row;
	char **names = NULL;
	size_t n = 0;
	bool ok = false;

	lr_sb_init(&last);
	lr_sb_init(&shown);
	lr_sb_puts(&last, "''");
	do {
		for (size_t i = 0; names && i < n; i++)
			free(names[i]);
		free(names);
		names = NULL;
		n = 0;
		if (!lr_db_queryf(
		        db,
		        "SELECT r.name FROM lr_resources r WHERE r.name > %s AND r.used <> "
		        "(SELECT COALESCE(SUM(h.permits), 0) FROM lr_holds h "
		        "WHERE h.resource = r.name) ORDER BY r.name LIMIT %d",
		        lr_sb_str(&last), LR_SWEEP_BATCH)) {
			snprintf(err, errlen, "%s", lr_db_error(db));
			goto out;
		}
		if (!(names = calloc(lr_db_num_rows(db) + 1, sizeof(*names))))
			goto oom;
		while ((row = lr_db_fetch(db)))
			if (!(names[n++] = strdup(row[0])))
				goto oom;
		for (size_t i = 0; i < n; i++) {
			struct recount r = {.name = names[i]};
			if (lr_txn_run(db, recount_txn, &r, err, errlen) != LR_TXN_COMMIT)
				goto out;
			c->transactions++;
			if (!r.repaired)
				continue;
			if (c->recounted++ < LR_SWEEP_SHOWN)
				lr_sb_printf(&shown, "%s%s (%s, now %s)",
				             c->recounted > 1 ? ", " : "", names[i], r.was, r.now);
		}
		if (n) {
			lr_sb_reset(&last);
			lr_db_sb_quote(db, &last, names[n - 1]);
		}
	} while (n == LR_SWEEP_BATCH);
	if (c->recounted)
		lr_log_warn("repaired the used count of %llu resource%s, which disagreed with the "
		            "hold rows: %s%s",
		            c->recounted, c->recounted == 1 ? "" : "s", lr_sb_str(&shown),
		            c->recounted > LR_SWEEP_SHOWN ? ", ..." : "");
	ok = true;
	goto out;
oom:
	snprintf(err, errlen, "out of memory");
out:
	for (size_t i = 0; names && i < n; i++)
		free(names[i]);
	free(names);
	lr_sb_finish(&last);
	lr_sb_finish(&shown);
	return ok;
}

struct res_sweep {
	const char *name;
	struct lr_sweep_counts *c;
	size_t holds, waiters; /* rows this transaction removed */
};

/*
 * One resource's expired holds and dead queue places, at most a batch of
 * each, in one short transaction: the resource row is locked first (as
 * every lockrun transaction locks it), then the expired hold rows, so a
 * late renewal waits and then finds its hold gone. Each grant is closed
 * as expired at its hold's expiry, as lr_sweep does inside an acquire.
 */
static enum lr_txn resource_txn(lr_db *db, void *arg)
{
	struct res_sweep *s = arg;
	struct lr_sb sb, q, ids;
	enum lr_txn r = LR_TXN_DBERROR;
	uint64_t ended = 0;

	s->holds = s->waiters = 0;
	lr_sb_init(&sb);
	lr_sb_init(&q);
	lr_sb_init(&ids);
	lr_db_sb_quote(db, &q, s->name);
	lr_sb_printf(&sb, "SELECT 1 FROM lr_resources WHERE name = %s FOR UPDATE", lr_sb_str(&q));
	if (!lr_db_query(db, lr_sb_str(&sb)))
		goto out;
	lr_sb_reset(&sb);
	lr_sb_printf(&sb,
	             "SELECT grant_id FROM lr_holds WHERE resource = %s "
	             "AND expires_at <= NOW(6) - " LR_SQL_GRACE " ORDER BY expires_at LIMIT %d "
	             "FOR UPDATE",
	             lr_sb_str(&q), LR_SWEEP_BATCH);
	if (!lr_db_query(db, lr_sb_str(&sb)))
		goto out;
	if (id_list(db, &ids, false)) {
		lr_sb_reset(&sb);
		lr_sb_printf(&sb,
		             "UPDATE lr_grants g JOIN lr_holds h ON h.grant_id = g.id "
		             "AND h.resource = %s SET g.ended_at = h.expires_at, "
		             "g.end_reason = 'expired' WHERE g.id IN (%s) AND g.ended_at IS NULL",
		             lr_sb_str(&q), lr_sb_str(&ids));
		if (!lr_db_query(db, lr_sb_str(&sb)))
			goto out;
		ended = lr_db_affected_rows(db);
		lr_sb_reset(&sb);
		lr_sb_printf(&sb, "DELETE FROM lr_holds WHERE resource = %s AND grant_id IN (%s)",
		             lr_sb_str(&q), lr_sb_str(&ids));
		if (!lr_db_query(db, lr_sb_str(&sb)))
			goto out;
		s->holds = lr_db_affected_rows(db);
		/* `used` is kept by the procedures (no triggers): the row is
		 * ours, so count the holds left, as lr_sweep does. */
		lr_sb_reset(&sb);
		lr_sb_printf(&sb,
		             "UPDATE lr_resources SET used = (SELECT COALESCE(SUM(permits), 0) "
		             "FROM lr_holds WHERE resource = %s) WHERE name = %s",
		             lr_sb_str(&q), lr_sb_str(&q));
		if (!lr_db_query(db, lr_sb_str(&sb)))
			goto out;
	}
	lr_sb_reset(&sb);
	lr_sb_printf(&sb,
	             "DELETE FROM lr_waiters WHERE resource = %s "
	             "AND expires_at <= NOW(6) - " LR_SQL_GRACE " ORDER BY expires_at LIMIT %d",
	             lr_sb_str(&q), LR_SWEEP_BATCH);
	if (!lr_db_query(db, lr_sb_str(&sb)))
		goto out;
	s->waiters = lr_db_affected_rows(db);
	s->c->expired += ended;
	r = LR_TXN_COMMIT;
out:
	lr_sb_finish(&sb);
	lr_sb_finish(&q);
	lr_sb_finish(&ids);
	return r;
}

/* One pass over up to a batch of resources with a hold or a queue place
 * past the grace, each in transactions of its own; *n says how many
 * resources it found, *removed how many rows it took away. */
static bool expired_pass(lr_db *db, struct lr_sweep_counts *c, size_t *n,
                         unsigned long long *removed, char *err, size_t errlen)
{
	MYSQL_ROW row;
	char **names = NULL;
	bool ok = false;

	*n = 0;
	*removed = 0;
	if (!lr_db_queryf(db,
	                  "SELECT resource FROM lr_holds WHERE expires_at <= NOW(6) - " LR_SQL_GRACE
	                  " UNION SELECT resource FROM lr_waiters "
	                  "WHERE expires_at <= NOW(6) - " LR_SQL_GRACE " ORDER BY 1 LIMIT %d",
	                  LR_SWEEP_BATCH)) {
		snprintf(err, errlen, "%s", lr_db_error(db));
		return false;
	}
	names = calloc(lr_db_num_rows(db) + 1, sizeof(*names));
	if (!names)
		goto oom;
	while ((row = lr_db_fetch(db)))
		if (!(names[(*n)++] = strdup(row[0])))
			goto oom;
	for (size_t i = 0; i < *n; i++) {
		struct res_sweep s = {.name = names[i], .c = c};
		do {
			if (lr_txn_run(db, resource_txn, &s, err, errlen) != LR_TXN_COMMIT)
				goto out;
			c->transactions++;
			c->holds += s.holds;
			c->waiters += s.waiters;
			*removed += s.holds + s.waiters;
		} while (s.holds == LR_SWEEP_BATCH || s.waiters == LR_SWEEP_BATCH);
	}
	ok = true;
	goto out;
oom:
	snprintf(err, errlen, "out of memory");
out:
	for (size_t i = 0; names && i < *n; i++)
		free(names[i]);
	free(names);
	return ok;
}

/* Ends what expired, a batch of resources at a time, until a pass finds
 * fewer than a batch, or removes nothing (rows another sweep took). */
static bool sweep_expired(lr_db *db, struct lr_sweep_counts *c, char *err, size_t errlen)
{
	unsigned long long removed;
	size_t n;

	do {
		if (!expired_pass(db, c, &n, &removed, err, errlen))
			return false;
	} while (n == LR_SWEEP_BATCH && removed);
	return true;
}

struct batch {
	const char *ids;
	unsigned long long retention_s;
	struct lr_sweep_counts *c;
	uint64_t done;
};

/*
 * Open grants that hold nothing: their lockrun cannot renew them (a
 * renewal extends holds), so they are over; ended as expired at the end
 * of their last lease. Only once that lease is a minute past, so a grant
 * whose acquire is still committing is never touched.
 */
static enum lr_txn orphan_txn(lr_db *db, void *arg)
{
	struct batch *b = arg;

	if (!lr_db_queryf(db,
	                  "UPDATE lr_grants g SET g.end_reason = 'expired', g.ended_at = "
	                  "LEAST(UTC_TIMESTAMP(6), COALESCE(g.renewed_at, g.acquired_at) "
	                  "+ INTERVAL g.ttl_ms * 1000 MICROSECOND) "
	                  "WHERE g.id IN (%s) AND g.ended_at IS NULL "
	                  "AND NOT EXISTS (SELECT 1 FROM lr_holds h WHERE h.grant_id = g.id)",
	                  b->ids))
		return LR_TXN_DBERROR;
	b->done = lr_db_affected_rows(db);
	return LR_TXN_COMMIT;
}

/* Finished log entries past the retention, with their items. A grant of
 * a --once-per window that is still open is kept whatever its age: it
 * is what says the window's run is done. */
static enum lr_txn purge_txn(lr_db *db, void *arg)
{
	struct batch *b = arg;

	if (!lr_db_queryf(db, "DELETE FROM lr_grant_items WHERE grant_id IN (%s)", b->ids))
		return LR_TXN_DBERROR;
	b->c->items_deleted += lr_db_affected_rows(db);
	if (!lr_db_queryf(db,
	                  "DELETE FROM lr_grants WHERE id IN (%s) AND ended_at < NOW(6) - "
	                  "INTERVAL %llu SECOND",
	                  b->ids, b->retention_s))
		return LR_TXN_DBERROR;
	b->done = lr_db_affected_rows(db);
	return LR_TXN_COMMIT;
}

/* One bounded DELETE, b->ids being the whole statement here. */
static enum lr_txn limited_txn(lr_db *db, void *arg)
{
	struct batch *b = arg;

	if (!lr_db_query(db, b->ids))
		return LR_TXN_DBERROR;
	b->done = lr_db_affected_rows(db);
	return LR_TXN_COMMIT;
}

/* Runs a DELETE ... LIMIT LR_SWEEP_BATCH, each in its own transaction,
 * until one takes less than a batch. */
static bool drain(lr_db *db, const char *del, struct batch *b, unsigned long long *count, char *err,
                  size_t errlen)
{
	do {
		b->ids = del;
		b->done = 0;
		if (lr_txn_run(db, limited_txn, b, err, errlen) != LR_TXN_COMMIT)
			return false;
		b->c->transactions++;
		*count += b->done;
	} while (b->done >= LR_SWEEP_BATCH);
	return true;
}

/*
 * Runs fn over batches of ids that `select` (a query of one column,
 * LIMIT LR_SWEEP_BATCH) finds, until a batch comes back empty; adds what
 * fn reports done to *count. A batch another sweep took meanwhile does
 * nothing here and the next select moves on.
 */
static bool batches(lr_db *db, const char *select, lr_txn_fn fn, struct batch *b,
                    unsigned long long *count, char *err, size_t errlen)
{
	struct lr_sb ids;
	bool ok = false;
	int idle = 0;

	lr_sb_init(&ids);
	/* A batch that changed nothing was another sweep's; a few of those
	 * in a row can only be rows this one cannot change: stop. */
	while (idle < 3) {
		size_t n;
		if (!lr_db_query(db, select)) {
			snprintf(err, errlen, "%s", lr_db_error(db));
			break;
		}
		if ((n = id_list(db, &ids, false)) == 0) {
			ok = true;
			break;
		}
		b->ids = lr_sb_str(&ids);
		if (lr_txn_run(db, fn, b, err, errlen) != LR_TXN_COMMIT)
			break;
		b->c->transactions++;
		*count += b->done;
		idle = b->done ? 0 : idle + 1;
	}
	if (idle >= 3)
		ok = true;
	lr_sb_finish(&ids);
	return ok;
}

/*
 * The whole sweep: `used` counts that disagree with the hold rows,
 * expired holds and dead queue places (per resource), open grants
 * without holds, then the log entries older than
 * retention_s and the audit rows older than 30 days, in batches of at
 * most LR_SWEEP_BATCH rows per transaction. Every step is idempotent and
 * safe beside another sweep: a row taken by the other one is simply no
 * longer found. Deadlocks and lock wait timeouts rerun the transaction.
 */
bool lr_sweep_run(lr_db *db, unsigned long long retention_s, struct lr_sweep_counts *c, char *err,
                  size_t errlen)
{
	struct batch b = {.retention_s = retention_s, .c = c};
	struct lr_sb sel;
	bool ok = false;

	memset(c, 0, sizeof(*c));
	lr_sb_init(&sel);
	if (!repair_used(db, c, err, errlen) || !sweep_expired(db, c, err, errlen))
		goto out;
	lr_sb_printf(&sel,
	             "SELECT g.id FROM lr_grants g WHERE g.ended_at IS NULL "
	             "AND COALESCE(g.renewed_at, g.acquired_at) + INTERVAL g.ttl_ms * 1000 "
	             "MICROSECOND < NOW(6) - INTERVAL 60 SECOND "
	             "AND NOT EXISTS (SELECT 1 FROM lr_holds h WHERE h.grant_id = g.id) "
	             "ORDER BY g.id LIMIT %d",
	             LR_SWEEP_BATCH);
	if (!batches(db, lr_sb_str(&sel), orphan_txn, &b, &c->orphans, err, errlen))
		goto out;
	lr_sb_reset(&sel);
	lr_sb_printf(&sel,
	             "SELECT id FROM lr_grants WHERE ended_at < NOW(6) - INTERVAL %llu SECOND "
	             "AND (once_window IS NULL OR once_window + INTERVAL once_period_ms * 1000 "
	             "MICROSECOND <= NOW(6)) ORDER BY ended_at LIMIT %d",
	             retention_s, LR_SWEEP_BATCH);
	if (!batches(db, lr_sb_str(&sel), purge_txn, &b, &c->grants_deleted, err, errlen))
		goto out;
	lr_sb_reset(&sel);
	lr_sb_printf(&sel,
	             "DELETE FROM lr_capacity_audit WHERE changed_at < NOW(6) - "
	             "INTERVAL %d DAY ORDER BY id LIMIT %d",
	             LR_SWEEP_AUDIT_DAYS, LR_SWEEP_BATCH);
	if (!drain(db, lr_sb_str(&sel), &b, &c->audit_deleted, err, errlen))
		goto out;
	/* --once-per completions: only what an acquire looks up, kept while
	 * a clock step back could still reach their window (a day, or three
	 * windows if longer); the history is in lr_grants. */
	lr_sb_reset(&sel);
	lr_sb_printf(&sel,
	             "DELETE FROM lr_once WHERE window_end < NOW(6) - INTERVAL 1 DAY "
	             "AND window_end < NOW(6) - INTERVAL 3 * period_ms * 1000 MICROSECOND "
	             "ORDER BY window_end LIMIT %d",
	             LR_SWEEP_BATCH);
	if (!drain(db, lr_sb_str(&sel), &b, &c->once_deleted, err, errlen))
		goto out;
	/* When it last ran, for `lockrunctl doctor`, which says when no
	 * sweep ran for days: a timer not enabled, or one whose account may
	 * not write the tables. */
	if (!lr_db_query(db, "INSERT INTO lr_settings (name, value, changed_at, changed_by) "
	                     "VALUES ('last_sweep', 0, UTC_TIMESTAMP(6), CURRENT_USER()) "
	                     "ON DUPLICATE KEY UPDATE changed_at = UTC_TIMESTAMP(6), "
	                     "changed_by = CURRENT_USER()")) {
		snprintf(err, errlen, "%s", lr_db_error(db));
		goto out;
	}
	ok = true;
out:
	lr_sb_finish(&sel);
	return ok;
}
