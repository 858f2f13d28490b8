-- lockrun's stored routines, 20: the sweep and the `used` count.
-- (How these files are applied: 00-start.sql.)
--
-- Internal, for the public procedures: the bounded sweep of expired holds
-- and queue places, the reclaiming of idle resource rows, and what keeps
-- each resource's `used` (the permits of its holds) right without
-- triggers.

DELIMITER //

-- Bounded sweep of one resource whose row the caller holds locked: at most
-- 20 holds and 20 waiters that expired more than the grace ago by this
-- server's clock, oldest first through k_expiry, their lock-log entries
-- closed, `used` recounted. A hold past its grace but not
-- yet swept still counts as used, so a bounded or skipped sweep can delay a
-- grant, never cause one. When it removed holds it also recomputes `used`
-- from the hold rows left, so a counter that drifted is mended here.
-- Cost: two short index range reads, and a few row writes per expired
-- hold.
CREATE OR REPLACE DEFINER = 'lockrun_owner'@'localhost' PROCEDURE lr_sweep(
  IN p_res VARCHAR(80) CHARACTER SET ascii)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_cut DATETIME(6) DEFAULT UTC_TIMESTAMP(6) - INTERVAL 5000000 MICROSECOND;
  DECLARE v_done INT DEFAULT 0;
  DECLARE v_gid BIGINT UNSIGNED;
  DECLARE v_exp DATETIME(6);
  DECLARE c CURSOR FOR SELECT grant_id, expires_at FROM lr_holds
    WHERE resource = p_res AND expires_at <= v_cut ORDER BY expires_at LIMIT 20;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
  -- Nearly always there is nothing to sweep: one index probe each, and
  -- the cursor (dear to open) only when there is.
  IF EXISTS (SELECT 1 FROM lr_holds WHERE resource = p_res AND expires_at <= v_cut) THEN
    OPEN c;
    l: LOOP
      FETCH c INTO v_gid, v_exp;
      IF v_done THEN LEAVE l; END IF;
      -- The expiry is checked again where the hold is deleted, and the
      -- grant ends only if it was. A renewal does not take the resource
      -- row the caller holds; it renews only holds within the grace, so
      -- one that starts after the cursor read cannot renew this hold, and
      -- one already under way when the cursor read it holds the hold row
      -- until it commits: so far the locking reads of `IF EXISTS` (here
      -- and in lr_acquire) waited for it, and then saw it renewed. This
      -- DELETE waits too, and decides on what the renewal committed,
      -- whatever read the caller made. Hold row, then grant row: the order
      -- of renew and release.
      DELETE FROM lr_holds WHERE resource = p_res AND grant_id = v_gid AND expires_at <= v_cut;
      IF ROW_COUNT() > 0 THEN
        UPDATE lr_grants SET ended_at = v_exp, end_reason = 'expired'
         WHERE id = v_gid AND ended_at IS NULL;
      END IF;
    END LOOP;
    CLOSE c;
    CALL lr_recount(p_res);
  END IF;
  IF EXISTS (SELECT 1 FROM lr_waiters WHERE resource = p_res AND expires_at <= v_cut) THEN
    DELETE FROM lr_waiters WHERE resource = p_res AND expires_at <= v_cut
     ORDER BY expires_at LIMIT 20;
  END IF;
END//

