#include "history.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "duration.h"
#include "report.h"
#include "strbuf.h"

/* Columns of the history query, in order. */
enum {
	C_ID,
	C_REQUESTED,
	C_ACQUIRED,
	C_ENDED,
	C_REASON,
	C_STATUS,
	C_SIGNAL,
	C_HOST,
	C_PID,
	C_USER,
	C_DBUSER,
	C_CMD,
	C_WAIT_US,
	C_HELD_US,
	C_BY,
	C_BY_OS,
	C_BY_HOST,
	C_NOTE,
	C_ITEMS,
	C_LAPSED,
	C_NCOLS
};

#define TS(col) "DATE_FORMAT(" col ", '%Y-%m-%dT%H:%i:%S.%fZ')"

#define LAPSED LR_HISTORY_LAPSED
#define ENDED  LR_HISTORY_ENDED

/* Items come as "resource|kind|permits|fence,..." (names never hold '|'
 * or ','; fence "-" when none was handed out). Calls fn per item. */
static void each_item(const char *items, void (*fn)(FILE *, char **, size_t), FILE *out)
{
	char *copy, *save = NULL, *it;
	size_t i = 0;

	if (!items || !(copy = strdup(items)))
		return;
	for (it = strtok_r(copy, ",", &save); it; it = strtok_r(NULL, ",", &save), i++) {
		char *f[4] = {it, NULL, NULL, NULL};
		for (int k = 1; k < 4 && f[k - 1]; k++)
			if ((f[k] = strchr(f[k - 1], '|')))
				*f[k]++ = '\0';
		if (f[3])
			fn(out, f, i);
	}
	free(copy);
}

static void json_item(FILE *out, char **f, size_t i)
{
	fprintf(out, "%s{\"resource\":", i ? "," : "");
	lr_report_json(out, f[0]);
	fprintf(out, ",\"kind\":\"%s\",\"permits\":%s,\"token\":%s}", f[1], f[2],
	        strcmp(f[3], "-") ? f[3] : "null");
}

static void text_item(FILE *out, char **f, size_t i)
{
	fputs(i ? ", " : "", out);
	lr_report_show(out, f[0], 64, 0);
	if (strcmp(f[1], "semaphore") == 0)
		fprintf(out, " x%s", f[2]);
	else if (strcmp(f[1], "rwlock") == 0)
		fputs(strcmp(f[2], "1") ? " (write)" : " (read)", out);
	if (strcmp(f[3], "-"))
		fprintf(out, " token %s", f[3]);
}

static void json_num(FILE *out, const char *key, const char *v)
{
	fprintf(out, ",\"%s\":%s", key, v ? v : "null");
}

/* view: read through lockrun_history, which hides the command: the key
 * is left out (the answer's "hidden"). */
static void json_run(FILE *out, MYSQL_ROW r, bool first, bool view)
{
	static const struct {
		const char *key;
		int col;
	} strs[] = {{"requested", C_REQUESTED},
	            {"acquired", C_ACQUIRED},
	            {"ended", C_ENDED},
	            {"end_reason", C_REASON},
	            {"host", C_HOST},
	            {"user", C_USER},
	            {"db_user", C_DBUSER},
	            {"command", C_CMD},
	            {"released_by", C_BY},
	            {"released_os_user", C_BY_OS},
	            {"released_host", C_BY_HOST},
	            {"release_note", C_NOTE}};

	fprintf(out, "%s{\"grant\":%s", first ? "" : ",", r[C_ID]);
	for (size_t k = 0; k < sizeof(strs) / sizeof(strs[0]); k++) {
		if (view && strs[k].col == C_CMD)
			continue;
		fprintf(out, ",\"%s\":", strs[k].key);
		lr_report_json_or_null(out, r[strs[k].col]);
	}
	json_num(out, "pid", r[C_PID]);
	json_num(out, "exit_status", r[C_STATUS]);
	json_num(out, "signal", r[C_SIGNAL]);
	fprintf(out, ",\"not_swept\":%s",
	        r[C_LAPSED] && strcmp(r[C_LAPSED], "1") == 0 ? "true" : "false");
	if (r[C_WAIT_US])
		fprintf(out, ",\"wait_s\":%.3f", strtod(r[C_WAIT_US], NULL) / 1e6);
	else
		fputs(",\"wait_s\":null", out);
	fprintf(out, ",\"held_s\":%.3f,\"resources\":[", strtod(r[C_HELD_US], NULL) / 1e6);
	each_item(r[C_ITEMS], json_item, out);
	fputs("]}", out);
}

/* "exited 0", "killed by signal 9", "force_released", "running"... */
static const char *how_ended(MYSQL_ROW r, char *buf, size_t len)
{
	if (!r[C_ENDED])
		snprintf(buf, len, "running");
	else if (r[C_LAPSED] && strcmp(r[C_LAPSED], "1") == 0)
		snprintf(buf, len, "expired, not swept yet");
	else if (r[C_REASON] && strcmp(r[C_REASON], "exited") == 0 && r[C_STATUS])
		snprintf(buf, len, "exited %s", r[C_STATUS]);
	else if (r[C_REASON] && strcmp(r[C_REASON], "signaled") == 0 && r[C_SIGNAL])
		snprintf(buf, len, "killed by signal %s", r[C_SIGNAL]);
	else
		snprintf(buf, len, "%s", r[C_REASON] ? r[C_REASON] : "ended");
	return buf;
}

/*
 * Three or four lines per run, each within 80 columns (the resources
 * line aside, which lists them all): when and how long, who and what,
 * which resources with which tokens, and who released it by force.
 */
