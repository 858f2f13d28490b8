#include "status.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "duration.h"
#include "lease.h"
#include "report.h"
#include "strbuf.h"

struct res_row {
	char *name, *kind;
	unsigned long capacity;
	unsigned long long used;        /* permits of holds an acquirer counts (within the grace) */
	unsigned long long fence;       /* the last token handed out */
	unsigned long long holders;     /* grants holding it, within the grace */
	unsigned long long expired;     /* holds past their expiry, not swept yet */
	unsigned long long waiters;     /* waiting requests, live: the database's queue and
	                                 * the host queues behind its places */
	unsigned long long host_queued; /* of which in host queues */
	double oldest_wait;             /* seconds the longest-waiting request has waited */
	double oldest_hold;             /* seconds the longest live hold has been held */
	char *paused_at;                /* NULL unless paused (lockrunctl pause) */
	char *paused_by, *pause_note;
};

static const char *used_text(const struct res_row *r, char *buf, size_t len)
{
	if (strcmp(r->kind, "rwlock") == 0) {
		if (r->used >= r->capacity)
			snprintf(buf, len, "write-locked");
		else if (r->used)
			snprintf(buf, len, "%llu reader%s", r->used, r->used == 1 ? "" : "s");
		else
			snprintf(buf, len, "free");
	} else if (strcmp(r->kind, "semaphore") == 0) {
		snprintf(buf, len, "%llu/%lu used", r->used, r->capacity);
	} else {
		snprintf(buf, len, "%s", r->used ? "held" : "free");
	}
	return buf;
}

static void free_rows(struct res_row *res, size_t n)
{
	for (size_t i = 0; res && i < n; i++) {
		free(res[i].name);
		free(res[i].kind);
		free(res[i].paused_at);
		free(res[i].paused_by);
		free(res[i].pause_note);
	}
	free(res);
}

/* What status shows: all resources or the one named (where: the operator's
 * WHERE clause on lr_resources r), read from the tables or, with view,
 * through lockrun_status. */
struct scope {
	const char *where, *name;
	bool view;
};

/*
 * Runs one read of status: sql, the operator's query, or with s->view the
 * part of lockrun_status that answers with the same columns. One round
 * trip.
 */
static bool scope_query(lr_db *db, const struct scope *s, const char *part, const char *sql)
{
	struct lr_sb sb;
	bool ok;

	if (!s->view)
		return lr_db_query(db, sql);
	lr_sb_init(&sb);
	lr_sb_printf(&sb, "CALL lockrun_status('%s', ", part);
	if (s->name)
		lr_db_sb_quote(db, &sb, s->name);
	else
		lr_sb_puts(&sb, "NULL");
	lr_sb_puts(&sb, ")");
	ok = !sb.oom && lr_db_query(db, lr_sb_str(&sb));
	lr_sb_finish(&sb);
	return ok;
}

/*
 * Reads the resources (all, or the one named) with their counts. Holds
 * and waiters within the grace count as they do for acquirers (see
 * LR_SWEEP_GRACE_MS); expired holds are counted apart. One query.
 */
