-- lockrun's stored routines, 30: acquire, and the claim of a grant handed
-- over while waiting. (How these files are applied: 00-start.sql.)
--
-- lockrun_acquire is public (the SQL API, doc/sql-api.md); lr_claim,
-- lr_enqueue and lr_acquire are its internal ways through.

DELIMITER //

-- lockrun_acquire: one attempt to take every item, all or nothing. See
-- doc/sql-api.md. One transaction: the resource rows are locked in name
-- order (missing mutex, rwlock and key rows created), each gets a bounded
-- sweep, then the grant rule decides: grant (fence + 1 on every row, the
-- log entry and the holds), or with p_enqueue a place in every queue
-- (ticket + 1 on every row), or nothing; or, for a once item whose window
-- has a successful run, 'done' (a skipped log entry, the queue left). It
-- commits in every case, so the sweep makes progress even while the
-- resource stays busy. Returns one row per item in name order.
--
-- Four ways through, so that a connection parses only what its call
-- needs (a routine is parsed on a session's first call of it, and every
-- lockrun run is a new connection): a grant handed to this request while
-- it waited is claimed (lr_claim); the common acquire, one item whose row
-- exists and is free, with nobody queued, nothing to sweep and no
-- fail-over in the way, is granted here in one transaction of six short
-- statements; the common enqueue, the same item busy (it does not fit)
-- and this request not queued yet, takes its place at the tail in
-- lr_enqueue, in the same transaction (a routine of its own, which only a
-- run that waits loads: a third of this text once was, parsed by every
-- run); everything else goes to lr_parse and lr_acquire, which decide it
-- again from the start.
CREATE OR REPLACE DEFINER = 'lockrun_owner'@'localhost' PROCEDURE lockrun_acquire(
  IN p_items VARCHAR(4000), IN p_request CHAR(32) CHARACTER SET ascii,
  IN p_lease CHAR(32) CHARACTER SET ascii, IN p_ttl_ms INT UNSIGNED, IN p_enqueue TINYINT,
  IN p_host VARCHAR(255), IN p_pid INT UNSIGNED, IN p_os_user VARCHAR(64),
  IN p_command VARCHAR(1024))
  MODIFIES SQL DATA SQL SECURITY DEFINER
