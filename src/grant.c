#include "grant.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "duration.h"
#include "report.h"
#include "strbuf.h"
#include "txn.h"

/* A hold the grant has, or had a moment ago. */
struct hold {
	char *resource;
	uint64_t fence;
};

static void free_holds(struct hold *h, size_t n)
{
	for (size_t i = 0; h && i < n; i++)
		free(h[i].resource);
	free(h);
}

/* Does resource row `stored` answer to the name `given` (a key's row is
 * "id:KEY"; either spelling is accepted)? */
static bool same_name(const char *stored, const char *given)
{
	return strcmp(stored, given) == 0 ||
	       (strncmp(stored, "id:", 3) == 0 && strcmp(stored + 3, given) == 0);
}

/*
 * Whether grant `id` is live: it exists, has not ended, holds at least one
 * resource, and no hold has expired by the server's clock. With tokens,
 * also that it holds each named resource with exactly that token. Prints
 * the answer (text or JSON; nothing when quiet). One query, no locks: the
 * answer may be stale the moment it is printed, as any check from outside
 * the application's own transaction is (lockrun_check is the in-transaction
 * one).
 */
enum lr_grant_result lr_grant_check(lr_db *db, uint64_t id, bool view,
                                    const struct lr_grant_token *want, size_t nwant, bool json,
                                    bool quiet, FILE *out, char *err, size_t errlen)
{
	struct hold *holds = NULL;
	size_t nholds = 0;
	char why[512] = "", d[32], *end_reason = NULL, *ended_at = NULL;
	double left = 0;
	bool exists = false, open = false;
	MYSQL_ROW row;

	/* view: lockrun's own account, through lockrun_grant (75-views.sql),
	 * which answers with the same columns. */
	if (!(view ? lr_db_queryf(db, "CALL lockrun_grant(%" PRIu64 ")", id)
	           : lr_db_queryf(db,
	                          "SELECT g.ended_at IS NULL, g.end_reason, "
	                          "DATE_FORMAT(g.ended_at, '%%Y-%%m-%%dT%%H:%%i:%%S.%%fZ'), "
	                          "h.resource, h.fence, TIMESTAMPDIFF(MICROSECOND, NOW(6), "
	                          "h.expires_at) FROM lr_grants g LEFT JOIN lr_holds h ON "
	                          "h.grant_id = g.id WHERE g.id = %" PRIu64 " ORDER BY h.resource",
	                          id))) {
		snprintf(err, errlen, "%s", lr_db_error(db));
		return LR_GRANT_DBERROR;
	}
	holds = calloc(lr_db_num_rows(db) + 1, sizeof(*holds));
	if (!holds) {
		snprintf(err, errlen, "out of memory");
		return LR_GRANT_DBERROR;
	}
	while ((row = lr_db_fetch(db))) {
		double l;
		if (!exists) {
			exists = true;
			open = row[0][0] == '1';
			end_reason = row[1] ? strdup(row[1]) : NULL;
			ended_at = row[2] ? strdup(row[2]) : NULL;
		}
		if (!row[3])
			continue;
		l = strtod(row[5], NULL) / 1e6;
		if (nholds == 0 || l < left)
			left = l;
		holds[nholds].resource = strdup(row[3]);
		holds[nholds].fence = strtoull(row[4], NULL, 10);
		if (!holds[nholds++].resource) {
			snprintf(why, sizeof(why), "out of memory");
			break;
		}
	}
	if (*why)
		;
	else if (!exists)
		snprintf(why, sizeof(why), "no such grant");
	else if (!open)
		snprintf(why, sizeof(why), "ended (%s) at %s", end_reason ? end_reason : "?",
		         ended_at ? ended_at : "?");
	else if (nholds == 0)
		snprintf(why, sizeof(why), "holds nothing");
	else if (left <= 0)
		snprintf(why, sizeof(why), "lease expired %s ago",
		         lr_duration_format(left, d, sizeof(d)));
	for (size_t k = 0; !*why && k < nwant; k++) {
		size_t i = 0;
		while (i < nholds && !same_name(holds[i].resource, want[k].name))
			i++;
		if (i == nholds)
			snprintf(why, sizeof(why), "does not hold '%s'", want[k].name);
		else if (holds[i].fence != want[k].token)
			snprintf(why, sizeof(why), "'%s' has token %" PRIu64 ", not %" PRIu64,
			         want[k].name, holds[i].fence, want[k].token);
	}
	if (json) {
		fprintf(out, "{\"grant\":%" PRIu64 ",\"live\":%s,\"why\":", id,
		        *why ? "false" : "true");
		lr_report_json_or_null(out, *why ? why : NULL);
		fputs(",\"end_reason\":", out);
		lr_report_json_or_null(out, end_reason);
		fputs(",\"ended\":", out);
		lr_report_json_or_null(out, ended_at);
		if (nholds)
			fprintf(out, ",\"remaining_s\":%.3f", left);
		else
			fputs(",\"remaining_s\":null", out);
		fputs(",\"holds\":[", out);
		for (size_t i = 0; i < nholds; i++) {
			fprintf(out, "%s{\"resource\":", i ? "," : "");
			lr_report_json(out, holds[i].resource);
			fprintf(out, ",\"token\":%" PRIu64 "}", holds[i].fence);
		}
		fputs("]}\n", out);
	} else if (!quiet && *why) {
		fprintf(out, "grant %" PRIu64 ": not live: %s\n", id, why);
	} else if (!quiet) {
		fprintf(out, "grant %" PRIu64 ": live, lease %s left;", id,
		        lr_duration_format(left, d, sizeof(d)));
		for (size_t i = 0; i < nholds; i++) {
			fputs(i ? ", " : " ", out);
			lr_report_show(out, holds[i].resource, 80, 0);
			fprintf(out, " token %" PRIu64, holds[i].fence);
		}
		fputc('\n', out);
	}
	free_holds(holds, nholds);
	free(end_reason);
	free(ended_at);
	return *why ? LR_GRANT_NOT : LR_GRANT_OK;
}

