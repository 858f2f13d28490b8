#include "named.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mysqld_error.h>

#include "strbuf.h"

static void add_get_locks(struct lr_request *lk, struct lr_sb *sb)
{
	for (size_t i = 0; i < lk->nitems; i++) {
		if (lk->items[i].kind != LR_KIND_NAMED)
			continue;
		lr_sb_puts(sb, ", GET_LOCK(");
		lr_db_sb_quote(lk->db, sb, lk->items[i].name);
		lr_sb_puts(sb, ", 0)");
	}
}

/* MySQL: whether the server is configured as a member of a Group
 * Replication group, by a variable that exists only with the plugin, so
 * read from performance_schema.global_variables, which any account may
 * read (NULL, not 1193, without the plugin). */
#define GROUP_MEMBER                                                                               \
	"(SELECT COUNT(*) FROM performance_schema.global_variables "                               \
	"WHERE VARIABLE_NAME = 'group_replication_group_name' AND VARIABLE_VALUE <> '')"

/* "SELECT <cluster>, GET_LOCK(a, 0), ...": on a Galera node (wsrep_on), or
 * a member of a MySQL group (GROUP_MEMBER), the IF() leaves GET_LOCK
 * unevaluated, so nothing is taken there. */
static bool send_take(struct lr_request *lk, bool wsrep)
{
	struct lr_sb sb;
	bool ok;
	const char *cluster = lr_db_is_mysql(lk->db) ? GROUP_MEMBER : "@@wsrep_on";

	lr_sb_init(&sb);
	if (wsrep) {
		lr_sb_printf(&sb, "SELECT %s, IF(%s, 0, 1)", cluster, cluster);
		/* The IF() per lock keeps GET_LOCK unevaluated in a cluster. */
		for (size_t i = 0; i < lk->nitems; i++) {
			if (lk->items[i].kind != LR_KIND_NAMED)
				continue;
			lr_sb_printf(&sb, ", IF(%s, NULL, GET_LOCK(", cluster);
			lr_db_sb_quote(lk->db, &sb, lk->items[i].name);
			lr_sb_puts(&sb, ", 0))");
		}
	} else {
		lr_sb_puts(&sb, "SELECT 0, 1");
		add_get_locks(lk, &sb);
	}
	ok = !sb.oom && lr_db_query(lk->db, lr_sb_str(&sb));
	lr_sb_finish(&sb);
	return ok;
}

/*
 * Takes every named lock of the request on the main connection, without
 * waiting, all or none: one that is held elsewhere gives back those that
 * were taken. The same statement says whether the server is a Galera node
 * or a member of a MySQL Group Replication group, whose named locks are
 * local to one node or member, and takes nothing there. One round trip
 * (two on a MariaDB without the wsrep_on variable, three when one lock is
 * busy).
 */
enum lr_named lr_named_take(struct lr_request *lk)
{
	MYSQL_ROW row;
	bool all = true;
	const char *busy = NULL;

	if (!lk->nnamed)
		return LR_NAMED_OK;
	if (!send_take(lk, true) &&
	    (lr_db_errno(lk->db) != ER_UNKNOWN_SYSTEM_VARIABLE || !send_take(lk, false))) {
		lr_request_set_db_error(lk, lk->db);
		return LR_NAMED_ERROR;
	}
	row = lr_db_fetch(lk->db);
	if (!row) {
		snprintf(lk->err, sizeof(lk->err), "%s: no answer to GET_LOCK",
		         lr_db_server(lk->db));
		return LR_NAMED_ERROR;
	}
	if (row[0] && (strcmp(row[0], "1") == 0 || strcmp(row[0], "ON") == 0)) {
		bool mysql = lr_db_is_mysql(lk->db);

		lk->galera = !mysql;
		snprintf(lk->err, sizeof(lk->err),
		         "%s is a %s: named locks there are local to one %s and would not "
		         "exclude other %ss; use --mutex instead",
		         lr_db_server(lk->db),
		         mysql ? "member of a MySQL Group Replication group" : "Galera node",
		         mysql ? "member" : "node", mysql ? "member" : "node");
		return LR_NAMED_GALERA;
	}
	lk->named_held = true;
	lk->named_gen = lr_db_generation(lk->db);
	for (size_t i = 0, col = 2; i < lk->nitems; i++) {
		if (lk->items[i].kind != LR_KIND_NAMED)
			continue;
		if (!row[col] || strcmp(row[col], "1") != 0) {
			all = false;
			busy = busy ? busy : lk->items[i].name;
		}
		col++;
	}
	if (all)
		return LR_NAMED_OK;
	snprintf(lk->err, sizeof(lk->err), "named lock '%s' is held by another session", busy);
	lr_named_release(lk);
	return LR_NAMED_BUSY;
}

/* Gives back every named lock of the request (RELEASE_ALL_LOCKS would also
 * drop the queue's wake-up lock, which has its own life). Those of a
 * connection that is gone went with it. One round trip. */
bool lr_named_release(struct lr_request *lk)
{
	struct lr_sb sb;
	bool ok, first = true;

	if (!lk->named_held)
		return true;
	lk->named_held = false;
	if (lk->named_gen != lr_db_generation(lk->db))
		return true;
	lr_sb_init(&sb);
	lr_sb_puts(&sb, "DO ");
	for (size_t i = 0; i < lk->nitems; i++) {
		if (lk->items[i].kind != LR_KIND_NAMED)
			continue;
		lr_sb_puts(&sb, first ? "RELEASE_LOCK(" : ", RELEASE_LOCK(");
		lr_db_sb_quote(lk->db, &sb, lk->items[i].name);
		lr_sb_puts(&sb, ")");
		first = false;
	}
	ok = !sb.oom && lr_db_query(lk->db, lr_sb_str(&sb));
	lr_sb_finish(&sb);
	return ok;
}

/*
 * Whether the named locks are still ours: they live exactly as long as the
 * connection that took them. A request of named locks only proves it with
 * one round trip (DO 0); otherwise the lease's renewal does, and this only
 * checks that the connection is still the same one. *lost when they are
 * gone. False: the database failed otherwise.
 */
bool lr_named_alive(struct lr_request *lk, bool *lost)
{
	*lost = false;
	if (!lk->nnamed)
		return true;
	if (lk->named_gen != lr_db_generation(lk->db)) {
		*lost = true;
		snprintf(lk->err, sizeof(lk->err),
		         "the connection holding the named locks was lost");
		return true;
	}
	if (lk->ntable)
		return true;
	if (lr_db_query(lk->db, "DO 0"))
		return true;
	*lost = true;
	snprintf(lk->err, sizeof(lk->err), "the connection holding the named locks was lost: %s",
	         lr_db_error(lk->db));
	return true;
}