static bool load_resources(lr_db *db, const struct scope *s, struct res_row **out, size_t *n)
{
	struct lr_sb sb;
	struct res_row *res;
	MYSQL_ROW row;
	bool ok;

	*out = NULL;
	*n = 0;
	lr_sb_init(&sb);
	lr_sb_printf(&sb,
	             "SELECT r.name, r.kind, r.capacity, r.fence, "
	             "COALESCE(SUM(IF(h.expires_at > NOW(6) - " LR_SQL_GRACE
	             ", h.permits, 0)), 0), "
	             "COALESCE(SUM(h.expires_at > NOW(6) - " LR_SQL_GRACE "), 0), "
	             "COALESCE(SUM(h.expires_at <= NOW(6)), 0), "
	             "(SELECT COUNT(*) FROM lr_waiters w "
	             "WHERE w.resource = r.name AND w.expires_at > NOW(6) - " LR_SQL_GRACE "), "
	             "(SELECT COALESCE(TIMESTAMPDIFF(MICROSECOND, MIN(w.since), NOW(6)), 0) "
	             "FROM lr_waiters w WHERE w.resource = r.name "
	             "AND w.expires_at > NOW(6) - " LR_SQL_GRACE "), "
	             "(SELECT COALESCE(TIMESTAMPDIFF(MICROSECOND, MIN(g.acquired_at), NOW(6)), 0) "
	             "FROM lr_holds o JOIN lr_grants g ON g.id = o.grant_id "
	             "WHERE o.resource = r.name AND o.expires_at > NOW(6) - " LR_SQL_GRACE "), "
	             "DATE_FORMAT(r.paused_at, '%%Y-%%m-%%dT%%H:%%i:%%sZ'), r.paused_by, "
	             "r.pause_note, "
	             "(SELECT COALESCE(SUM(w.host_behind), 0) FROM lr_waiters w "
	             "WHERE w.resource = r.name AND w.expires_at > NOW(6) - " LR_SQL_GRACE ") "
	             "FROM lr_resources r LEFT JOIN lr_holds h ON h.resource = r.name %s "
	             "GROUP BY r.name, r.kind, r.capacity, r.fence, r.paused_at, r.paused_by, "
	             "r.pause_note ORDER BY r.name",
	             s->where);
	ok = scope_query(db, s, "resources", lr_sb_str(&sb));
	lr_sb_finish(&sb);
	if (!ok)
		return false;
	res = calloc(lr_db_num_rows(db) + 1, sizeof(*res));
	if (!res)
		return false;
	while ((row = lr_db_fetch(db))) {
		struct res_row *r = &res[*n];
		r->name = strdup(row[0]);
		r->kind = strdup(row[1]);
		r->capacity = strtoul(row[2], NULL, 10);
		r->fence = strtoull(row[3], NULL, 10);
		r->used = strtoull(row[4], NULL, 10);
		r->holders = strtoull(row[5], NULL, 10);
		r->expired = strtoull(row[6], NULL, 10);
		r->waiters = strtoull(row[7], NULL, 10);
		r->oldest_wait = strtod(row[8], NULL) / 1e6;
		r->oldest_hold = strtod(row[9], NULL) / 1e6;
		r->paused_at = row[10] ? strdup(row[10]) : NULL;
		r->paused_by = row[11] ? strdup(row[11]) : NULL;
		r->pause_note = row[12] ? strdup(row[12]) : NULL;
		r->host_queued = strtoull(row[13], NULL, 10);
		r->waiters += r->host_queued; /* the places, and the runs behind them */
		(*n)++;
		if (!r->name || !r->kind || (row[10] && !r->paused_at) ||
		    (row[11] && !r->paused_by) || (row[12] && !r->pause_note))
			break;
	}
	*out = res;
	return *n == lr_db_num_rows(db);
}

/* Columns of the holder/waiter query, in order. */
enum {
	C_RES,
	C_TYPE,
	C_PERMITS,
	C_ORDER,
	C_ID,
	C_HOST,
	C_PID,
	C_USER,
	C_CMD,
	C_SINCE,
	C_EXPIRES,
	C_LEFT_US,
	C_AGE_US,
	C_BEHIND /* waiters: runs of its host queued behind it (the host queue) */
};

/*
 * Holders (type 0, by token) then waiters (type 1, in queue order) of
 * every resource, in one result sorted the way it is printed. Every hold
 * is listed, also one past its grace that no acquirer swept yet (marked);
 * waiters past the grace are gone for everyone, so not listed.
 */
