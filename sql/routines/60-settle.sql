-- lockrun's stored routines, 60: settle, for an acquire whose answer was
-- lost. Public. (How these files are applied: 00-start.sql.)

DELIMITER //

-- lockrun_settle: after an acquire whose answer was lost. First WRITES
-- every resource row of the items (a ticket bump), which waits for, or on
-- Galera conflicts with, an acquire transaction still in flight; then
-- looks the ids up; then commits, so what it answers is final. A complete
-- live grant of p_lease is 'granted'. Otherwise any partial grant is closed
-- and a tombstone row takes the lease id, so an acquire with it that has
-- not even started yet fails (1062) instead of granting after we said no:
-- the caller must use a new lease id. 'queued' when the request has all
-- its places, else 'none'.
CREATE OR REPLACE DEFINER = 'lockrun_owner'@'localhost' PROCEDURE lockrun_settle(
  IN p_items VARCHAR(4000), IN p_request CHAR(32) CHARACTER SET ascii,
  IN p_lease CHAR(32) CHARACTER SET ascii)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_sw, v_lwt BIGINT;
  DECLARE v_galera TINYINT;
  DECLARE v_gid BIGINT UNSIGNED;
  DECLARE v_items, v_n, v_live, v_q INT DEFAULT 0;
  DECLARE v_outcome VARCHAR(10);
  DECLARE v_done INT DEFAULT 0;
  DECLARE v_name VARCHAR(80) CHARACTER SET ascii;
  DECLARE v_itemstr VARCHAR(4000) DEFAULT p_items;
  DECLARE v_req TEXT;
  DECLARE v_once_key VARCHAR(64) CHARACTER SET ascii;
  DECLARE v_period, v_offset BIGINT UNSIGNED;
  DECLARE v_window DATETIME(6);
  DECLARE c CURSOR FOR SELECT j.name
    FROM JSON_TABLE(v_req, '$[*]' COLUMNS(name VARCHAR(80) PATH '$.name')) j
    ORDER BY CAST(j.name AS BINARY);
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION
  BEGIN
    ROLLBACK;
    CALL lr_leave(v_sw, v_lwt);
    RESIGNAL;
  END;
  CALL lr_enter('lockrun_settle', 11, p_request, p_lease, NULL, v_sw, v_lwt, v_galera);
  IF LOCATE('once:', v_itemstr) > 0 THEN
    CALL lr_once_items(v_itemstr, v_once_key, v_period, v_offset);
  END IF;
  CALL lr_parse(v_itemstr, v_req, v_items);
  -- Under autocommit = 0 the reads before this began a transaction, and
  -- SET TRANSACTION would fail (1568): end it (the caller had none).
  COMMIT;
  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  OPEN c;
  l: LOOP
    FETCH c INTO v_name;
    IF v_done THEN LEAVE l; END IF;
    UPDATE lr_resources SET ticket = ticket + 1 WHERE name = v_name;
  END LOOP;
  CLOSE c;
  SET v_done = 0;
  SELECT id INTO v_gid FROM lr_grants WHERE request_id = p_lease AND ended_at IS NULL;
  SET v_done = 0;
  SELECT COUNT(*), COALESCE(SUM(h.expires_at > UTC_TIMESTAMP(6)), 0) INTO v_n, v_live
    FROM lr_holds h
    JOIN JSON_TABLE(v_req, '$[*]' COLUMNS(name VARCHAR(80) PATH '$.name')) q ON q.name = h.resource
   WHERE h.grant_id = v_gid;
  SELECT COUNT(*) INTO v_q
    FROM lr_waiters w
    JOIN JSON_TABLE(v_req, '$[*]' COLUMNS(name VARCHAR(80) PATH '$.name')) q ON q.name = w.resource
   WHERE w.request_id = p_request;
  IF v_gid IS NOT NULL AND v_n = v_items AND v_live = v_n THEN
    SET v_outcome = 'granted';
    -- Handed over by a release (lr_hand_off), perhaps long before the
    -- lost call was sent: claimed now, renewed from now, as the claim
    -- would have.
    UPDATE lr_holds h JOIN lr_grants g ON g.id = h.grant_id
       SET h.expires_at = UTC_TIMESTAMP(6) + INTERVAL g.ttl_ms * 1000 MICROSECOND
     WHERE h.grant_id = v_gid AND g.queued_as IS NOT NULL AND g.claimed_at IS NULL;
    UPDATE lr_grants SET claimed_at = UTC_TIMESTAMP(6)
     WHERE id = v_gid AND queued_as IS NOT NULL AND claimed_at IS NULL;
  ELSE
    UPDATE lr_grants SET ended_at = UTC_TIMESTAMP(6), end_reason = 'expired'
     WHERE request_id = p_lease AND ended_at IS NULL;
    CALL lr_unhold(v_gid, v_n);
    INSERT IGNORE INTO lr_grants (request_id, host, pid, os_user, db_user, command, ttl_ms,
                                  acquired_at, ended_at, end_reason)
    VALUES (p_lease, '', 0, '', USER(), '(settled: never granted)', 0,
            UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), 'aborted');
    SET v_outcome = IF(v_q = v_items, 'queued', 'none');
    SET v_gid = NULL;
    -- The lost answer said the once item's window was done: it still is.
    SELECT once_window INTO v_window FROM lr_grants
     WHERE request_id = p_lease AND end_reason = 'skipped';
    IF v_done = 0 THEN
      SET v_outcome = 'done';
    END IF;
    SET v_done = 0;
  END IF;
  COMMIT;
  CALL lr_leave(v_sw, v_lwt);
  CALL lr_wait_lock(p_request, v_outcome = 'queued', v_galera);
  SELECT v_outcome AS outcome, v_gid AS grant_id, q.name AS resource,
         (SELECT h.fence FROM lr_holds h WHERE h.grant_id = v_gid AND h.resource = q.name) AS fence,
         (SELECT w.ticket FROM lr_waiters w WHERE w.request_id = p_request AND w.resource = q.name) AS ticket,
         v_window AS once_window,
         IF(v_outcome = 'done' AND q.name = CONCAT('id:', v_once_key),
            CONCAT('the window from ', DATE_FORMAT(v_window, '%Y-%m-%d %H:%i:%s'),
                   ' UTC already has a successful run of --id ''', v_once_key, ''''), NULL) AS message,
         3 AS api
    FROM JSON_TABLE(v_req, '$[*]' COLUMNS(name VARCHAR(80) PATH '$.name')) q
   ORDER BY CAST(q.name AS BINARY);
  COMMIT;
END//

DELIMITER ;
