#include "admin.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lease.h"
#include "report.h"
#include "strbuf.h"
#include "txn.h"

struct set_cap {
	const char *name, *os_user, *host;
	unsigned capacity;
	long old_cap;
	enum lr_admin_result res;
	char msg[256];
};

/* Appends the audit row of a change: action 'capacity' (new NULL:
 * deleted), 'pause' or 'resume', with a note (NULL: none). */
static void audit_sql(lr_db *db, struct lr_sb *sb, const char *name, long old_cap, long new_cap,
                      const char *os_user, const char *host, const char *action, const char *note)
{
	lr_sb_puts(sb, "INSERT INTO lr_capacity_audit (resource, old_capacity, new_capacity, "
	               "db_user, os_user, host, changed_at, action, note) VALUES (");
	lr_db_sb_quote(db, sb, name);
	if (old_cap < 0)
		lr_sb_puts(sb, ", NULL");
	else
		lr_sb_printf(sb, ", %ld", old_cap);
	if (new_cap < 0)
		lr_sb_puts(sb, ", NULL");
	else
		lr_sb_printf(sb, ", %ld", new_cap);
	lr_sb_puts(sb, ", CURRENT_USER(), ");
	lr_db_sb_quote(db, sb, os_user);
	lr_sb_puts(sb, ", ");
	lr_db_sb_quote(db, sb, host);
	lr_sb_printf(sb, ", NOW(6), '%s', ", action);
	if (note)
		lr_db_sb_quote(db, sb, note);
	else
		lr_sb_puts(sb, "NULL");
	lr_sb_puts(sb, ")");
}

static enum lr_txn set_cap_txn(lr_db *db, void *arg)
{
	struct set_cap *s = arg;
	struct lr_sb sb, q;
	enum lr_txn r = LR_TXN_DBERROR;
	MYSQL_ROW row;

	lr_sb_init(&sb);
	lr_sb_init(&q);
	lr_db_sb_quote(db, &q, s->name);
	s->old_cap = -1;
	lr_sb_printf(&sb, "SELECT kind, capacity FROM lr_resources WHERE name = %s FOR UPDATE",
	             lr_sb_str(&q));
	if (!lr_db_query(db, lr_sb_str(&sb)))
		goto out;
	if ((row = lr_db_fetch(db))) {
		if (strcmp(row[0], "semaphore") != 0) {
			snprintf(s->msg, sizeof(s->msg),
			         "'%s' is a %s; only semaphores have a capacity to set", s->name,
			         row[0]);
			s->res = LR_ADMIN_INVALID;
			r = LR_TXN_ROLLBACK;
			goto out;
		}
		s->old_cap = strtol(row[1], NULL, 10);
	}
	if (s->old_cap == (long)s->capacity) {
		r = LR_TXN_ROLLBACK; /* nothing to write */
		goto out;
	}
	lr_sb_reset(&sb);
	/* A new semaphore's tokens start above any a deleted namesake
	 * handed out (lr_fence_floor: the name's own row, written by
	 * lr_admin_delete, and its bucket's, by the routines' lr_reclaim). */
	if (s->old_cap < 0)
		lr_sb_printf(&sb,
		             "INSERT INTO lr_resources (name, kind, capacity, fence) "
		             "VALUES (%s, 'semaphore', %u, COALESCE((SELECT MAX(f.fence) FROM "
		             "lr_fence_floor f WHERE f.name IN (%s, CONCAT('~', "
		             "LEFT(SHA2(%s, 256), 3)))), 0))",
		             lr_sb_str(&q), s->capacity, lr_sb_str(&q), lr_sb_str(&q));
	else
		lr_sb_printf(&sb,
		             "UPDATE lr_resources SET capacity = %u, updated_at = NOW(6) "
		             "WHERE name = %s",
		             s->capacity, lr_sb_str(&q));
	if (!lr_db_query(db, lr_sb_str(&sb)))
		goto out;
	lr_sb_reset(&sb);
	audit_sql(db, &sb, s->name, s->old_cap, s->capacity, s->os_user, s->host, "capacity", NULL);
	if (lr_db_query(db, lr_sb_str(&sb)))
		r = LR_TXN_COMMIT;
out:
	lr_sb_finish(&sb);
	lr_sb_finish(&q);
	return r;
}