static bool query_parties(lr_db *db, const struct scope *s)
{
	const char *where = s->where;
	bool named = s->name != NULL;
	struct lr_sb sb;
	bool ok;

	lr_sb_init(&sb);
	lr_sb_printf(&sb,
	             "SELECT h.resource, 0, h.permits, h.fence, g.id, g.host, g.pid, g.os_user, "
	             "g.command, DATE_FORMAT(g.acquired_at, '%%Y-%%m-%%dT%%H:%%i:%%SZ'), "
	             "DATE_FORMAT(h.expires_at, '%%Y-%%m-%%dT%%H:%%i:%%S.%%fZ'), "
	             "TIMESTAMPDIFF(MICROSECOND, NOW(6), h.expires_at), "
	             "TIMESTAMPDIFF(MICROSECOND, g.acquired_at, NOW(6)), 0 "
	             "FROM lr_holds h JOIN lr_grants g ON g.id = h.grant_id "
	             "JOIN lr_resources r ON r.name = h.resource %s "
	             "UNION ALL "
	             "SELECT w.resource, 1, w.permits, w.ticket, w.request_id, w.host, w.pid, "
	             "w.os_user, w.command, DATE_FORMAT(w.since, '%%Y-%%m-%%dT%%H:%%i:%%SZ'), "
	             "DATE_FORMAT(w.expires_at, '%%Y-%%m-%%dT%%H:%%i:%%S.%%fZ'), "
	             "TIMESTAMPDIFF(MICROSECOND, NOW(6), w.expires_at), "
	             "TIMESTAMPDIFF(MICROSECOND, w.since, NOW(6)), w.host_behind "
	             "FROM lr_waiters w JOIN lr_resources r ON r.name = w.resource "
	             "%s%s w.expires_at > NOW(6) - " LR_SQL_GRACE " ORDER BY 1, 2, 4",
	             where, where, named ? " AND" : "WHERE");
	ok = scope_query(db, s, "holders", lr_sb_str(&sb));
	lr_sb_finish(&sb);
	return ok;
}

static void json_party(FILE *out, MYSQL_ROW h, unsigned pos)
{
	double left = strtod(h[C_LEFT_US], NULL) / 1e6;
	double age = strtod(h[C_AGE_US], NULL) / 1e6;

	if (h[C_TYPE][0] == '0')
		fprintf(out,
		        "%s{\"grant\":%s,\"permits\":%s,\"token\":%s,\"host\":", pos ? "," : "",
		        h[C_ID], h[C_PERMITS], h[C_ORDER]);
	else {
		/* Through lockrun_status, no request id (a secret) and no
		 * command: those fields are left out (the answer's "hidden"). */
		fputs(pos ? ",{" : "{", out);
		if (h[C_ID]) {
			fputs("\"request\":", out);
			lr_report_json(out, h[C_ID]);
			fputc(',', out);
		}
		fprintf(out, "\"position\":%u,\"permits\":%s,\"ticket\":%s,\"host\":", pos + 1,
		        h[C_PERMITS], h[C_ORDER]);
	}
	lr_report_json(out, h[C_HOST]);
	fprintf(out, ",\"pid\":%s,\"user\":", h[C_PID]);
	lr_report_json(out, h[C_USER]);
	if (h[C_CMD]) {
		fputs(",\"command\":", out);
		lr_report_json(out, h[C_CMD]);
	}
	fprintf(out, ",\"since\":\"%s\",\"expires\":\"%s\"", h[C_SINCE], h[C_EXPIRES]);
	if (h[C_TYPE][0] == '0')
		fprintf(out,
		        ",\"held_s\":%.3f,\"remaining_s\":%.3f,\"expired\":%s,\"sweepable\":%s}",
		        age, left, left <= 0 ? "true" : "false",
		        left * 1000 <= -LR_SWEEP_GRACE_MS ? "true" : "false");
	else
		fprintf(out, ",\"waited_s\":%.3f,\"expired\":%s,\"host_queue_behind\":%s}", age,
		        left <= 0 ? "true" : "false", h[C_BEHIND]);
}

/* Two lines, each within 80 columns whatever the names; stored text is
 * shown escaped, so no row can send a terminal escape to the operator's
 * screen. */
