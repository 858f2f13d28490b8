-- lockrun's stored routines, 90: who may call them. (How these files are
-- applied: 00-start.sql.)
--
-- After every other routine file: the grants below name the thirteen public
-- procedures, which must exist then, and lr_setup_access calls lr_enter,
-- lr_epoch and lr_leave (10-helpers.sql) while it runs.

DELIMITER //

-- Runs one statement of lr_setup_access's: MySQL has no EXECUTE
-- IMMEDIATE, and PREPARE takes only a user variable there (this step is
-- the administrator's, whose session it is; no API routine uses one).
CREATE OR REPLACE PROCEDURE lr_setup_run(IN p_sql VARCHAR(1000))
  SQL SECURITY INVOKER
BEGIN
  SET @lr_setup_sql = p_sql;
  PREPARE lr_setup_stmt FROM @lr_setup_sql;
  EXECUTE lr_setup_stmt;
  DEALLOCATE PREPARE lr_setup_stmt;
  SET @lr_setup_sql = NULL;
END//

-- The role <database>_api (lockrun_api for the database lockrun) may
-- execute the thirteen public procedures and nothing else; sql/grant.sql
-- gives it to the runtime account. Re-applied with every new text of the
-- routine files, so a new public procedure reaches every account that has
-- the role. Accounts that still have the grant of API 2 and earlier, EXECUTE
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
  DECLARE v_max BIGINT;
  DECLARE v_sql, v_owner_sql VARCHAR(700);
  DECLARE v_api2 TINYINT;
  DECLARE c CURSOR FOR
    SELECT p.GRANTEE FROM information_schema.SCHEMA_PRIVILEGES p
     WHERE p.TABLE_SCHEMA = DATABASE() AND p.GRANTEE <> '''lockrun_owner''@''localhost'''
       AND p.GRANTEE NOT LIKE '%@'''''
     GROUP BY p.GRANTEE HAVING COUNT(*) = 1 AND MAX(p.PRIVILEGE_TYPE) = 'EXECUTE' AND v_api2;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
  CALL lr_server_grant(v_role, '', v_sql, v_owner_sql, v_api2);
  IF v_owner_sql IS NOT NULL THEN
    CALL lr_setup_run(v_owner_sql);
  END IF;
  BEGIN
    -- MySQL cannot prepare CREATE ROLE (1295): `lockrunctl init` made
    -- the role before it applied these files.
    DECLARE CONTINUE HANDLER FOR 1295 BEGIN END;
    CALL lr_setup_run(CONCAT('CREATE ROLE IF NOT EXISTS ', v_role));
  END;
  CALL lr_setup_run(CONCAT('GRANT EXECUTE ON PROCEDURE ', v_db, '.lockrun_acquire TO ', v_role));
  CALL lr_setup_run(CONCAT('GRANT EXECUTE ON PROCEDURE ', v_db, '.lockrun_settle TO ', v_role));
  CALL lr_setup_run(CONCAT('GRANT EXECUTE ON PROCEDURE ', v_db, '.lockrun_poll TO ', v_role));
  CALL lr_setup_run(CONCAT('GRANT EXECUTE ON PROCEDURE ', v_db, '.lockrun_sleep TO ', v_role));
  CALL lr_setup_run(CONCAT('GRANT EXECUTE ON PROCEDURE ', v_db, '.lockrun_dequeue TO ', v_role));
  CALL lr_setup_run(CONCAT('GRANT EXECUTE ON PROCEDURE ', v_db, '.lockrun_host_queue TO ', v_role));
  CALL lr_setup_run(CONCAT('GRANT EXECUTE ON PROCEDURE ', v_db, '.lockrun_renew TO ', v_role));
  CALL lr_setup_run(CONCAT('GRANT EXECUTE ON PROCEDURE ', v_db, '.lockrun_release TO ', v_role));
  CALL lr_setup_run(CONCAT('GRANT EXECUTE ON PROCEDURE ', v_db, '.lockrun_check TO ', v_role));
  CALL lr_setup_run(CONCAT('GRANT EXECUTE ON PROCEDURE ', v_db, '.lockrun_status TO ', v_role));
  CALL lr_setup_run(CONCAT('GRANT EXECUTE ON PROCEDURE ', v_db, '.lockrun_list TO ', v_role));
  CALL lr_setup_run(CONCAT('GRANT EXECUTE ON PROCEDURE ', v_db, '.lockrun_history TO ', v_role));
  CALL lr_setup_run(CONCAT('GRANT EXECUTE ON PROCEDURE ', v_db, '.lockrun_grant TO ', v_role));
  OPEN c;
  l: LOOP
    FETCH c INTO v_grantee;
    IF v_done THEN LEAVE l; END IF;
    SET v_other = NULL;
    SELECT NULLIF(u.default_role, '') INTO v_other FROM mysql.user u
     WHERE CONCAT('''', u.User, '''@''', u.Host, '''') = v_grantee;
    SET v_done = 0;
    IF v_other IS NULL OR CONCAT('''', v_other, '''') = v_role THEN
      CALL lr_setup_run(CONCAT('GRANT ', v_role, ' TO ', v_grantee));
      CALL lr_server_grant(v_role, v_grantee, v_sql, v_owner_sql, v_api2);
      CALL lr_setup_run(v_sql);
      CALL lr_setup_run(CONCAT('REVOKE EXECUTE ON ', v_db, '.* FROM ', v_grantee));
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
  -- read-only server (a replica): it does not write them; and refused
  -- (1290, lr_enter's 16) on a writable one whose replication runs.
  IF NOT @@global.read_only THEN
    CALL lr_enter(NULL, 16, NULL, NULL, NULL, v_sw, v_lwt, v_galera);
    CALL lr_epoch(NULL, 0, v_since, v_until, v_floor, v_max);
    CALL lr_leave(v_sw, v_lwt);
  END IF;
  -- What init tells the administrator (the column `note`).
  SELECT j.note FROM JSON_TABLE(v_notes, '$[*]' COLUMNS(note VARCHAR(1000) PATH '$')) j;
END//

DELIMITER ;

CALL lr_setup_access();
DROP PROCEDURE lr_setup_access;
DROP PROCEDURE lr_setup_run;
