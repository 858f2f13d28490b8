-- lockrun's stored routines, 70: check, the fencing check an application
-- makes inside its own transaction. Public. (How these files are applied:
-- 00-start.sql.)

DELIMITER //

-- lockrun_check: for applications, INSIDE their own transaction, right
-- before COMMIT: is the grant of lease p_lease (the grant's secret: a
-- client can check only its own grants) live on p_resource, or on all its
-- resources when NULL, and with which fence? Share-locks the hold rows
-- until the caller's transaction ends, so no sweep or release on this
-- server removes them before the caller commits; the holder's renewal
-- waits for it too, so keep what follows short. On a Galera node a share
-- lock is local, so it writes the hold rows instead (checks + 1): they are
-- then in the caller's write set, certification orders its COMMIT against
-- any release or sweep of them on another node, and whichever comes
-- second fails (the caller's COMMIT with 1213).
CREATE OR REPLACE DEFINER = 'lockrun_owner'@'localhost' PROCEDURE lockrun_check(
  IN p_lease CHAR(32) CHARACTER SET ascii, IN p_resource VARCHAR(80) CHARACTER SET ascii)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_sw, v_lwt BIGINT;
  DECLARE v_galera TINYINT;
  DECLARE v_gid BIGINT UNSIGNED;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_gid = NULL;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION
  BEGIN
    CALL lr_leave(v_sw, v_lwt);
    RESIGNAL;
  END;
  CALL lr_enter('lockrun_check', 2, NULL, p_lease, NULL, v_sw, v_lwt, v_galera);
  IF p_resource IS NOT NULL AND (BINARY p_resource NOT REGEXP '^(id:)?[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$'
                                 OR p_resource REGEXP '[[:cntrl:]]') THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'lockrun: invalid resource: use a lock name, or id:KEY for a key';
  END IF;
  SELECT id INTO v_gid FROM lr_grants WHERE request_id = p_lease AND ended_at IS NULL;
  IF v_galera AND v_gid IS NOT NULL THEN
    UPDATE lr_holds SET checks = checks + 1
     WHERE grant_id = v_gid AND (p_resource IS NULL OR resource = p_resource);
  END IF;
  SELECT COALESCE(COUNT(*) > 0 AND MIN(expires_at) > UTC_TIMESTAMP(6), 0) AS live,
         COUNT(*) AS holds,
         IF(COUNT(*) = 1 OR p_resource IS NOT NULL, MAX(fence), NULL) AS fence,
         GREATEST(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), MIN(expires_at)) DIV 1000, 0) AS remaining_ms,
         3 AS api
    FROM lr_holds WHERE grant_id = v_gid
     AND (p_resource IS NULL OR resource = p_resource) LOCK IN SHARE MODE;
  CALL lr_leave(v_sw, v_lwt);
END//

DELIMITER ;
