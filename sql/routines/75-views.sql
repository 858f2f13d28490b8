-- lockrun's stored routines, 75: what `lockrunctl status`, `list`,
-- `history` and `check` show, for the runtime account. Public. (How these
-- files are applied: 00-start.sql.)
--
-- The runtime account may not read lockrun's tables (sql/grant.sql); these
-- four procedures read them for it, and leave out what only the operator
-- account sees: a holder's or waiter's command line (it often carries
-- secrets) and the two secrets of the SQL API, a grant's lease and a queue
-- place's request id. Host, pid, OS and database account, times, tokens,
-- kinds, capacities and counts are shown, as busy answers show them.
-- Each answers with one result set whose columns are those of the
-- operator's query in src/ (status.c, admin.c, history.c, grant.c), so
-- `lockrunctl` prints both the same way; a hidden value is NULL.
--
-- Not on the lock path: no lock routine calls them, and they write
-- nothing. Their reads lock nothing, whatever the caller's session says
-- (lr_view_enter): outside a transaction, at READ COMMITTED, each SELECT
-- a consistent read of its own. Cost: one query each.

DELIMITER //

-- Opens every procedure of this file: resets the caller's settings that
-- reach the definer's statements and turns on causal reads on a Galera
-- node, as lr_enter does (lr_server_state), then refuses a caller inside
-- a transaction: at SERIALIZABLE (also one set for the next transaction
-- only, which no routine can see) every read there locks, until the
-- caller commits, rows the lock path writes. Called right before the
-- one SELECT of its caller, once the arguments are checked, so that the
-- characteristics set here go to that SELECT and to nothing of the
-- caller's. Outside one, the next
-- transaction (the SELECT that follows, even under autocommit = 0) is made
-- READ COMMITTED and READ ONLY, so it reads the latest committed rows and
-- locks none (lr_view_leave ends it). p_sw: what lr_leave puts back.
CREATE OR REPLACE DEFINER = 'lockrun_owner'@'localhost' PROCEDURE lr_view_enter(
  IN p_proc VARCHAR(20), OUT p_sw BIGINT)
  READS SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_slaves BIGINT;
  DECLARE v_in_trx, v_galera TINYINT;
  DECLARE v_msg VARCHAR(200);
  DECLARE v_me VARCHAR(255) CHARACTER SET ascii;  -- not asked for (8)
  CALL lr_server_state(6, v_slaves, v_in_trx, v_galera, p_sw, v_me, v_me);
  IF v_in_trx THEN
    CALL lr_leave(p_sw, NULL);
    SET v_msg = CONCAT(p_proc, ': call it outside a transaction (its reads there could lock ',
                       'lockrun''s rows until you commit)');
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
  END IF;
  SET TRANSACTION ISOLATION LEVEL READ COMMITTED, READ ONLY;
END//

-- Closes every procedure of this file, also on an error once
-- lr_view_enter let it in (p_in): under autocommit = 0 its read began a
-- transaction, which ends here, so the caller is left outside one, as it
-- came.
CREATE OR REPLACE DEFINER = 'lockrun_owner'@'localhost' PROCEDURE lr_view_leave(
  IN p_in TINYINT, IN p_sw BIGINT)
  NO SQL SQL SECURITY DEFINER
BEGIN
  IF p_in AND NOT @@autocommit THEN
    COMMIT;
  END IF;
  CALL lr_leave(p_sw, NULL);
END//

-- A resource name as the view procedures take it: NULL (all), a name, or
-- a key's row 'id:KEY' (lockrun_check's check).
CREATE OR REPLACE DEFINER = 'lockrun_owner'@'localhost' PROCEDURE lr_view_name(
  IN p_resource VARCHAR(80) CHARACTER SET ascii)
  NO SQL SQL SECURITY DEFINER
BEGIN
  IF p_resource IS NOT NULL AND (CONVERT(p_resource USING utf8mb4) COLLATE utf8mb4_bin NOT REGEXP '^(id:)?[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$'
                                 OR p_resource REGEXP '[[:cntrl:]]') THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'lockrun: invalid resource: use a lock name, or id:KEY for a key';
  END IF;
END//

