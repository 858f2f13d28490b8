-- lockrun schema, migration 8: pausing a resource.
--
-- Apply with `lockrunctl init`, or by hand as an administrator with the
-- mariadb client, after 001-007 and before sql/routines/:
--     mariadb lockrun < sql/008-pause.sql
-- Idempotent: every statement may run again.
--
-- `lockrunctl pause NAME` stops new grants of a resource, hand-offs
-- included, while its holders run on and its waiters wait, until
-- `lockrunctl resume NAME`: for maintenance, or to drain a semaphore.
-- The procedures read paused_at under the resource row's lock, which
-- pause and resume take too. Who paused it, from where and why is kept on
-- the row while it lasts, and every pause and resume in
-- lr_capacity_audit (action 'pause' or 'resume', with the reason in
-- note; a capacity change is action 'capacity').
ALTER TABLE lr_resources
  ADD COLUMN IF NOT EXISTS paused_at  DATETIME(6)  NULL,
  ADD COLUMN IF NOT EXISTS paused_by  VARCHAR(400) NULL,
  ADD COLUMN IF NOT EXISTS pause_note VARCHAR(255) NULL;

ALTER TABLE lr_capacity_audit
  ADD COLUMN IF NOT EXISTS action VARCHAR(12) CHARACTER SET ascii NOT NULL DEFAULT 'capacity',
  ADD COLUMN IF NOT EXISTS note   VARCHAR(255) NULL;

INSERT IGNORE INTO lr_schema (version, description) VALUES (8, 'pause and resume');
