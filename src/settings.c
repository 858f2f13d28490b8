#include "settings.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "txn.h"

/*
 * Reads max_ttl_ms. lockrunctl status and max-ttl call it; one query.
 */
enum lr_settings_result lr_settings_max_ttl(lr_db *db, uint64_t *ms, char *err, size_t errlen)
{
	MYSQL_ROW row;

	if (!lr_db_query(db, "SELECT value FROM lr_settings WHERE name = 'max_ttl_ms'")) {
		snprintf(err, errlen, "%s", lr_db_error(db));
		return LR_SETTINGS_ERROR;
	}
	if (!(row = lr_db_fetch(db)) || !row[0]) {
		snprintf(err, errlen, "no max_ttl_ms in lr_settings; run 'lockrunctl init'");
		return LR_SETTINGS_ERROR;
	}
	*ms = strtoull(row[0], NULL, 10);
	return LR_SETTINGS_OK;
}

struct set_max {
	uint64_t ms, old_ms;
	enum lr_settings_result res;
	char msg[256];
};

/* Under the setting's row lock: refuse to go below a live lease (its
 * renewals would fail from then on), else write it with who did it. */
static enum lr_txn set_max_txn(lr_db *db, void *arg)
{
	struct set_max *s = arg;
	MYSQL_ROW row;

	s->res = LR_SETTINGS_ERROR;
	if (!lr_db_query(db, "SELECT value FROM lr_settings WHERE name = 'max_ttl_ms' FOR UPDATE"))
		return LR_TXN_DBERROR;
	s->old_ms = (row = lr_db_fetch(db)) && row[0] ? strtoull(row[0], NULL, 10) : 0;
	if (!lr_db_queryf(db,
	                  "SELECT id, ttl_ms FROM lr_grants WHERE ended_at IS NULL "
	                  "AND ttl_ms > %" PRIu64 " ORDER BY ttl_ms DESC LIMIT 1",
	                  s->ms))
		return LR_TXN_DBERROR;
	if ((row = lr_db_fetch(db))) {
		snprintf(s->msg, sizeof(s->msg),
		         "grant %s holds a lease of %s ms: its renewals would fail; lower max-ttl "
		         "after it ended",
		         row[0], row[1]);
		s->res = LR_SETTINGS_REFUSED;
		return LR_TXN_ROLLBACK;
	}
	if (!lr_db_queryf(db,
	                  "INSERT INTO lr_settings (name, value, changed_at, changed_by) "
	                  "VALUES ('max_ttl_ms', %" PRIu64 ", UTC_TIMESTAMP(6), CURRENT_USER()) "
	                  "ON DUPLICATE KEY UPDATE value = VALUES(value), "
	                  "changed_at = VALUES(changed_at), changed_by = VALUES(changed_by)",
	                  s->ms))
		return LR_TXN_DBERROR;
	s->res = LR_SETTINGS_OK;
	return LR_TXN_COMMIT;
}

/*
 * Sets max_ttl_ms to ms (the caller checked 1000-86400000), unless a live
 * grant has a longer lease. lockrunctl max-ttl calls it; one transaction
 * of three statements, run again after a deadlock or lock wait timeout.
 */
enum lr_settings_result lr_settings_set_max_ttl(lr_db *db, uint64_t ms, uint64_t *old_ms, char *err,
                                                size_t errlen)
{
	struct set_max s = {.ms = ms};
	enum lr_txn r = lr_txn_run(db, set_max_txn, &s, err, errlen);

	*old_ms = s.old_ms;
	if (r == LR_TXN_COMMIT)
		return LR_SETTINGS_OK;
	if (s.res == LR_SETTINGS_REFUSED)
		snprintf(err, errlen, "%s", s.msg);
	return s.res == LR_SETTINGS_REFUSED ? LR_SETTINGS_REFUSED : LR_SETTINGS_ERROR;
}