-- Reclaims up to p_n idle resource rows, for lr_acquire after it created
-- rows (migration 11): rows of a mutex, read-write lock or key, which any
-- acquire creates, that nobody has granted, released or waited for in ten
-- minutes (updated_at; no holds, no waiters, `used` 0) and that are not
-- paused; never a semaphore (`lockrunctl set` makes those). Each creation
-- pays for up to two deletions, so an account that makes up names keeps
-- at most about 1.5 times what it made in the last ten minutes. Every
-- token of a name lives on: its fence is folded into its bucket's floor
-- in lr_fence_floor ('~' and the first 3 hex digits of the name's SHA-256),
-- which a new row of the name starts above (lr_acquire, `lockrunctl set`).
-- Best effort, in its own transaction after the caller's COMMIT: a row
-- locked by anyone is skipped (SKIP LOCKED: no lock-order wait), and any
-- error only ends the step. Cost: an index read of the oldest rows, and
-- two writes per row reclaimed.
CREATE OR REPLACE DEFINER = 'lockrun_owner'@'localhost' PROCEDURE lr_reclaim(IN p_n INT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_i INT DEFAULT 0;
  DECLARE v_name VARCHAR(80) CHARACTER SET ascii;
  DECLARE v_fence BIGINT UNSIGNED;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_name = NULL;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION ROLLBACK;
  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  l: WHILE v_i < p_n DO
    SET v_name = NULL, v_i = v_i + 1;
    -- Under the row's lock nobody grants or queues on it (both lock it
    -- first), so what this finds idle stays idle until the DELETE.
    SELECT r.name, r.fence INTO v_name, v_fence FROM lr_resources r
     WHERE r.updated_at < UTC_TIMESTAMP(6) - INTERVAL 600 SECOND
       AND r.kind <> 'semaphore' AND r.used = 0 AND r.paused_at IS NULL
       AND NOT EXISTS (SELECT 1 FROM lr_holds h WHERE h.resource = r.name)
       AND NOT EXISTS (SELECT 1 FROM lr_waiters w WHERE w.resource = r.name)
     ORDER BY r.updated_at LIMIT 1 FOR UPDATE SKIP LOCKED;
    IF v_name IS NULL THEN
      LEAVE l;
    END IF;
    -- Read again without SKIP LOCKED, which would pass over a hold row
    -- that a renewal has locked.
    IF EXISTS (SELECT 1 FROM lr_holds WHERE resource = v_name)
       OR EXISTS (SELECT 1 FROM lr_waiters WHERE resource = v_name) THEN
      LEAVE l;
    END IF;
    INSERT INTO lr_fence_floor (name, fence, deleted_at)
    VALUES (CONCAT('~', LEFT(SHA2(v_name, 256), 3)), v_fence, UTC_TIMESTAMP(6))
    ON DUPLICATE KEY UPDATE fence = GREATEST(fence, VALUES(fence)), deleted_at = VALUES(deleted_at);
    DELETE FROM lr_resources WHERE name = v_name;
  END WHILE;
  COMMIT;
END//

-- Sets `used` of resource p_res, whose row the caller holds locked, to the
-- permits of its hold rows, if it disagrees. Called where the count is
-- cheap or matters: after a sweep, for a mutex or key at every acquire
-- (at most one hold row), and before a busy answer. One index range read
-- of the resource's holds.
CREATE OR REPLACE DEFINER = 'lockrun_owner'@'localhost' PROCEDURE lr_recount(
  IN p_res VARCHAR(80) CHARACTER SET ascii)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  UPDATE lr_resources SET used = (SELECT COALESCE(SUM(h.permits), 0) FROM lr_holds h WHERE h.resource = p_res)
   WHERE name = p_res
     AND used <> (SELECT COALESCE(SUM(h.permits), 0) FROM lr_holds h WHERE h.resource = p_res);
END//

-- Whether `used` must be counted from the hold rows rather than kept by
-- adding and taking off permits: while the triggers of lockrun 0.1 on
-- lr_holds may still exist (lr_routines has a 'triggers' row until init
-- dropped them), which keep it too, and for a minute after these routines
-- were installed, while calls of the older routines, which relied on
-- those triggers, may still run. Then every decision and every change of
-- the holds counts the rows (lr_recount), which is right with or without
-- the triggers. One read of two primary-key entries.
CREATE OR REPLACE DEFINER = 'lockrun_owner'@'localhost' PROCEDURE lr_fresh(OUT p_fresh TINYINT)
  READS SQL DATA SQL SECURITY DEFINER
BEGIN
  SET p_fresh = EXISTS (SELECT 1 FROM lr_routines WHERE name IN ('triggers', 'procedures')
                         AND (name = 'triggers' OR applied_at > UTC_TIMESTAMP(6) - INTERVAL 60 SECOND));
END//

-- Deletes grant p_gid's holds and takes their permits off `used` of their
-- resources, whose rows the caller holds locked; p_n: the holds deleted.
-- The procedures keep `used` themselves: a trigger would need SUPER to
-- create on a server with binary logging, which managed databases do not
-- give. Never below zero; in lr_fresh's time, counted from the rows left.
-- Two statements (three while fresh).
CREATE OR REPLACE DEFINER = 'lockrun_owner'@'localhost' PROCEDURE lr_unhold(
  IN p_gid BIGINT UNSIGNED, OUT p_n INT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_fresh TINYINT;
  CALL lr_fresh(v_fresh);
  IF NOT v_fresh THEN
    UPDATE lr_resources r JOIN lr_holds h ON h.resource = r.name
       SET r.used = IF(r.used >= h.permits, r.used - h.permits, 0), r.updated_at = UTC_TIMESTAMP(6)
     WHERE h.grant_id = p_gid;
  END IF;
  DELETE FROM lr_holds WHERE grant_id = p_gid;
  SET p_n = ROW_COUNT();
  IF v_fresh THEN
    UPDATE lr_resources r JOIN lr_grant_items i ON i.resource = r.name
       SET r.used = (SELECT COALESCE(SUM(h.permits), 0) FROM lr_holds h WHERE h.resource = r.name)
     WHERE i.grant_id = p_gid;
  END IF;
END//

DELIMITER ;
