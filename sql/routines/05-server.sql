-- lockrun's stored routines, 05: the seam between the servers. (How these
-- files are applied: 00-start.sql.)
--
-- What the routines ask of the server that MariaDB and MySQL spell
-- differently is asked here, and nowhere else: whether this server
-- replicates from another, whether the session is in a transaction, its
-- isolation level, the name of the server that writes the tables, and
-- Galera's causal reads. Each routine holds both spellings, in executable
-- comments: MariaDB alone runs the text of /*M! ... */, MySQL alone that
-- of /*!80000 ... */ (MariaDB skips the versions 50700 to 99999, which
-- are MySQL's). MySQL refuses, when a routine is created, a system
-- variable it does not know (1193), which is why a runtime test of the
-- server would not do. The routines' DDL (CREATE OR REPLACE, ADD COLUMN
-- IF NOT EXISTS) is MariaDB's; `lockrunctl init` spells it for MySQL
-- (src/schema.c, to_mysql).
--
-- Internal, like the helpers: the runtime account's role cannot execute
-- them.

DELIMITER //

-- lr_enter's questions, in one CALL, as each routine a session calls
-- costs it a load on first use and a call each time. First the two
-- settings of the caller's session that would reach the definer's
-- statements, reset (lr_enter says why): `timestamp`, and `insert_id`,
-- which would choose a grant's id. MariaDB resets insert_id with 0; MySQL
-- takes a 0 as the id itself, and has no other way to unset it than the
-- INSERT it is for, so a session that set it (a value other than 0) is
-- refused there, before anything is written. One that set 0 looks unset;
-- its grant gets the id 0, which the routines refuse after the INSERT
-- (its transaction is rolled back).
-- p_what 1: p_replicating, how many replication channels apply another
-- server's transactions here. MariaDB: status Slaves_running (the
-- connections whose SQL thread runs), read from SESSION_STATUS: a
-- global-only variable shows the same value there, and GLOBAL_STATUS
-- would first add up every connection's counters under one server-wide
-- mutex, a cost that grows with the connections (waiters included) and
-- that every writing call paid. MySQL: the channels of
-- performance_schema.replication_applier_status whose applier is ON,
-- other than Group Replication's own (group_replication_applier,
-- _recovery): a member of a single-primary group is no replica; its
-- primary is writable and its secondaries are super_read_only, refused
-- below as any read-only server is. A member of a multi-primary group is
-- refused outright (1290, one line), as lockrun does not support that
-- mode: every member there writes, and lockrun would need one writer
-- chosen alike by all clients and certification conflicts taken as
-- retries (tests/group/README.md). The mode is read from
-- performance_schema.global_variables, as the variable exists only where
-- the plugin is loaded (1193 when the routine is created elsewhere).
-- Asked with 1 too, as every routine that writes asks it: whether the
-- server is read-only. One that is (and applies no other server's
-- transactions: lr_enter names a replica as such) is refused with 1290,
-- the server's own answer to a write there, which lockrun takes for "try
-- the next host". The server's answer alone is no fence: it spares an
-- account with CONNECTION_ADMIN or SUPER (MySQL) or READ_ONLY ADMIN
-- (MariaDB; SUPER too before 10.11), and such an account is the
-- routines' definer when it installed them without SET USER /
-- SET_ANY_DEFINER (a managed database's master account). MariaDB:
-- read_only, which 12.0 may also set to NO_LOCK or NO_LOCK_NO_ADMIN
-- (read-only too), hence by name; MySQL: read_only or super_read_only
-- (which sets read_only, but is asked too). A read of two variables, no
-- statement.
-- p_what 2: p_in_trx, whether the session is inside a transaction.
-- MariaDB: @@in_transaction. MySQL has no such variable; SET TRANSACTION
-- fails there inside a transaction (1568), and outside one sets the next
-- transaction's access mode to READ WRITE, the default, which the callers
-- that ask (writers, and lockrun_check under SERIALIZABLE) start anyway.
-- p_what 4: Galera's causal reads: p_galera, whether this server is a
-- Galera node (wsrep_on), p_sw the session's wsrep_sync_wait (NULL
-- elsewhere, so that nothing is set or put back there), which is set to 3
-- (lr_enter says why; lr_leave puts it back through lr_server_sync).
-- MySQL has no Galera: 0 and NULL.
-- p_what 8: p_me, the name of the server that writes the tables (lr_epoch
-- says why and what changes it), and p_was, the form it had before the
-- replication position was part of it (NULL where there was none); and
-- p_galera. MariaDB: 'galera:' and the cluster's name on a Galera node,
-- else 'server:' with the server_id, host name, port and @@gtid_slave_pos
-- (hashed when long). MySQL: 'server:' with the server_uuid (unique per
-- data directory, where MySQL's server_id defaults to 1 everywhere), host
-- name, port and the transactions of other servers that this one applied
-- (its GTID set without its own, hashed when long): that set changes
-- whenever it applies another writer's transactions as a replica, as
-- MariaDB's position does. A member of a Group Replication group (its
-- group_replication_applier channel ON) is named by its group instead:
-- 'group:' and group_replication_group_name, the source of every GTID of
-- the group, so that the position would change with each of its
-- transactions. At a change of primary, a new primary at
-- BEFORE_ON_PRIMARY_FAILOVER or stronger (BEFORE, AFTER and
-- BEFORE_AND_AFTER include it) applies every transaction the group
-- certified before it answers a read or a write: it is the same server to
-- lockrun, as a Galera cluster's next node is, and no epoch starts. At
-- EVENTUAL a new primary answers reads before it has applied them, as a
-- promoted replica may lack its primary's last commits, so the member's
-- server_uuid is part of the name there, and each change of primary is a
-- fail-over (an epoch, its quarantine and its floor). The level is the
-- group's GLOBAL one, which every session on a member agrees on. A server
-- that left its group is 'server:' again (another name: a new epoch).
-- Asked alone (8, by the short acquire and lr_epoch after their lr_enter),
-- the session is not reset again. The name was a routine of its own
-- (lr_server_me) until each cold run's load of it was measured: about
-- 0.15 ms of server CPU on MySQL 9.7, where this one is loaded already.
-- Cost: one read of status or of performance_schema for 1, and
-- on a group's member one more of performance_schema; for 8, none on a
-- server that applied no other server's transactions, otherwise one read
-- of performance_schema (MySQL).
CREATE OR REPLACE DEFINER = 'lockrun_owner'@'localhost' PROCEDURE lr_server_state(
  IN p_what TINYINT, OUT p_replicating BIGINT, OUT p_in_trx TINYINT, OUT p_galera TINYINT,
  OUT p_sw BIGINT, OUT p_me VARCHAR(255) CHARACTER SET ascii,
  OUT p_was VARCHAR(255) CHARACTER SET ascii)
  READS SQL DATA SQL SECURITY DEFINER
