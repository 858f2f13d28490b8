-- lockrun's stored routines, 40: the queue and waiting.
-- (How these files are applied: 00-start.sql.)
--
-- The public lockrun_poll, lockrun_sleep, lockrun_dequeue and
-- lockrun_host_queue, for a request that holds queue places, and the
-- internal lr_wait_lock (the wake-up chain) and lr_heartbeat (places kept
-- alive), which acquire calls too.

DELIMITER //

-- The queue's wake-up chain: a queued request's session holds its wait
-- lock (lr_lock_name), and the waiter right behind it blocks in GET_LOCK
-- on it, so it wakes the moment the request ahead is granted, leaves or
-- dies. Taken at most once per session (GET_LOCK nests). On Galera named
-- locks are local to a node: a waiter on another node finds the lock free
-- and polls instead. p_galera is not read: the signature stays, so that an
-- older install's routines that call this keep working during an upgrade.
CREATE OR REPLACE DEFINER = 'lockrun_owner'@'localhost' PROCEDURE lr_wait_lock(
  IN p_request CHAR(32) CHARACTER SET ascii, IN p_take TINYINT, IN p_galera TINYINT)
  NO SQL SQL SECURITY DEFINER
BEGIN
  DECLARE v_name VARCHAR(64) CHARACTER SET ascii;
  DECLARE v_held TINYINT;
  CALL lr_lock_name('wait', p_request, v_name);
  SET v_held = COALESCE(IS_USED_LOCK(v_name) = CONNECTION_ID(), 0);
  IF p_take AND NOT v_held THEN
    DO GET_LOCK(v_name, 0);
  ELSEIF NOT p_take AND v_held THEN
    DO RELEASE_LOCK(v_name);
  END IF;
END//

-- A waiter's heartbeat: its places live 10 s from now. Written only when
-- less than 7 s are left (at most one write every 3 s), and never to a
-- place already sweepable (it may be gone on another node).
CREATE OR REPLACE DEFINER = 'lockrun_owner'@'localhost' PROCEDURE lr_heartbeat(
  IN p_request CHAR(32) CHARACTER SET ascii)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  UPDATE lr_waiters SET expires_at = UTC_TIMESTAMP(6) + INTERVAL 10000000 MICROSECOND
   WHERE request_id = p_request AND expires_at < UTC_TIMESTAMP(6) + INTERVAL 7000000 MICROSECOND
     AND expires_at > UTC_TIMESTAMP(6) - INTERVAL 5000000 MICROSECOND;
END//

