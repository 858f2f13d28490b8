-- lockrun schema, migration 2: the lock protocol as stored procedures.
--
-- Apply with `lockrunctl init`, or by hand as an administrator with the
-- mariadb client, in the lockrun database:
--     mariadb lockrun < sql/002-procedures.sql
-- Idempotent: every statement may run again (CREATE OR REPLACE, IF NOT
-- EXISTS). Needs MariaDB 10.4 or later (ACCOUNT LOCK); tested on 10.11 and
-- on Galera 4 with 10.11. Not tested on MySQL (its DDL differs: no ADD
-- COLUMN IF NOT EXISTS, no CREATE OR REPLACE PROCEDURE).
--
-- What it holds: the definer account of the stored routines, the `used`
-- counter and its triggers, the indexes of bounded sweeps and the wake-up
-- columns. The routines themselves live in sql/procedures.sql, which
-- `lockrunctl init` applies after the numbered migrations.

-- ---------------------------------------------------------------- definer
-- The routines' owner holds the table rights the runtime account no longer
-- has. Nobody can log in as it (ACCOUNT LOCK), and it has no global
-- privilege: the KILL QUERY of the wake-up needs none, because the only
-- threads it may kill run routines of this same definer.
CREATE USER IF NOT EXISTS 'lockrun_owner'@'localhost' ACCOUNT LOCK;
-- This database, whatever its name (GRANT takes no expression).
SET @lr_grant = CONCAT('GRANT SELECT, INSERT, UPDATE, DELETE, CREATE TEMPORARY TABLES, ',
                       'EXECUTE, TRIGGER ON `', REPLACE(DATABASE(), '`', '``'),
                       '`.* TO ''lockrun_owner''@''localhost''');
PREPARE lr_stmt FROM @lr_grant;
EXECUTE lr_stmt;
DEALLOCATE PREPARE lr_stmt;

-- ---------------------------------------------------------------- schema
-- used: the permits of the resource's lr_holds rows, kept by the triggers
-- below, so an acquire reads one row instead of summing every hold.
ALTER TABLE lr_resources ADD COLUMN IF NOT EXISTS used BIGINT UNSIGNED NOT NULL DEFAULT 0 AFTER capacity;
-- Bounded sweeps: the oldest expiries of one resource first.
ALTER TABLE lr_holds ADD INDEX IF NOT EXISTS k_expiry (resource, expires_at);
ALTER TABLE lr_waiters ADD INDEX IF NOT EXISTS k_expiry (resource, expires_at);
-- The head waiter's sleeping connection and the server it is on (a
-- connection id is unique per server start only).
ALTER TABLE lr_waiters ADD COLUMN IF NOT EXISTS wake_conn BIGINT UNSIGNED NULL,
                       ADD COLUMN IF NOT EXISTS wake_node VARCHAR(120) CHARACTER SET ascii NULL;

-- Triggers rather than upkeep in each procedure: `used` stays exact for
-- every writer, including an operator's DELETE FROM lr_holds. Every insert
-- of a hold happens under its resource row's lock anyway; a delete takes
-- it here. Rows applied by Galera's replication do not fire triggers: the
-- row events carry the lr_resources change itself.
CREATE OR REPLACE DEFINER = 'lockrun_owner'@'localhost' TRIGGER lr_holds_ai
  AFTER INSERT ON lr_holds FOR EACH ROW
  UPDATE lr_resources SET used = used + NEW.permits WHERE name = NEW.resource;
CREATE OR REPLACE DEFINER = 'lockrun_owner'@'localhost' TRIGGER lr_holds_ad
  AFTER DELETE ON lr_holds FOR EACH ROW
  UPDATE lr_resources SET used = used - OLD.permits WHERE name = OLD.resource;
DELIMITER //
-- A hold's permits and resource never change; refuse it rather than drift.
CREATE OR REPLACE DEFINER = 'lockrun_owner'@'localhost' TRIGGER lr_holds_bu
  BEFORE UPDATE ON lr_holds FOR EACH ROW
BEGIN
  IF NEW.permits <> OLD.permits OR NEW.resource <> OLD.resource THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'lr_holds: permits and resource never change';
  END IF;
END//
DELIMITER ;

-- The one-time fill, after the triggers exist, so no hold written or
-- deleted meanwhile is missed; re-running it is harmless.
UPDATE lr_resources r
   SET r.used = (SELECT COALESCE(SUM(h.permits), 0) FROM lr_holds h WHERE h.resource = r.name);

INSERT IGNORE INTO lr_schema (version, description) VALUES (2, 'stored procedures: the SQL API');
