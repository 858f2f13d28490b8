#include "admin.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <mysqld_error.h>

#include "lock.h"
#include "strbuf.h"
#include "text.h"

/*
 * Creates semaphore NAME or changes its capacity, and records the change
 * (who, from where, when, old, new) in the same transaction. Lowering
 * below current use is allowed: grants stop until use drops. An unchanged
 * capacity writes nothing. Up to six statements; retried on deadlock.
 */
enum lr_admin_result lr_admin_set_capacity(lr_db *db, const char *name, unsigned capacity,
                                           const char *os_user, const char *host, long *old_cap,
                                           char *err, size_t errlen)
{
	struct lr_sb sb, qname;
	enum lr_admin_result res = LR_ADMIN_ERROR;
	MYSQL_ROW row;
	unsigned e;

	lr_sb_init(&sb);
	lr_sb_init(&qname);
	lr_db_sb_quote(db, &qname, name);
	for (int attempt = 0; attempt < 5; attempt++) {
		*old_cap = -1;
		if (!lr_db_query(db, "START TRANSACTION"))
			goto db_fail;
		lr_sb_reset(&sb);
		lr_sb_printf(&sb,
		             "SELECT kind, capacity FROM lr_resources WHERE name = %s FOR UPDATE",
		             lr_sb_str(&qname));
		if (!lr_db_query(db, lr_sb_str(&sb)))
			goto db_fail;
		if ((row = lr_db_fetch(db))) {
			if (strcmp(row[0], "semaphore") != 0) {
				snprintf(err, errlen,
				         "'%s' is a %s; only semaphores have a capacity to set",
				         name, row[0]);
				lr_db_query(db, "ROLLBACK");
				res = LR_ADMIN_INVALID;
				goto out;
			}
			*old_cap = strtol(row[1], NULL, 10);
		}
		if (*old_cap == (long)capacity) {
			lr_db_query(db, "ROLLBACK");
			res = LR_ADMIN_OK;
			goto out;
		}
		lr_sb_reset(&sb);
		if (*old_cap < 0)
			lr_sb_printf(&sb,
			             "INSERT INTO lr_resources (name, kind, capacity) "
			             "VALUES (%s, 'semaphore', %u)",
			             lr_sb_str(&qname), capacity);
		else
			lr_sb_printf(&sb,
			             "UPDATE lr_resources SET capacity = %u, updated_at = NOW(6) "
			             "WHERE name = %s",
			             capacity, lr_sb_str(&qname));
		if (!lr_db_query(db, lr_sb_str(&sb)))
			goto db_fail;
		lr_sb_reset(&sb);
		lr_sb_printf(&sb,
		             "INSERT INTO lr_capacity_audit (resource, old_capacity, new_capacity, "
		             "db_user, os_user, host, changed_at) VALUES (%s, ",
		             lr_sb_str(&qname));
		if (*old_cap < 0)
			lr_sb_puts(&sb, "NULL");
		else
			lr_sb_printf(&sb, "%ld", *old_cap);
		lr_sb_printf(&sb, ", %u, CURRENT_USER(), ", capacity);
		lr_db_sb_quote(db, &sb, os_user);
		lr_sb_puts(&sb, ", ");
		lr_db_sb_quote(db, &sb, host);
		lr_sb_puts(&sb, ", NOW(6))");
		if (!lr_db_query(db, lr_sb_str(&sb)) || !lr_db_query(db, "COMMIT"))
			goto db_fail;
		res = LR_ADMIN_OK;
		goto out;
	db_fail:
		/* Judge the failed statement: the ROLLBACK resets the error. */
		e = lr_db_errno(db);
		snprintf(err, errlen, "%s", lr_db_error(db));
		if (lr_db_connected(db))
			lr_db_query(db, "ROLLBACK");
		if (e != ER_LOCK_DEADLOCK && e != ER_LOCK_WAIT_TIMEOUT)
			break;
	}
out:
	lr_sb_finish(&sb);
	lr_sb_finish(&qname);
	return res;
}

/* s as a JSON string: valid whatever the bytes (see text.h). */
static void json_str(FILE *out, const char *s)
{
	struct lr_sb sb;

	lr_sb_init(&sb);
	lr_text_json(&sb, s);
	fputs(lr_sb_str(&sb), out);
	lr_sb_finish(&sb);
}

/* s for a terminal, control characters and invalid UTF-8 escaped, in at
 * most width columns and padded with spaces to pad columns. */
