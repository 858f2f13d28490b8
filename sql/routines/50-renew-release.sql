-- lockrun's stored routines, 50: renew and release, and the release's
-- hand-off to the next waiter. (How these files are applied:
-- 00-start.sql.)
--
-- The public lockrun_renew and lockrun_release, and the internal
-- lr_release (also for lockrun_dequeue and lr_claim) and lr_hand_off (the
-- grants a release makes to the head of the queue, which lr_claim in
-- 30-acquire.sql claims).

DELIMITER //

-- lr_end_why: how a lease's grant ended when not by its holder's release,
-- in words for its holder (who has the lease, and so may know): swept as
-- expired, or released by force (by whom, from where, and why), or
-- 'not renewed' while it has not ended yet. NULL when the grant ended by a
-- release of its own, or there is no such grant. One read by the unique
-- key; for lockrun_renew's refusal and lockrun_release's answer.
CREATE OR REPLACE DEFINER = 'lockrun_owner'@'localhost' PROCEDURE lr_end_why(
  IN p_lease CHAR(32) CHARACTER SET ascii, OUT p_why VARCHAR(1000))
  READS SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET p_why = NULL;
  SET p_why = NULL;
  SELECT CASE WHEN end_reason = 'force_released' THEN
                CONCAT('released by force by ', COALESCE(released_by, '?'), ' (',
                       COALESCE(released_os_user, '?'), '@', COALESCE(released_host, '?'), ')',
                       IF(COALESCE(release_note, '') = '', '', CONCAT(': ', release_note)))
              WHEN end_reason = 'expired' THEN 'swept: its lease had expired'
              WHEN end_reason IS NULL THEN 'not renewed: its holds are past their lease'
              ELSE NULL END
    INTO p_why FROM lr_grants WHERE request_id = p_lease;
END//

-- lockrun_renew: extends every hold of the lease by p_ttl_ms from the
-- server's now, but only holds not yet past the grace (those may have been
-- swept and their permits granted again), and notes the renewal in the
-- lock log. Its own transaction. The lease is intact iff renewed = holds =
-- the number of items.
CREATE OR REPLACE DEFINER = 'lockrun_owner'@'localhost' PROCEDURE lockrun_renew(
  IN p_lease CHAR(32) CHARACTER SET ascii, IN p_ttl_ms INT UNSIGNED)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_sw, v_lwt BIGINT;
  DECLARE v_galera TINYINT;
  DECLARE v_gid BIGINT UNSIGNED;
  DECLARE v_renewed BIGINT DEFAULT 0;
  DECLARE v_again BIGINT;        -- the second lr_enter's session values,
  DECLARE v_again_galera TINYINT; -- which the first one's already hold
  DECLARE v_ended VARCHAR(1000);
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_gid = NULL;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION
  BEGIN
    ROLLBACK;
    CALL lr_leave(v_sw, v_lwt);
    RESIGNAL;
  END;
  CALL lr_enter('lockrun_renew', 14, NULL, p_lease, p_ttl_ms, v_sw, v_lwt, v_galera);
  -- READ COMMITTED: under the session's REPEATABLE READ with snapshot
  -- isolation (on by default from MariaDB 11.6), a hold that a check or
  -- a claim changed after this transaction's first read would fail the
  -- UPDATE with 1020. Under autocommit = 0 lr_enter's reads began a
  -- transaction, and SET TRANSACTION would fail (1568): end it first.
  COMMIT;
  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  -- The lease length checked again inside the transaction, the bound
  -- read in shared mode: a `lockrunctl max-ttl` that lowered it since
  -- waits for this renewal (and sees its hold), or the renewal is refused.
  CALL lr_enter('lockrun_renew', 4, NULL, NULL, p_ttl_ms, v_again, v_again, v_again_galera);
  SELECT id INTO v_gid FROM lr_grants WHERE request_id = p_lease AND ended_at IS NULL;
  IF v_gid IS NOT NULL THEN
    -- UTC_TIMESTAMP as of this statement: after the causal wait.
    UPDATE lr_holds SET expires_at = UTC_TIMESTAMP(6) + INTERVAL p_ttl_ms * 1000 MICROSECOND
     WHERE grant_id = v_gid
       AND expires_at > UTC_TIMESTAMP(6) - INTERVAL 5000000 MICROSECOND;
    SET v_renewed = ROW_COUNT();
    IF v_renewed > 0 THEN
      UPDATE lr_grants SET renewed_at = UTC_TIMESTAMP(6) WHERE id = v_gid;
    END IF;
  END IF;
  COMMIT;
  -- A lease not renewed: why, for its holder, who has the lease and so
  -- may know (ended: how, and by whom and why if by force).
  IF v_renewed = 0 THEN
    CALL lr_end_why(p_lease, v_ended);
    IF v_ended IS NULL AND v_gid IS NULL THEN
      SELECT CONCAT('ended: ', end_reason) INTO v_ended FROM lr_grants WHERE request_id = p_lease;
    END IF;
  END IF;
  SELECT v_gid AS grant_id, COUNT(*) AS holds, v_renewed AS renewed,
         MIN(expires_at) AS expires_at, v_ended AS ended, 3 AS api
    FROM lr_holds WHERE grant_id = v_gid;
  COMMIT;
  CALL lr_leave(v_sw, v_lwt);
