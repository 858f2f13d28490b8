-- lockrun's stored routines, 10: the helpers every public procedure uses.
-- (How these files are applied: 00-start.sql.)
--
-- Internal: the role of the runtime account cannot execute them, so they
-- trust their callers' arguments (the public procedures check them).
-- lr_enter and lr_leave open and close every API call; lr_lock_name names
-- a request's wake-up lock; lr_epoch keeps grants back after a fail-over;
-- lr_parse reads a request's items. 90-access.sql calls the first three
-- while the files are applied.

DELIMITER //

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

DELIMITER ;