-- lockrun_poll: a queued request's cheap look: one row per place. An
-- acquire can succeed iff every row has at_head = 1 and fits = 1. ahead
-- counts the live places ahead up to 10; ahead_max is the ticket distance
-- to the first place, an upper bound. Also its heartbeat (lr_heartbeat)
-- and its wake-up lock. wait_for is the wake-up lock of the place right
-- ahead (lr_lock_name: a hash, 'lockrun.wait.' and 32 hex digits).
CREATE OR REPLACE DEFINER = 'lockrun_owner'@'localhost' PROCEDURE lockrun_poll(
  IN p_request CHAR(32) CHARACTER SET ascii)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_sw, v_lwt BIGINT;
  DECLARE v_galera TINYINT;
  DECLARE v_now DATETIME(6);
  DECLARE v_cut DATETIME(6);
  DECLARE v_places INT;
  DECLARE v_done INT DEFAULT 0;
  DECLARE v_res VARCHAR(80) CHARACTER SET ascii;
  DECLARE v_ticket BIGINT UNSIGNED;
  DECLARE v_ahead TEXT DEFAULT '[]';
  DECLARE c CURSOR FOR SELECT resource, ticket FROM lr_waiters WHERE request_id = p_request;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION
  BEGIN
    ROLLBACK;
    CALL lr_leave(v_sw, v_lwt);
    RESIGNAL;
  END;
  CALL lr_enter('lockrun_poll', 9, p_request, NULL, NULL, v_sw, v_lwt, v_galera);
  -- READ COMMITTED: the count reads the places the heartbeat then writes,
  -- which the request's sleeper (lockrun_sleep, another connection) may
  -- have written since; under snapshot isolation (MariaDB 11.8's
  -- REPEATABLE READ) that write would fail with 1020.
  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  SELECT COUNT(*), UTC_TIMESTAMP(6) INTO v_places, v_now FROM lr_waiters WHERE request_id = p_request;
  SET v_cut = v_now - INTERVAL 5000000 MICROSECOND;
  CALL lr_heartbeat(p_request);
  COMMIT;
  CALL lr_wait_lock(p_request, v_places > 0, v_galera);
  -- How many live places of other requests are ahead of each of ours,
  -- counted up to 10 (10: ten or more), so a poll reads at most ten index
  -- entries per place however long the queue. Tickets have gaps (a
  -- granted or departed request leaves one), so the ticket distance alone
  -- would overstate it.
  OPEN c;
  l: LOOP
    FETCH c INTO v_res, v_ticket;
    IF v_done THEN LEAVE l; END IF;
    SET v_ahead = JSON_ARRAY_APPEND(v_ahead, '$', JSON_OBJECT('resource', v_res, 'n',
        (SELECT COUNT(*) FROM (SELECT 1 FROM lr_waiters WHERE resource = v_res
            AND ticket < v_ticket AND expires_at > v_cut LIMIT 10) x)));
  END LOOP;
  CLOSE c;
  SELECT w.resource, r.capacity, r.used, w.permits,
         -- Counted from the live hold rows, not `used`: a count that
         -- drifted high (an operator's DELETE) must not keep a waiter
         -- from ever trying; the acquire then recounts it.
         ((SELECT COALESCE(SUM(h.permits), 0) FROM lr_holds h
            WHERE h.resource = w.resource AND h.expires_at > v_cut)
          + w.permits <= r.capacity AND r.paused_at IS NULL) AS fits,
         NOT EXISTS (SELECT 1 FROM lr_waiters a WHERE a.resource = w.resource
                      AND a.ticket < w.ticket AND a.expires_at > v_cut) AS at_head,
         w.ticket - (SELECT MIN(a.ticket) FROM lr_waiters a WHERE a.resource = w.resource) AS ahead_max,
         (SELECT j.n FROM JSON_TABLE(v_ahead, '$[*]' COLUMNS(resource VARCHAR(80) PATH '$.resource',
                                 n INT PATH '$.n')) j WHERE j.resource = w.resource) AS ahead,
         -- Who holds it (the first grant), for the waiter's -v lines.
         (SELECT CONCAT(g.host, ':', g.pid, ' (', g.db_user, ')')
            FROM lr_holds h JOIN lr_grants g ON g.id = h.grant_id
           WHERE h.resource = w.resource ORDER BY h.grant_id LIMIT 1) AS holder,
         IF(r.paused_at IS NULL, NULL,
            CONCAT('paused since ', DATE_FORMAT(r.paused_at, '%Y-%m-%d %H:%i:%s'), ' UTC',
                   IF(COALESCE(r.pause_note, '') = '', '', CONCAT(': ', r.pause_note)))) AS paused,
         -- lr_lock_name's 'wait' name, spelled out: a SELECT calls no procedure.
         (SELECT CONCAT('lockrun.wait.', LEFT(SHA2(CONCAT('wait:', a.request_id), 256), 32))
            FROM lr_waiters a
           WHERE a.resource = w.resource AND a.ticket < w.ticket AND a.expires_at > v_cut
           ORDER BY a.ticket DESC LIMIT 1) AS wait_for,
         v_places AS places, v_galera AS galera, 3 AS api
    FROM lr_waiters w JOIN lr_resources r ON r.name = w.resource
   WHERE w.request_id = p_request ORDER BY w.resource;
  COMMIT;
  CALL lr_leave(v_sw, v_lwt);
END//

-- lockrun_sleep: for the head waiter, on a second connection that runs
-- nothing else, so a KILL QUERY can only ever end this sleep. Registers
-- the connection on the request's places (written only when it changed),
-- keeps them alive, and unless an acquire could succeed already, sleeps up
-- to p_ms. A release on this server KILLs the sleep (lockrun_release).
-- No lost wake-up: the registration commits before the check, so a
-- release the check missed commits later, reads the registration, and its
-- KILL ends this CALL wherever it is.
CREATE OR REPLACE DEFINER = 'lockrun_owner'@'localhost' PROCEDURE lockrun_sleep(
  IN p_request CHAR(32) CHARACTER SET ascii, IN p_ms INT UNSIGNED)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_cut DATETIME(6);
  DECLARE v_places INT;
  DECLARE v_ready TINYINT;
  DECLARE v_held_ms BIGINT;
  DECLARE v_sw, v_lwt BIGINT;
  DECLARE v_galera TINYINT;
  DECLARE v_bell VARCHAR(64) CHARACTER SET ascii;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION
  BEGIN
    ROLLBACK;
    CALL lr_leave(v_sw, v_lwt);
    RESIGNAL;
  END;
  CALL lr_enter('lockrun_sleep', 9, p_request, NULL, NULL, v_sw, v_lwt, v_galera);
  IF p_ms IS NULL THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'lockrun: ms must be a number of milliseconds (at most 60000 are slept)';
  END IF;
  -- The doorbell's named lock, taken before the registration a release
  -- reads, and kept for the connection's life (taken once: it nests). A
  -- release rings only a connection that holds it, here: named locks are
  -- per server, so this answers "does the sleeper run on this server, and
  -- is it still that connection" in one lookup.
  CALL lr_lock_name('bell', p_request, v_bell);
  IF NOT COALESCE(IS_USED_LOCK(v_bell) = CONNECTION_ID(), 0) THEN
    DO GET_LOCK(v_bell, 0);
  END IF;
  START TRANSACTION;
  UPDATE lr_waiters SET wake_conn = CONNECTION_ID()
   WHERE request_id = p_request AND (wake_conn IS NULL OR wake_conn <> CONNECTION_ID());
  CALL lr_heartbeat(p_request);
  COMMIT;
  -- Counted after the registration: a release that granted us (and so
  -- took our places) while we registered is seen here. Ready: every place
  -- is first among the live places of its queue and fits (the live hold
  -- rows counted, not `used`, which may have drifted high; holds past the
  -- grace count as free: the acquire sweeps them), or a count no longer
  -- fits the capacity at all (the acquire then answers 'invalid' at once);
  -- never while a fail-over's quarantine lasts (lr_epoch): nothing is
  -- granted then, and the sleep ends with it at the latest.
  SET v_cut = UTC_TIMESTAMP(6) - INTERVAL 5000000 MICROSECOND;
  SELECT COUNT(*) INTO v_places FROM lr_waiters WHERE request_id = p_request;
  SELECT GREATEST(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), quarantine_until) DIV 1000, 0)
    INTO v_held_ms FROM lr_epoch WHERE id = 1;
  SET v_ready = v_places = 0 OR COALESCE(v_held_ms, 0) = 0 AND NOT EXISTS (
      SELECT 1 FROM lr_waiters w JOIN lr_resources r ON r.name = w.resource
       WHERE w.request_id = p_request AND w.permits <= r.capacity
         AND (EXISTS (SELECT 1 FROM lr_waiters a WHERE a.resource = w.resource
                       AND a.ticket < w.ticket AND a.expires_at > v_cut)
              OR (SELECT COALESCE(SUM(h.permits), 0) FROM lr_holds h
                   WHERE h.resource = w.resource AND h.expires_at > v_cut)
                 + w.permits > r.capacity));
  COMMIT;
  CALL lr_leave(v_sw, v_lwt);
  IF v_ready THEN
    SELECT 1 AS woken, v_places AS places, 3 AS api;
  ELSE
    SELECT SLEEP(IF(v_held_ms > 0, LEAST(p_ms, 60000, v_held_ms), LEAST(p_ms, 60000)) / 1000) AS woken, v_places AS places, 3 AS api;
  END IF;