static void text_party(FILE *out, MYSQL_ROW h, unsigned pos)
{
	double left = strtod(h[C_LEFT_US], NULL) / 1e6;
	double age = strtod(h[C_AGE_US], NULL) / 1e6;
	char d1[32], d2[32];

	if (h[C_TYPE][0] == '0')
		fputs("  holder ", out);
	else
		fprintf(out, "  waiter %u: ", pos + 1);
	lr_report_show(out, h[C_HOST], 16, 0);
	fprintf(out, ":%s ", h[C_PID]);
	lr_report_show(out, h[C_USER], 10, 0);
	if (h[C_TYPE][0] == '0' && left <= 0)
		/* Still counted as used within the grace: see LR_SWEEP_GRACE_MS. */
		fprintf(out, ", held %s, token %s, EXPIRED %s ago, not swept\n",
		        lr_duration_format(age, d1, sizeof(d1)), h[C_ORDER],
		        lr_duration_format(left, d2, sizeof(d2)));
	else if (h[C_TYPE][0] == '0')
		fprintf(out, ", held %s, token %s, lease %s left\n",
		        lr_duration_format(age, d1, sizeof(d1)), h[C_ORDER],
		        lr_duration_format(left, d2, sizeof(d2)));
	else if (strcmp(h[C_PERMITS], "2147483647") == 0) /* a write lock's: all */
		fprintf(out, ", waiting %s, to write\n", lr_duration_format(age, d1, sizeof(d1)));
	else
		fprintf(out, ", waiting %s, %s permit%s\n", lr_duration_format(age, d1, sizeof(d1)),
		        h[C_PERMITS], strcmp(h[C_PERMITS], "1") ? "s" : "");
	fprintf(out, "    since %s  ", h[C_SINCE]);
	lr_report_show(out, h[C_CMD] ? h[C_CMD] : LR_REPORT_HIDDEN, 48, 0);
	fputc('\n', out);
	if (h[C_TYPE][0] == '1' && strcmp(h[C_BEHIND], "0") != 0)
		fprintf(out, "    and %s more run%s of its host queued behind it\n", h[C_BEHIND],
		        strcmp(h[C_BEHIND], "1") ? "s" : "");
}

/* The fail-over epoch (migration 7): the server that writes the tables,
 * since when, and how long new grants are still held back. */
struct epoch {
	char n[16], server[256], since[32], until[32];
	double quarantine_s, max_ttl_s;
};

/* Reads the epoch: one query. False if there is none (an older schema):
 * status then shows no epoch. */
static bool load_epoch(lr_db *db, const struct scope *s, struct epoch *e)
{
	MYSQL_ROW row;

	if (!scope_query(db, s, "epoch",
	                 "SELECT epoch, server, DATE_FORMAT(started_at, '%Y-%m-%dT%H:%i:%sZ'), "
	                 "DATE_FORMAT(quarantine_until, '%Y-%m-%dT%H:%i:%sZ'), "
	                 "GREATEST(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), "
	                 "quarantine_until), 0) / 1e6, "
	                 "(SELECT value / 1e3 FROM lr_settings WHERE name = 'max_ttl_ms') "
	                 "FROM lr_epoch WHERE id = 1") ||
	    !(row = lr_db_fetch(db)) || !row[0])
		return false;
	snprintf(e->n, sizeof(e->n), "%s", row[0]);
	snprintf(e->server, sizeof(e->server), "%s", row[1] ? row[1] : "");
	snprintf(e->since, sizeof(e->since), "%s", row[2] ? row[2] : "");
	snprintf(e->until, sizeof(e->until), "%s", row[3] ? row[3] : "");
	e->quarantine_s = row[4] ? strtod(row[4], NULL) : 0;
	e->max_ttl_s = row[5] ? strtod(row[5], NULL) : 0;
	return true;
}