struct release {
	uint64_t id;
	const struct lr_grant_releaser *by;
	struct hold *holds;
	size_t nholds;
	char msg[256];
};

/* The grant's hold rows, in name order, locked or not; into r->holds. */
static bool read_holds(lr_db *db, struct release *r, bool lock)
{
	MYSQL_ROW row;

	free_holds(r->holds, r->nholds);
	r->holds = NULL;
	r->nholds = 0;
	if (!lr_db_queryf(db,
	                  "SELECT resource, fence FROM lr_holds WHERE grant_id = %" PRIu64
	                  " ORDER BY resource%s",
	                  r->id, lock ? " FOR UPDATE" : ""))
		return false;
	r->holds = calloc(lr_db_num_rows(db) + 1, sizeof(*r->holds));
	if (!r->holds)
		return false;
	while ((row = lr_db_fetch(db))) {
		if (!(r->holds[r->nholds].resource = strdup(row[0])))
			return false;
		r->nholds++;
	}
	return true;
}

static enum lr_txn release_txn(lr_db *db, void *arg)
{
	struct release *r = arg;
	struct lr_sb sb, in;
	enum lr_txn res = LR_TXN_DBERROR;
	MYSQL_ROW row;
	size_t locked;

	lr_sb_init(&sb);
	lr_sb_init(&in);
	/* Which rows to lock: read plainly first, then lock the resource
	 * rows in name order, the order of every lockrun transaction, before
	 * touching the grant or its holds (as lockrun_release does). */
	if (!read_holds(db, r, false))
		goto out;
	for (size_t i = 0; i < r->nholds; i++) {
		lr_sb_reset(&sb);
		lr_sb_puts(&sb, "SELECT 1 FROM lr_resources WHERE name = ");
		lr_db_sb_quote(db, &sb, r->holds[i].resource);
		lr_sb_puts(&sb, " FOR UPDATE");
		if (!lr_db_query(db, lr_sb_str(&sb)))
			goto out;
		lr_sb_puts(&in, i ? ", " : "");
		lr_db_sb_quote(db, &in, r->holds[i].resource);
	}
	locked = r->nholds;
	if (!lr_db_queryf(db,
	                  "SELECT ended_at IS NULL, end_reason FROM lr_grants WHERE id = %" PRIu64
	                  " FOR UPDATE",
	                  r->id))
		goto out;
	if (!(row = lr_db_fetch(db))) {
		snprintf(r->msg, sizeof(r->msg), "no grant %" PRIu64, r->id);
		res = LR_TXN_ROLLBACK;
		goto out;
	}
	if (row[0][0] != '1') {
		snprintf(r->msg, sizeof(r->msg), "grant %" PRIu64 " has ended already (%s)", r->id,
		         row[1] ? row[1] : "?");
		res = LR_TXN_ROLLBACK;
		goto out;
	}
	/* Holds are only ever removed, and whoever removes one ends the
	 * grant in the same transaction: with the grant still open, they are
	 * the ones read. Read again, locked, to be sure. */
	if (!read_holds(db, r, true))
		goto out;
	if (r->nholds != locked) {
		/* Cannot happen by the rule above; let the retry start over. */
		snprintf(r->msg, sizeof(r->msg), "grant %" PRIu64 " changed; try again", r->id);
		res = LR_TXN_ROLLBACK;
		goto out;
	}
	if (r->nholds) {
		/* Every token the zombie has is now below the resource's
		 * fence: a downstream that checks tokens refuses it, and the
		 * next grant gets one above it. */
		lr_sb_reset(&sb);
		lr_sb_printf(&sb,
		             "UPDATE lr_resources SET fence = fence + 1, updated_at = NOW(6) "
		             "WHERE name IN (%s)",
		             lr_sb_str(&in));
		if (!lr_db_query(db, lr_sb_str(&sb)))
			goto out;
		lr_sb_reset(&sb);
		lr_sb_printf(&sb,
		             "SELECT name, fence FROM lr_resources WHERE name IN (%s) "
		             "ORDER BY name",
		             lr_sb_str(&in));
		if (!lr_db_query(db, lr_sb_str(&sb)))
			goto out;
		for (size_t i = 0; (row = lr_db_fetch(db)) && i < r->nholds; i++)
			r->holds[i].fence = strtoull(row[1], NULL, 10);
		/* The permits go back to `used`, which the procedures keep
		 * (no triggers: see sql/routines/95-recount.sql), then the holds. */
		if (!lr_db_queryf(db,
		                  "UPDATE lr_resources r JOIN lr_holds h ON h.resource = r.name "
		                  "SET r.used = IF(r.used >= h.permits, r.used - h.permits, 0) "
		                  "WHERE h.grant_id = %" PRIu64,
		                  r->id) ||
		    !lr_db_queryf(db, "DELETE FROM lr_holds WHERE grant_id = %" PRIu64, r->id))
			goto out;
	}
	lr_sb_reset(&sb);
	lr_sb_printf(&sb, "UPDATE lr_grants SET ended_at = UTC_TIMESTAMP(6), "
	                  "end_reason = 'force_released', released_by = USER(), "
	                  "released_os_user = ");
	lr_db_sb_quote(db, &sb, r->by->os_user);
	lr_sb_puts(&sb, ", released_host = ");
	lr_db_sb_quote(db, &sb, r->by->host);
	lr_sb_puts(&sb, ", release_note = ");
	lr_db_sb_quote(db, &sb, r->by->reason);
	lr_sb_printf(&sb, " WHERE id = %" PRIu64 " AND ended_at IS NULL", r->id);
	if (lr_db_query(db, lr_sb_str(&sb)))
		res = LR_TXN_COMMIT;
out:
	lr_sb_finish(&sb);
	lr_sb_finish(&in);
	return res;
}