static void show(FILE *out, const char *s, size_t width, size_t pad)
{
	struct lr_sb sb;
	size_t used;

	lr_sb_init(&sb);
	used = lr_text_show(&sb, s, width);
	fprintf(out, "%s%*s", lr_sb_str(&sb), used < pad ? (int)(pad - used) : 0, "");
	lr_sb_finish(&sb);
}

/* A resource's name as users wrote it: keys are stored with a prefix. */
static const char *shown(const char *name, const char *kind)
{
	return strcmp(kind, "key") == 0 && strncmp(name, "id:", 3) == 0 ? name + 3 : name;
}

struct res_row {
	char *name, *kind;
	unsigned long capacity;
	unsigned long long used;
	unsigned long long fence;
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

/*
 * Prints resources with their live holders, as text for people (fits 80
 * columns) or as JSON for programs. A snapshot read: status decides
 * nothing. Two queries.
 */
bool lr_admin_status(lr_db *db, const char *name, bool json, FILE *out, bool *found, char *err,
                     size_t errlen)
{
	struct lr_sb sb, where;
	struct res_row *res = NULL;
	size_t nres = 0;
	MYSQL_ROW row, pending = NULL;
	bool ok = false;

	*found = false;
	lr_sb_init(&sb);
	lr_sb_init(&where);
	if (name) {
		lr_sb_puts(&where, "WHERE (r.name = ");
		lr_db_sb_quote(db, &where, name);
		lr_sb_puts(&where, " OR r.name = CONCAT('id:', ");
		lr_db_sb_quote(db, &where, name);
		lr_sb_puts(&where, "))");
	}
	lr_sb_printf(&sb,
	             "SELECT r.name, r.kind, r.capacity, COALESCE(SUM(h.permits), 0), r.fence "
	             "FROM lr_resources r LEFT JOIN lr_holds h "
	             "ON h.resource = r.name AND h.expires_at > NOW(6) - " LR_SQL_GRACE " %s "
	             "GROUP BY r.name, r.kind, r.capacity, r.fence ORDER BY r.name",
	             lr_sb_str(&where));
	if (!lr_db_query(db, lr_sb_str(&sb)))
		goto db_fail;
	res = calloc(lr_db_num_rows(db) + 1, sizeof(*res));
	if (!res)
		goto out;
	while ((row = lr_db_fetch(db))) {
		res[nres].name = strdup(row[0]);
		res[nres].kind = strdup(row[1]);
		res[nres].capacity = strtoul(row[2], NULL, 10);
		res[nres].used = strtoull(row[3], NULL, 10);
		res[nres].fence = strtoull(row[4], NULL, 10);
		nres++;
	}
	*found = nres > 0;
	/* Holders (type 0, by token) then waiters (type 1, in queue order),
	 * for every resource, in one result sorted the way it is printed.
	 * Rows expired but not yet sweepable still count, as they do for
	 * acquirers (LR_SWEEP_GRACE_MS). */
	lr_sb_reset(&sb);
	lr_sb_printf(&sb,
	             "SELECT h.resource, 0, h.permits, h.fence, g.id, g.host, g.pid, g.os_user, "
	             "g.command, DATE_FORMAT(g.acquired_at, '%%Y-%%m-%%dT%%H:%%i:%%SZ'), "
	             "DATE_FORMAT(h.expires_at, '%%Y-%%m-%%dT%%H:%%i:%%S.%%fZ'), "
	             "TIMESTAMPDIFF(MICROSECOND, NOW(6), h.expires_at) "
	             "FROM lr_holds h JOIN lr_grants g ON g.id = h.grant_id "
	             "JOIN lr_resources r ON r.name = h.resource "
	             "%s%s h.expires_at > NOW(6) - " LR_SQL_GRACE " "
	             "UNION ALL "
	             "SELECT w.resource, 1, w.permits, w.ticket, w.request_id, w.host, w.pid, "
	             "w.os_user, w.command, DATE_FORMAT(w.since, '%%Y-%%m-%%dT%%H:%%i:%%SZ'), "
	             "DATE_FORMAT(w.expires_at, '%%Y-%%m-%%dT%%H:%%i:%%S.%%fZ'), "
	             "TIMESTAMPDIFF(MICROSECOND, NOW(6), w.expires_at) "
	             "FROM lr_waiters w JOIN lr_resources r ON r.name = w.resource "
	             "%s%s w.expires_at > NOW(6) - " LR_SQL_GRACE " ORDER BY 1, 2, 4",
	             name ? lr_sb_str(&where) : "WHERE", name ? " AND" : "",
	             name ? lr_sb_str(&where) : "WHERE", name ? " AND" : "");
	if (!lr_db_query(db, lr_sb_str(&sb)))
		goto db_fail;
	if (json)
		fputs("{\"resources\":[", out);
	for (size_t i = 0; i < nres; i++) {
		struct res_row *r = &res[i];
		char buf[64];
		int section = -1; /* the JSON array open: 0 holders, 1 waiters */
		unsigned pos = 0;
		if (json) {
			fprintf(out, "%s{\"name\":", i ? "," : "");
			json_str(out, shown(r->name, r->kind));
			fputs(",\"kind\":", out);
			json_str(out, r->kind);
			fprintf(out, ",\"capacity\":%lu,\"used\":%llu,\"fence\":%llu", r->capacity,
			        r->used, r->fence);
		} else {
			show(out, shown(r->name, r->kind), SIZE_MAX, 32);
			fprintf(out, " %-9s %s\n", r->kind, used_text(r, buf, sizeof(buf)));
		}
		/* Rows come sorted by resource: walk them alongside. Stored rows
		 * stay valid until the result is freed. */
		if (!pending)
			pending = lr_db_fetch(db);
		/* Skip rows of resources that appeared between the two queries. */
		while (pending && strcmp(pending[0], r->name) < 0)
			pending = lr_db_fetch(db);
		for (; pending && strcmp(pending[0], r->name) == 0; pending = lr_db_fetch(db)) {
			MYSQL_ROW h = pending;
			int type = h[1][0] - '0';
			double left = strtod(h[11], NULL) / 1e6;
			if (!json && section != type) {
				section = type;
				pos = 0;
			}
			if (json) {
				if (section != type) {
					fputs(section < 0 && type == 1
					          ? ",\"holders\":[],\"waiters\":["
					      : section < 0 ? ",\"holders\":["
					                    : "],\"waiters\":[",
					      out);
					section = type;
					pos = 0;
				}
				if (type == 0)
					fprintf(
					    out,
					    "%s{\"grant\":%s,\"permits\":%s,\"token\":%s,\"host\":",
					    pos ? "," : "", h[4], h[2], h[3]);
				else {
					fprintf(out, "%s{\"request\":", pos ? "," : "");
					json_str(out, h[4]);
					fprintf(out,
					        ",\"permits\":%s,\"ticket\":%s,\"host\":", h[2],
					        h[3]);
				}
				json_str(out, h[5]);
				fprintf(out, ",\"pid\":%s,\"user\":", h[6]);
				json_str(out, h[7]);
				fputs(",\"command\":", out);
				json_str(out, h[8]);
				fprintf(out, ",\"since\":\"%s\",\"expires\":\"%s\",\"expired\":%s}",
				        h[9], h[10], left <= 0 ? "true" : "false");
			} else {
				/* Two lines, each within 80 columns whatever the names;
				 * stored text is shown escaped, so no row can send a
				 * terminal escape to the operator's screen. */
				if (type == 0)
					fputs("  holder ", out);
				else
					fprintf(out, "  waiter %u: ", pos + 1);
				show(out, h[5], 16, 0);
				fprintf(out, ":%s ", h[6]);
				show(out, h[7], 10, 0);
				if (type == 0 && left <= 0)
					/* Still counted as used: see LR_SWEEP_GRACE_MS. */
					fprintf(out, ", token %s, expired %.0fs ago\n", h[3],
					        -left);
				else if (type == 0)
					fprintf(out, ", token %s, lease %.0fs left\n", h[3], left);
				else
					fprintf(out, ", %s permit%s\n", h[2],
					        strcmp(h[2], "1") ? "s" : "");
				fprintf(out, "    since %s  ", h[9]);
				show(out, h[8], 48, 0);
				fputc('\n', out);
			}
			pos++;
		}
		if (json)
			fputs(section < 0    ? ",\"holders\":[],\"waiters\":[]}"
			      : section == 0 ? "],\"waiters\":[]}"
			                     : "]}",
			      out);
	}
	if (json)
		fputs("]}\n", out);
	ok = true;
	goto out;
db_fail:
	snprintf(err, errlen, "%s", lr_db_error(db));
out:
	for (size_t i = 0; res && i < nres; i++) {
		free(res[i].name);
		free(res[i].kind);
	}
	free(res);
	lr_sb_finish(&sb);
	lr_sb_finish(&where);
	return ok;
}