/*
 * Creates semaphore NAME or changes its capacity, and records the change
 * (who, from where, when, old, new) in the same transaction. Lowering
 * below current use is allowed: grants stop until use drops. An unchanged
 * capacity writes nothing. Up to five statements; retried on deadlock.
 */
enum lr_admin_result lr_admin_set_capacity(lr_db *db, const char *name, unsigned capacity,
                                           const char *os_user, const char *host, long *old_cap,
                                           char *err, size_t errlen)
{
	struct set_cap s = {.name = name, .os_user = os_user, .host = host, .capacity = capacity};

	switch (lr_txn_run(db, set_cap_txn, &s, err, errlen)) {
	case LR_TXN_COMMIT:
		*old_cap = s.old_cap;
		return LR_ADMIN_OK;
	case LR_TXN_ROLLBACK:
		*old_cap = s.old_cap;
		if (s.res != LR_ADMIN_OK)
			snprintf(err, errlen, "%s", s.msg);
		return s.res;
	default:
		return LR_ADMIN_ERROR;
	}
}

/*
 * Lists every resource row: a table for people, JSON, or only the names
 * (one a line, as stored: a key is "id:KEY"; for shell completion); of
 * one kind only if kind is not NULL (checked by the caller). Used
 * counts the permits of holds an acquirer counts (not past the sweep
 * grace), as `status` does; holds past it that no sweep removed yet are
 * shown apart. One query, no locks. The name column's width comes from
 * a subquery, not a window function: with one, MariaDB 11.8 returns the
 * rows unsorted despite the ORDER BY.
 */
bool lr_admin_list(lr_db *db, enum lr_admin_format fmt, const char *kind, bool view, FILE *out,
                   char *err, size_t errlen)
{
	MYSQL_ROW row;
	bool first = true;

	/* lockrun's own account: the same columns through lockrun_list
	 * (75-views.sql); kind is one of the four, checked by the caller. */
	if (view && !lr_db_queryf(db, "CALL lockrun_list(%s%s%s)", kind ? "'" : "",
	                          kind ? kind : "NULL", kind ? "'" : "")) {
		snprintf(err, errlen, "%s", lr_db_error(db));
		return false;
	}
	if (!view &&
	    !lr_db_queryf(db,
	                  "SELECT r.name, r.kind, r.capacity, COALESCE(SUM(IF(h.expires_at > "
	                  "NOW(6) - " LR_SQL_GRACE ", h.permits, 0)), 0), r.fence, "
	                  "DATE_FORMAT(r.created_at, '%%Y-%%m-%%dT%%H:%%i:%%SZ'), "
	                  "DATE_FORMAT(r.updated_at, '%%Y-%%m-%%dT%%H:%%i:%%SZ'), "
	                  "COALESCE(SUM(h.expires_at <= NOW(6) - " LR_SQL_GRACE "), 0), "
	                  "(SELECT GREATEST(32, MAX(CHAR_LENGTH(x.name))) FROM lr_resources x "
	                  "WHERE x.kind = '%s' OR '%s' = '') "
	                  "FROM lr_resources r LEFT JOIN lr_holds h ON h.resource = r.name "
	                  "WHERE r.kind = '%s' OR '%s' = '' GROUP BY r.name ORDER BY r.name",
	                  kind ? kind : "", kind ? kind : "", kind ? kind : "", kind ? kind : "")) {
		snprintf(err, errlen, "%s", lr_db_error(db));
		return false;
	}
	if (fmt == LR_ADMIN_JSON)
		fputs("{\"resources\":[", out);
	while ((row = lr_db_fetch(db))) {
		/* The name column as wide as the longest name (up to 64). */
		int w = atoi(row[8]);
		if (first && fmt == LR_ADMIN_TABLE)
			fprintf(out, "%-*s %-9s %10s %10s %10s\n", w, "NAME", "KIND", "CAPACITY",
			        "USED", "TOKEN");
		switch (fmt) {
		case LR_ADMIN_NAMES:
			/* Names are checked ASCII on the way in; still, never
			 * hand a terminal a raw byte. */
			lr_report_show(out, row[0], SIZE_MAX, 0);
			fputc('\n', out);
			break;
		case LR_ADMIN_JSON:
			fprintf(out, "%s{\"name\":", first ? "" : ",");
			lr_report_json(out, row[0]);
			fprintf(out,
			        ",\"kind\":\"%s\",\"capacity\":%s,\"used\":%s,\"fence\":%s,"
			        "\"created\":\"%s\",\"updated\":\"%s\",\"expired_holds\":%s}",
			        row[1], row[2], row[3], row[4], row[5], row[6], row[7]);
			break;
		default:
			lr_report_show(out, row[0], SIZE_MAX, (size_t)w);
			fprintf(out, " %-9s %10s %10s %10s", row[1],
			        strcmp(row[1], "rwlock") == 0 ? "-" : row[2], row[3], row[4]);
			if (strcmp(row[7], "0") != 0)
				fprintf(out, "  (%s expired, not swept yet)", row[7]);
			fputc('\n', out);
			break;
		}
		first = false;
	}
	if (fmt == LR_ADMIN_JSON)
		fputs("]}\n", out);
	return true;
}