-- lockrun_status(part, resource): `lockrunctl status`. resource NULL for
-- every resource, else a name (a key by its name or 'id:KEY'). part:
-- 'resources': name, kind, capacity, fence (the last token), used
--   permits, holders and expired holds, waiters, the longest wait and hold
--   (microseconds), paused since, by, why, and runs queued behind the
--   waiters in host queues; holds and waiters within the sweep grace count
--   as acquirers count them.
-- 'holders': each hold (type 0: its grant, permits, token) and each live
--   queue place (type 1: permits, ticket, runs of its host behind it):
--   resource, type, permits, token or ticket, grant number (NULL for a
--   waiter: its request id is its secret), host, pid, OS user, command
--   (always NULL), since, expires, microseconds left, microseconds held or
--   waited, behind; by resource, holders first.
-- 'epoch': the fail-over epoch, its server, start, end of quarantine,
--   seconds of quarantine left, max_ttl in seconds.
-- 'ended': grants that ended in the last hour, per resource and end
--   reason.
CREATE OR REPLACE DEFINER = 'lockrun_owner'@'localhost' PROCEDURE lockrun_status(
  IN p_part VARCHAR(20) CHARACTER SET ascii, IN p_resource VARCHAR(80) CHARACTER SET ascii)
  READS SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_sw BIGINT;
  DECLARE v_key VARCHAR(80) CHARACTER SET ascii DEFAULT CONCAT('id:', p_resource);
  DECLARE v_in TINYINT DEFAULT 0;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION
  BEGIN
    CALL lr_view_leave(v_in, v_sw);
    RESIGNAL;
  END;
  CALL lr_view_name(p_resource);
  IF p_part IS NULL OR BINARY p_part NOT IN ('resources', 'holders', 'epoch', 'ended') THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'lockrun_status: part must be resources, holders, epoch or ended';
  END IF;
  CALL lr_view_enter('lockrun_status', v_sw);
  SET v_in = 1;
  IF p_part = 'resources' THEN
    SELECT r.name, r.kind, r.capacity, r.fence,
           COALESCE(SUM(IF(h.expires_at > UTC_TIMESTAMP(6) - INTERVAL 5000000 MICROSECOND, h.permits, 0)), 0) AS used,
           COALESCE(SUM(h.expires_at > UTC_TIMESTAMP(6) - INTERVAL 5000000 MICROSECOND), 0) AS holders,
           COALESCE(SUM(h.expires_at <= UTC_TIMESTAMP(6)), 0) AS expired_holds,
           (SELECT COUNT(*) FROM lr_waiters w
             WHERE w.resource = r.name AND w.expires_at > UTC_TIMESTAMP(6) - INTERVAL 5000000 MICROSECOND) AS waiting,
           (SELECT COALESCE(TIMESTAMPDIFF(MICROSECOND, MIN(w.since), UTC_TIMESTAMP(6)), 0) FROM lr_waiters w
             WHERE w.resource = r.name AND w.expires_at > UTC_TIMESTAMP(6) - INTERVAL 5000000 MICROSECOND) AS oldest_wait_us,
           (SELECT COALESCE(TIMESTAMPDIFF(MICROSECOND, MIN(g.acquired_at), UTC_TIMESTAMP(6)), 0)
              FROM lr_holds o JOIN lr_grants g ON g.id = o.grant_id
             WHERE o.resource = r.name AND o.expires_at > UTC_TIMESTAMP(6) - INTERVAL 5000000 MICROSECOND) AS oldest_hold_us,
           DATE_FORMAT(r.paused_at, '%Y-%m-%dT%H:%i:%sZ') AS paused_at, r.paused_by, r.pause_note,
           (SELECT COALESCE(SUM(w.host_behind), 0) FROM lr_waiters w
             WHERE w.resource = r.name AND w.expires_at > UTC_TIMESTAMP(6) - INTERVAL 5000000 MICROSECOND) AS host_queued
      FROM lr_resources r LEFT JOIN lr_holds h ON h.resource = r.name
     WHERE p_resource IS NULL OR r.name = p_resource OR r.name = v_key
     GROUP BY r.name, r.kind, r.capacity, r.fence, r.paused_at, r.paused_by, r.pause_note
     ORDER BY r.name;
  ELSEIF p_part = 'holders' THEN
    SELECT h.resource, 0 AS type, h.permits, h.fence AS token, g.id AS grant_id, g.host, g.pid,
           g.os_user, NULL AS command, DATE_FORMAT(g.acquired_at, '%Y-%m-%dT%H:%i:%SZ') AS since,
           DATE_FORMAT(h.expires_at, '%Y-%m-%dT%H:%i:%S.%fZ') AS expires,
           TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), h.expires_at) AS left_us,
           TIMESTAMPDIFF(MICROSECOND, g.acquired_at, UTC_TIMESTAMP(6)) AS age_us, 0 AS behind
      FROM lr_holds h JOIN lr_grants g ON g.id = h.grant_id
     WHERE p_resource IS NULL OR h.resource = p_resource OR h.resource = v_key
    UNION ALL
    SELECT w.resource, 1, w.permits, w.ticket, NULL, w.host, w.pid, w.os_user, NULL,
           DATE_FORMAT(w.since, '%Y-%m-%dT%H:%i:%SZ'),
           DATE_FORMAT(w.expires_at, '%Y-%m-%dT%H:%i:%S.%fZ'),
           TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), w.expires_at),
           TIMESTAMPDIFF(MICROSECOND, w.since, UTC_TIMESTAMP(6)), w.host_behind
      FROM lr_waiters w
     WHERE (p_resource IS NULL OR w.resource = p_resource OR w.resource = v_key)
       AND w.expires_at > UTC_TIMESTAMP(6) - INTERVAL 5000000 MICROSECOND
     ORDER BY 1, 2, 4;
  ELSEIF p_part = 'epoch' THEN
    SELECT epoch, server, DATE_FORMAT(started_at, '%Y-%m-%dT%H:%i:%sZ') AS started_at,
           DATE_FORMAT(quarantine_until, '%Y-%m-%dT%H:%i:%sZ') AS quarantine_until,
           GREATEST(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), quarantine_until), 0) / 1e6 AS quarantine_s,
           (SELECT value / 1e3 FROM lr_settings WHERE name = 'max_ttl_ms') AS max_ttl_s
      FROM lr_epoch WHERE id = 1;
  ELSEIF p_part = 'ended' THEN
    SELECT i.resource, g.end_reason, COUNT(*) AS grants FROM lr_grants g
      JOIN lr_grant_items i ON i.grant_id = g.id
     WHERE (p_resource IS NULL OR i.resource = p_resource OR i.resource = v_key)
       AND g.ended_at > UTC_TIMESTAMP(6) - INTERVAL 1 HOUR
     GROUP BY 1, 2 ORDER BY 1, 2;
  END IF;
  CALL lr_view_leave(v_in, v_sw);