/* The resource list with holders and waiters, as text or JSON. */
static bool print_people(lr_db *db, const struct scope *s, const struct res_row *res, size_t nres,
                         bool json, FILE *out)
{
	MYSQL_ROW pending = NULL;
	struct epoch e;
	bool have_epoch = load_epoch(db, s, &e);

	/* Only a quarantine is news to people; programs get the epoch always. */
	if (have_epoch && !json && e.quarantine_s > 0) {
		fputs("database fail-over at ", out);
		lr_report_show(out, e.since, SIZE_MAX, 0);
		fputs(" (epoch ", out);
		lr_report_show(out, e.n, SIZE_MAX, 0);
		fputs(", now on ", out);
		lr_report_show(out, e.server, SIZE_MAX, 0);
		fputs("): no new grants until ", out);
		lr_report_show(out, e.until, SIZE_MAX, 0);
		fprintf(out, " (%.0f s)\n", e.quarantine_s);
	}
	if (!query_parties(db, s))
		return false;
	if (json && s->view)
		fputs("{\"hidden\":[\"command\",\"request\"],\"resources\":[", out);
	else if (json)
		fputs("{\"resources\":[", out);
	/* The name column as wide as the longest name (up to 64). */
	size_t width = 32;
	for (size_t i = 0; i < nres; i++)
		if (strlen(lr_report_name(res[i].name, res[i].kind)) > width)
			width = strlen(lr_report_name(res[i].name, res[i].kind));
	for (size_t i = 0; i < nres; i++) {
		const struct res_row *r = &res[i];
		char buf[64];
		int section = -1; /* the JSON array open: 0 holders, 1 waiters */
		unsigned pos = 0;
		if (json) {
			fprintf(out, "%s{\"name\":", i ? "," : "");
			lr_report_json(out, lr_report_name(r->name, r->kind));
			fputs(",\"kind\":", out);
			lr_report_json(out, r->kind);
			fprintf(
			    out,
			    ",\"capacity\":%lu,\"used\":%llu,\"fence\":%llu,\"expired_holds\":%llu",
			    r->capacity, r->used, r->fence, r->expired);
			fprintf(out, ",\"waiting\":%llu,\"host_queued\":%llu", r->waiters,
			        r->host_queued);
			fprintf(out, ",\"oldest_hold_s\":%.3f,\"paused\":", r->oldest_hold);
			if (r->paused_at) {
				fprintf(out, "{\"since\":\"%s\",\"by\":", r->paused_at);
				lr_report_json_or_null(out, r->paused_by);
				fputs(",\"reason\":", out);
				lr_report_json_or_null(out, r->pause_note);
				fputc('}', out);
			} else {
				fputs("null", out);
			}
		} else {
			lr_report_show(out, lr_report_name(r->name, r->kind), SIZE_MAX, width);
			fprintf(out, " %-9s %s", r->kind, used_text(r, buf, sizeof(buf)));
			if (r->expired)
				fprintf(out, ", %llu expired", r->expired);
			if (r->paused_at) {
				fprintf(out, ", PAUSED since %s by ", r->paused_at);
				lr_report_show(out, r->paused_by, 40, 0);
				if (r->pause_note && *r->pause_note) {
					fputs(": ", out);
					lr_report_show(out, r->pause_note, 60, 0);
				}
			}
			fputc('\n', out);
		}
		/* Rows come sorted by resource: walk them alongside. Stored rows
		 * stay valid until the result is freed. */
		if (!pending)
			pending = lr_db_fetch(db);
		/* Skip rows of resources that appeared between the two queries. */
		while (pending && strcmp(pending[C_RES], r->name) < 0)
			pending = lr_db_fetch(db);
		for (; pending && strcmp(pending[C_RES], r->name) == 0; pending = lr_db_fetch(db)) {
			int type = pending[C_TYPE][0] - '0';
			if (section != type) {
				if (json)
					fputs(section < 0 && type == 1
					          ? ",\"holders\":[],\"waiters\":["
					      : section < 0 ? ",\"holders\":["
					                    : "],\"waiters\":[",
					      out);
				section = type;
				pos = 0;
			}
			if (json)
				json_party(out, pending, pos);
			else
				text_party(out, pending, pos);
			pos++;
		}
		if (json)
			fputs(section < 0    ? ",\"holders\":[],\"waiters\":[]}"
			      : section == 0 ? "],\"waiters\":[]}"
			                     : "]}",
			      out);
	}
	if (json && have_epoch) {
		fprintf(out, "],\"epoch\":{\"epoch\":%s,\"server\":", e.n);
		lr_report_json(out, e.server);
		fprintf(out,
		        ",\"started_at\":\"%s\",\"quarantine_until\":\"%s\","
		        "\"quarantine_s\":%.3f,\"max_ttl_s\":%.3f}}\n",
		        e.since, e.until, e.quarantine_s, e.max_ttl_s);
	} else if (json) {
		fputs("]}\n", out);
	}
	return true;
}