BEGIN
  /*M!
  DECLARE CONTINUE HANDLER FOR 1193 SET p_sw = NULL, p_galera = 0;
  IF p_what & 7 THEN
    SET SESSION timestamp = DEFAULT, SESSION insert_id = 0;
  END IF;
  IF p_what & 1 THEN
    SELECT VARIABLE_VALUE INTO p_replicating FROM information_schema.SESSION_STATUS
     WHERE VARIABLE_NAME = 'SLAVES_RUNNING';
    IF p_replicating = 0 AND CAST(@@global.read_only AS CHAR) NOT IN ('0', 'OFF') THEN
      SIGNAL SQLSTATE 'HY000' SET MYSQL_ERRNO = 1290,
        MESSAGE_TEXT = 'lockrun writes nothing on a read-only server: read_only is ON here';
    END IF;
  END IF;
  IF p_what & 2 THEN
    SET p_in_trx = @@in_transaction;
  END IF;
  IF p_what & 12 THEN
    SET p_galera = IF(@@wsrep_on, 1, 0);
  END IF;
  IF p_what & 4 THEN
    SET p_sw = IF(p_galera, @@session.wsrep_sync_wait, NULL);
    IF p_sw IS NOT NULL THEN
      SET SESSION wsrep_sync_wait = 3;
    END IF;
  END IF;
  IF p_what & 8 THEN
    IF p_galera THEN
      SET p_me = LEFT(CONCAT('galera:', @@wsrep_cluster_name), 255), p_was = NULL;
    ELSE
      SET p_me = CONCAT('server:', @@server_id, ':', LEFT(@@hostname, 100), ':', @@port, ':',
                        IF(LENGTH(@@gtid_slave_pos) > 100, MD5(@@gtid_slave_pos), @@gtid_slave_pos)),
          p_was = LEFT(CONCAT('server:', @@server_id, ':', @@hostname, ':', @@port), 255);
    END IF;
  END IF;
  */
  /*!80000
  DECLARE v_group BIGINT;
  DECLARE v_pos TEXT;
  DECLARE v_name, v_level VARCHAR(100) CHARACTER SET ascii;
  IF p_what & 7 THEN
    SET SESSION timestamp = DEFAULT;
    IF @@session.insert_id <> 0 THEN
      SIGNAL SQLSTATE '45000' SET
        MESSAGE_TEXT = 'lockrun: this session set insert_id, which would choose a grant''s id: call lockrun without it';
    END IF;
  END IF;
  IF p_what & 1 THEN
    SELECT COALESCE(SUM(SERVICE_STATE = 'ON' AND CHANNEL_NAME NOT LIKE 'group\_replication\_%'), 0),
           COALESCE(SUM(SERVICE_STATE = 'ON' AND CHANNEL_NAME LIKE 'group\_replication\_%'), 0)
      INTO p_replicating, v_group
      FROM performance_schema.replication_applier_status;
    IF v_group > 0 AND EXISTS (SELECT 1 FROM performance_schema.global_variables
                                WHERE VARIABLE_NAME = 'group_replication_single_primary_mode'
                                  AND VARIABLE_VALUE <> 'ON') THEN
      SIGNAL SQLSTATE 'HY000' SET MYSQL_ERRNO = 1290,
        MESSAGE_TEXT = 'lockrun: this group is in multi-primary mode, which lockrun does not support';
    END IF;
    IF p_replicating = 0 AND (@@global.read_only OR @@global.super_read_only) THEN
      SIGNAL SQLSTATE 'HY000' SET MYSQL_ERRNO = 1290,
        MESSAGE_TEXT = 'lockrun writes nothing on a read-only server: read_only (or super_read_only) is ON here';
    END IF;
  END IF;
  IF p_what & 2 THEN
    BEGIN
      DECLARE EXIT HANDLER FOR 1568 SET p_in_trx = 1;
      SET p_in_trx = 0;
      SET TRANSACTION READ WRITE;
    END;
  END IF;
  IF p_what & 8 THEN
    SET v_pos = REPLACE(REPLACE(
      GTID_SUBTRACT(@@global.gtid_executed, CONCAT(@@server_uuid, ':1-9223372036854775806')),
      '\n', ''), ' ', '');
    IF v_pos <> '' THEN
      SELECT MAX(g.VARIABLE_VALUE), MAX(c.VARIABLE_VALUE) INTO v_name, v_level
        FROM performance_schema.replication_applier_status a
        JOIN performance_schema.global_variables g ON g.VARIABLE_NAME = 'group_replication_group_name'
        JOIN performance_schema.global_variables c ON c.VARIABLE_NAME = 'group_replication_consistency'
       WHERE a.CHANNEL_NAME = 'group_replication_applier' AND a.SERVICE_STATE = 'ON';
    END IF;
    IF v_name <> '' THEN
      SET p_me = CONCAT('group:', v_name, IF(v_level = 'EVENTUAL', CONCAT(':', @@server_uuid), ''));
    ELSE
      SET p_me = CONCAT('server:', @@server_uuid, ':', LEFT(@@hostname, 100), ':', @@port, ':',
                        IF(LENGTH(v_pos) > 100, LEFT(SHA2(v_pos, 256), 32), v_pos));
    END IF;
    SET p_was = NULL;
  END IF;
  SET p_galera = 0, p_sw = NULL;
  */