/*
 * Ends grant `id` by force: in one transaction, locks its resource rows
 * in name order, raises each one's fence by one (so the zombie's tokens
 * are stale everywhere), deletes its holds and closes its log entry as
 * force_released with who, from where and why. Its lockrun learns it at
 * its next renewal (no open grant) and stops its command. A grant that
 * has ended already is refused. Waiters are not woken at once (their
 * next poll, within a second, sees the room). About 6 + n statements.
 */
enum lr_grant_result lr_grant_release(lr_db *db, uint64_t id, const struct lr_grant_releaser *by,
                                      bool json, bool quiet, FILE *out, char *err, size_t errlen)
{
	struct release r = {.id = id, .by = by};
	enum lr_grant_result res = LR_GRANT_DBERROR;

	switch (lr_txn_run(db, release_txn, &r, err, errlen)) {
	case LR_TXN_COMMIT:
		res = LR_GRANT_OK;
		break;
	case LR_TXN_ROLLBACK:
		snprintf(err, errlen, "%s", r.msg);
		res = LR_GRANT_NOT;
		goto out;
	default:
		goto out;
	}
	if (json) {
		fprintf(out, "{\"grant\":%" PRIu64 ",\"released\":true,\"holds\":[", id);
		for (size_t i = 0; i < r.nholds; i++) {
			fprintf(out, "%s{\"resource\":", i ? "," : "");
			lr_report_json(out, r.holds[i].resource);
			fprintf(out, ",\"fence\":%" PRIu64 "}", r.holds[i].fence);
		}
		fputs("]}\n", out);
	} else if (!quiet) {
		fprintf(out, "grant %" PRIu64 " released by force", id);
		for (size_t i = 0; i < r.nholds; i++) {
			fputs(i ? ", " : "; fences now ", out);
			lr_report_show(out, r.holds[i].resource, 80, 0);
			fprintf(out, " %" PRIu64, r.holds[i].fence);
		}
		fputc('\n', out);
	}
out:
	free_holds(r.holds, r.nholds);
	return res;
}
