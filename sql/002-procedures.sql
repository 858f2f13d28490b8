-- lockrun schema, migration 2: what the stored procedures need of the
-- schema. (It once created the procedures too, whence its name, which the
-- schema history keeps; they live in sql/routines/ now.)
--
-- Apply with `lockrunctl init`, or by hand as an administrator with the
-- mariadb client, in the lockrun database:
--     mariadb lockrun < sql/002-procedures.sql
-- Idempotent: every statement may run again (CREATE OR REPLACE, IF NOT
-- EXISTS). Needs MariaDB 10.4 or later (ACCOUNT LOCK; the routines need 10.6); tested on 10.11 and
-- on Galera 4 with 10.11. Not tested on MySQL (its DDL differs: no ADD
-- COLUMN IF NOT EXISTS, no CREATE OR REPLACE PROCEDURE).
--
-- What it holds: the definer account of the stored routines, the `used`
-- counter, the indexes of bounded sweeps and the wake-up
-- columns. The routines themselves live in sql/routines/, which
-- `lockrunctl init` applies after the numbered migrations.

-- ---------------------------------------------------------------- definer
-- The routines' owner holds the table rights the runtime account no longer
-- has. Nobody can log in as it (ACCOUNT LOCK), and it has no global
-- privilege: the KILL QUERY of the wake-up needs none, because the only
-- threads it may kill run routines of this same definer.
CREATE USER IF NOT EXISTS 'lockrun_owner'@'localhost' ACCOUNT LOCK;
-- This database, whatever its name (GRANT takes no expression).
SET @lr_grant = CONCAT('GRANT SELECT, INSERT, UPDATE, DELETE, EXECUTE ON `', REPLACE(DATABASE(), '`', '``'),
                       '`.* TO ''lockrun_owner''@''localhost''');
PREPARE lr_stmt FROM @lr_grant;
EXECUTE lr_stmt;
DEALLOCATE PREPARE lr_stmt;

-- ---------------------------------------------------------------- schema
-- used: the permits of the resource's lr_holds rows, kept by the
-- procedures, so an acquire reads one row instead of summing every hold.
ALTER TABLE lr_resources ADD COLUMN IF NOT EXISTS used BIGINT UNSIGNED NOT NULL DEFAULT 0 AFTER capacity;
-- Bounded sweeps: the oldest expiries of one resource first.
ALTER TABLE lr_holds ADD INDEX IF NOT EXISTS k_expiry (resource, expires_at);
ALTER TABLE lr_waiters ADD INDEX IF NOT EXISTS k_expiry (resource, expires_at);
-- The head waiter's sleeping connection and the server it is on (a
-- connection id is unique per server start only).
ALTER TABLE lr_waiters ADD COLUMN IF NOT EXISTS wake_conn BIGINT UNSIGNED NULL,
                       ADD COLUMN IF NOT EXISTS wake_node VARCHAR(120) CHARACTER SET ascii NULL;

-- The one-time fill; re-running it is harmless. (Until lockrun 0.2 this
-- migration also created triggers on lr_holds that kept `used`; the
-- routines keep it now, and `lockrunctl init` drops the triggers where
-- they exist (sql/routines/00-start.sql says how by hand): creating a
-- trigger needs SUPER on a server with binary logging.)
UPDATE lr_resources r
   SET r.used = (SELECT COALESCE(SUM(h.permits), 0) FROM lr_holds h WHERE h.resource = r.name);

INSERT IGNORE INTO lr_schema (version, description) VALUES (2, 'stored procedures: the SQL API');