END//

-- lockrun_list(kind): `lockrunctl list`: every resource (of kind
-- semaphore, mutex, rwlock or key; NULL: all): name, kind, capacity, used
-- permits (within the grace), fence, created, updated, holds past the
-- grace, and the width of the longest name (at least 32).
CREATE OR REPLACE DEFINER = 'lockrun_owner'@'localhost' PROCEDURE lockrun_list(
  IN p_kind VARCHAR(20) CHARACTER SET ascii)
  READS SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_sw BIGINT;
  DECLARE v_in TINYINT DEFAULT 0;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION
  BEGIN
    CALL lr_view_leave(v_in, v_sw);
    RESIGNAL;
  END;
  IF p_kind IS NOT NULL AND BINARY p_kind NOT IN ('semaphore', 'mutex', 'rwlock', 'key') THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'lockrun_list: kind must be semaphore, mutex, rwlock, key or NULL';
  END IF;
  CALL lr_view_enter('lockrun_list', v_sw);
  SET v_in = 1;
  SELECT r.name, r.kind, r.capacity,
         COALESCE(SUM(IF(h.expires_at > UTC_TIMESTAMP(6) - INTERVAL 5000000 MICROSECOND, h.permits, 0)), 0) AS used,
         r.fence, DATE_FORMAT(r.created_at, '%Y-%m-%dT%H:%i:%SZ') AS created,
         DATE_FORMAT(r.updated_at, '%Y-%m-%dT%H:%i:%SZ') AS updated,
         COALESCE(SUM(h.expires_at <= UTC_TIMESTAMP(6) - INTERVAL 5000000 MICROSECOND), 0) AS expired_holds,
         (SELECT GREATEST(32, MAX(CHAR_LENGTH(x.name))) FROM lr_resources x
           WHERE p_kind IS NULL OR x.kind = p_kind) AS name_width
    FROM lr_resources r LEFT JOIN lr_holds h ON h.resource = r.name
   WHERE p_kind IS NULL OR r.kind = p_kind
   GROUP BY r.name ORDER BY r.name;
  CALL lr_view_leave(v_in, v_sw);
END//