/* A label value in the exposition format: \, " and newline escaped. */
static void prom_label(FILE *out, const char *s)
{
	for (; *s; s++) {
		if (*s == '\\' || *s == '"')
			fprintf(out, "\\%c", *s);
		else if (*s == '\n')
			fputs("\\n", out);
		else
			fputc(*s, out);
	}
}

static void prom_head(FILE *out, const char *metric, const char *help, const char *type)
{
	fprintf(out, "# HELP lockrun_%s %s\n# TYPE lockrun_%s %s\n", metric, help, metric, type);
}

/* The end reasons of lr_grants.end_reason, in the schema's order. */
static const char *const reasons[] = {"exited",       "signaled", "lost",           "expired",
                                      "spawn_failed", "aborted",  "force_released", "skipped"};
#define NREASONS (sizeof(reasons) / sizeof(reasons[0]))

/*
 * The Prometheus text exposition format (version 0.0.4), for
 * node_exporter's textfile collector: one gauge family per figure, one
 * series per resource, and the grants that ended in the last hour per
 * resource and end reason (every reason, zeros included, so alert rules
 * never meet a missing series). Two more queries.
 */
static bool print_prometheus(lr_db *db, const struct scope *s, const struct res_row *res,
                             size_t nres, FILE *out)
{
	static const struct {
		const char *metric, *help;
	} fams[] = {
	    {"resource_capacity", "Permits the resource has (a mutex 1, a read-write lock "
	                          "2147483647)."},
	    {"resource_used", "Permits held by live leases (expired within the 5 s grace "
	                      "included, as acquirers count them)."},
	    {"resource_holders", "Grants holding the resource."},
	    {"resource_waiters", "Requests waiting for the resource: in the database's queue, "
	                         "and in host queues behind their host's first."},
	    {"resource_oldest_wait_seconds", "How long the longest-waiting request has waited."},
	    {"resource_expired_holds", "Holds whose lease expired but that nobody swept yet."},
	    {"resource_oldest_hold_seconds", "How long the longest live hold has been held "
	                                     "(0: none)."},
	    {"resource_paused", "1 while the resource is paused (lockrunctl pause): it grants "
	                        "nothing new."},
	    {"resource_fence_total", "The last fencing token handed out: one more per grant, "
	                             "never less."},
	};
	unsigned long long *ended = NULL;
	struct lr_sb sb;
	MYSQL_ROW row;
	bool ok = false;

	lr_sb_init(&sb);
	ended = calloc(nres * NREASONS + 1, sizeof(*ended));
	if (!ended)
		goto out;
	lr_sb_printf(&sb,
	             "SELECT i.resource, g.end_reason, COUNT(*) FROM lr_grants g "
	             "JOIN lr_grant_items i ON i.grant_id = g.id "
	             "JOIN lr_resources r ON r.name = i.resource %s%s "
	             "g.ended_at > NOW(6) - INTERVAL 1 HOUR GROUP BY 1, 2 ORDER BY 1, 2",
	             s->where, *s->where ? " AND" : "WHERE");
	if (!scope_query(db, s, "ended", lr_sb_str(&sb)))
		goto out;
	while ((row = lr_db_fetch(db))) {
		for (size_t i = 0; i < nres; i++) {
			if (strcmp(res[i].name, row[0]) != 0)
				continue;
			for (size_t k = 0; k < NREASONS; k++)
				if (row[1] && strcmp(row[1], reasons[k]) == 0)
					ended[i * NREASONS + k] = strtoull(row[2], NULL, 10);
		}
	}
	for (size_t f = 0; f < sizeof(fams) / sizeof(fams[0]); f++) {
		prom_head(out, fams[f].metric, fams[f].help,
		          strstr(fams[f].metric, "_total") ? "counter" : "gauge");
		for (size_t i = 0; i < nres; i++) {
			const struct res_row *r = &res[i];
			fprintf(out, "lockrun_%s{resource=\"", fams[f].metric);
			prom_label(out, r->name);
			fprintf(out, "\",kind=\"%s\"} ", r->kind);
			switch (f) {
			case 0:
				fprintf(out, "%lu\n", r->capacity);
				break;
			case 1:
				fprintf(out, "%llu\n", r->used);
				break;
			case 2:
				fprintf(out, "%llu\n", r->holders);
				break;
			case 3:
				fprintf(out, "%llu\n", r->waiters);
				break;
			case 4:
				fprintf(out, "%.3f\n", r->oldest_wait);
				break;
			case 5:
				fprintf(out, "%llu\n", r->expired);
				break;
			case 6:
				fprintf(out, "%.3f\n", r->oldest_hold);
				break;
			case 7:
				fprintf(out, "%d\n", r->paused_at != NULL);
				break;
			default:
				fprintf(out, "%llu\n", r->fence);
				break;
			}
		}
	}
	prom_head(out, "grants_ended_last_hour",
	          "Grants of the resource that ended in the last hour, by end reason.", "gauge");
	for (size_t i = 0; i < nres; i++) {
		for (size_t k = 0; k < NREASONS; k++) {
			fputs("lockrun_grants_ended_last_hour{resource=\"", out);
			prom_label(out, res[i].name);
			fprintf(out, "\",kind=\"%s\",reason=\"%s\"} %llu\n", res[i].kind,
			        reasons[k], ended[i * NREASONS + k]);
		}
	}
	struct epoch e;
	if (load_epoch(db, s, &e)) {
		prom_head(out, "epoch",
		          "The fail-over epoch: one more each time another server "
		          "took over the lock tables.",
		          "gauge");
		fprintf(out, "lockrun_epoch %s\n", e.n);
		prom_head(out, "quarantine_seconds",
		          "How long new grants are still held back after a fail-over (0: none).",
		          "gauge");
		fprintf(out, "lockrun_quarantine_seconds %.3f\n", e.quarantine_s);
		prom_head(out, "max_ttl_seconds",
		          "The longest lease this database grants, and a fail-over's quarantine.",
		          "gauge");
		fprintf(out, "lockrun_max_ttl_seconds %.3f\n", e.max_ttl_s);
	}
	if (!lr_db_query(db, "SELECT UNIX_TIMESTAMP(NOW(6))") || !(row = lr_db_fetch(db)))
		goto out;
	prom_head(out, "status_time_seconds",
	          "When these figures were read, by the database server's clock.", "gauge");
	fprintf(out, "lockrun_status_time_seconds %s\n", row[0]);
	ok = true;
out:
	free(ended);
	lr_sb_finish(&sb);
	return ok;
}

