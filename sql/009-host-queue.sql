-- lockrun schema, migration 9: the host queues in the counts.
--
-- Apply with `lockrunctl init`, or by hand as an administrator with the
-- mariadb client, after 001-008 and before sql/routines/:
--     mariadb lockrun < sql/009-host-queue.sql
-- Idempotent: every statement may run again.
--
-- Runs of one host that ask for the same locks wait in a host queue
-- (lockrun(1), HOST QUEUE), holding no connection; only the first of them
-- stands in the database's queue. host_behind is how many wait behind
-- that one, as it tells (lockrun_host_queue), so that `lockrunctl status`
-- and its metrics count every waiting run. A figure for operators only:
-- no decision reads it.
ALTER TABLE lr_waiters
  ADD COLUMN IF NOT EXISTS host_behind INT UNSIGNED NOT NULL DEFAULT 0;

INSERT IGNORE INTO lr_schema (version, description) VALUES (9, 'host queues in the counts');