static void text_run(FILE *out, MYSQL_ROW r, bool view)
{
	char d1[32], d2[32], how[64];

	fprintf(out, "grant %s  %.19sZ", r[C_ID], r[C_ACQUIRED]);
	if (r[C_WAIT_US])
		fprintf(out, "  waited %s",
		        lr_duration_format(strtod(r[C_WAIT_US], NULL) / 1e6, d1, sizeof(d1)));
	fprintf(out, "  held %s  %s\n",
	        lr_duration_format(strtod(r[C_HELD_US], NULL) / 1e6, d2, sizeof(d2)),
	        how_ended(r, how, sizeof(how)));
	fputs("  ", out);
	lr_report_show(out, r[C_USER], 10, 0);
	fputc('@', out);
	lr_report_show(out, r[C_HOST], 16, 0);
	fprintf(out, ":%s  ", r[C_PID]);
	lr_report_show(out, view ? LR_REPORT_HIDDEN : r[C_CMD], 40, 0);
	fputs("\n  ", out);
	if (r[C_ITEMS])
		each_item(r[C_ITEMS], text_item, out);
	else
		fputs("(resources not recorded)", out);
	fputc('\n', out);
	if (r[C_BY]) {
		fputs("  released by ", out);
		lr_report_show(out, r[C_BY], 24, 0);
		fputs(" (", out);
		lr_report_show(out, r[C_BY_OS], 10, 0);
		fputc('@', out);
		lr_report_show(out, r[C_BY_HOST], 16, 0);
		fputs("): ", out);
		lr_report_show(out, r[C_NOTE], 20, 0);
		fputc('\n', out);
	}
}

/*
 * Prints the runs of the lock log, newest first: all, or those that held
 * resource q->name; only those running at some time within the last
 * q->since seconds; at most q->limit. Settlement tombstones (never
 * granted) are left out. Two statements: the session's GROUP_CONCAT
 * limit (a run has up to 64 resources), then one query.
 */
bool lr_history_print(lr_db *db, const struct lr_history_query *q, bool json, bool view, FILE *out,
                      size_t *shown, char *err, size_t errlen)
{
	struct lr_sb sb;
	MYSQL_ROW row;
	bool ok = false;

	*shown = 0;
	lr_sb_init(&sb);
	if (!lr_db_query(db, "SET SESSION group_concat_max_len = 1048576"))
		goto fail;
	lr_sb_puts(&sb, "SELECT g.id, " TS("g.requested_at") ", " TS("g.acquired_at") ", " TS(
	                    ENDED) ", COALESCE(g.end_reason, IF(" LAPSED ", 'expired', NULL)), "
	                           "g.exit_status, g.term_signal, g.host, g.pid, g.os_user, "
	                           "g.db_user, g.command, TIMESTAMPDIFF(MICROSECOND, "
	                           "g.requested_at, g.acquired_at), TIMESTAMPDIFF(MICROSECOND, "
	                           "g.acquired_at, COALESCE(" ENDED ", NOW(6))), g.released_by, "
	                           "g.released_os_user, g.released_host, g.release_note, "
	                           "(SELECT GROUP_CONCAT(CONCAT_WS('|', i.resource, i.kind, "
	                           "i.permits, COALESCE(i.fence, '-')) ORDER BY i.resource "
	                           "SEPARATOR ',') FROM lr_grant_items i WHERE i.grant_id = "
	                           "g.id), " LAPSED " FROM lr_grants g LEFT JOIN " LR_HISTORY_HX
	                           " hx ON hx.grant_id = g.id WHERE g.ttl_ms > 0");
	if (q->name) {
		lr_sb_puts(&sb, " AND g.id IN (SELECT f.grant_id FROM lr_grant_items f "
		                "WHERE f.resource = ");
		lr_db_sb_quote(db, &sb, q->name);
		lr_sb_puts(&sb, " OR f.resource = CONCAT('id:', ");
		lr_db_sb_quote(db, &sb, q->name);
		lr_sb_puts(&sb, "))");
	}
	if (q->since)
		lr_sb_printf(&sb,
		             " AND COALESCE(" ENDED ", NOW(6)) >= NOW(6) - INTERVAL %llu SECOND",
		             q->since);
	lr_sb_printf(&sb, " ORDER BY g.acquired_at DESC, g.id DESC LIMIT %lu", q->limit);
	if (view) {
		/* The same columns through lockrun_history (75-views.sql). */
		lr_sb_finish(&sb);
		lr_sb_init(&sb);
		lr_sb_puts(&sb, "CALL lockrun_history(");
		if (q->name)
			lr_db_sb_quote(db, &sb, q->name);
		else
			lr_sb_puts(&sb, "NULL");
		if (q->since)
			lr_sb_printf(&sb, ", %llu, %lu)", q->since, q->limit);
		else
			lr_sb_printf(&sb, ", NULL, %lu)", q->limit);
	}
	if (sb.oom || !lr_db_query(db, lr_sb_str(&sb)))
		goto fail;
	if (json)
		fputs(view ? "{\"hidden\":[\"command\"],\"runs\":[" : "{\"runs\":[", out);
	while ((row = lr_db_fetch(db))) {
		if (json)
			json_run(out, row, *shown == 0, view);
		else
			text_run(out, row, view);
		(*shown)++;
	}
	if (json)
		fputs("]}\n", out);
	ok = true;
	goto out;
fail:
	snprintf(err, errlen, "%s", lr_db_error(db));
out:
	lr_sb_finish(&sb);
	return ok;
}
