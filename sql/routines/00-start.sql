-- lockrun's stored routines: the lock protocol and the SQL API.
--
-- They live in the files of sql/routines/ (installed as
-- share/lockrun/sql/routines/), one per concern, numbered in the order
-- they are applied:
--   00-start.sql          this file: routines of earlier versions
--                         dropped, and the start of lr_fresh's minute
--   05-server.sql         lr_server_*: the seam between MariaDB and
--                         MySQL, all that the servers spell differently
--   10-helpers.sql        lr_enter, lr_leave, lr_lock_name, lr_epoch,
--                         lr_parse: what every public procedure uses
--   20-sweep.sql          lr_sweep, lr_reclaim, lr_recount, lr_fresh,
--                         lr_unhold: the sweep, idle rows reclaimed, and
--                         the `used` count
--   30-acquire.sql        lockrun_acquire, lr_claim, lr_acquire
--   40-queue.sql          lr_wait_lock, lr_heartbeat, lockrun_poll,
--                         lockrun_sleep, lockrun_dequeue,
--                         lockrun_host_queue: waiting
--   50-renew-release.sql  lockrun_renew, lr_hand_off, lr_release,
--                         lockrun_release
--   60-settle.sql         lockrun_settle
--   70-check.sql          lockrun_check
--   80-once.sql           lr_once_items: once-per windows
--   90-access.sql         the role that may execute the public procedures
--                         (lr_setup_access, run once and dropped)
--   95-recount.sql        every resource's `used` made exact once
-- The servers resolve a CALL when it runs, so the routines may come in any
-- order; what runs while the files are applied fixes it: this file
-- first, the access step once every routine it grants or calls exists,
-- the recount last.
--
-- Not numbered migrations: `lockrunctl init` applies these files,
-- concatenated in this order, after the numbered ones whenever their text
-- differs from what the database last got (the SHA-256 of the
-- concatenation, kept in lr_routines as 'procedures'), so a fix to a
-- routine reaches every database without a schema version of its own.
-- Apply by hand as an administrator, after every sql/0*.sql, in the
-- lockrun database, all of them in order:
--     cat /usr/share/lockrun/sql/routines/*.sql | mariadb lockrun
-- (each file has its own DELIMITER lines, so they may also be given to
-- the client one by one, in order). Idempotent: every routine is CREATE
-- OR REPLACE, which keeps the grants on it. Needs the definer account and
-- the tables of the numbered migrations (002 creates
-- 'lockrun_owner'@'localhost'). MySQL knows no CREATE OR REPLACE
-- PROCEDURE, nor ADD COLUMN IF NOT EXISTS in the migrations: there, only
-- `lockrunctl init` applies the files, spelled for MySQL (05-server.sql).
--
-- Why procedures: each lock operation is one CALL, one round trip, and the
-- row locks of a grant are held for microseconds inside the server instead
-- of for a dozen client round trips. And they are the SQL API: any
-- application takes, renews, checks and releases the same locks as lockrun,
-- with an account that may only EXECUTE them (SQL SECURITY DEFINER), so no
-- client can write a row of its own into lockrun's tables.
--
-- The security boundary (API 3). The runtime account holds one role,
-- <database>_api, which may execute exactly the nine lockrun_* procedures
-- (the grants of 90-access.sql); the lr_* helpers are for them
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
-- The sweep grace (5 s, src/lease.h LR_SWEEP_GRACE_MS) is spelled out in the
-- routines as INTERVAL 5000000 MICROSECOND. Queue places live 10 s unless
-- renewed.

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
-- them. `lockrunctl init` drops the triggers after these files; by hand, an
-- account with SUPER (needed on a server with binary logging) runs
--     DROP TRIGGER lr_holds_ai; DROP TRIGGER lr_holds_ad; DROP TRIGGER lr_holds_bu;
--     DELETE FROM lr_routines WHERE name = 'triggers';
INSERT INTO lr_routines (name, digest, applied_at) VALUES ('procedures', REPEAT('0', 64), UTC_TIMESTAMP(6))
  ON DUPLICATE KEY UPDATE applied_at = UTC_TIMESTAMP(6);
INSERT IGNORE INTO lr_routines (name, digest, applied_at)
SELECT 'triggers', REPEAT('0', 64), UTC_TIMESTAMP(6) FROM information_schema.TRIGGERS
 WHERE TRIGGER_SCHEMA = DATABASE() AND EVENT_OBJECT_TABLE = 'lr_holds' LIMIT 1;