struct del {
	const char *name, *os_user, *host;
	unsigned long long fence;
	enum lr_admin_result res;
	char msg[256];
};

static enum lr_txn delete_txn(lr_db *db, void *arg)
{
	struct del *d = arg;
	struct lr_sb sb, q;
	enum lr_txn r = LR_TXN_DBERROR;
	MYSQL_ROW row;
	long cap = -1;
	unsigned long long holds, live_holds, waiters;

	lr_sb_init(&sb);
	lr_sb_init(&q);
	lr_db_sb_quote(db, &q, d->name);
	/* The row first, locked: every acquire of it waits for us, and
	 * finds it gone (a mutex is then created anew, from the floor). */
	lr_sb_printf(&sb,
	             "SELECT kind, capacity, fence FROM lr_resources WHERE name = %s FOR UPDATE",
	             lr_sb_str(&q));
	if (!lr_db_query(db, lr_sb_str(&sb)))
		goto out;
	if (!(row = lr_db_fetch(db))) {
		snprintf(d->msg, sizeof(d->msg), "no resource named '%s'", d->name);
		d->res = LR_ADMIN_MISSING;
		r = LR_TXN_ROLLBACK;
		goto out;
	}
	if (strcmp(row[0], "semaphore") == 0)
		cap = strtol(row[1], NULL, 10);
	d->fence = strtoull(row[2], NULL, 10);
	lr_sb_reset(&sb);
	lr_sb_printf(&sb,
	             "SELECT (SELECT COUNT(*) FROM lr_holds WHERE resource = %s), "
	             "(SELECT COUNT(*) FROM lr_holds WHERE resource = %s "
	             "AND expires_at > NOW(6) - " LR_SQL_GRACE "), "
	             "(SELECT COUNT(DISTINCT request_id) FROM lr_waiters WHERE resource = %s "
	             "AND expires_at > NOW(6) - " LR_SQL_GRACE ")",
	             lr_sb_str(&q), lr_sb_str(&q), lr_sb_str(&q));
	if (!lr_db_query(db, lr_sb_str(&sb)) || !(row = lr_db_fetch(db)))
		goto out;
	holds = strtoull(row[0], NULL, 10);
	live_holds = strtoull(row[1], NULL, 10);
	waiters = strtoull(row[2], NULL, 10);
	if (holds || waiters) {
		if (live_holds || waiters)
			snprintf(d->msg, sizeof(d->msg),
			         "'%s' is in use (%llu holder%s, %llu waiter%s); not deleted",
			         d->name, live_holds, live_holds == 1 ? "" : "s", waiters,
			         waiters == 1 ? "" : "s");
		else
			snprintf(d->msg, sizeof(d->msg),
			         "'%s' still has %llu expired hold%s; run 'lockrunctl sweep' first",
			         d->name, holds, holds == 1 ? "" : "s");
		d->res = LR_ADMIN_BUSY;
		r = LR_TXN_ROLLBACK;
		goto out;
	}
	/* The floor: a later resource of this name starts its tokens here,
	 * never lower, so none is handed out twice. */
	lr_sb_reset(&sb);
	lr_sb_printf(&sb,
	             "INSERT INTO lr_fence_floor (name, fence, deleted_at) VALUES (%s, %llu, "
	             "UTC_TIMESTAMP(6)) ON DUPLICATE KEY UPDATE "
	             "fence = GREATEST(fence, VALUES(fence)), deleted_at = VALUES(deleted_at)",
	             lr_sb_str(&q), d->fence);
	if (!lr_db_query(db, lr_sb_str(&sb)))
		goto out;
	/* Waiters that died (past the grace) go with it. */
	lr_sb_reset(&sb);
	lr_sb_printf(&sb, "DELETE FROM lr_waiters WHERE resource = %s", lr_sb_str(&q));
	if (!lr_db_query(db, lr_sb_str(&sb)))
		goto out;
	lr_sb_reset(&sb);
	lr_sb_printf(&sb, "DELETE FROM lr_resources WHERE name = %s", lr_sb_str(&q));
	if (!lr_db_query(db, lr_sb_str(&sb)))
		goto out;
	if (cap >= 0) {
		lr_sb_reset(&sb);
		audit_sql(db, &sb, d->name, cap, -1, d->os_user, d->host, "capacity", NULL);
		if (!lr_db_query(db, lr_sb_str(&sb)))
			goto out;
	}
	r = LR_TXN_COMMIT;
out:
	lr_sb_finish(&sb);
	lr_sb_finish(&q);
	return r;
}