-- lockrun_history(resource, since_s, max): `lockrunctl history`: the
-- runs of the lock log, newest first, at most max (1-1000000); those that
-- held resource (NULL: all), running at some time within the last since_s
-- seconds (NULL: any time). Columns: grant number, requested, acquired,
-- ended, end reason, exit status, signal, host, pid, OS user, database
-- account, command (always NULL), microseconds waited and held, who
-- released it by force (account, OS user, host, note), its resources
-- ('resource|kind|permits|token', comma-separated, up to the session's
-- group_concat_max_len), and whether its lease lapsed unswept. A running
-- grant whose lease ended past the grace shows as expired then.
CREATE OR REPLACE DEFINER = 'lockrun_owner'@'localhost' PROCEDURE lockrun_history(
  IN p_resource VARCHAR(80) CHARACTER SET ascii, IN p_since_s BIGINT, IN p_max BIGINT)
  READS SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_sw BIGINT;
  DECLARE v_key VARCHAR(80) CHARACTER SET ascii DEFAULT CONCAT('id:', p_resource);
  DECLARE v_max INT;
  DECLARE v_in TINYINT DEFAULT 0;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION
  BEGIN
    CALL lr_view_leave(v_in, v_sw);
    RESIGNAL;
  END;
  CALL lr_view_name(p_resource);
  IF p_max IS NULL OR p_max < 1 OR p_max > 1000000 OR p_since_s < 0 OR p_since_s > 3153600000 THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'lockrun_history: max must be 1-1000000, since_s 0-3153600000 or NULL';
  END IF;
  SET v_max = p_max;
  CALL lr_view_enter('lockrun_history', v_sw);
  SET v_in = 1;
  SELECT g.id AS grant_id, DATE_FORMAT(g.requested_at, '%Y-%m-%dT%H:%i:%S.%fZ') AS requested,
         DATE_FORMAT(g.acquired_at, '%Y-%m-%dT%H:%i:%S.%fZ') AS acquired,
         DATE_FORMAT(COALESCE(g.ended_at, IF(x.lapsed, x.lease_end, NULL)), '%Y-%m-%dT%H:%i:%S.%fZ') AS ended,
         COALESCE(g.end_reason, IF(x.lapsed, 'expired', NULL)) AS end_reason,
         g.exit_status, g.term_signal, g.host, g.pid, g.os_user, g.db_user, NULL AS command,
         TIMESTAMPDIFF(MICROSECOND, g.requested_at, g.acquired_at) AS wait_us,
         TIMESTAMPDIFF(MICROSECOND, g.acquired_at,
                       COALESCE(g.ended_at, IF(x.lapsed, x.lease_end, NULL), UTC_TIMESTAMP(6))) AS held_us,
         g.released_by, g.released_os_user, g.released_host, g.release_note,
         (SELECT GROUP_CONCAT(CONCAT_WS('|', i.resource, i.kind, i.permits, COALESCE(i.fence, '-'))
                              ORDER BY i.resource SEPARATOR ',')
            FROM lr_grant_items i WHERE i.grant_id = g.id) AS resources,
         x.lapsed AS not_swept
    FROM lr_grants g
    JOIN (SELECT g2.id,
                 COALESCE(hx.until, COALESCE(g2.renewed_at, g2.acquired_at) + INTERVAL g2.ttl_ms * 1000 MICROSECOND) AS lease_end,
                 (g2.ended_at IS NULL AND
                  COALESCE(hx.until, COALESCE(g2.renewed_at, g2.acquired_at) + INTERVAL g2.ttl_ms * 1000 MICROSECOND)
                    <= UTC_TIMESTAMP(6) - INTERVAL 5000000 MICROSECOND) AS lapsed
            FROM lr_grants g2
            LEFT JOIN (SELECT grant_id, MAX(expires_at) AS until FROM lr_holds GROUP BY grant_id) hx
              ON hx.grant_id = g2.id
           WHERE g2.ttl_ms > 0) x ON x.id = g.id
   WHERE (p_resource IS NULL OR g.id IN (SELECT f.grant_id FROM lr_grant_items f
                                          WHERE f.resource = p_resource OR f.resource = v_key))
     AND (p_since_s IS NULL OR
          COALESCE(g.ended_at, IF(x.lapsed, x.lease_end, NULL), UTC_TIMESTAMP(6))
            >= UTC_TIMESTAMP(6) - INTERVAL p_since_s SECOND)
   ORDER BY g.acquired_at DESC, g.id DESC LIMIT v_max;
  CALL lr_view_leave(v_in, v_sw);
END//

-- lockrun_grant(grant): `lockrunctl check GRANT`: grant number grant
-- (LOCKRUN_GRANT; not its lease: this shows, it decides nothing) with
-- each of its holds: open, end reason, ended, resource, token,
-- microseconds left; no row if there is no such grant. A read from
-- outside, stale the moment it is read: an application checks its own
-- grant inside its transaction with lockrun_check.
CREATE OR REPLACE DEFINER = 'lockrun_owner'@'localhost' PROCEDURE lockrun_grant(
  IN p_grant BIGINT UNSIGNED)
  READS SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_sw BIGINT;
  DECLARE v_in TINYINT DEFAULT 0;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION
  BEGIN
    CALL lr_view_leave(v_in, v_sw);
    RESIGNAL;
  END;
  CALL lr_view_enter('lockrun_grant', v_sw);
  SET v_in = 1;
  SELECT g.ended_at IS NULL AS is_open, g.end_reason, DATE_FORMAT(g.ended_at, '%Y-%m-%dT%H:%i:%S.%fZ') AS ended,
         h.resource, h.fence AS token, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), h.expires_at) AS left_us
    FROM lr_grants g LEFT JOIN lr_holds h ON h.grant_id = g.id
   WHERE g.id = p_grant ORDER BY h.resource;
  CALL lr_view_leave(v_in, v_sw);
END//

DELIMITER ;