END//

-- lockrun_dequeue: leaves the queue (gave up, or stopped). A grant that a
-- release handed to the request just before (lr_hand_off) and that it has
-- not claimed is given back too, and handed on. Releases the wake-up
-- lock, so the waiter behind moves up at once.
CREATE OR REPLACE DEFINER = 'lockrun_owner'@'localhost' PROCEDURE lockrun_dequeue(
  IN p_request CHAR(32) CHARACTER SET ascii)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_sw, v_lwt BIGINT;
  DECLARE v_galera TINYINT;
  DECLARE v_removed, v_returned, v_woken INT DEFAULT 0;
  DECLARE v_lease CHAR(32) CHARACTER SET ascii;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_lease = NULL;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION
  BEGIN
    ROLLBACK;
    CALL lr_leave(v_sw, v_lwt);
    RESIGNAL;
  END;
  CALL lr_enter('lockrun_dequeue', 9, p_request, NULL, NULL, v_sw, v_lwt, v_galera);
  START TRANSACTION;
  DELETE FROM lr_waiters WHERE request_id = p_request;
  SET v_removed = ROW_COUNT();
  COMMIT;
  -- After the places are gone no release can hand us anything more.
  SELECT request_id INTO v_lease FROM lr_grants
   WHERE queued_as = p_request AND ended_at IS NULL AND claimed_at IS NULL LIMIT 1;
  COMMIT;
  IF v_lease IS NOT NULL THEN
    CALL lr_release(v_lease, 'aborted', NULL, NULL, v_galera, v_returned, v_woken);
    SET v_returned = 1;
  END IF;
  CALL lr_leave(v_sw, v_lwt);
  CALL lr_wait_lock(p_request, 0, v_galera);
  SELECT v_removed AS removed, v_returned AS returned, 3 AS api;