/*
 * Deletes resource NAME (as stored: a key is "id:KEY") unless anyone
 * holds or waits for it, and records its fence in lr_fence_floor so a
 * later resource of that name never reissues a token. A semaphore's
 * deletion is audited like a capacity change (new capacity NULL). One
 * transaction of up to six statements, retried on deadlock.
 */
enum lr_admin_result lr_admin_delete(lr_db *db, const char *name, const char *os_user,
                                     const char *host, unsigned long long *fence, char *err,
                                     size_t errlen)
{
	struct del d = {.name = name, .os_user = os_user, .host = host};

	switch (lr_txn_run(db, delete_txn, &d, err, errlen)) {
	case LR_TXN_COMMIT:
		*fence = d.fence;
		return LR_ADMIN_OK;
	case LR_TXN_ROLLBACK:
		snprintf(err, errlen, "%s", d.msg);
		return d.res;
	default:
		return LR_ADMIN_ERROR;
	}
}

struct pause {
	const char *name, *reason, *os_user, *host;
	bool pause;
	bool changed;
	enum lr_admin_result res;
	char msg[256];
};

static enum lr_txn pause_txn(lr_db *db, void *arg)
{
	struct pause *p = arg;
	struct lr_sb sb, q;
	enum lr_txn r = LR_TXN_DBERROR;
	MYSQL_ROW row;
	long cap;

	lr_sb_init(&sb);
	lr_sb_init(&q);
	lr_db_sb_quote(db, &q, p->name);
	p->changed = false;
	lr_sb_printf(&sb,
	             "SELECT paused_at IS NOT NULL, capacity FROM lr_resources WHERE name = %s "
	             "FOR UPDATE",
	             lr_sb_str(&q));
	if (!lr_db_query(db, lr_sb_str(&sb)))
		goto out;
	if (!(row = lr_db_fetch(db))) {
		snprintf(p->msg, sizeof(p->msg), "no resource '%.80s' (see 'lockrunctl list')",
		         p->name);
		p->res = LR_ADMIN_MISSING;
		r = LR_TXN_ROLLBACK;
		goto out;
	}
	if ((strcmp(row[0], "1") == 0) == p->pause) {
		r = LR_TXN_ROLLBACK; /* paused already, or not paused: nothing to write */
		goto out;
	}
	cap = strtol(row[1], NULL, 10);
	lr_sb_reset(&sb);
	if (p->pause) {
		lr_sb_puts(&sb, "UPDATE lr_resources SET paused_at = NOW(6), paused_by = "
		                "CONCAT(CURRENT_USER(), ' (', ");
		lr_db_sb_quote(db, &sb, p->os_user);
		lr_sb_puts(&sb, ", '@', ");
		lr_db_sb_quote(db, &sb, p->host);
		lr_sb_puts(&sb, ", ')'), pause_note = ");
		lr_db_sb_quote(db, &sb, p->reason ? p->reason : "");
	} else {
		lr_sb_puts(&sb, "UPDATE lr_resources SET paused_at = NULL, paused_by = NULL, "
		                "pause_note = NULL");
	}
	lr_sb_printf(&sb, ", updated_at = NOW(6) WHERE name = %s", lr_sb_str(&q));
	if (!lr_db_query(db, lr_sb_str(&sb)))
		goto out;
	lr_sb_reset(&sb);
	audit_sql(db, &sb, p->name, cap, cap, p->os_user, p->host, p->pause ? "pause" : "resume",
	          p->reason);
	if (lr_db_query(db, lr_sb_str(&sb))) {
		p->changed = true;
		r = LR_TXN_COMMIT;
	}
out:
	lr_sb_finish(&sb);
	lr_sb_finish(&q);
	return r;
}