END//

-- The session's isolation level, by the name the server gives it:
-- MariaDB before 11.1 knows only tx_isolation, MySQL only
-- transaction_isolation. No cost beyond the CALL.
CREATE OR REPLACE DEFINER = 'lockrun_owner'@'localhost' PROCEDURE lr_server_isolation(
  OUT p_iso VARCHAR(40))
  READS SQL DATA SQL SECURITY DEFINER
BEGIN
  /*M!
  SELECT VARIABLE_VALUE INTO p_iso FROM information_schema.SESSION_VARIABLES
   WHERE VARIABLE_NAME IN ('TX_ISOLATION', 'TRANSACTION_ISOLATION') LIMIT 1;
  */
  /*!80000
  SET p_iso = REPLACE(@@session.transaction_isolation, '-', ' ');
  */
END//

-- Puts the session's wsrep_sync_wait back to p_sw (lr_leave): only ever
-- called with what lr_server_state read on a Galera node, so never on
-- MySQL, where the body is empty.
CREATE OR REPLACE DEFINER = 'lockrun_owner'@'localhost' PROCEDURE lr_server_sync(IN p_sw BIGINT)
  NO SQL SQL SECURITY DEFINER
BEGIN
  /*M!
  DECLARE CONTINUE HANDLER FOR 1193 BEGIN END;
  SET SESSION wsrep_sync_wait = p_sw;
  */
END//

-- What the access step (90-access.sql, run by the administrator) spells
-- differently: p_sql, the statement that makes p_role the default role of
-- p_grantee (MariaDB: FOR, MySQL: TO); p_owner_sql, a grant the definer
-- needs besides its own database's (MySQL: reading the replication
-- channels of performance_schema, which MariaDB's status shows to
-- anyone; NULL when none); and p_api2, whether accounts of API 2 may exist
-- here, which only lockrun on MariaDB made.
CREATE OR REPLACE DEFINER = 'lockrun_owner'@'localhost' PROCEDURE lr_server_grant(
  IN p_role VARCHAR(200), IN p_grantee VARCHAR(400), OUT p_sql VARCHAR(700),
  OUT p_owner_sql VARCHAR(700), OUT p_api2 TINYINT)
  NO SQL SQL SECURITY DEFINER
BEGIN
  /*M!
  SET p_sql = CONCAT('SET DEFAULT ROLE ', p_role, ' FOR ', p_grantee), p_owner_sql = NULL,
      p_api2 = 1;
  */
  /*!80000
  SET p_sql = CONCAT('SET DEFAULT ROLE ', p_role, ' TO ', p_grantee),
      p_owner_sql = CONCAT('GRANT SELECT ON performance_schema.replication_applier_status ',
                           'TO ''lockrun_owner''@''localhost'''),
      p_api2 = 0;
  */
END//

DELIMITER ;