END//

-- lockrun_host_queue: the first run of a host's queue (lockrun(1), its
-- local queue) tells how many runs of its host wait behind it for the same
-- locks, holding no connection (p_behind, 0-1000000), so that status and
-- metrics count them (lr_waiters.host_behind, migration 9). Written on the request's own queue
-- places only: the request id is their secret. A figure for operators:
-- no decision reads it, so a wrong one misleads a dashboard, never a
-- grant. One UPDATE of the request's waiter rows; answers how many. On
-- Galera the UPDATE may meet a release's hand-off of the same place on
-- another node, and one of them then retries (1213): the head sends it
-- at most once a second, and only when its count changed.
CREATE OR REPLACE DEFINER = 'lockrun_owner'@'localhost' PROCEDURE lockrun_host_queue(
  IN p_request CHAR(32) CHARACTER SET ascii, IN p_behind INT UNSIGNED)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_sw, v_lwt BIGINT;
  DECLARE v_galera TINYINT;
  DECLARE v_places INT;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION
  BEGIN
    ROLLBACK;
    CALL lr_leave(v_sw, v_lwt);
    RESIGNAL;
  END;
  CALL lr_enter('lockrun_host_queue', 9, p_request, NULL, NULL, v_sw, v_lwt, v_galera);
  IF p_behind IS NULL OR p_behind > 1000000 THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'lockrun: behind must be 0-1000000';
  END IF;
  START TRANSACTION;
  UPDATE lr_waiters SET host_behind = p_behind
   WHERE request_id = p_request AND host_behind <> p_behind;
  SELECT COUNT(*) INTO v_places FROM lr_waiters WHERE request_id = p_request;
  COMMIT;
  CALL lr_leave(v_sw, v_lwt);
  SELECT v_places AS places, 3 AS api;
END//

DELIMITER ;
