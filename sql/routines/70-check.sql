-- lockrun's stored routines, 70: check, the fencing check an application
-- makes inside its own transaction. Public. (How these files are applied:
-- 00-start.sql.)

DELIMITER //

-- lockrun_check: for applications, INSIDE their own transaction, right
-- before COMMIT: is the grant of lease p_lease (the grant's secret: a
-- client can check only its own grants) live on p_resource, or on all its
-- resources when NULL, and with which fence? Until the caller's
-- transaction ends, no sweep or release on this server removes the holds
-- it found; the holder's renewal waits for it too, so keep what follows
-- short. On a Galera node a share lock is local, so it writes the hold
-- rows instead (checks + 1): they are then in the caller's write set,
-- certification orders its COMMIT against any release or sweep of them
-- on another node, and whichever comes second fails (the caller's COMMIT
-- with 1213).
--
-- It runs in the caller's transaction, at the caller's isolation level,
-- and its locks last as long as that transaction, so it locks exactly the
-- rows it found, each by its full primary key (a record lock, never a gap
-- or next-key lock, which would keep other grants out): a lease nobody
-- holds locks nothing. First two reads that lock nothing below
-- SERIALIZABLE: the grant's id (by the lease) and its hold rows. Then the
-- grant row, share-locked by its id: it always exists, and every path that
-- deletes holds of a live grant (release, sweep, settle, force release)
-- also ends the grant in the same transaction, so from here on they wait;
-- read at its latest, it says whether the grant ended meanwhile. Then each
-- hold row found, locked by (resource, grant_id), answers with its latest
-- expiry and fence. (Renew and release lock hold rows before the grant
-- row: one running at this very moment may deadlock with the check, and
-- the server rolls one back with 1213, which either side retries; the
-- other order would lock the gap of a hold deleted meanwhile.)
--
-- Refused in a transaction when the session's level is SERIALIZABLE:
-- there every read locks, and the look-up of a lease nobody holds would
-- lock a gap of the lease index, where new grants' leases go. A one-shot
-- SET TRANSACTION ISOLATION LEVEL SERIALIZABLE is invisible to a routine
-- (the session variable keeps its value, and INNODB_TRX needs PROCESS and
-- lags by up to 0.1 s), so the reads are laid out to lock no gap there
-- either for a live lease: the lease and the grant row are found by
-- unique keys, and the hold rows by a range read that stops at the
-- grant's own count of them (lr_grants.holds), never reading the next
-- grant's row. A made-up lease in such a transaction does lock the gap
-- around it until the caller ends it, and grants whose lease falls there
-- wait for that (doc/sql-api.md says so). Cost: two index reads, then one
-- primary-key read per hold and one for the grant.
CREATE OR REPLACE DEFINER = 'lockrun_owner'@'localhost' PROCEDURE lockrun_check(
  IN p_lease CHAR(32) CHARACTER SET ascii, IN p_resource VARCHAR(80) CHARACTER SET ascii)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_sw, v_lwt BIGINT;
  DECLARE v_galera, v_open TINYINT;
  DECLARE v_gid BIGINT UNSIGNED;
  DECLARE v_done, v_holds INT DEFAULT 0;
  DECLARE v_res VARCHAR(80) CHARACTER SET ascii;
  DECLARE v_exp, v_min DATETIME(6);
  DECLARE v_fence, v_max BIGINT UNSIGNED;
  DECLARE v_iso VARCHAR(40) DEFAULT '';
  DECLARE v_n, v_slaves, v_s BIGINT;
  DECLARE v_in_trx, v_g TINYINT DEFAULT 0;
  DECLARE v_me VARCHAR(255) CHARACTER SET ascii;  -- not asked for (8)
  -- The hold rows' keys: all of the grant's, the resource is picked out
  -- below (a miss of (resource, grant id) would lock a gap), and no more
  -- rows than the grant made (v_n): a read past them would lock the gap
  -- after them under a SERIALIZABLE the session does not show.
  DECLARE c CURSOR FOR SELECT resource FROM lr_holds WHERE grant_id = v_gid LIMIT v_n;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION
  BEGIN
    CALL lr_leave(v_sw, v_lwt);
    RESIGNAL;
  END;
  CALL lr_enter('lockrun_check', 2, NULL, p_lease, NULL, v_sw, v_lwt, v_galera);
  IF p_resource IS NOT NULL AND (CONVERT(p_resource USING utf8mb4) COLLATE utf8mb4_bin NOT REGEXP '^(id:)?[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$'
                                 OR p_resource REGEXP '[[:cntrl:]]') THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'lockrun: invalid resource: use a lock name, or id:KEY for a key';
  END IF;
  -- The session's level (lr_server_isolation), and whether it is in a
  -- transaction (lr_server_state), which is asked only at SERIALIZABLE.
  CALL lr_server_isolation(v_iso);
  IF v_iso = 'SERIALIZABLE' AND NOT @@autocommit THEN
    SET v_in_trx = 1;
  ELSEIF v_iso = 'SERIALIZABLE' THEN
    CALL lr_server_state(2, v_slaves, v_in_trx, v_g, v_s, v_me, v_me);
  END IF;
  IF v_in_trx THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'lockrun_check: not in a SERIALIZABLE transaction (its reads would lock lockrun''s rows until you commit)';
  END IF;
  SELECT id INTO v_gid FROM lr_grants WHERE request_id = p_lease AND ended_at IS NULL;
  SET v_done = 0;
  IF v_gid IS NOT NULL THEN
    SELECT ended_at IS NULL, COALESCE(holds, 65536) INTO v_open, v_n FROM lr_grants
     WHERE id = v_gid LOCK IN SHARE MODE;
    SET v_done = 0;
  END IF;
  IF v_open THEN
    OPEN c;
    l: LOOP
      FETCH c INTO v_res;
      IF v_done THEN LEAVE l; END IF;
      IF p_resource IS NOT NULL AND BINARY v_res <> BINARY p_resource THEN ITERATE l; END IF;
      IF v_galera THEN
        UPDATE lr_holds SET checks = checks + 1 WHERE resource = v_res AND grant_id = v_gid;
      END IF;
      SET v_exp = NULL;
      SELECT expires_at, fence INTO v_exp, v_fence FROM lr_holds
       WHERE resource = v_res AND grant_id = v_gid LOCK IN SHARE MODE;
      SET v_done = 0;
      IF v_exp IS NOT NULL THEN
        SET v_holds = v_holds + 1, v_min = LEAST(COALESCE(v_min, v_exp), v_exp),
            v_max = GREATEST(COALESCE(v_max, v_fence), v_fence);
      END IF;
    END LOOP;
    CLOSE c;
  END IF;
  SELECT COALESCE(v_holds > 0 AND v_min > UTC_TIMESTAMP(6), 0) AS live,
         v_holds AS holds,
         IF(v_holds = 1 OR p_resource IS NOT NULL, v_max, NULL) AS fence,
         GREATEST(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), v_min) DIV 1000, 0) AS remaining_ms,
         3 AS api;
  CALL lr_leave(v_sw, v_lwt);
END//

DELIMITER ;