/*
 * Pauses resource NAME (as stored: a key is "id:KEY"), or resumes it: a
 * paused resource grants nothing new, hand-offs included, while its
 * holders run on and its waiters wait (the procedures check paused_at
 * under the resource row's lock, which this takes too). Records who did
 * it, from where and why in lr_capacity_audit (action 'pause' or
 * 'resume'). *changed: false if it was so already (nothing written).
 * One transaction of three statements, retried on deadlock.
 */
enum lr_admin_result lr_admin_pause(lr_db *db, const char *name, bool pause, const char *reason,
                                    const char *os_user, const char *host, bool *changed, char *err,
                                    size_t errlen)
{
	struct pause p = {
	    .name = name, .reason = reason, .os_user = os_user, .host = host, .pause = pause};

	*changed = false;
	switch (lr_txn_run(db, pause_txn, &p, err, errlen)) {
	case LR_TXN_COMMIT:
		*changed = p.changed;
		return LR_ADMIN_OK;
	case LR_TXN_ROLLBACK:
		if (p.res != LR_ADMIN_OK)
			snprintf(err, errlen, "%s", p.msg);
		return p.res;
	default:
		return LR_ADMIN_ERROR;
	}
}

/* One attempt of lr_admin_new_epoch: lr_epoch forced, then its row. */
static enum lr_txn new_epoch_txn(lr_db *db, void *arg)
{
	struct lr_admin_epoch *e = arg;
	MYSQL_ROW row;

	if (!lr_db_query(db, "CALL lr_epoch(NULL, 1, @lr_since, @lr_until, @lr_floor, @lr_max)") ||
	    !lr_db_query(db, "SELECT @lr_since IS NOT NULL, epoch, "
	                     "DATE_FORMAT(@lr_until, '%Y-%m-%d %H:%i:%s'), fence_floor "
	                     "FROM lr_epoch WHERE id = 1"))
		return LR_TXN_DBERROR;
	if (!(row = lr_db_fetch(db)))
		return LR_TXN_DBERROR;
	e->started = row[0] && strcmp(row[0], "1") == 0;
	snprintf(e->epoch, sizeof(e->epoch), "%s", row[1] ? row[1] : "?");
	snprintf(e->until, sizeof(e->until), "%s", row[2] ? row[2] : "?");
	snprintf(e->floor, sizeof(e->floor), "%s", row[3] ? row[3] : "?");
	return LR_TXN_COMMIT;
}

/*
 * Starts a new fail-over epoch on the server db is connected to, whatever
 * the tables say (lr_epoch with p_force): a quarantine of max_ttl_ms plus
 * the sweep grace, and tokens above this server's clock. For a fail-over
 * tool, after it made this server the writer, and for the cases lr_epoch
 * cannot recognise (an old primary made writable again, a backup restored
 * in place). Refused on a replica, like every grant. One transaction of
 * two statements, run again after a deadlock.
 */
enum lr_admin_result lr_admin_new_epoch(lr_db *db, struct lr_admin_epoch *e, char *err,
                                        size_t errlen)
{
	return lr_txn_run(db, new_epoch_txn, e, err, errlen) == LR_TXN_COMMIT ? LR_ADMIN_OK
	                                                                      : LR_ADMIN_ERROR;
}