proc: BEGIN
  DECLARE v_sw, v_lwt BIGINT;
  DECLARE v_galera, v_fast TINYINT DEFAULT 0;
  DECLARE v_done, v_n INT DEFAULT 0;
  DECLARE v_gid, v_permits, v_cap, v_used, v_fence, v_floor, v_ticket BIGINT UNSIGNED;
  DECLARE v_held_as CHAR(32) CHARACTER SET ascii;
  DECLARE v_items VARCHAR(4000) DEFAULT p_items;
  DECLARE v_kind, v_rkind VARCHAR(10);
  DECLARE v_name VARCHAR(80) CHARACTER SET ascii;
  DECLARE v_me, v_was VARCHAR(255) CHARACTER SET ascii;
  DECLARE v_x BIGINT;
  DECLARE v_now DATETIME(6);
  DECLARE v_req TEXT;
  DECLARE v_once_key VARCHAR(64) CHARACTER SET ascii;  -- a once item's key,
  DECLARE v_period, v_offset BIGINT UNSIGNED;          -- window length and offset
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION
  BEGIN
    ROLLBACK;
    CALL lr_leave(v_sw, v_lwt);
    RESIGNAL;
  END;
  CALL lr_enter('lockrun_acquire', 15, p_request, p_lease, p_ttl_ms, v_sw, v_lwt, v_galera);
  IF p_enqueue IS NULL OR p_enqueue NOT IN (0, 1) THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'lockrun: enqueue must be 0 or 1';
  END IF;

  -- 0. A grant a release handed to this request while it waited
  --    (lr_hand_off, which checked the items when they queued) and that
  --    nobody claimed yet: claim it, before any parsing, as cheaply as
  --    possible. It was made under the lease the request queued with, and
  --    only that lease claims it: the request id and the lease are the
  --    two secrets of the request, so nobody else can. Its holds are
  --    renewed from now, as if granted by this call, so the caller may
  --    count its lease from when it sent the call. No resource row is
  --    locked: the grant exists and is ours. One whose holds are past the
  --    sweep grace was not claimed in time (it may be swept and its room
  --    given away any moment): it is ended here, and the call fails. The
  --    answer names the grant's items.
  SELECT id, request_id INTO v_gid, v_held_as FROM lr_grants
   WHERE queued_as = p_request AND ended_at IS NULL AND claimed_at IS NULL LIMIT 1;
  IF v_gid IS NOT NULL THEN
    CALL lr_claim(v_gid, v_held_as, p_request, p_lease, p_ttl_ms, v_galera, v_sw, v_lwt);
    LEAVE proc;
  END IF;

  -- 1. The common acquire: one item of lockrun's own spelling (what
  --    lr_parse accepts, in its simplest form), its row there. Nobody may
  --    be queued on it (so none is ahead, none to sweep, and this request
  --    has no place to leave), no hold past its grace (none at all for a
  --    mutex or key: their `used` is checked against the row), the lease
  --    new, the epoch this server's and past its quarantine, the
  --    resource not paused, and not lr_fresh's minute. Anything else is
  --    decided by lr_acquire.
  -- 2. The common enqueue (p_enqueue), from the same reads: the same
  --    item, row, epoch and resource, but busy: the permits do not fit
  --    beside the live holds (`used` must agree with the hold rows, as
  --    lr_acquire's recount would find it), so it cannot be granted; not
  --    a key (a held key is not waited for); this request queued nowhere
  --    yet, the lease new, nothing to sweep (no hold and no queue place
  --    past its grace). Others may be queued: the place goes at the tail,
  --    as lr_acquire puts it (lr_enqueue says how).
  IF CONVERT(p_items USING utf8mb4) COLLATE utf8mb4_bin REGEXP '^(semaphore:[A-Za-z0-9][A-Za-z0-9_.-]{0,63}:[1-9][0-9]{0,6}|(mutex|key|read|write):[A-Za-z0-9][A-Za-z0-9_.-]{0,63})$'
     AND p_items NOT REGEXP '[[:cntrl:]]' THEN
    SET v_kind = SUBSTRING_INDEX(p_items, ':', 1),
        v_name = SUBSTRING_INDEX(SUBSTRING_INDEX(p_items, ':', 2), ':', -1),
        v_permits = IF(v_kind = 'semaphore', SUBSTRING_INDEX(p_items, ':', -1) + 0,
                       IF(v_kind = 'write', 2147483647, 1)),
        v_name = IF(v_kind = 'key', CONCAT('id:', v_name), v_name),
        v_kind = IF(v_kind IN ('read', 'write'), 'rwlock', v_kind);
    CALL lr_server_state(8, v_x, v_x, v_galera, v_x, v_me, v_was);
    COMMIT;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    -- A request that may wait, on a row that looks busy, loads lr_enqueue
    -- now, before this transaction locks anything: loaded under the row's
    -- lock below, its parse would hold every other caller of the resource
    -- behind it, and in a burst of waiters on a busy machine the session
    -- holding that lock waits for a CPU meanwhile (one cause of the
    -- collapse of 1,000 waiters at once on 2 cores,
    -- doc/design/server-cost.md). The look is a plain SELECT at READ
    -- COMMITTED, a read without a lock whatever the caller's isolation:
    -- a subquery of an IF would be a locking read under REPEATABLE READ.
    IF p_enqueue THEN
      SET v_x = NULL;
      SELECT used + v_permits > capacity INTO v_x FROM lr_resources WHERE name = v_name;
      IF v_x THEN
        CALL lr_enqueue(NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                        NULL, NULL, NULL, NULL, NULL, v_fast);
      END IF;
    END IF;
    SET v_now = UTC_TIMESTAMP(6);
    -- lr_epoch's and lr_fresh's questions, all answered no, in one read:
    -- the epoch is this server's (named by the seam, as lr_epoch names it)
    -- and past its quarantine, the lease is within max_ttl_ms and no raise
    -- of it is new; the settings row in shared mode, as lr_epoch reads it.
    -- (No replication thread runs: lr_enter refused a replica.)
    SELECT e.fence_floor INTO v_floor FROM lr_epoch e JOIN lr_settings s ON s.name = 'max_ttl_ms'
     WHERE e.id = 1 AND e.quarantine_until <= v_now
       AND e.server = v_me
       AND p_ttl_ms <= s.value AND (s.grant_until IS NULL OR s.grant_until <= v_now)
       AND NOT EXISTS (SELECT 1 FROM lr_routines WHERE name IN ('triggers', 'procedures')
                        AND (name = 'triggers' OR applied_at > v_now - INTERVAL 60 SECOND))
      LOCK IN SHARE MODE;
    IF v_floor IS NOT NULL THEN
      SELECT kind, capacity, used, fence, ticket, paused_at IS NULL
        INTO v_rkind, v_cap, v_used, v_fence, v_ticket, v_fast
        FROM lr_resources WHERE name = v_name FOR UPDATE;
      IF NOT v_fast OR v_rkind <> v_kind OR (v_kind = 'semaphore' AND v_permits > 1000000) THEN
        SET v_fast = 0;
      ELSEIF v_used + v_permits <= v_cap THEN
        SELECT NOT EXISTS (SELECT 1 FROM lr_waiters WHERE resource = v_name)
           AND NOT EXISTS (SELECT 1 FROM lr_holds WHERE resource = v_name
                            AND expires_at <= IF(v_cap = 1, '9999-12-31', v_now - INTERVAL 5000000 MICROSECOND))
           AND NOT EXISTS (SELECT 1 FROM lr_grants WHERE request_id = p_lease)
          INTO v_fast;
      ELSEIF p_enqueue AND v_kind <> 'key' AND v_permits <= v_cap THEN
        -- Busy: queue here if nothing else is in the way (lr_enqueue,
        -- which answers and ends the call if it does).
        CALL lr_enqueue(v_name, v_kind, v_permits, v_used, v_cap, v_ticket, v_now, p_request,
                        p_lease, p_ttl_ms, p_host, p_pid, p_os_user, p_command, v_galera, v_sw,
                        v_lwt, v_fast);
        IF v_fast THEN
          LEAVE proc;
        END IF;
      ELSE
        SET v_fast = 0;
      END IF;
    END IF;
    IF v_fast THEN
      SET v_fence = GREATEST(v_fence, v_floor) + 1;
      UPDATE lr_resources SET fence = v_fence, used = used + v_permits, updated_at = v_now
       WHERE name = v_name;
      INSERT INTO lr_grants (request_id, idem_key, host, pid, os_user, db_user, command,
                             ttl_ms, holds, requested_at, acquired_at)
      VALUES (p_lease, IF(v_kind = 'key', SUBSTRING(v_name, 4), NULL),
              LEFT(COALESCE(p_host, SUBSTRING_INDEX(USER(), '@', -1)), 255), COALESCE(p_pid, 0),
              LEFT(COALESCE(p_os_user, ''), 64), USER(), LEFT(COALESCE(p_command, ''), 1024), p_ttl_ms,
              1, v_now, v_now);
      SET v_gid = LAST_INSERT_ID();
      IF v_gid = 0 THEN  -- MySQL: the caller set insert_id = 0 (05-server.sql)
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'lockrun: this session set insert_id, which would choose a grant''s id: call lockrun without it';
      END IF;
      INSERT INTO lr_grant_items (grant_id, resource, kind, permits, fence)
      VALUES (v_gid, v_name, v_kind, v_permits, v_fence);
      INSERT INTO lr_holds (resource, grant_id, permits, fence, expires_at)
      VALUES (v_name, v_gid, v_permits, v_fence, v_now + INTERVAL p_ttl_ms * 1000 MICROSECOND);
      COMMIT;
      -- lr_leave, spelled out: a free lock's run then never loads it.
      SET SESSION innodb_lock_wait_timeout = v_lwt;
      IF v_sw IS NOT NULL THEN
        CALL lr_server_sync(v_sw);
      END IF;
      SELECT 'granted' AS outcome, v_gid AS grant_id, v_name AS resource, 'ok' AS state,
             v_fence AS fence, NULL AS ticket, v_used + v_permits AS used, v_cap AS capacity,
             NULL AS head, 1 AS at_head, NULL AS wait_for, NULL AS holder, NULL AS message,
             NULL AS once_window, NULL AS done_by, v_galera AS galera, 3 AS api;
      LEAVE proc;
    END IF;
    COMMIT;
  END IF;

  IF LOCATE('once:', v_items) > 0 THEN
    CALL lr_once_items(v_items, v_once_key, v_period, v_offset);
  END IF;
  CALL lr_parse(v_items, v_req, v_n);
  CALL lr_acquire(v_req, p_request, p_lease, p_ttl_ms, p_enqueue, p_host, p_pid, p_os_user,
                  p_command, v_once_key, v_period, v_offset, v_galera, v_sw, v_lwt);
END//

-- Claims the grant p_gid that a release handed to request p_request while
-- it waited (lr_hand_off), for lockrun_acquire, which found it and answers
-- with what this returns; p_held_as is the lease it was made under. See
-- step 0 there. The caller's handler rolls back and restores the session
-- (p_sw, p_lwt) on an error. Cost: one locking read and two writes.
CREATE OR REPLACE DEFINER = 'lockrun_owner'@'localhost' PROCEDURE lr_claim(
  IN p_gid BIGINT UNSIGNED, IN p_held_as CHAR(32) CHARACTER SET ascii,
  IN p_request CHAR(32) CHARACTER SET ascii, IN p_lease CHAR(32) CHARACTER SET ascii,
  IN p_ttl_ms INT UNSIGNED, IN p_galera TINYINT, IN p_sw BIGINT, IN p_lwt BIGINT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_found, v_live INT DEFAULT 0;
  IF p_held_as <> p_lease THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'lockrun: the grant handed to this request is claimed with the lease the request queued with';
  END IF;
  -- The caller's read began a transaction under autocommit = 0: end it
  -- (SET TRANSACTION would fail, 1568). READ COMMITTED, as every
  -- transaction here that reads rows it then writes: under snapshot
  -- isolation (MariaDB 11.8's REPEATABLE READ) a row written by another
  -- since this transaction's first read fails the write with 1020.
  COMMIT;
  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  SELECT COUNT(*), COALESCE(SUM(expires_at > UTC_TIMESTAMP(6) - INTERVAL 5000000 MICROSECOND), 0)
    INTO v_found, v_live FROM lr_holds WHERE grant_id = p_gid FOR UPDATE;
  IF v_found = 0 OR v_live < v_found THEN
    COMMIT;
    CALL lr_release(p_lease, 'lost', NULL, NULL, p_galera, v_found, v_live);
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'lockrun: the grant handed to this request while it waited expired before it was claimed; queue again with a new lease id';
  END IF;
  UPDATE lr_holds SET expires_at = UTC_TIMESTAMP(6) + INTERVAL p_ttl_ms * 1000 MICROSECOND
   WHERE grant_id = p_gid;
  UPDATE lr_grants SET claimed_at = UTC_TIMESTAMP(6), ttl_ms = p_ttl_ms WHERE id = p_gid;
  COMMIT;
  CALL lr_leave(p_sw, p_lwt);
  CALL lr_wait_lock(p_request, 0, p_galera);
  -- head: whether others wait behind (lockrun then prepares its release).
  SELECT 'granted' AS outcome, p_gid AS grant_id, i.resource, 'ok' AS state, h.fence,
         NULL AS ticket, r.used, r.capacity,
         (SELECT MIN(w.ticket) FROM lr_waiters w WHERE w.resource = i.resource) AS head,
         1 AS at_head, NULL AS wait_for, NULL AS holder, NULL AS message, NULL AS once_window,
         NULL AS done_by, p_galera AS galera, 3 AS api
    FROM lr_grant_items i
    JOIN lr_holds h ON h.grant_id = i.grant_id AND h.resource = i.resource
    JOIN lr_resources r ON r.name = i.resource
   WHERE i.grant_id = p_gid ORDER BY i.resource;
  -- That read began a transaction under autocommit = 0: end it, so the
  -- claimer's renewal may run.
  COMMIT;
END//

-- The common enqueue of lockrun_acquire (its step 2), in a routine of its
-- own so that a call that finds its row free never loads it: inside the
-- caller's transaction, which holds the resource row p_name (of kind
-- p_kind, p_used of p_cap permits used, its ticket p_ticket) locked, and
-- read the epoch at p_now. Whether this request of p_permits may queue
-- here: nothing to sweep (no hold and no queue place past its grace), the
-- request queued nowhere yet, the lease new, and `used` as the hold rows
-- count it (as lr_acquire's recount would find it). If so, p_queued = 1:
-- the place goes at the tail, as lr_acquire puts it, with the same row
-- written (ticket + 1, so that enqueues conflict like grants, also under
-- Galera), the same place (lease and ttl for lr_hand_off, 10 s to live),
-- the wake-up lock taken, the session restored (p_sw, p_lwt), and the
-- same answer (wait_for the place right ahead, holder the first hold).
-- Else p_queued = 0 and nothing is written: the caller goes the general
-- way. Errors go to the caller's handler, which rolls back. Cost: one
-- read; if queued, two writes, the commit and lr_wait_lock.
CREATE OR REPLACE DEFINER = 'lockrun_owner'@'localhost' PROCEDURE lr_enqueue(
  IN p_name VARCHAR(80) CHARACTER SET ascii, IN p_kind VARCHAR(10), IN p_permits BIGINT UNSIGNED,
  IN p_used BIGINT UNSIGNED, IN p_cap BIGINT UNSIGNED, IN p_ticket BIGINT UNSIGNED,
  IN p_now DATETIME(6), IN p_request CHAR(32) CHARACTER SET ascii,
  IN p_lease CHAR(32) CHARACTER SET ascii, IN p_ttl_ms INT UNSIGNED, IN p_host VARCHAR(255),
  IN p_pid INT UNSIGNED, IN p_os_user VARCHAR(64), IN p_command VARCHAR(1024),
  IN p_galera TINYINT, IN p_sw BIGINT, IN p_lwt BIGINT, OUT p_queued TINYINT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
proc: BEGIN
  DECLARE v_ticket, v_head BIGINT UNSIGNED;
  DECLARE v_wait_for VARCHAR(64) CHARACTER SET ascii;
  DECLARE v_holder VARCHAR(700);
  IF p_name IS NULL THEN  -- lockrun_acquire loads it before it locks the row
    SET p_queued = 0;
    LEAVE proc;
  END IF;
  -- The head, the wake-up lock of the place right ahead (lr_lock_name's
  -- 'wait' name, spelled out), the holder: what lr_acquire answers with,
  -- read as it reads them.
  SELECT IF(NOT EXISTS (SELECT 1 FROM lr_waiters WHERE request_id = p_request)
            AND NOT EXISTS (SELECT 1 FROM lr_waiters WHERE resource = p_name
                             AND expires_at <= p_now - INTERVAL 5000000 MICROSECOND)
            AND NOT EXISTS (SELECT 1 FROM lr_holds WHERE resource = p_name
                             AND expires_at <= p_now - INTERVAL 5000000 MICROSECOND)
            AND NOT EXISTS (SELECT 1 FROM lr_grants WHERE request_id = p_lease)
            AND p_used = (SELECT COALESCE(SUM(permits), 0) FROM lr_holds WHERE resource = p_name),
            1, 0),
         (SELECT MIN(ticket) FROM lr_waiters WHERE resource = p_name),
         (SELECT CONCAT('lockrun.wait.', LEFT(SHA2(CONCAT('wait:', request_id), 256), 32))
            FROM lr_waiters WHERE resource = p_name ORDER BY ticket DESC LIMIT 1),
         (SELECT CONCAT(g.host, ':', g.pid, ' (', g.db_user, '), held ', CASE
                   WHEN TIMESTAMPDIFF(SECOND, g.acquired_at, p_now) < 120
                     THEN CONCAT(TIMESTAMPDIFF(SECOND, g.acquired_at, p_now), 's')
                   WHEN TIMESTAMPDIFF(SECOND, g.acquired_at, p_now) < 7200
                     THEN CONCAT(TIMESTAMPDIFF(MINUTE, g.acquired_at, p_now), 'm')
                   ELSE CONCAT(TIMESTAMPDIFF(HOUR, g.acquired_at, p_now), 'h') END)
            FROM lr_holds h JOIN lr_grants g ON g.id = h.grant_id
           WHERE h.resource = p_name ORDER BY h.grant_id LIMIT 1)
    INTO p_queued, v_head, v_wait_for, v_holder;
  IF NOT p_queued THEN
    LEAVE proc;
  END IF;
  SET v_ticket = p_ticket + 1;
  UPDATE lr_resources SET ticket = v_ticket WHERE name = p_name;
  INSERT INTO lr_waiters (resource, ticket, request_id, permits, host, pid, os_user,
                          command, since, expires_at, lease, ttl_ms, db_user)
  VALUES (p_name, v_ticket, p_request, p_permits,
          LEFT(COALESCE(p_host, SUBSTRING_INDEX(USER(), '@', -1)), 255), COALESCE(p_pid, 0),
          LEFT(COALESCE(p_os_user, ''), 64), LEFT(COALESCE(p_command, ''), 1024),
          p_now, p_now + INTERVAL 10000000 MICROSECOND, p_lease, p_ttl_ms, USER());
  COMMIT;
  CALL lr_leave(p_sw, p_lwt);
  -- The wake-up chain: hold our wait lock while we wait (lr_wait_lock).
  CALL lr_wait_lock(p_request, 1, p_galera);
  SELECT 'queued' AS outcome, NULL AS grant_id, p_name AS resource, 'busy' AS state,
         NULL AS fence, v_ticket AS ticket, p_used AS used, p_cap AS capacity,
         v_head AS head, v_head IS NULL AS at_head, v_wait_for AS wait_for,
         v_holder AS holder,
         IF(p_kind = 'semaphore', CONCAT('''', p_name, ''' is busy (', p_used, '/', p_cap, ' used)'),
            CONCAT('''', p_name, ''' is busy')) AS message,
         NULL AS once_window, NULL AS done_by, p_galera AS galera, 3 AS api;
END//

-- The acquire proper (lockrun_acquire), once the items are parsed into the
-- JSON array p_req: steps 1 to 4 in one transaction, the wait lock, the
-- answer. Errors go to the caller's handler, which rolls back. What it
-- learns per item lives in local JSON arrays (v_seen, then v_out, the
-- answer), never in a table the caller's session could reach.
CREATE OR REPLACE DEFINER = 'lockrun_owner'@'localhost' PROCEDURE lr_acquire(
  IN p_req TEXT, IN p_request CHAR(32) CHARACTER SET ascii, IN p_lease CHAR(32) CHARACTER SET ascii,
  IN p_ttl_ms INT UNSIGNED, IN p_enqueue TINYINT,
  IN p_host VARCHAR(255), IN p_pid INT UNSIGNED, IN p_os_user VARCHAR(64),
  IN p_command VARCHAR(1024), IN p_once_key VARCHAR(64) CHARACTER SET ascii,
  IN p_period BIGINT UNSIGNED, IN p_offset BIGINT UNSIGNED, IN p_galera TINYINT,
  IN p_sw BIGINT, IN p_lwt BIGINT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_now DATETIME(6);
  DECLARE v_done, v_found INT DEFAULT 0;
  DECLARE v_name VARCHAR(80) CHARACTER SET ascii;
  DECLARE v_kind, v_rkind VARCHAR(10);
  DECLARE v_state VARCHAR(12);
  DECLARE v_msg VARCHAR(300);
  DECLARE v_permits, v_cap, v_used, v_fence, v_ticket, v_mine, v_head, v_gid BIGINT UNSIGNED;
  DECLARE v_seen, v_out TEXT DEFAULT '[]';
  DECLARE v_nitems, v_unqueued INT DEFAULT 0;
  DECLARE v_outcome VARCHAR(10) DEFAULT 'granted';
  DECLARE v_queued, v_ended, v_again TINYINT DEFAULT 0;
  DECLARE v_created INT DEFAULT 0;                     -- resource rows made
  DECLARE v_key VARCHAR(64) CHARACTER SET ascii;       -- a key item's key, for the log
  DECLARE v_once_res VARCHAR(80) CHARACTER SET ascii;  -- the once key's resource row
  DECLARE v_window DATETIME(6);                        -- and this call's window
  DECLARE v_once_gid BIGINT UNSIGNED;                  -- the run that made it done
  DECLARE v_once_at DATETIME(6);
  DECLARE v_wait_for VARCHAR(64) CHARACTER SET ascii;
  DECLARE v_ahead_req CHAR(32) CHARACTER SET ascii;
  DECLARE v_holder VARCHAR(700);
  DECLARE v_host VARCHAR(255) DEFAULT LEFT(COALESCE(p_host, SUBSTRING_INDEX(USER(), '@', -1)), 255);
  DECLARE v_fresh, v_held TINYINT DEFAULT 0;
  DECLARE v_since, v_until DATETIME(6);
  DECLARE v_floor BIGINT UNSIGNED;
  DECLARE v_max BIGINT;
  DECLARE v_paused DATETIME(6);                        -- the resource's pause,
  DECLARE v_note VARCHAR(255);                         -- and why
  DECLARE c CURSOR FOR SELECT j.name, j.kind, j.permits
    FROM JSON_TABLE(p_req, '$[*]' COLUMNS(name VARCHAR(80) PATH '$.name', kind VARCHAR(10) PATH '$.kind',
                                          permits BIGINT UNSIGNED PATH '$.permits')) j
    ORDER BY CAST(j.name AS BINARY);
  DECLARE s CURSOR FOR SELECT j.name, j.kind, j.permits, j.capacity, j.used, j.fence, j.ticket,
                              j.mine, j.head, j.state, j.message
    FROM JSON_TABLE(v_seen, '$[*]' COLUMNS(name VARCHAR(80) PATH '$.name', kind VARCHAR(10) PATH '$.kind',
         permits BIGINT UNSIGNED PATH '$.permits', capacity BIGINT UNSIGNED PATH '$.capacity',
         used BIGINT UNSIGNED PATH '$.used', fence BIGINT UNSIGNED PATH '$.fence',
         ticket BIGINT UNSIGNED PATH '$.ticket', mine BIGINT UNSIGNED PATH '$.mine',
         head BIGINT UNSIGNED PATH '$.head', state VARCHAR(12) PATH '$.state',
         message VARCHAR(300) PATH '$.message')) j
    ORDER BY CAST(j.name AS BINARY);
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
  SET v_once_res = CONCAT('id:', p_once_key);

  -- Under autocommit = 0 the reads before this began a transaction, and
  -- SET TRANSACTION would fail (1568): end it (the caller had none).
  COMMIT;
  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  SET v_now = UTC_TIMESTAMP(6);
  CALL lr_fresh(v_fresh);
  -- Before any resource row: the epoch's row is locked first, if at all.
  CALL lr_epoch(p_ttl_ms, 0, v_since, v_until, v_floor, v_max);
  -- A once item's window, by this server's clock in UTC (no time zone
  -- enters): the start of the period, counted from the epoch plus the
  -- offset, that holds now.
  IF p_period IS NOT NULL THEN
    SET v_window = TIMESTAMP('1970-01-01 00:00:00') + INTERVAL
        ((TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', v_now) DIV 1000 - p_offset)
         DIV p_period * p_period + p_offset) * 1000 MICROSECOND;
  END IF;

  -- 1. Lock every resource row in name order, the order every lockrun
  --    transaction uses, so two requests cannot deadlock on them; sweep
  --    it; note what the grant rule needs, and the rule's verdict for the
  --    item: invalid, key_busy, busy or ok.
  OPEN c;
  lock_loop: LOOP
    SET v_done = 0;
    FETCH c INTO v_name, v_kind, v_permits;
    IF v_done THEN LEAVE lock_loop; END IF;
    SET v_nitems = v_nitems + 1, v_found = 0, v_state = NULL, v_msg = NULL;
    SET v_used = NULL, v_mine = NULL, v_head = NULL, v_paused = NULL, v_note = NULL;
    IF v_kind = 'key' AND v_key IS NULL THEN
      SET v_key = SUBSTRING(v_name, 4);
    END IF;
    SELECT 1, kind, capacity, fence, ticket, paused_at, pause_note
      INTO v_found, v_rkind, v_cap, v_fence, v_ticket, v_paused, v_note
      FROM lr_resources WHERE name = v_name FOR UPDATE;
    IF NOT v_found AND v_kind <> 'semaphore' THEN
      -- A name deleted before (`lockrunctl delete`: its own floor) or
      -- reclaimed (lr_reclaim: its bucket's) starts above every token it
      -- issued.
      INSERT IGNORE INTO lr_resources (name, kind, capacity, fence)
      VALUES (v_name, v_kind, IF(v_kind = 'rwlock', 2147483647, 1),
              COALESCE((SELECT MAX(f.fence) FROM lr_fence_floor f
                         WHERE f.name IN (v_name, CONCAT('~', LEFT(SHA2(v_name, 256), 3)))), 0));
      SET v_created = v_created + ROW_COUNT();
      SET v_done = 0;
      SELECT 1, kind, capacity, fence, ticket, paused_at, pause_note
        INTO v_found, v_rkind, v_cap, v_fence, v_ticket, v_paused, v_note
        FROM lr_resources WHERE name = v_name FOR UPDATE;
    END IF;
    IF NOT v_found THEN
      SET v_state = 'invalid', v_msg = CONCAT('unknown semaphore ''', v_name,
          '''; create it with ''lockrunctl set ', v_name, ' CAPACITY''');
    ELSEIF v_rkind <> v_kind THEN
      SET v_state = 'invalid', v_msg = CONCAT('''', IF(v_kind = 'key', SUBSTRING(v_name, 4), v_name),
          ''' is a ', v_rkind, ', not a ', v_kind);
    ELSEIF v_permits > v_cap THEN
      SET v_state = 'invalid', v_msg = CONCAT('asked for ', v_permits, ' permit',
          IF(v_permits = 1, '', 's'), ' of semaphore ''', v_name, ''', whose capacity is ', v_cap);
    ELSE
      IF EXISTS (SELECT 1 FROM lr_holds WHERE resource = v_name
                    AND expires_at <= v_now - INTERVAL 5000000 MICROSECOND)
         OR EXISTS (SELECT 1 FROM lr_waiters WHERE resource = v_name
                    AND expires_at <= v_now - INTERVAL 5000000 MICROSECOND) THEN
        CALL lr_sweep(v_name);
      END IF;
      -- Our row, locked: `used` is exact for every committed hold, unless
      -- it drifted; a mutex or key (one hold row at most), anything about
      -- to answer busy, and everything in the minute after `lockrunctl
      -- init` installed these routines (see lr_fresh) count the hold rows
      -- to be sure.
      SELECT used INTO v_used FROM lr_resources WHERE name = v_name;
      IF v_cap = 1 OR v_used + v_permits > v_cap OR v_fresh THEN
        CALL lr_recount(v_name);
        SELECT used INTO v_used FROM lr_resources WHERE name = v_name;
      END IF;
      SELECT MIN(ticket) INTO v_mine FROM lr_waiters WHERE resource = v_name AND request_id = p_request;
      SELECT MIN(ticket) INTO v_head FROM lr_waiters WHERE resource = v_name AND request_id <> p_request;
      -- The grant rule: a held key is never waited for (but a once
      -- item's key is: whether its run succeeds decides ours); the permits
      -- must fit; and no other request may be queued ahead.
      -- A paused resource (lockrunctl pause) grants nothing: its
      -- requests wait, as for a busy one.
      IF v_paused IS NOT NULL THEN
        SET v_state = 'busy', v_msg = LEFT(CONCAT('''', IF(v_kind = 'key', SUBSTRING(v_name, 4), v_name),
            ''' is paused since ', DATE_FORMAT(v_paused, '%Y-%m-%d %H:%i:%s'), ' UTC',
            IF(COALESCE(v_note, '') = '', '', CONCAT(': ', v_note))), 300);
      ELSEIF v_kind = 'key' AND v_used > 0 AND NOT v_name <=> v_once_res THEN
        SET v_state = 'key_busy', v_msg = CONCAT('another run with --id ''', SUBSTRING(v_name, 4), ''' is still going');
      ELSEIF v_used + v_permits > v_cap THEN
        SET v_state = 'busy', v_msg = CASE
            WHEN v_kind = 'key' THEN CONCAT('another run with --id ''', SUBSTRING(v_name, 4), ''' is still going')
            WHEN v_kind = 'semaphore' THEN CONCAT('''', v_name, ''' is busy (', v_used, '/', v_cap, ' used)')
            ELSE CONCAT('''', v_name, ''' is busy') END;
      ELSEIF v_head IS NOT NULL AND (v_mine IS NULL OR v_head < v_mine) THEN
        SET v_state = 'busy', v_msg = CONCAT('''', v_name, ''' has requests queued ahead');
      ELSE
        SET v_state = 'ok';
      END IF;
    END IF;
    IF v_mine IS NULL THEN
      SET v_unqueued = v_unqueued + 1;
    END IF;
    IF v_state = 'invalid' THEN
      SET v_outcome = 'invalid';
    ELSEIF v_state = 'key_busy' AND v_outcome <> 'invalid' THEN
      SET v_outcome = 'key_busy';
    ELSEIF v_state = 'busy' AND v_outcome = 'granted' THEN
      SET v_outcome = 'busy';
    END IF;
    SET v_seen = JSON_ARRAY_APPEND(v_seen, '$', JSON_OBJECT('name', v_name, 'kind', v_kind,
        'permits', v_permits, 'capacity', v_cap, 'used', v_used, 'fence', v_fence,
        'ticket', v_ticket, 'mine', v_mine, 'head', v_head, 'state', v_state, 'message', v_msg));
  END LOOP;
  CLOSE c;
  SET v_done = 0;

  -- 2. Idempotent: this lease already granted and not ended? Return it,
  --    if this call is a replay of the request that got it: the same
  --    items, kinds and permits (its lr_grant_items); else refused, and
  --    the caller's handler rolls back what step 1 wrote. Ended
  --    (released, or a settlement's tombstone)? Then this is a late
  --    call whose answer nobody will read: it must neither grant nor
  --    queue. Read after the rows are locked, so a settlement either
  --    waited for this call or committed before it.
  SELECT g.id, g.ended_at IS NOT NULL INTO v_gid, v_ended FROM lr_grants g WHERE g.request_id = p_lease;
  SET v_done = 0;
  IF v_ended THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'lockrun: this lease id was used already; take a new one';
  END IF;
  -- The kinds compare as bytes: tables made on MariaDB 10.x have
  -- utf8mb4_general_ci, a JSON_TABLE column on 11.8 that server's default
  -- utf8mb4_uca1400_ai_ci, and `=` between the two is refused (1267).
  IF v_gid IS NOT NULL AND ((SELECT COUNT(*) FROM lr_grant_items WHERE grant_id = v_gid) <> v_nitems
     OR EXISTS (SELECT 1 FROM JSON_TABLE(p_req, '$[*]' COLUMNS(name VARCHAR(80) PATH '$.name',
                  kind VARCHAR(10) PATH '$.kind', permits BIGINT UNSIGNED PATH '$.permits')) j
                 WHERE NOT EXISTS (SELECT 1 FROM lr_grant_items i WHERE i.grant_id = v_gid
                                    AND i.resource = j.name AND BINARY i.kind = BINARY j.kind AND i.permits = j.permits))) THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'lockrun: this lease id was granted for other items; a replay names the same items, kinds and counts (a new request: a new lease)';
  END IF;
  IF v_outcome = 'invalid' THEN
    SET v_gid = NULL;
  ELSEIF v_gid IS NOT NULL THEN
    SET v_outcome = 'granted', v_again = 1;
    SELECT once_window INTO v_window FROM lr_grants WHERE id = v_gid;
  ELSEIF v_outcome <> 'key_busy' AND p_once_key IS NOT NULL THEN
    -- 3. A once item whose window has a successful run (a row of lr_once
    --    GRANTED inside it, written by the release of that run under
    --    this same key row's lock) is done: nothing else matters.
    SELECT grant_id, done_at INTO v_once_gid, v_once_at FROM lr_once
     WHERE idem_key = p_once_key AND granted_at >= v_window
       AND granted_at < v_window + INTERVAL p_period * 1000 MICROSECOND
     ORDER BY granted_at LIMIT 1;
    SET v_done = 0;
    IF v_once_gid IS NOT NULL THEN
      SET v_outcome = 'done';
    END IF;
  END IF;

  -- After a fail-over, no grant until the quarantine ends: busy, with the
  -- reason (and with enqueue a place, as for any busy answer).
  IF v_outcome = 'granted' AND v_gid IS NULL AND v_until > v_now THEN
    SET v_outcome = 'busy', v_held = 1;
  END IF;

  -- 4. Act, item by item in name order, and write the answer's rows.
  --    Granted: every fence + 1 (the written row every contender
  --    conflicts on), the log entry with what it holds (kept after the
  --    end), the holds and their permits on `used`; the queue left. The
  --    request time is its oldest queue place's.
  IF v_outcome = 'granted' AND v_gid IS NULL THEN
    INSERT INTO lr_grants (request_id, idem_key, host, pid, os_user, db_user, command,
                           ttl_ms, holds, requested_at, acquired_at, once_window, once_period_ms)
    VALUES (p_lease, COALESCE(p_once_key, v_key), v_host, COALESCE(p_pid, 0),
            LEFT(COALESCE(p_os_user, ''), 64), USER(), LEFT(COALESCE(p_command, ''), 1024), p_ttl_ms,
            v_nitems, COALESCE((SELECT MIN(w.since) FROM lr_waiters w WHERE w.request_id = p_request), v_now),
            v_now, v_window, p_period);
    SET v_gid = LAST_INSERT_ID();
    IF v_gid = 0 THEN  -- MySQL: the caller set insert_id = 0 (05-server.sql)
      SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'lockrun: this session set insert_id, which would choose a grant''s id: call lockrun without it';
    END IF;
    DELETE FROM lr_waiters WHERE request_id = p_request;
  ELSEIF v_outcome = 'busy' AND p_enqueue AND v_unqueued > 0 THEN
    -- Queue: a ticket from every resource row (written, so enqueues
    -- conflict like grants), one place each. A partial set of places
    -- (some were swept) is replaced whole.
    DELETE FROM lr_waiters WHERE request_id = p_request;
    SET v_outcome = 'queued';
  ELSEIF v_outcome = 'busy' THEN
    -- Still queued from before: keep the places alive.
    CALL lr_heartbeat(p_request);
  ELSEIF v_outcome = 'done' THEN
    -- Done: nothing taken, the queue left; the lock log records the skip
    -- with its window and the items it asked for (no fence).
    INSERT INTO lr_grants (request_id, idem_key, host, pid, os_user, db_user, command,
                           ttl_ms, requested_at, acquired_at, ended_at, end_reason,
                           once_window, once_period_ms)
    VALUES (p_lease, p_once_key, v_host, COALESCE(p_pid, 0), LEFT(COALESCE(p_os_user, ''), 64),
            USER(), LEFT(COALESCE(p_command, ''), 1024), p_ttl_ms,
            COALESCE((SELECT MIN(w.since) FROM lr_waiters w WHERE w.request_id = p_request), v_now),
            v_now, v_now, 'skipped', v_window, p_period);
    SET v_gid = LAST_INSERT_ID();
    IF v_gid = 0 THEN  -- MySQL: the caller set insert_id = 0 (05-server.sql)
      SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'lockrun: this session set insert_id, which would choose a grant''s id: call lockrun without it';
    END IF;
    DELETE FROM lr_waiters WHERE request_id = p_request;
  END IF;
  SET v_done = 0;
  OPEN s;
  act: LOOP
    SET v_done = 0;
    FETCH s INTO v_name, v_kind, v_permits, v_cap, v_used, v_fence, v_ticket, v_mine, v_head,
                 v_state, v_msg;
    IF v_done THEN LEAVE act; END IF;
    SET v_wait_for = NULL, v_holder = NULL;
    IF v_held AND v_since IS NULL THEN
      SET v_state = 'busy', v_msg = CONCAT('database fail-over: this server''s clock (',
          DATE_FORMAT(v_now, '%Y-%m-%d %H:%i:%s'), ' UTC) is before the end of the previous ',
          'writer''s quarantine (', DATE_FORMAT(v_until, '%Y-%m-%d %H:%i:%s'),
          ' UTC by its clock): no new grants until then');
    ELSEIF v_held THEN
      SET v_state = 'busy', v_msg = CONCAT('database fail-over at ',
          DATE_FORMAT(v_since, '%Y-%m-%d %H:%i:%s'), ' UTC: no new grants until ',
          DATE_FORMAT(v_until, '%Y-%m-%d %H:%i:%s'), ' UTC');
    END IF;
    IF v_outcome = 'invalid' AND v_state <> 'invalid' THEN
      SET v_state = NULL, v_msg = NULL;
    ELSEIF v_again THEN
      -- Our earlier grant (step 2): as it was.
      SELECT fence INTO v_fence FROM lr_holds WHERE grant_id = v_gid AND resource = v_name;
      SET v_state = 'ok', v_msg = NULL, v_done = 0;
    ELSEIF v_outcome = 'granted' THEN
      UPDATE lr_resources SET fence = GREATEST(fence, v_floor) + 1,
             used = used + IF(v_fresh, 0, v_permits), updated_at = v_now
       WHERE name = v_name;
      SET v_fence = GREATEST(v_fence, v_floor) + 1, v_used = v_used + v_permits, v_mine = NULL;
      INSERT INTO lr_grant_items (grant_id, resource, kind, permits, fence)
      VALUES (v_gid, v_name, v_kind, v_permits, v_fence);
      INSERT INTO lr_holds (resource, grant_id, permits, fence, expires_at)
      VALUES (v_name, v_gid, v_permits, v_fence, v_now + INTERVAL p_ttl_ms * 1000 MICROSECOND);
      IF v_fresh THEN
        CALL lr_recount(v_name);
      END IF;
    ELSEIF v_outcome = 'queued' THEN
      -- A request of one item (not a once item: its outcome is decided
      -- by its key's run) leaves what a release needs to grant it
      -- directly (lr_hand_off).
      UPDATE lr_resources SET ticket = ticket + 1 WHERE name = v_name;
      SET v_ticket = v_ticket + 1, v_mine = v_ticket;
      INSERT INTO lr_waiters (resource, ticket, request_id, permits, host, pid, os_user,
                              command, since, expires_at, lease, ttl_ms, db_user)
      VALUES (v_name, v_mine, p_request, v_permits, v_host, COALESCE(p_pid, 0),
              LEFT(COALESCE(p_os_user, ''), 64), LEFT(COALESCE(p_command, ''), 1024),
              v_now, v_now + INTERVAL 10000000 MICROSECOND,
              IF(v_nitems = 1 AND p_once_key IS NULL, p_lease, NULL), p_ttl_ms, USER());
    ELSEIF v_outcome = 'done' THEN
      INSERT INTO lr_grant_items (grant_id, resource, kind, permits, fence)
      VALUES (v_gid, v_name, v_kind, v_permits, NULL);
      SET v_mine = NULL, v_state = IF(v_name = v_once_res, 'done', 'ok');
      SET v_msg = IF(v_name = v_once_res,
          CONCAT('the window from ', DATE_FORMAT(v_window, '%Y-%m-%d %H:%i:%s'),
                 ' UTC already has a successful run of --id ''', p_once_key,
                 ''' (grant ', v_once_gid, ', ended ',
                 DATE_FORMAT(v_once_at, '%Y-%m-%d %H:%i:%s'), ')'), NULL);
    END IF;
    IF v_outcome IN ('queued', 'busy', 'key_busy') THEN
      -- Whom to wait for: the wake-up lock of the live place right ahead
      -- of ours (a hash: the request id stays secret). Who holds it:
      -- host, pid, account and how long held, never the command, which
      -- may carry secrets.
      IF v_mine IS NOT NULL AND v_head IS NOT NULL AND v_head < v_mine THEN
        SELECT request_id INTO v_ahead_req FROM lr_waiters
         WHERE resource = v_name AND ticket < v_mine AND request_id <> p_request
         ORDER BY ticket DESC LIMIT 1;
        IF v_done = 0 THEN
          CALL lr_lock_name('wait', v_ahead_req, v_wait_for);
        END IF;
        SET v_done = 0;
      END IF;
      IF v_state = 'busy' AND v_used + v_permits > v_cap THEN
        SELECT CONCAT(g.host, ':', g.pid, ' (', g.db_user, '), held ', CASE
                 WHEN TIMESTAMPDIFF(SECOND, g.acquired_at, v_now) < 120
                   THEN CONCAT(TIMESTAMPDIFF(SECOND, g.acquired_at, v_now), 's')
                 WHEN TIMESTAMPDIFF(SECOND, g.acquired_at, v_now) < 7200
                   THEN CONCAT(TIMESTAMPDIFF(MINUTE, g.acquired_at, v_now), 'm')
                 ELSE CONCAT(TIMESTAMPDIFF(HOUR, g.acquired_at, v_now), 'h') END) INTO v_holder
          FROM lr_holds h JOIN lr_grants g ON g.id = h.grant_id
         WHERE h.resource = v_name ORDER BY h.grant_id LIMIT 1;
        SET v_done = 0;
      END IF;
    END IF;
    SET v_out = JSON_ARRAY_APPEND(v_out, '$', JSON_OBJECT('resource', v_name, 'state', v_state,
        'fence', IF(v_outcome = 'granted', v_fence, NULL), 'ticket', v_mine, 'used', v_used,
        'capacity', v_cap, 'head', v_head,
        'at_head', (v_head IS NULL OR (v_mine IS NOT NULL AND v_head > v_mine)),
        'wait_for', v_wait_for, 'holder', v_holder, 'message', v_msg));
    IF v_mine IS NULL THEN
      SET v_queued = -1;
    ELSEIF v_queued = 0 THEN
      SET v_queued = 1;
    END IF;
  END LOOP;
  CLOSE s;
  COMMIT;
  -- Rows made: reclaim idle ones, two for each (a transaction of its own).
  IF v_created > 0 THEN
    CALL lr_reclaim(2 * v_created);
  END IF;
  CALL lr_leave(p_sw, p_lwt);

  -- The wake-up chain: hold our wait lock while we have every place,
  -- drop it once granted (the waiter behind wakes). A request that had no
  -- place before this call holds none: nothing to drop.
  SET v_queued = v_outcome IN ('queued', 'busy', 'key_busy') AND v_queued = 1;
  IF v_queued OR v_unqueued < v_nitems THEN
    CALL lr_wait_lock(p_request, v_queued, p_galera);
  END IF;

  SELECT v_outcome AS outcome, IF(v_outcome = 'granted', v_gid, NULL) AS grant_id,
         j.resource, j.state, j.fence, j.ticket, j.used, j.capacity, j.head, j.at_head,
         j.wait_for, j.holder, j.message, v_window AS once_window,
         IF(v_outcome = 'done', v_once_gid, NULL) AS done_by, p_galera AS galera, 3 AS api
    FROM JSON_TABLE(v_out, '$[*]' COLUMNS(
         n FOR ORDINALITY,
         resource VARCHAR(80) PATH '$.resource', state VARCHAR(12) PATH '$.state',
         fence BIGINT UNSIGNED PATH '$.fence', ticket BIGINT UNSIGNED PATH '$.ticket',
         used BIGINT UNSIGNED PATH '$.used', capacity BIGINT UNSIGNED PATH '$.capacity',
         head BIGINT UNSIGNED PATH '$.head', at_head TINYINT PATH '$.at_head',
         wait_for VARCHAR(64) PATH '$.wait_for', holder VARCHAR(700) PATH '$.holder',
         message VARCHAR(300) PATH '$.message')) j
   ORDER BY j.n;
END//

DELIMITER ;