END//

-- The release's hand-off (migration 5). Called by lr_release inside its
-- transaction, with the rows of grant p_gid's resources locked in name
-- order and its holds gone: for each of those resources, grants the
-- request at the head of the queue, and the next ones while they fit (at
-- most 10), exactly as its own acquire would (fence + 1 on the resource
-- row, the log entry, the item, the hold, the place left), so that the
-- woken waiter only claims the grant (the claim renews the hold to the
-- full ttl). Only a live place (not past its
-- expiry) of a request of one item that left its lease (lockrun_acquire
-- writes it for those) is served; the first other one stops the queue
-- there, and is woken to acquire as before (p_stuck = 1: some head may
-- fit but was not served). Appends 'conn@request' of each served
-- request's sleeping doorbell to p_wake, for the KILL after the COMMIT.
-- The grant is made under the lease the request queued with, and only
-- that request, with that lease, can claim it (lockrun_acquire).
-- Cost: one locking read of the queue's head per resource; with a live
-- head, lr_epoch once; and a few row writes per grant.
CREATE OR REPLACE DEFINER = 'lockrun_owner'@'localhost' PROCEDURE lr_hand_off(
  IN p_gid BIGINT UNSIGNED, IN p_galera TINYINT, INOUT p_wake VARCHAR(4000),
  OUT p_stuck TINYINT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
proc: BEGIN
  DECLARE v_done, v_n INT DEFAULT 0;
  DECLARE v_res VARCHAR(80) CHARACTER SET ascii;
  DECLARE v_req, v_lease CHAR(32) CHARACTER SET ascii;
  DECLARE v_permits, v_ttl, v_used, v_cap, v_gid, v_conn, v_fence BIGINT UNSIGNED;
  DECLARE v_kind VARCHAR(10);
  DECLARE v_exp, v_since DATETIME(6);
  DECLARE v_host VARCHAR(255);
  DECLARE v_pid INT UNSIGNED;
  DECLARE v_os VARCHAR(64);
  DECLARE v_cmd VARCHAR(1024);
  DECLARE v_dbu VARCHAR(300);
  DECLARE v_now DATETIME(6) DEFAULT UTC_TIMESTAMP(6);
  DECLARE v_fresh, v_paused TINYINT;
  DECLARE v_epoch_at, v_until DATETIME(6);
  DECLARE v_floor BIGINT UNSIGNED;
  DECLARE v_max BIGINT;
  DECLARE c CURSOR FOR SELECT resource FROM lr_grant_items WHERE grant_id = p_gid ORDER BY resource;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
  SET p_stuck = 0;
  IF p_gid IS NULL THEN
    LEAVE proc;
  END IF;
  CALL lr_fresh(v_fresh);
  OPEN c;
  res: LOOP
    FETCH c INTO v_res;
    IF v_done THEN LEAVE res; END IF;
    SET v_n = 0;
    IF v_fresh THEN
      CALL lr_recount(v_res);
    END IF;
    head: LOOP
      SET v_req = NULL, v_lease = NULL;
      -- Locked, so the waiter's own writes (heartbeat, doorbell, leaving)
      -- come before or after this hand-off, never inside it.
      SELECT request_id, lease, ttl_ms, permits, expires_at, since, wake_conn,
             host, pid, os_user, command, db_user
        INTO v_req, v_lease, v_ttl, v_permits, v_exp, v_since, v_conn,
             v_host, v_pid, v_os, v_cmd, v_dbu
        FROM lr_waiters WHERE resource = v_res ORDER BY ticket LIMIT 1 FOR UPDATE;
      SET v_done = 0;
      IF v_req IS NULL OR v_exp <= v_now THEN
        LEAVE head;
      END IF;
      -- After a fail-over nothing is handed on until the quarantine ends,
      -- and nothing on a replica (lr_epoch); the waiters acquire then.
      -- Asked once, and only when there is someone to hand on to: a
      -- release with nobody waiting pays nothing for it.
      IF v_until IS NULL THEN
        CALL lr_epoch(NULL, 0, v_epoch_at, v_until, v_floor, v_max);
      END IF;
      IF v_until > v_now THEN
        LEAVE proc;
      END IF;
      IF v_n >= 10 THEN
        SET p_stuck = 1;
        LEAVE head;
      END IF;
      SELECT used, capacity, kind, paused_at IS NOT NULL INTO v_used, v_cap, v_kind, v_paused
        FROM lr_resources WHERE name = v_res;
      -- Paused (lockrunctl pause): nothing is handed on; resume lets
      -- the waiters acquire.
      IF v_paused OR v_used + v_permits > v_cap THEN
        LEAVE head;
      END IF;
      -- A lease is left only by a request of one item (its places are
      -- always written whole), so this place is all the request has.
      -- So does one whose lease is longer than max_ttl_ms allows now (it
      -- was lowered since it queued): its acquire says so.
      IF v_lease IS NULL OR v_ttl IS NULL OR v_ttl > v_max
         OR EXISTS (SELECT 1 FROM lr_grants WHERE request_id = v_lease) THEN
        -- It may fit, but must acquire itself: the caller wakes it.
        SET p_stuck = 1;
        LEAVE head;
      END IF;
      UPDATE lr_resources SET fence = GREATEST(fence, v_floor) + 1,
             used = used + IF(v_fresh, 0, v_permits), updated_at = v_now
       WHERE name = v_res;
      SELECT fence INTO v_fence FROM lr_resources WHERE name = v_res;
      INSERT INTO lr_grants (request_id, host, pid, os_user, db_user, command, ttl_ms, holds,
                             requested_at, acquired_at, queued_as)
      VALUES (v_lease, v_host, v_pid, v_os, COALESCE(v_dbu, ''), v_cmd, v_ttl, 1, v_since, v_now, v_req);
      SET v_gid = LAST_INSERT_ID();
      IF v_gid = 0 THEN  -- MySQL: the caller set insert_id = 0 (05-server.sql)
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'lockrun: this session set insert_id, which would choose a grant''s id: call lockrun without it';
      END IF;
      INSERT INTO lr_grant_items (grant_id, resource, kind, permits, fence)
      VALUES (v_gid, v_res, v_kind, v_permits, v_fence);
      -- Until claimed, the hold lives no longer than the place it replaces
      -- would have (at most 10 s since the waiter's last call): a waiter
      -- that died holds the queue back no longer than before.
      INSERT INTO lr_holds (resource, grant_id, permits, fence, expires_at)
      VALUES (v_res, v_gid, v_permits, v_fence,
              LEAST(v_exp, v_now + INTERVAL v_ttl * 1000 MICROSECOND));
      IF v_fresh THEN
        CALL lr_recount(v_res);
      END IF;
      DELETE FROM lr_waiters WHERE request_id = v_req;
      IF v_conn IS NOT NULL AND LENGTH(COALESCE(p_wake, '')) < 3900 THEN
        SET p_wake = CONCAT(COALESCE(p_wake, ''), v_conn, '@', v_req, ' ');
      END IF;
      SET v_n = v_n + 1;
    END LOOP;
  END LOOP;
  CLOSE c;
END//

-- lr_release: the release itself, for lockrun_release and lockrun_dequeue.
-- Gives the lease's holds back and closes its lock-log entry, in one
-- transaction that locks the resource rows in name order first (their
-- `used` goes down); in the same transaction hands the freed room to
-- the waiters at the head of those queues (lr_hand_off). After the COMMIT
-- it rings the doorbells on this server (lockrun_sleep): of each request
-- it granted, and of the head waiter of each freed resource. KILL QUERY is
-- allowed because both sides run routines of the same definer.
-- Idempotent: after any error, run it again.
CREATE OR REPLACE DEFINER = 'lockrun_owner'@'localhost' PROCEDURE lr_release(
  IN p_lease CHAR(32) CHARACTER SET ascii, IN p_reason VARCHAR(12),
  IN p_exit_status INT, IN p_term_signal INT, IN p_galera TINYINT,
  OUT p_released INT, OUT p_woken INT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
proc: BEGIN
  DECLARE v_done INT DEFAULT 0;
  DECLARE v_gid BIGINT UNSIGNED;
  DECLARE v_name VARCHAR(80) CHARACTER SET ascii;
  DECLARE v_x INT;
  DECLARE v_conn BIGINT UNSIGNED;
  DECLARE v_req CHAR(32) CHARACTER SET ascii;
  DECLARE v_key VARCHAR(64) CHARACTER SET ascii;
  DECLARE v_wake, v_one VARCHAR(4000) DEFAULT '';
  DECLARE v_stuck TINYINT DEFAULT 0;
  DECLARE v_bell VARCHAR(64) CHARACTER SET ascii;
  DECLARE c CURSOR FOR SELECT resource FROM lr_holds WHERE grant_id = v_gid ORDER BY resource;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION
  BEGIN
    ROLLBACK;
    RESIGNAL;
  END;
  SET p_released = 0, p_woken = 0;
  -- No lease: only load this routine and lr_hand_off into the session's
  -- cache (lockrun_release with no lease); lr_hand_off does nothing for
  -- no grant.
  IF p_lease IS NULL THEN
    CALL lr_hand_off(NULL, p_galera, v_wake, v_stuck);
    LEAVE proc;
  END IF;
  -- Under autocommit = 0 the reads before this began a transaction, and
  -- SET TRANSACTION would fail (1568): end it (the caller had none).
  COMMIT;
  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  -- The key and window never change; read once here, with the id.
  SELECT id, IF(once_window IS NULL, NULL, idem_key) INTO v_gid, v_key
    FROM lr_grants WHERE request_id = p_lease;
  SET v_done = 0;
  OPEN c;
  l: LOOP
    FETCH c INTO v_name;
    IF v_done THEN LEAVE l; END IF;
    SELECT 1 INTO v_x FROM lr_resources WHERE name = v_name FOR UPDATE;
  END LOOP;
  CLOSE c;
  SET v_done = 0;
  CALL lr_unhold(v_gid, p_released);
  UPDATE lr_grants SET ended_at = UTC_TIMESTAMP(6), end_reason = p_reason,
         exit_status = p_exit_status, term_signal = p_term_signal
   WHERE id = v_gid AND ended_at IS NULL;
  IF ROW_COUNT() = 1 THEN
    -- A once-per run that ended well, by this release (not swept before
    -- it): its window is done. Under the key row's lock, taken above,
    -- like the acquire that reads it. Then a bounded trim of the key's
    -- rows whose window ended more than GREATEST(1 day, 3 periods) ago.
    IF v_key IS NOT NULL AND p_reason = 'exited' AND p_exit_status = 0 THEN
      INSERT IGNORE INTO lr_once (idem_key, granted_at, grant_id, window_start, period_ms,
                                  window_end, done_at)
      SELECT idem_key, acquired_at, id, once_window, once_period_ms,
             once_window + INTERVAL once_period_ms * 1000 MICROSECOND, UTC_TIMESTAMP(6)
        FROM lr_grants WHERE id = v_gid;
      DELETE FROM lr_once WHERE idem_key = v_key
         AND window_end < UTC_TIMESTAMP(6) - INTERVAL GREATEST(86400000, 3 * period_ms) * 1000 MICROSECOND
       ORDER BY granted_at LIMIT 10;
    END IF;
  ELSE
    -- Ended already, by a force release or a sweep, while the command
    -- ran on: the reason stays, and how the command really ended is
    -- kept too.
    UPDATE lr_grants SET exit_status = p_exit_status, term_signal = p_term_signal
     WHERE id = v_gid AND end_reason IN ('force_released', 'expired')
       AND exit_status IS NULL AND term_signal IS NULL;
  END IF;
  -- With nobody queued on the freed resources (an enqueue writes their
  -- rows, which we hold locked) there is nothing to hand on.
  IF p_released > 0 AND EXISTS (SELECT 1 FROM lr_grant_items i JOIN lr_waiters w ON w.resource = i.resource
                                 WHERE i.grant_id = v_gid) THEN
    CALL lr_hand_off(v_gid, p_galera, v_wake, v_stuck);
  END IF;
  COMMIT;
  -- The wake-ups, best effort: a sleeper that is gone (1094) or not ours
  -- (1095) is covered by its own timeout. First the requests just
  -- granted; then, if some head was not served, the head waiter of each
  -- freed resource (the grant's items, kept in the lock log after the
  -- holds are gone; a grant from before migration 3 has none, and its
  -- waiters wake by timeout).
  IF p_released > 0 THEN BEGIN
    DECLARE wc CURSOR FOR
      SELECT w.wake_conn, w.request_id FROM lr_grant_items r
        JOIN lr_waiters w ON w.resource = r.resource
         AND w.ticket = (SELECT MIN(a.ticket) FROM lr_waiters a WHERE a.resource = r.resource)
       WHERE r.grant_id = v_gid AND w.wake_conn IS NOT NULL;
    DECLARE CONTINUE HANDLER FOR 1094, 1095 BEGIN END;
    -- The release is committed: nothing here may report it failed (a
    -- causal wait that times out on a stalled Galera node is 1205). A
    -- failure only ends the wake-ups; the sleepers' timeouts cover them.
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN END;
    WHILE v_wake <> '' DO
      SET v_one = SUBSTRING_INDEX(v_wake, ' ', 1);
      SET v_wake = SUBSTRING(v_wake, LENGTH(v_one) + 2);
      SET v_conn = SUBSTRING_INDEX(v_one, '@', 1) + 0;
      CALL lr_lock_name('bell', SUBSTRING_INDEX(v_one, '@', -1), v_bell);
      IF IS_USED_LOCK(v_bell) = v_conn THEN
        KILL QUERY v_conn;
        SET p_woken = p_woken + 1;
      END IF;
    END WHILE;
    IF v_stuck THEN
      OPEN wc;
      w: LOOP
        FETCH wc INTO v_conn, v_req;
        IF v_done THEN LEAVE w; END IF;
        CALL lr_lock_name('bell', v_req, v_bell);
        IF IS_USED_LOCK(v_bell) = v_conn THEN
          KILL QUERY v_conn;
          SET p_woken = p_woken + 1;
        END IF;
      END LOOP;
      CLOSE wc;
    END IF;
  END; END IF;
  -- The wake-up reads began a transaction under autocommit = 0: end it,
  -- so the caller's next writer may run.
  COMMIT;
END//

-- lockrun_release: gives the lease's holds back, closes its lock-log entry
-- and hands the freed room on (lr_release). Idempotent: after any error,
-- CALL it again. With no lease (NULL) it releases nothing and answers
-- released 0: it only has the server parse the routines of a release that
-- hands the lock on, for this connection now, as a connection parses each
-- routine on its first call (about 1 ms for these), so that such a release
-- later does not spend that time while the next waiter waits. lockrun
-- does this while its command runs, when others wait for its lock.
--
-- The common release, a grant of one hold (not a once run) with nobody
-- queued on its resource, is done here, in one transaction of four short
-- statements after the row lock, and needs no other routine; the rest goes
-- to lr_release.
CREATE OR REPLACE DEFINER = 'lockrun_owner'@'localhost' PROCEDURE lockrun_release(
  IN p_lease CHAR(32) CHARACTER SET ascii, IN p_reason VARCHAR(12),
  IN p_exit_status INT, IN p_term_signal INT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_sw, v_lwt BIGINT;
  DECLARE v_galera TINYINT;
  DECLARE v_released, v_woken INT DEFAULT 0;
  DECLARE v_gid BIGINT UNSIGNED;
  DECLARE v_res VARCHAR(80) CHARACTER SET ascii;
  DECLARE v_permits BIGINT UNSIGNED;
  DECLARE v_fast TINYINT DEFAULT 0;
  DECLARE v_ended VARCHAR(1000);
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_gid = NULL;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION
  BEGIN
    ROLLBACK;
    CALL lr_leave(v_sw, v_lwt);
    RESIGNAL;
  END;
  CALL lr_enter('lockrun_release', IF(p_lease IS NULL, 8, 10), NULL, p_lease, NULL, v_sw, v_lwt, v_galera);
  IF p_lease IS NOT NULL THEN
    IF p_reason IS NULL OR BINARY p_reason NOT IN ('exited', 'signaled', 'lost', 'spawn_failed', 'aborted') THEN
      SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'lockrun: reason must be exited, signaled, lost, spawn_failed or aborted';
    END IF;
    IF p_exit_status NOT BETWEEN 0 AND 255 OR p_term_signal NOT BETWEEN 0 AND 127 THEN
      SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'lockrun: exit_status must be 0-255 and term_signal 0-127, or NULL';
    END IF;
    -- Under autocommit = 0 the reads before this began a transaction, and
    -- SET TRANSACTION would fail (1568): end it (the caller had none).
    COMMIT;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    -- The grant's one resource, unless lr_fresh would say yes (the same
    -- two primary-key entries).
    SELECT id INTO v_gid FROM lr_grants
     WHERE request_id = p_lease AND ended_at IS NULL AND once_window IS NULL
       AND NOT EXISTS (SELECT 1 FROM lr_routines WHERE name IN ('triggers', 'procedures')
                        AND (name = 'triggers' OR applied_at > UTC_TIMESTAMP(6) - INTERVAL 60 SECOND));
    IF v_gid IS NOT NULL THEN
      SELECT MIN(resource), MIN(permits), COUNT(*) = 1 INTO v_res, v_permits, v_fast
        FROM lr_holds WHERE grant_id = v_gid;
    END IF;
    IF v_fast THEN
      -- Under the row's lock (every grant, enqueue, sweep and release of
      -- the resource takes it): the hold still there, nobody queued.
      SELECT EXISTS (SELECT 1 FROM lr_holds WHERE resource = v_res AND grant_id = v_gid)
             AND NOT EXISTS (SELECT 1 FROM lr_waiters WHERE resource = v_res) INTO v_fast
        FROM lr_resources WHERE name = v_res FOR UPDATE;
    END IF;
    IF v_fast THEN
      UPDATE lr_resources SET used = IF(used >= v_permits, used - v_permits, 0),
             updated_at = UTC_TIMESTAMP(6) WHERE name = v_res;
      DELETE FROM lr_holds WHERE resource = v_res AND grant_id = v_gid;
      SET v_released = 1;
      UPDATE lr_grants SET ended_at = UTC_TIMESTAMP(6), end_reason = p_reason,
             exit_status = p_exit_status, term_signal = p_term_signal
       WHERE id = v_gid;
    END IF;
    COMMIT;
  END IF;
  IF NOT v_fast THEN
    CALL lr_release(p_lease, p_reason, p_exit_status, p_term_signal, v_galera, v_released, v_woken);
  END IF;
  -- Whether the lock log holds this release's end (made now, or by an
  -- earlier call whose answer was lost): if the grant had been swept or
  -- released by force before, its holder must know that how its command
  -- ended was not what ended the grant (a --once-per window stays open).
  IF p_lease IS NOT NULL AND NOT v_fast THEN
    CALL lr_end_why(p_lease, v_ended);
    -- Under autocommit = 0 that read began a transaction: leave none.
    COMMIT;
  END IF;
  -- lr_leave, spelled out: a free lock's run then never loads it.
  SET SESSION innodb_lock_wait_timeout = v_lwt;
  IF v_sw IS NOT NULL THEN
    CALL lr_server_sync(v_sw);
  END IF;
  SELECT v_released AS released, v_woken AS woken, 3 AS api, v_ended AS ended;
END//

DELIMITER ;
