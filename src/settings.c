#include "settings.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lease.h"
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
	char grant_until[32]; /* a raise's delay for grants, UTC, or "" */
};

/*
 * Under the setting's row lock (every grant and renewal reads it in shared
 * mode, so none is under way): refuse to go below a live lease, by the
 * lease a grant asked for (its renewals would fail from then on) or by a
 * hold that outlasts the new value (renewed for longer through the SQL
 * API), so that the new value bounds every lease from now on, also for a
 * replica that has this change. Else write it with who did it. A raise
 * on a server with a binary log (and so perhaps asynchronous replicas;
 * not Galera, which loses no commit) reaches grants only after
 * LR_MAX_TTL_RAISE_DELAY_S (migration 10): a replica that missed it must
 * not have missed a lease it allowed.
 */
static enum lr_txn set_max_txn(lr_db *db, void *arg)
{
	struct set_max *s = arg;
	MYSQL_ROW row;
	uint64_t grant_ms;
	bool delay;

	s->res = LR_SETTINGS_ERROR;
	s->grant_until[0] = '\0';
	/* MySQL has no wsrep_on (and no Galera). */
	if (!lr_db_queryf(
	        db,
	        "SELECT value, IF(grant_until > UTC_TIMESTAMP(6), LEAST(value, grant_ms), "
	        "value), @@log_bin AND NOT %s "
	        "FROM lr_settings WHERE name = 'max_ttl_ms' FOR UPDATE",
	        lr_db_is_mysql(db) ? "0" : "COALESCE(@@wsrep_on, 0)"))
		return LR_TXN_DBERROR;
	row = lr_db_fetch(db);
	s->old_ms = row && row[0] ? strtoull(row[0], NULL, 10) : 0;
	grant_ms = row && row[1] ? strtoull(row[1], NULL, 10) : s->ms;
	delay = row && row[2] && strcmp(row[2], "1") == 0 && s->ms > grant_ms;
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
	                  "SELECT grant_id, DATE_FORMAT(expires_at, '%%Y-%%m-%%d %%H:%%i:%%s') "
	                  "FROM lr_holds WHERE expires_at > UTC_TIMESTAMP(6) + INTERVAL %" PRIu64
	                  " MICROSECOND ORDER BY expires_at DESC LIMIT 1",
	                  s->ms * 1000))
		return LR_TXN_DBERROR;
	if ((row = lr_db_fetch(db))) {
		snprintf(s->msg, sizeof(s->msg),
		         "grant %s holds a lease until %s UTC, longer than that from now: lower "
		         "max-ttl after then",
		         row[0] ? row[0] : "?", row[1] ? row[1] : "?");
		s->res = LR_SETTINGS_REFUSED;
		return LR_TXN_ROLLBACK;
	}
	if (!lr_db_queryf(
	        db,
	        "INSERT INTO lr_settings (name, value, changed_at, changed_by, grant_ms, "
	        "grant_until) VALUES ('max_ttl_ms', %" PRIu64
	        ", UTC_TIMESTAMP(6), CURRENT_USER(), %" PRIu64 ", %s) "
	        "ON DUPLICATE KEY UPDATE value = VALUES(value), "
	        "changed_at = VALUES(changed_at), changed_by = VALUES(changed_by), "
	        "grant_ms = VALUES(grant_ms), grant_until = VALUES(grant_until)",
	        s->ms, delay ? grant_ms : s->ms,
	        delay ? "UTC_TIMESTAMP(6) + INTERVAL " LR_STR(LR_MAX_TTL_RAISE_DELAY_S) " SECOND"
	              : "NULL"))
		return LR_TXN_DBERROR;
	if (delay &&
	    lr_db_query(db, "SELECT DATE_FORMAT(grant_until, '%H:%i:%s') FROM lr_settings "
	                    "WHERE name = 'max_ttl_ms'") &&
	    (row = lr_db_fetch(db)) && row[0])
		snprintf(s->grant_until, sizeof(s->grant_until), "%s", row[0]);
	s->res = LR_SETTINGS_OK;
	return LR_TXN_COMMIT;
}

/*
 * Sets max_ttl_ms to ms (the caller checked 1000-86400000), unless a live
 * grant has a longer lease. lockrunctl max-ttl calls it; one transaction
 * of five or six statements, run again after a deadlock or lock wait
 * timeout. A raise that grants may use only later leaves that time (UTC,
 * HH:MM:SS) in grant_until, else "".
 */
enum lr_settings_result lr_settings_set_max_ttl(lr_db *db, uint64_t ms, uint64_t *old_ms,
                                                char *grant_until, size_t gulen, char *err,
                                                size_t errlen)
{
	struct set_max s = {.ms = ms};
	enum lr_txn r = lr_txn_run(db, set_max_txn, &s, err, errlen);

	*old_ms = s.old_ms;
	snprintf(grant_until, gulen, "%s", r == LR_TXN_COMMIT ? s.grant_until : "");
	if (r == LR_TXN_COMMIT)
		return LR_SETTINGS_OK;
	if (s.res == LR_SETTINGS_REFUSED)
		snprintf(err, errlen, "%s", s.msg);
	return s.res == LR_SETTINGS_REFUSED ? LR_SETTINGS_REFUSED : LR_SETTINGS_ERROR;
}
