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
-- in its error handler; the short acquire and release spell lr_leave's
-- two statements out, so that a free lock's run does not load it), so the
-- caller needs no session set-up and keeps its own settings. First
-- lr_enter checks what p_check names, before it changes anything: 1 the
-- request id, 2 the lease (32 lowercase hex digits each), 4 the lease
-- length (1000 ms up to this database's max_ttl_ms, in
-- lr_settings, `lockrunctl max-ttl`, which bounds how long a fail-over
-- holds grants back: lr_epoch; while a raise is new, its grant_ms,
-- migration 10; read in shared mode, so that a caller that checks again
-- inside its transaction, as renewals and grants do, holds `lockrunctl
-- max-ttl` off until it commits), 8 a writer: it commits what it writes, so
-- it refuses to run inside the caller's transaction (its COMMIT would
-- commit that) and starts its own even under autocommit = 0, so that no
-- row lock of its outlives the CALL; and, as 16 alone asks too (`lockrunctl
-- new-epoch`, through lr_epoch), it refuses to run on a server
-- that replicates from another (status Slaves_running: the
-- replication connections whose SQL thread runs), writable or not, with
-- 1290 as a read-only server answers, so that lockrun tries its next host:
-- one write of any kind there (a renewal, a release, a queue heartbeat)
-- gives the replica a transaction of its own, which stops its replication
-- (GTID strict mode) or is overwritten, and a replica that no longer
-- replicates looks like a primary to the routines; and a read-only server
-- (read_only, on MySQL also super_read_only), with the same 1290, whatever
-- the definer's privileges would let it write there (lr_server_state):
-- read_only is how a fail-over fences the old primary, so nothing is
-- granted, renewed, handed on, released or queued there, and no epoch
-- starts. Then the session: a lock wait of 2 s,
-- so a row held elsewhere costs a retry (1205), not a hang; and on a
-- Galera node causal reads (wsrep_sync_wait = 3: reads, UPDATE and DELETE
-- wait until the node applied what the cluster committed before them; one
-- causal wait per CALL). Two settings of the caller's are not kept but
-- reset, because they would reach the definer's statements: `timestamp`
-- (any account may set it, and it moves UTC_TIMESTAMP, so a caller could
-- make live leases look expired, or a new raise of max_ttl_ms look old,
-- so it is reset before the checks) and `insert_id` (it would choose a
-- grant's id). p_galera: whether this server is a Galera node (wsrep_on).
-- What of this the servers spell differently (the resets, the replica and
-- transaction questions, the causal reads, which are set first and put
-- back by the handler below on a refusal) is one CALL of the seam,
-- lr_server_state (05-server.sql). One routine for the rest, because each
-- routine a connection calls is loaded and parsed on its first call (see
-- doc/benchmarks.md). Cost: that CALL, one primary-key read with the ttl
-- check, and a read of status (about 0.15 ms) for a writer.
CREATE OR REPLACE DEFINER = 'lockrun_owner'@'localhost' PROCEDURE lr_enter(
  IN p_proc VARCHAR(20), IN p_check TINYINT, IN p_request VARCHAR(4000), IN p_lease VARCHAR(4000),
  IN p_ttl_ms BIGINT, OUT p_sw BIGINT, OUT p_lwt BIGINT, OUT p_galera TINYINT)
  READS SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_max, v_slaves BIGINT;
  DECLARE v_in_trx TINYINT;
  DECLARE v_msg VARCHAR(300);
  DECLARE v_me, v_was VARCHAR(255) CHARACTER SET ascii;  -- not asked for (8)
  -- A refusal below leaves the caller's wsrep_sync_wait as it was.
  DECLARE EXIT HANDLER FOR SQLEXCEPTION
  BEGIN
    CALL lr_leave(p_sw, NULL);
    RESIGNAL;
  END;
  CALL lr_server_state(IF(p_check & 24, 1, 0) | IF(p_check & 8, 2, 0) | 4, v_slaves, v_in_trx,
                       p_galera, p_sw, v_me, v_was);
  IF p_check & 24 THEN
    IF v_slaves > 0 THEN
      SET v_msg = CONCAT('lockrun writes nothing on a replica, writable or not: this server ',
                         'replicates from another (', v_slaves, ' channel(s) running)');
      SIGNAL SQLSTATE 'HY000' SET MYSQL_ERRNO = 1290, MESSAGE_TEXT = v_msg;
    END IF;
  END IF;
  IF p_check & 8 AND v_in_trx THEN
    SET v_msg = CONCAT(p_proc, ': call it outside a transaction (its own would commit yours)');
  ELSEIF p_check & 1 AND (p_request IS NULL OR
                          CONVERT(p_request USING utf8mb4) COLLATE utf8mb4_bin NOT REGEXP '^[0-9a-f]{32}$') THEN
    SET v_msg = 'lockrun: request must be 32 lowercase hex digits';
  ELSEIF p_check & 2 AND (p_lease IS NULL OR
                          CONVERT(p_lease USING utf8mb4) COLLATE utf8mb4_bin NOT REGEXP '^[0-9a-f]{32}$') THEN
    SET v_msg = 'lockrun: lease must be 32 lowercase hex digits';
  ELSEIF p_check & 4 THEN
    SELECT LEAST(COALESCE(MAX(IF(grant_until > UTC_TIMESTAMP(6), LEAST(value, grant_ms), value)),
                          86400000), 86400000) INTO v_max
      FROM lr_settings WHERE name = 'max_ttl_ms' LOCK IN SHARE MODE;
    IF p_ttl_ms IS NULL OR p_ttl_ms < 1000 OR p_ttl_ms > v_max THEN
      SET v_msg = CONCAT('lockrun: ttl_ms must be 1000-', v_max, ' (this database''s max_ttl_ms,',
                         ' which `lockrunctl max-ttl` sets)');
    END IF;
  END IF;
  IF v_msg IS NOT NULL THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
  END IF;
  SET p_lwt = @@session.innodb_lock_wait_timeout;
  SET SESSION innodb_lock_wait_timeout = 2;
END//

CREATE OR REPLACE DEFINER = 'lockrun_owner'@'localhost' PROCEDURE lr_leave(IN p_sw BIGINT, IN p_lwt BIGINT)
  NO SQL SQL SECURITY DEFINER
BEGIN
  IF p_lwt IS NOT NULL THEN
    SET SESSION innodb_lock_wait_timeout = p_lwt;
  END IF;
  IF p_sw IS NOT NULL THEN
    CALL lr_server_sync(p_sw);
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
-- p_since, when the epoch began, p_floor, the least fence a grant may
-- take now (a grant takes GREATEST(fence, p_floor) + 1), and p_max, the
-- longest lease a grant may have now. Called at the start of every
-- transaction that may grant, before any resource row is locked; p_ttl_ms
-- is the lease asked for (NULL: none). p_force (`lockrunctl new-epoch`)
-- starts a new epoch on this server whatever the tables say.
--
-- Never on a replica: every caller's lr_enter (and here `lockrunctl
-- new-epoch`) refuses a server that applies replicated transactions,
-- writable or not, with 1290, before anything is written. A replica
-- whose SQL thread is stopped is not seen: no SQL a routine may run shows
-- the IO thread alone, or a stopped connection, reliably
-- (Slave_heartbeat_period outlives RESET SLAVE ALL); `lockrunctl doctor`
-- reports it. Then the bound on leases, max_ttl_ms (lr_settings),
-- read in shared mode: `lockrunctl max-ttl` writes that row, so a change
-- waits for this transaction, or this one reads the change; a p_ttl_ms
-- above the bound fails as lr_enter's check does.
--
-- The tables name the server that writes them: 'galera:' and the
-- cluster's name on a Galera node (a synchronous cluster loses no commit,
-- so any node of it is the same server), else 'server:' with the
-- server_id, host name, port and replication position (@@gtid_slave_pos,
-- hashed when long). The position changes whenever this server applies
-- another writer's transactions as a replica: an old primary that
-- followed the new one and is promoted again (fail-back) is another
-- writer, even if it had not applied the new primary's epoch yet; a
-- replica has another server_id; a dump loaded elsewhere, another host or
-- port; a disk copy with the same server_id, host and port, once it
-- replicated, another position. Not a change: a reconnect, a restart, a
-- lockrun upgrade (a row of the form before the position was part of it
-- is taken over). So an old primary restarted read-only, never a replica,
-- and made writable again after the new one wrote is not recognised; nor
-- is a backup restored onto the same server: `lockrunctl new-epoch` is
-- the fail-over tool's step for those (doc/production.md).
--
-- Found on another server, this one starts a new epoch: the other may have
-- granted or renewed leases whose writes never arrived here, none longer
-- than max_ttl_ms (every grant and renewal obeys it, and a raise reaches
-- grants only after a delay: migration 10), so grants wait for that plus
-- the sweep grace, by this server's clock; and its tokens floor at this
-- server's clock in microseconds since 1970. An epoch's tokens start at
-- its floor, its server's clock at its start, and grow by one per grant of
-- a resource; it grants nothing before its quarantine ends. So the floor
-- of the next one is above them only if its server's clock, at the
-- start, is past the previous epoch's last grant; what this server can
-- check is that its clock is past the previous quarantine's end. Until it
-- is (a clock behind the previous writer's, or that writer failed during
-- its quarantine), no epoch starts and grants wait: p_since is NULL and
-- p_until the previous quarantine's end, which the busy answer names.
-- Once past it, the floor is above every token of an epoch that granted
-- fewer times per resource than its quarantine has microseconds (at least
-- six million), whatever the clocks say; beyond that, the clocks must
-- agree to within the previous epoch's life. Cost: two primary-key reads
-- (one in shared mode); at a change, a locking read and two writes, once.
CREATE OR REPLACE DEFINER = 'lockrun_owner'@'localhost' PROCEDURE lr_epoch(
  IN p_ttl_ms BIGINT, IN p_force TINYINT, OUT p_since DATETIME(6),
  OUT p_until DATETIME(6), OUT p_floor BIGINT UNSIGNED, OUT p_max BIGINT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_me, v_was VARCHAR(255) CHARACTER SET ascii;
  DECLARE v_server VARCHAR(255) CHARACTER SET ascii;
  DECLARE v_epoch INT UNSIGNED;
  DECLARE v_now DATETIME(6);
  DECLARE v_sw, v_lwt, v_x BIGINT;
  DECLARE v_galera, v_t TINYINT;
  -- Its callers' lr_enter refused a replica already; `lockrunctl
  -- new-epoch` (p_force) calls it directly: the same refusal (16).
  IF p_force THEN
    CALL lr_enter(NULL, 16, NULL, NULL, NULL, v_sw, v_lwt, v_galera);
    CALL lr_leave(v_sw, v_lwt);
  END IF;
  SELECT LEAST(COALESCE(MAX(IF(grant_until > UTC_TIMESTAMP(6), LEAST(value, grant_ms), value)),
                        86400000), 86400000) INTO p_max
    FROM lr_settings WHERE name = 'max_ttl_ms' LOCK IN SHARE MODE;
  IF p_ttl_ms > p_max THEN
    -- Lowered since the caller's lr_enter: its refusal, now.
    CALL lr_enter(NULL, 4, NULL, NULL, p_ttl_ms, v_sw, v_lwt, v_galera);
  END IF;
  CALL lr_server_state(8, v_x, v_t, v_galera, v_x, v_me, v_was);
  SELECT server, started_at, quarantine_until, fence_floor INTO v_server, p_since, p_until, p_floor
    FROM lr_epoch WHERE id = 1;
  IF p_force OR v_server IS NULL OR v_server <> v_me THEN
    SET v_server = NULL;
    SELECT epoch, server, started_at, quarantine_until, fence_floor
      INTO v_epoch, v_server, p_since, p_until, p_floor FROM lr_epoch WHERE id = 1 FOR UPDATE;
    SET v_now = UTC_TIMESTAMP(6);
    IF v_server = '' OR (NOT p_force AND v_server = v_was) THEN
      -- The first routine to run since the schema was made, or this
      -- server's own epoch named as before the position was part of it:
      -- this server's.
      UPDATE lr_epoch SET server = v_me WHERE id = 1;
      INSERT INTO lr_epochs (epoch, server, started_at, quarantine_until, fence_floor)
      VALUES (v_epoch, v_me, p_since, p_until, p_floor)
      ON DUPLICATE KEY UPDATE server = VALUES(server);
    ELSEIF NOT p_force AND v_server = v_me THEN
      -- Started by another transaction meanwhile.
      SET v_server = v_me;
    ELSEIF v_server IS NOT NULL AND v_server <> v_me AND v_now < p_until THEN
      -- This clock has not passed the previous quarantine's end: no
      -- epoch yet, and no grant.
      SET p_since = NULL;
    ELSE
      SET v_epoch = COALESCE(v_epoch, 0) + 1, p_since = v_now,
          p_until = v_now + INTERVAL (SELECT LEAST(COALESCE(MAX(value), 86400000), 86400000) + 5000
                                        FROM lr_settings WHERE name = 'max_ttl_ms') * 1000 MICROSECOND,
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
                           LEFT(v_name, 40), ''': use a whole number 1-1000000');
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
      END IF;
      SET v_permits = v_cnt + 0;
    END IF;
    IF CONVERT(v_name USING utf8mb4) COLLATE utf8mb4_bin NOT REGEXP '^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$' THEN
      SET v_msg = CONCAT('lockrun: invalid name ''', LEFT(v_name, 40), ''': use 1-64 letters, ',
                         'digits, _ . or -, first a letter or digit');
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
