-- lockrun schema, migration 5: the release hands the lock to the next
-- waiter itself.
--
-- Apply with `lockrunctl init`, or by hand with the mariadb client:
--     mariadb lockrun < sql/005-handoff.sql
-- Idempotent.
--
-- A queued request of one item (no once item) leaves with its queue place
-- what a grant needs: its lease id, ttl and database user. The release
-- that frees room then grants the head of the queue inside its own
-- transaction (lockrun_release, lr_hand_off), so the woken waiter's next
-- acquire only claims the grant. lr_grants.queued_as names the request a
-- grant was handed to; lockrun_dequeue gives such a grant back when its
-- request leaves instead, and lockrun_acquire and lockrun_settle renew its
-- holds when they return it. Places written before this migration have no
-- lease: they are woken and acquire as before.
ALTER TABLE lr_waiters
  ADD COLUMN IF NOT EXISTS lease   CHAR(32) CHARACTER SET ascii NULL,
  ADD COLUMN IF NOT EXISTS ttl_ms  INT UNSIGNED NULL,
  ADD COLUMN IF NOT EXISTS db_user VARCHAR(300) NULL;
ALTER TABLE lr_grants
  ADD COLUMN IF NOT EXISTS queued_as CHAR(32) CHARACTER SET ascii NULL,
  ADD INDEX IF NOT EXISTS k_queued_as (queued_as);

INSERT IGNORE INTO lr_schema (version, description) VALUES (5, 'hand-off by the release');