/*
 * Prints resources with their live holders and waiters: as text for
 * people (fits 80 columns), JSON for programs, or the Prometheus format.
 * A snapshot read: status decides nothing. Two or three queries.
 */
bool lr_status_print(lr_db *db, const char *name, enum lr_status_format fmt, bool view, FILE *out,
                     bool *found, char *err, size_t errlen)
{
	struct scope s = {.name = name, .view = view};
	struct lr_sb where;
	struct res_row *res = NULL;
	size_t nres = 0;
	bool ok = false;

	*found = false;
	lr_sb_init(&where);
	if (name) {
		lr_sb_puts(&where, "WHERE (r.name = ");
		lr_db_sb_quote(db, &where, name);
		lr_sb_puts(&where, " OR r.name = CONCAT('id:', ");
		lr_db_sb_quote(db, &where, name);
		lr_sb_puts(&where, "))");
	}
	s.where = lr_sb_str(&where);
	if (!load_resources(db, &s, &res, &nres))
		goto fail;
	*found = nres > 0;
	if (fmt == LR_STATUS_PROMETHEUS)
		ok = print_prometheus(db, &s, res, nres, out);
	else
		ok = print_people(db, &s, res, nres, fmt == LR_STATUS_JSON, out);
	if (ok)
		goto out;
fail:
	snprintf(err, errlen, "%s", lr_db_errno(db) ? lr_db_error(db) : "out of memory");
out:
	free_rows(res, nres);
	lr_sb_finish(&where);
	return ok;
}
