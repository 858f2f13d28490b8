-- lockrun's stored routines: the lock protocol and the SQL API.
--
-- Not a numbered migration: `lockrunctl init` applies this file after the
-- numbered ones whenever its text differs from what the database last got
-- (a SHA-256 of the file kept in lr_routines), so a fix to a routine
-- reaches every database without a schema version of its own. Apply by
-- hand as an administrator, after every sql/0*.sql, in the lockrun
-- database:
--     mariadb lockrun < sql/procedures.sql
-- Idempotent: every routine is CREATE OR REPLACE, which keeps the grants
-- on it. Needs the definer account and the tables of the numbered
-- migrations (002 creates 'lockrun_owner'@'localhost').
--
-- Why procedures: each lock operation is one CALL, one round trip, and the
-- row locks of a grant are held for microseconds inside the server instead
-- of for a dozen client round trips. And they are the SQL API: any
-- application takes, renews, checks and releases the same locks as lockrun,
-- with an account that may only EXECUTE them (SQL SECURITY DEFINER), so no
-- client can write a row of its own into lockrun's tables.
--
-- The security boundary (API 3). The runtime account holds one role,
-- <database>_api, which may execute exactly the eight lockrun_* procedures
-- (the grants at the end of this file); the lr_* helpers are for them
-- alone. Nothing the caller controls reaches a decision: every argument is
-- checked by the public procedure that takes it; every time is this
-- server's clock, read after lr_enter has reset the session's `timestamp`
-- (which any account may set); no routine creates or reads a temporary
-- table, user variable or prepared statement, so per-call state lives in
-- local variables (a request's items as a JSON array); and the two ids a
-- client makes are its secrets: the request id (its queue places) and the
-- lease (its grant). Other clients see neither: the wake-up lock names are
-- hashes of the request id, and `holder` names host, pid and account only.
--
-- The rules of migration 1 still hold: times are the server's
-- (UTC_TIMESTAMP(6), which is lockrun's NOW(6) under time_zone '+00:00');
-- every grant and every enqueue writes each resource row it involves, so
-- contenders conflict on a written row, also under Galera; the fence is
-- taken from the resource row in commit order.
--
-- The sweep grace (5 s, lock.h LR_SWEEP_GRACE_MS) is spelled out below as
-- INTERVAL 5000000 MICROSECOND. Queue places live 10 s unless renewed.

-- Routines of earlier versions that no longer exist.
DROP PROCEDURE IF EXISTS lr_req_open;
DROP PROCEDURE IF EXISTS lr_no_transaction;
DROP PROCEDURE IF EXISTS lr_check_id;
DROP PROCEDURE IF EXISTS lr_check_ttl;
DROP FUNCTION IF EXISTS lr_bell;
DROP FUNCTION IF EXISTS lr_galera;
DROP FUNCTION IF EXISTS lr_ready;
DROP FUNCTION IF EXISTS lr_node;
DROP FUNCTION IF EXISTS lr_ahead;

-- From here until a minute after the last statement, and for as long as
-- the triggers of lockrun 0.1 on lr_holds exist, the routines count
-- `used` from the hold rows instead of adding and taking off permits
-- (lr_fresh): those triggers did that too, and older routines relied on
-- them. `lockrunctl init` drops the triggers after this file; by hand, an
-- account with SUPER (needed on a server with binary logging) runs
--     DROP TRIGGER lr_holds_ai; DROP TRIGGER lr_holds_ad; DROP TRIGGER lr_holds_bu;
--     DELETE FROM lr_routines WHERE name = 'triggers';
INSERT INTO lr_routines (name, digest, applied_at) VALUES ('procedures', REPEAT('0', 64), UTC_TIMESTAMP(6))
  ON DUPLICATE KEY UPDATE applied_at = UTC_TIMESTAMP(6);
INSERT IGNORE INTO lr_routines (name, digest, applied_at)
SELECT 'triggers', REPEAT('0', 64), UTC_TIMESTAMP(6) FROM information_schema.TRIGGERS
 WHERE TRIGGER_SCHEMA = DATABASE() AND EVENT_OBJECT_TABLE = 'lr_holds' LIMIT 1;

DELIMITER //

-- ---------------------------------------------------------------- helpers
-- Internal: the role of the runtime account cannot execute them, so they
-- trust their callers' arguments (the public procedures check them).

-- Every API procedure starts with lr_enter and ends with lr_leave (also
-- in its error handler), so the caller needs no session set-up and keeps
-- its own settings. First lr_enter checks what p_check names, before it
-- changes anything: 1 the request id, 2 the lease (32 lowercase hex digits
-- each), 4 the lease length (1000 ms up to this database's max_ttl_ms, in
-- lr_settings, `lockrunctl max-ttl`, which bounds how long a fail-over
-- holds grants back: lr_epoch), 8 a writer: it commits what it writes, so
-- it refuses to run inside the caller's transaction (its COMMIT would
-- commit that) and starts its own even under autocommit = 0, so that no
-- row lock of its outlives the CALL. Then the session: a lock wait of 2 s,
-- so a row held elsewhere costs a retry (1205), not a hang; and on a
-- Galera node causal reads (wsrep_sync_wait = 3: reads, UPDATE and DELETE
-- wait until the node applied what the cluster committed before them; one
-- causal wait per CALL). Two settings of the caller's are not kept but
-- reset, because they would reach the definer's statements: `timestamp`
-- (any account may set it, and it moves UTC_TIMESTAMP, so a caller could
-- make live leases look expired) and `insert_id` (it would choose a
-- grant's id). p_galera: whether this server is a Galera node (wsrep_on).
-- One routine for all of it, because each routine a connection calls is
-- loaded and parsed on its first call (see doc/benchmarks.md). Cost: one
-- primary-key read with the ttl check, else none.
CREATE OR REPLACE DEFINER = 'lockrun_owner'@'localhost' PROCEDURE lr_enter(
  IN p_proc VARCHAR(20), IN p_check TINYINT, IN p_request VARCHAR(4000), IN p_lease VARCHAR(4000),
  IN p_ttl_ms BIGINT, OUT p_sw BIGINT, OUT p_lwt BIGINT, OUT p_galera TINYINT)
  READS SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_max BIGINT;
  DECLARE v_msg VARCHAR(300);
  DECLARE CONTINUE HANDLER FOR 1193 SET p_sw = NULL, p_galera = 0;
  IF p_check & 8 AND @@in_transaction THEN
    SET v_msg = CONCAT(p_proc, ': call it outside a transaction (its own would commit yours)');
  ELSEIF p_check & 1 AND (p_request IS NULL OR BINARY p_request NOT REGEXP '^[0-9a-f]{32}$') THEN
    SET v_msg = 'lockrun: request must be 32 lowercase hex digits';
  ELSEIF p_check & 2 AND (p_lease IS NULL OR BINARY p_lease NOT REGEXP '^[0-9a-f]{32}$') THEN
    SET v_msg = 'lockrun: lease must be 32 lowercase hex digits';
  ELSEIF p_check & 4 THEN
    SELECT LEAST(COALESCE(MAX(value), 86400000), 86400000) INTO v_max
      FROM lr_settings WHERE name = 'max_ttl_ms';
    IF p_ttl_ms IS NULL OR p_ttl_ms < 1000 OR p_ttl_ms > v_max THEN
      SET v_msg = CONCAT('lockrun: ttl_ms must be 1000-', v_max, ' (this database''s max_ttl_ms,',
                         ' which `lockrunctl max-ttl` sets: a fail-over holds grants back that long)');
    END IF;
  END IF;
  IF v_msg IS NOT NULL THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
  END IF;
  SET SESSION timestamp = DEFAULT, SESSION insert_id = 0;
  SET p_lwt = @@session.innodb_lock_wait_timeout;
  SET SESSION innodb_lock_wait_timeout = 2;
  SET p_galera = IF(@@wsrep_on, 1, 0);
  SET p_sw = @@session.wsrep_sync_wait;
  IF p_sw IS NOT NULL THEN
    SET SESSION wsrep_sync_wait = 3;
  END IF;
END//
CREATE OR REPLACE DEFINER = 'lockrun_owner'@'localhost' PROCEDURE lr_leave(IN p_sw BIGINT, IN p_lwt BIGINT)
  NO SQL SQL SECURITY DEFINER
BEGIN
  DECLARE CONTINUE HANDLER FOR 1193 BEGIN END;
  IF p_lwt IS NOT NULL THEN
    SET SESSION innodb_lock_wait_timeout = p_lwt;
  END IF;
  IF p_sw IS NOT NULL THEN
    SET SESSION wsrep_sync_wait = p_sw;
  END IF;
END//

-- The public name of a request's wake-up lock or doorbell: a hash of the
-- request id, which is the secret of its queue places, so the name can be
-- shown to the waiter behind (wait_for) without giving the id away.
-- Named locks need no privilege, so anyone may take such a name; that can
-- only delay a wake-up (waiters also poll), never grant anything.
CREATE OR REPLACE DEFINER = 'lockrun_owner'@'localhost' PROCEDURE lr_lock_name(
  IN p_what VARCHAR(4), IN p_request CHAR(32) CHARACTER SET ascii,
  OUT p_name VARCHAR(64) CHARACTER SET ascii)
  NO SQL SQL SECURITY DEFINER
BEGIN
  SET p_name = CONCAT('lockrun.', p_what, '.', LEFT(SHA2(CONCAT(p_what, ':', p_request), 256), 32));
END//

-- The queue's wake-up chain (not on Galera, where named locks are local to
-- a node): a queued request's session holds its wait lock (lr_lock_name),
-- and the waiter right behind it blocks in GET_LOCK on it, so it wakes the
-- moment the request ahead is granted, leaves or dies. Taken at most once
-- per session (GET_LOCK nests).
CREATE OR REPLACE DEFINER = 'lockrun_owner'@'localhost' PROCEDURE lr_wait_lock(
  IN p_request CHAR(32) CHARACTER SET ascii, IN p_take TINYINT, IN p_galera TINYINT)
  NO SQL SQL SECURITY DEFINER
BEGIN
  DECLARE v_name VARCHAR(64) CHARACTER SET ascii;
  DECLARE v_held TINYINT;
  CALL lr_lock_name('wait', p_request, v_name);
  SET v_held = COALESCE(IS_USED_LOCK(v_name) = CONNECTION_ID(), 0);
  IF p_take AND NOT v_held AND NOT p_galera THEN
    DO GET_LOCK(v_name, 0);
  ELSEIF NOT p_take AND v_held THEN
    DO RELEASE_LOCK(v_name);
  END IF;
END//

-- The epoch this server is in (migration 7): p_until, until when nothing
-- may be granted or handed on (in the past once grants may go on),
-- p_since, when the epoch began, and p_floor, the least fence a grant may
-- take now (a grant takes GREATEST(fence, p_floor) + 1). Called at the
-- start of every transaction that may grant.
--
-- The tables name the server that writes them: 'galera:' and the
-- cluster's name on a Galera node (a synchronous cluster loses no commit,
-- so any node of it is the same server), else 'server:' with the
-- server_id, host name and port (a replica has another server_id; a dump
-- loaded elsewhere, another host or port). Found on another server, this
-- one starts a new epoch: the other may have granted or renewed leases
-- whose writes never arrived here, none longer than max_ttl_ms, so grants
-- wait for that plus the sweep grace, by this server's clock; and its
-- tokens floor at this server's clock in microseconds since 1970. No
-- token of an earlier epoch is as large: each epoch's tokens start at its
-- floor, the clock at its start, and grow by one per grant of a resource,
-- which takes far more than a microsecond, so they stay below the clock of
-- the server that issues them, and so below the clock at any later
-- epoch's start (clocks of the servers agreeing to within the time a
-- fail-over takes). The same server (a reconnect, a restart) is no
-- change. A backup restored onto the same server is not recognised: see
-- doc/production.md. Cost: one primary-key read; at a change, a locking
-- read and two writes, once.
CREATE OR REPLACE DEFINER = 'lockrun_owner'@'localhost' PROCEDURE lr_epoch(
  IN p_galera TINYINT, OUT p_since DATETIME(6), OUT p_until DATETIME(6), OUT p_floor BIGINT UNSIGNED)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_me VARCHAR(255) CHARACTER SET ascii;
  DECLARE v_server VARCHAR(255) CHARACTER SET ascii;
  DECLARE v_epoch INT UNSIGNED;
  DECLARE v_max BIGINT;
  DECLARE v_now DATETIME(6);
  IF p_galera THEN
    SET v_me = LEFT(CONCAT('galera:', @@wsrep_cluster_name), 255);
  ELSE
    SET v_me = LEFT(CONCAT('server:', @@server_id, ':', @@hostname, ':', @@port), 255);
  END IF;
  SELECT server, started_at, quarantine_until, fence_floor INTO v_server, p_since, p_until, p_floor
    FROM lr_epoch WHERE id = 1;
  IF v_server IS NULL OR v_server <> v_me THEN
    SET v_server = NULL;
    SELECT epoch, server, started_at, quarantine_until, fence_floor
      INTO v_epoch, v_server, p_since, p_until, p_floor FROM lr_epoch WHERE id = 1 FOR UPDATE;
    SET v_now = UTC_TIMESTAMP(6);
    IF v_server = '' THEN
      -- The first routine to run since the schema was made: this server's.
      UPDATE lr_epoch SET server = v_me WHERE id = 1;
      INSERT IGNORE INTO lr_epochs (epoch, server, started_at, quarantine_until, fence_floor)
      VALUES (v_epoch, v_me, p_since, p_until, p_floor);
    ELSEIF v_server IS NULL OR v_server <> v_me THEN
      SELECT value INTO v_max FROM lr_settings WHERE name = 'max_ttl_ms';
      SET v_epoch = COALESCE(v_epoch, 0) + 1, p_since = v_now,
          p_until = v_now + INTERVAL (LEAST(COALESCE(v_max, 86400000), 86400000) + 5000) * 1000 MICROSECOND,
          p_floor = GREATEST(COALESCE(p_floor, 0), TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', v_now));
      INSERT INTO lr_epoch (id, epoch, server, started_at, quarantine_until, fence_floor)
      VALUES (1, v_epoch, v_me, p_since, p_until, p_floor)
      ON DUPLICATE KEY UPDATE epoch = VALUES(epoch), server = VALUES(server), started_at = VALUES(started_at),
                              quarantine_until = VALUES(quarantine_until), fence_floor = VALUES(fence_floor);
      INSERT INTO lr_epochs (epoch, server, previous, started_at, quarantine_until, fence_floor)
      VALUES (v_epoch, v_me, v_server, p_since, p_until, p_floor)
      ON DUPLICATE KEY UPDATE server = VALUES(server), previous = VALUES(previous),
                              started_at = VALUES(started_at), quarantine_until = VALUES(quarantine_until),
                              fence_floor = VALUES(fence_floor);
    END IF;
  END IF;
END//

-- Parses 'kind:name[:count],...' into p_req, a JSON array of
-- {"name", "kind", "permits"} (lr_items reads it back), checking it as
-- lockrun's command line does: kinds mutex, semaphore, read, write, key;
-- names of 1-64 [A-Za-z0-9_.-] starting with a letter or digit; counts
-- 1-1000000 (semaphores only); 1-64 items, no name twice. A key's resource
-- row is named 'id:<key>'. Only local variables: no table is touched.
CREATE OR REPLACE DEFINER = 'lockrun_owner'@'localhost' PROCEDURE lr_parse(
  IN p_items VARCHAR(4000), OUT p_req TEXT, OUT p_n INT)
  NO SQL SQL SECURITY DEFINER
BEGIN
  DECLARE v_rest VARCHAR(4000) DEFAULT TRIM(COALESCE(p_items, ''));
  DECLARE v_item, v_kind, v_name, v_cnt VARCHAR(4000);
  DECLARE v_seen VARCHAR(6000) CHARACTER SET ascii COLLATE ascii_bin DEFAULT ',';
  DECLARE v_permits BIGINT UNSIGNED;
  DECLARE v_msg VARCHAR(300);
  SET p_req = '[]', p_n = 0;
  -- No control character anywhere: a name's pattern below ends in $,
  -- which also matches before a final newline.
  IF p_items REGEXP '[[:cntrl:]]' THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'lockrun: items must not contain control characters';
  END IF;
  WHILE v_rest <> '' DO
    SET v_item = TRIM(SUBSTRING_INDEX(v_rest, ',', 1));
    SET v_rest = IF(LOCATE(',', v_rest) = 0, '', TRIM(SUBSTRING(v_rest, LOCATE(',', v_rest) + 1)));
    SET v_kind = SUBSTRING_INDEX(v_item, ':', 1);
    SET v_name = IF(LOCATE(':', v_item) = 0, '', SUBSTRING(v_item, LENGTH(v_kind) + 2));
    SET v_permits = 1;
    IF BINARY v_kind NOT IN ('mutex', 'semaphore', 'read', 'write', 'key') THEN
      SET v_msg = CONCAT('lockrun: invalid kind ''', LEFT(v_kind, 20),
                         ''' (use mutex, semaphore, read, write or key)');
      SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
    END IF;
    IF v_kind = 'semaphore' AND LOCATE(':', v_name) > 0 THEN
      SET v_cnt = SUBSTRING_INDEX(v_name, ':', -1);
      SET v_name = LEFT(v_name, LENGTH(v_name) - LENGTH(v_cnt) - 1);
      IF v_cnt NOT REGEXP '^[0-9]{1,7}$' OR v_cnt + 0 < 1 OR v_cnt + 0 > 1000000 THEN
        SET v_msg = CONCAT('lockrun: invalid count ''', LEFT(v_cnt, 20), ''' for ''',
                           LEFT(v_name, 64), ''': use a whole number 1-1000000');
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
      END IF;
      SET v_permits = v_cnt + 0;
    END IF;
    IF BINARY v_name NOT REGEXP '^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$' THEN
      SET v_msg = CONCAT('lockrun: invalid name ''', LEFT(v_name, 64), ''': use 1-64 letters, ',
                         'digits, ''_'', ''.'' or ''-'', starting with a letter or digit');
      SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
    END IF;
    SET p_n = p_n + 1;
    IF p_n > 64 THEN
      SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'lockrun: give 1 to 64 items, separated by commas';
    END IF;
    -- read:x and write:x are one row, x; key:x is the row id:x.
    SET v_name = IF(v_kind = 'key', CONCAT('id:', v_name), v_name);
    IF LOCATE(CONCAT(',', v_name, ','), v_seen) > 0 THEN
      SET v_msg = CONCAT('lockrun: ''', LEFT(IF(v_kind = 'key', SUBSTRING(v_name, 4), v_name), 64),
                         ''' is named more than once');
      SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
    END IF;
    SET v_seen = CONCAT(v_seen, v_name, ',');
    SET p_req = JSON_ARRAY_APPEND(p_req, '$', JSON_OBJECT(
        'name', v_name,
        'kind', CASE WHEN v_kind IN ('read', 'write') THEN 'rwlock' ELSE v_kind END,
        'permits', IF(v_kind = 'write', 2147483647, v_permits)));
  END WHILE;
  IF p_n = 0 THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'lockrun: give 1 to 64 items, separated by commas';
  END IF;
END//
-- Rewrites a once item, 'once:KEY:PERIOD_MS[:OFFSET_MS]', into the key
-- item 'key:KEY' that lr_parse knows, and returns its window: KEY,
-- PERIOD_MS (1000-31622400000, i.e. 1 s to 366 days) and OFFSET_MS (0 to
-- PERIOD_MS - 1; default 0). At most one once item per request. Without
-- one, p_key is NULL and p_items unchanged. No table is read or written.
CREATE OR REPLACE DEFINER = 'lockrun_owner'@'localhost' PROCEDURE lr_once_items(
  INOUT p_items VARCHAR(4000), OUT p_key VARCHAR(64) CHARACTER SET ascii,
  OUT p_period BIGINT UNSIGNED, OUT p_offset BIGINT UNSIGNED)
  NO SQL SQL SECURITY DEFINER
proc: BEGIN
  DECLARE v_rest VARCHAR(4000) DEFAULT TRIM(COALESCE(p_items, ''));
  DECLARE v_out VARCHAR(4000) DEFAULT '';
  DECLARE v_item, v_per, v_off VARCHAR(4000);
  DECLARE v_colons INT;
  DECLARE v_msg VARCHAR(300);
  SET p_key = NULL, p_period = NULL, p_offset = NULL;
  IF v_rest REGEXP '[[:cntrl:]]' THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'lockrun: items must not contain control characters';
  END IF;
  IF LOCATE('once:', v_rest) = 0 THEN
    LEAVE proc;
  END IF;
  WHILE v_rest <> '' DO
    SET v_item = TRIM(SUBSTRING_INDEX(v_rest, ',', 1));
    SET v_rest = IF(LOCATE(',', v_rest) = 0, '', TRIM(SUBSTRING(v_rest, LOCATE(',', v_rest) + 1)));
    IF LEFT(v_item, 5) = 'once:' THEN
      SET v_colons = LENGTH(v_item) - LENGTH(REPLACE(v_item, ':', ''));
      SET v_per = IF(v_colons >= 2, SUBSTRING_INDEX(SUBSTRING_INDEX(v_item, ':', 3), ':', -1), '');
      SET v_off = IF(v_colons = 3, SUBSTRING_INDEX(v_item, ':', -1), '0');
      IF p_key IS NOT NULL THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'lockrun: give at most one once item';
      END IF;
      IF v_colons NOT IN (2, 3) OR v_per NOT REGEXP '^[0-9]{4,11}$' OR v_off NOT REGEXP '^[0-9]{1,11}$'
         OR v_per + 0 < 1000 OR v_per + 0 > 31622400000 OR v_off + 0 >= v_per + 0 THEN
        SET v_msg = CONCAT('lockrun: invalid once item ''', LEFT(v_item, 100),
                           ''': use once:KEY:PERIOD_MS[:OFFSET_MS], PERIOD_MS 1000-31622400000',
                           ' and OFFSET_MS below it');
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
      END IF;
      SET p_key = LEFT(SUBSTRING_INDEX(SUBSTRING_INDEX(v_item, ':', 2), ':', -1), 64);
      SET p_period = v_per + 0, p_offset = v_off + 0;
      SET v_item = CONCAT('key:', SUBSTRING_INDEX(SUBSTRING_INDEX(v_item, ':', 2), ':', -1));
    END IF;
    SET v_out = CONCAT(v_out, IF(v_out = '', '', ','), v_item);
  END WHILE;
  SET p_items = v_out;
END//

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
      UPDATE lr_grants SET ended_at = v_exp, end_reason = 'expired'
       WHERE id = v_gid AND ended_at IS NULL;
      DELETE FROM lr_holds WHERE resource = p_res AND grant_id = v_gid;
    END LOOP;
    CLOSE c;
    CALL lr_recount(p_res);
  END IF;
  IF EXISTS (SELECT 1 FROM lr_waiters WHERE resource = p_res AND expires_at <= v_cut) THEN
    DELETE FROM lr_waiters WHERE resource = p_res AND expires_at <= v_cut
     ORDER BY expires_at LIMIT 20;
  END IF;
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
       SET r.used = IF(r.used >= h.permits, r.used - h.permits, 0)
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
-- Cost: one locking read of the queue's head per resource, and a few row
-- writes per grant.
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
  DECLARE c CURSOR FOR SELECT resource FROM lr_grant_items WHERE grant_id = p_gid ORDER BY resource;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
  SET p_stuck = 0;
  IF p_gid IS NULL THEN
    LEAVE proc;
  END IF;
  -- After a fail-over nothing is handed on until the quarantine ends
  -- (lr_epoch); the waiters acquire then.
  CALL lr_epoch(p_galera, v_epoch_at, v_until, v_floor);
  IF v_until > v_now THEN
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
      IF v_lease IS NULL OR v_ttl IS NULL
         OR EXISTS (SELECT 1 FROM lr_grants WHERE request_id = v_lease) THEN
        -- It may fit, but must acquire itself: the caller wakes it.
        SET p_stuck = 1;
        LEAVE head;
      END IF;
      UPDATE lr_resources SET fence = GREATEST(fence, v_floor) + 1,
             used = used + IF(v_fresh, 0, v_permits), updated_at = v_now
       WHERE name = v_res;
      SELECT fence INTO v_fence FROM lr_resources WHERE name = v_res;
      INSERT INTO lr_grants (request_id, host, pid, os_user, db_user, command, ttl_ms,
                             requested_at, acquired_at, queued_as)
      VALUES (v_lease, v_host, v_pid, v_os, COALESCE(v_dbu, ''), v_cmd, v_ttl, v_since, v_now, v_req);
      SET v_gid = LAST_INSERT_ID();
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

-- ---------------------------------------------------------------- the API

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
-- Three ways through, so that a connection parses only what its call
-- needs (a routine is parsed on a session's first call of it, and every
-- lockrun run is a new connection): a grant handed to this request while
-- it waited is claimed (lr_claim); the common acquire, one item whose row
-- exists and is free, with nobody queued, nothing to sweep and no
-- fail-over in the way, is granted here in one transaction of six short
-- statements; everything else goes to lr_parse and lr_acquire, which
-- decide it again from the start.
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
  DECLARE v_gid, v_permits, v_cap, v_used, v_fence, v_floor BIGINT UNSIGNED;
  DECLARE v_held_as CHAR(32) CHARACTER SET ascii;
  DECLARE v_items VARCHAR(4000) DEFAULT p_items;
  DECLARE v_kind, v_rkind VARCHAR(10);
  DECLARE v_name VARCHAR(80) CHARACTER SET ascii;
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
  IF BINARY p_items REGEXP '^(semaphore:[A-Za-z0-9][A-Za-z0-9_.-]{0,63}:[1-9][0-9]{0,6}|(mutex|key|read|write):[A-Za-z0-9][A-Za-z0-9_.-]{0,63})$'
     AND p_items NOT REGEXP '[[:cntrl:]]' THEN
    SET v_kind = SUBSTRING_INDEX(p_items, ':', 1),
        v_name = SUBSTRING_INDEX(SUBSTRING_INDEX(p_items, ':', 2), ':', -1),
        v_permits = IF(v_kind = 'semaphore', SUBSTRING_INDEX(p_items, ':', -1) + 0,
                       IF(v_kind = 'write', 2147483647, 1)),
        v_name = IF(v_kind = 'key', CONCAT('id:', v_name), v_name),
        v_kind = IF(v_kind IN ('read', 'write'), 'rwlock', v_kind);
    COMMIT;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    SET v_now = UTC_TIMESTAMP(6);
    -- lr_epoch's and lr_fresh's questions, both answered no, in one read.
    SELECT fence_floor INTO v_floor FROM lr_epoch
     WHERE id = 1 AND quarantine_until <= v_now
       AND server = LEFT(IF(v_galera, CONCAT('galera:', @@wsrep_cluster_name),
                            CONCAT('server:', @@server_id, ':', @@hostname, ':', @@port)), 255)
       AND NOT EXISTS (SELECT 1 FROM lr_routines WHERE name IN ('triggers', 'procedures')
                        AND (name = 'triggers' OR applied_at > v_now - INTERVAL 60 SECOND));
    IF v_floor IS NOT NULL THEN
      SELECT kind, capacity, used, fence, paused_at IS NULL INTO v_rkind, v_cap, v_used, v_fence, v_fast
        FROM lr_resources WHERE name = v_name FOR UPDATE;
      IF v_fast AND v_rkind = v_kind AND v_used + v_permits <= v_cap
         AND (v_kind <> 'semaphore' OR v_permits <= 1000000) THEN
        SELECT NOT EXISTS (SELECT 1 FROM lr_waiters WHERE resource = v_name)
           AND NOT EXISTS (SELECT 1 FROM lr_holds WHERE resource = v_name
                            AND expires_at <= IF(v_cap = 1, '9999-12-31', v_now - INTERVAL 5000000 MICROSECOND))
           AND NOT EXISTS (SELECT 1 FROM lr_grants WHERE request_id = p_lease)
          INTO v_fast;
      ELSE
        SET v_fast = 0;
      END IF;
    END IF;
    IF v_fast THEN
      SET v_fence = GREATEST(v_fence, v_floor) + 1;
      UPDATE lr_resources SET fence = v_fence, used = used + v_permits, updated_at = v_now
       WHERE name = v_name;
      INSERT INTO lr_grants (request_id, idem_key, host, pid, os_user, db_user, command,
                             ttl_ms, requested_at, acquired_at)
      VALUES (p_lease, IF(v_kind = 'key', SUBSTRING(v_name, 4), NULL),
              LEFT(COALESCE(p_host, SUBSTRING_INDEX(USER(), '@', -1)), 255), COALESCE(p_pid, 0),
              LEFT(COALESCE(p_os_user, ''), 64), USER(), LEFT(COALESCE(p_command, ''), 1024), p_ttl_ms,
              v_now, v_now);
      SET v_gid = LAST_INSERT_ID();
      INSERT INTO lr_grant_items (grant_id, resource, kind, permits, fence)
      VALUES (v_gid, v_name, v_kind, v_permits, v_fence);
      INSERT INTO lr_holds (resource, grant_id, permits, fence, expires_at)
      VALUES (v_name, v_gid, v_permits, v_fence, v_now + INTERVAL p_ttl_ms * 1000 MICROSECOND);
      COMMIT;
      CALL lr_leave(v_sw, v_lwt);
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
  CALL lr_epoch(p_galera, v_since, v_until, v_floor);
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
      -- A name deleted before starts above every token it issued.
      INSERT IGNORE INTO lr_resources (name, kind, capacity, fence)
      VALUES (v_name, v_kind, IF(v_kind = 'rwlock', 2147483647, 1),
              COALESCE((SELECT f.fence FROM lr_fence_floor f WHERE f.name = v_name), 0));
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

  -- 2. Idempotent: this lease already granted and not ended? Return it.
  --    Ended (released, or a settlement's tombstone)? Then this is a late
  --    call whose answer nobody will read: it must neither grant nor
  --    queue. Read after the rows are locked, so a settlement either
  --    waited for this call or committed before it.
  SELECT g.id, g.ended_at IS NOT NULL INTO v_gid, v_ended FROM lr_grants g WHERE g.request_id = p_lease;
  SET v_done = 0;
  IF v_ended THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'lockrun: this lease id was used already; take a new one';
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
                           ttl_ms, requested_at, acquired_at, once_window, once_period_ms)
    VALUES (p_lease, COALESCE(p_once_key, v_key), v_host, COALESCE(p_pid, 0),
            LEFT(COALESCE(p_os_user, ''), 64), USER(), LEFT(COALESCE(p_command, ''), 1024), p_ttl_ms,
            COALESCE((SELECT MIN(w.since) FROM lr_waiters w WHERE w.request_id = p_request), v_now),
            v_now, v_window, p_period);
    SET v_gid = LAST_INSERT_ID();
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
    IF v_held THEN
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
  DECLARE v_ended VARCHAR(1000);
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_gid = NULL;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION
  BEGIN
    ROLLBACK;
    CALL lr_leave(v_sw, v_lwt);
    RESIGNAL;
  END;
  CALL lr_enter('lockrun_renew', 14, NULL, p_lease, p_ttl_ms, v_sw, v_lwt, v_galera);
  START TRANSACTION;
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
    SELECT CASE WHEN end_reason = 'force_released' THEN
                  CONCAT('released by force by ', COALESCE(released_by, '?'), ' (',
                         COALESCE(released_os_user, '?'), '@', COALESCE(released_host, '?'), ')',
                         IF(COALESCE(release_note, '') = '', '', CONCAT(': ', release_note)))
                WHEN end_reason = 'expired' THEN 'swept: its lease had expired'
                WHEN end_reason IS NULL THEN 'not renewed: its holds are past their lease'
                ELSE CONCAT('ended: ', end_reason) END
      INTO v_ended FROM lr_grants WHERE request_id = p_lease;
  END IF;
  SELECT v_gid AS grant_id, COUNT(*) AS holds, v_renewed AS renewed,
         MIN(expires_at) AS expires_at, v_ended AS ended, 3 AS api
    FROM lr_holds WHERE grant_id = v_gid;
  COMMIT;
  CALL lr_leave(v_sw, v_lwt);
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
      UPDATE lr_resources SET used = IF(used >= v_permits, used - v_permits, 0) WHERE name = v_res;
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
  CALL lr_leave(v_sw, v_lwt);
  SELECT v_released AS released, v_woken AS woken, 3 AS api;
END//

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

-- ---------------------------------------------------------------- access
-- The role <database>_api (lockrun_api for the database lockrun) may
-- execute the eight public procedures and nothing else; sql/grant.sql
-- gives it to the runtime account. Re-applied with every new text of this
-- file, so a new public procedure reaches every account that has the
-- role. Accounts that still have the grant of API 2 and earlier, EXECUTE
-- on the whole database and no other right there, are moved to the role:
-- that grant let them call the internal routines. Sessions already
-- connected keep the database grant they started with (the server checks
-- it per session), so running holders renew and release as before; their
-- next connection has the role. An account whose default role is another
-- one is left as it is (an account has one default role): init says so,
-- and `lockrunctl doctor` shows it. Also records the server that writes
-- the tables (below). Run as the administrator that runs init, then
-- dropped.
CREATE OR REPLACE PROCEDURE lr_setup_access()
  SQL SECURITY INVOKER
BEGIN
  DECLARE v_role VARCHAR(200) DEFAULT CONCAT('''', REPLACE(CONCAT(DATABASE(), '_api'), '''', ''''''), '''');
  DECLARE v_db VARCHAR(200) DEFAULT CONCAT('`', REPLACE(DATABASE(), '`', '``'), '`');
  DECLARE v_grantee VARCHAR(400);
  DECLARE v_other VARCHAR(200);
  DECLARE v_notes TEXT DEFAULT '[]';
  DECLARE v_done INT DEFAULT 0;
  DECLARE v_sw, v_lwt BIGINT;
  DECLARE v_galera TINYINT;
  DECLARE v_since, v_until DATETIME(6);
  DECLARE v_floor BIGINT UNSIGNED;
  DECLARE c CURSOR FOR
    SELECT p.GRANTEE FROM information_schema.SCHEMA_PRIVILEGES p
     WHERE p.TABLE_SCHEMA = DATABASE() AND p.GRANTEE <> '''lockrun_owner''@''localhost'''
       AND p.GRANTEE NOT LIKE '%@'''''
     GROUP BY p.GRANTEE HAVING COUNT(*) = 1 AND MAX(p.PRIVILEGE_TYPE) = 'EXECUTE';
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
  EXECUTE IMMEDIATE CONCAT('CREATE ROLE IF NOT EXISTS ', v_role);
  EXECUTE IMMEDIATE CONCAT('GRANT EXECUTE ON PROCEDURE ', v_db, '.lockrun_acquire TO ', v_role);
  EXECUTE IMMEDIATE CONCAT('GRANT EXECUTE ON PROCEDURE ', v_db, '.lockrun_settle TO ', v_role);
  EXECUTE IMMEDIATE CONCAT('GRANT EXECUTE ON PROCEDURE ', v_db, '.lockrun_poll TO ', v_role);
  EXECUTE IMMEDIATE CONCAT('GRANT EXECUTE ON PROCEDURE ', v_db, '.lockrun_sleep TO ', v_role);
  EXECUTE IMMEDIATE CONCAT('GRANT EXECUTE ON PROCEDURE ', v_db, '.lockrun_dequeue TO ', v_role);
  EXECUTE IMMEDIATE CONCAT('GRANT EXECUTE ON PROCEDURE ', v_db, '.lockrun_renew TO ', v_role);
  EXECUTE IMMEDIATE CONCAT('GRANT EXECUTE ON PROCEDURE ', v_db, '.lockrun_release TO ', v_role);
  EXECUTE IMMEDIATE CONCAT('GRANT EXECUTE ON PROCEDURE ', v_db, '.lockrun_check TO ', v_role);
  OPEN c;
  l: LOOP
    FETCH c INTO v_grantee;
    IF v_done THEN LEAVE l; END IF;
    SET v_other = NULL;
    SELECT NULLIF(u.default_role, '') INTO v_other FROM mysql.user u
     WHERE CONCAT('''', u.User, '''@''', u.Host, '''') = v_grantee;
    SET v_done = 0;
    IF v_other IS NULL OR CONCAT('''', v_other, '''') = v_role THEN
      EXECUTE IMMEDIATE CONCAT('GRANT ', v_role, ' TO ', v_grantee);
      EXECUTE IMMEDIATE CONCAT('SET DEFAULT ROLE ', v_role, ' FOR ', v_grantee);
      EXECUTE IMMEDIATE CONCAT('REVOKE EXECUTE ON ', v_db, '.* FROM ', v_grantee);
      SET v_notes = JSON_ARRAY_APPEND(v_notes, '$', CONCAT('moved ', v_grantee, ' from EXECUTE on ',
          v_db, '.* to the role ', v_role, '; a session of it that calls the procedures without ',
          v_db, ' as its default database must reconnect'));
    ELSE
      SET v_notes = JSON_ARRAY_APPEND(v_notes, '$', CONCAT(v_grantee, ' keeps EXECUTE on ', v_db,
          '.*, which reaches the internal routines: its default role is ', v_other,
          '; grant ', v_role, ' to that role and revoke EXECUTE on ', v_db, '.*'));
    END IF;
  END LOOP;
  CLOSE c;
  -- The server that installs the routines writes the tables: recorded now,
  -- so that replicas have it before the first grant (lr_epoch). Were it
  -- left to the first grant, a replica that missed that grant would take
  -- the tables over as if newly installed, without a quarantine. Not on a
  -- read-only server (a replica): it does not write them.
  IF NOT @@global.read_only THEN
    CALL lr_enter(NULL, 0, NULL, NULL, NULL, v_sw, v_lwt, v_galera);
    CALL lr_epoch(v_galera, v_since, v_until, v_floor);
    CALL lr_leave(v_sw, v_lwt);
  END IF;
  -- What init tells the administrator (the column `note`).
  SELECT j.note FROM JSON_TABLE(v_notes, '$[*]' COLUMNS(note VARCHAR(1000) PATH '$')) j;
END//

DELIMITER ;

CALL lr_setup_access();
DROP PROCEDURE lr_setup_access;

-- No triggers: creating one needs SUPER on a server with binary logging
-- (managed databases give none), and rows applied by Galera do not fire
-- them. The routines above keep `used`; every count is made exact once.
UPDATE lr_resources r
   SET r.used = (SELECT COALESCE(SUM(h.permits), 0) FROM lr_holds h WHERE h.resource = r.name)
 WHERE r.used <> (SELECT COALESCE(SUM(h.permits), 0) FROM lr_holds h WHERE h.resource = r.name);
