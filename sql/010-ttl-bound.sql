-- lockrun schema, migration 10: a raised max_ttl_ms reaches replicas
-- before any lease uses it.
--
-- Apply with `lockrunctl init`, or by hand as an administrator with the
-- mariadb client, after 001-009 and before sql/routines/:
--     mariadb lockrun < sql/010-ttl-bound.sql
-- Idempotent: every statement may run again.
--
-- A fail-over's quarantine is the new primary's max_ttl_ms (lr_epoch):
-- the longest lease the old primary may have granted or renewed without
-- the new one hearing of it. A replica that missed a raise of max_ttl_ms
-- would quarantine too briefly for the leases granted under the raise. So
-- on a server with a binary log (it may have asynchronous replicas) a
-- raise is not for grants at once: until grant_until, grants and renewals
-- obey the smaller grant_ms, while max_ttl_ms (value) is already the
-- larger, which any replica that has the raise quarantines for. A replica
-- that lacks the raise lacks every lease it allowed, as long as it was no
-- further behind than the delay (`lockrunctl max-ttl` says it; see
-- doc/production.md). A lowering needs no delay: `lockrunctl max-ttl`
-- refuses it while any hold outlasts the new value, under the row lock
-- every grant and renewal takes in shared mode.
ALTER TABLE lr_settings
  ADD COLUMN IF NOT EXISTS grant_ms BIGINT NULL,
  ADD COLUMN IF NOT EXISTS grant_until DATETIME(6) NULL;

INSERT IGNORE INTO lr_schema (version, description) VALUES (10, 'raised max_ttl_ms delayed for grants');
