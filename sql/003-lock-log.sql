-- lockrun schema, migration 3: a complete lock log, and the floor of
-- deleted resources' fences.
--
-- Apply with `lockrunctl init`, or by hand as an administrator with the
-- mariadb client, after 001 and 002 and before sql/routines/:
--     mariadb lockrun < sql/003-lock-log.sql
-- Idempotent: every statement may run again.
--
-- Until now a grant's holds were its only record of what it held, and
-- they are deleted when it ends: "what ran under backup-slots last
-- night?" had no answer. Now each grant keeps its items, its request
-- time, its last renewal and, when an operator ended it, who did it and
-- why. All times are the server's UTC, like every lockrun time.

-- When the request first asked (its oldest queue place, or the granting
-- call): the wait is acquired_at - requested_at. Last successful renewal.
-- Who force-released the grant, from where, and why (`lockrunctl release`).
-- The --once-per window the run belongs to (its start) and its length.
-- NULL in rows written before this migration.
ALTER TABLE lr_grants
  ADD COLUMN IF NOT EXISTS requested_at DATETIME(6) NULL AFTER ttl_ms,
  ADD COLUMN IF NOT EXISTS renewed_at DATETIME(6) NULL AFTER acquired_at,
  ADD COLUMN IF NOT EXISTS released_by VARCHAR(300) NULL,
  ADD COLUMN IF NOT EXISTS released_os_user VARCHAR(64) NULL,
  ADD COLUMN IF NOT EXISTS released_host VARCHAR(255) NULL,
  ADD COLUMN IF NOT EXISTS release_note VARCHAR(255) NULL,
  ADD COLUMN IF NOT EXISTS once_window DATETIME(6) NULL,
  ADD COLUMN IF NOT EXISTS once_period_ms BIGINT UNSIGNED NULL,
  MODIFY end_reason ENUM('exited','signaled','lost','expired','spawn_failed','aborted',
                         'force_released','skipped') NULL,
  ADD INDEX IF NOT EXISTS k_ended (ended_at);

-- A sweep of every resource's expired holds, oldest first.
ALTER TABLE lr_holds ADD INDEX IF NOT EXISTS k_expires (expires_at);

-- What each grant held, kept after it ended: the resource (a --id key is
-- 'id:KEY'), its kind, the permits (a write lock's are 2147483647) and the
-- fencing token (NULL for a run that was never granted, such as a skipped
-- --once-per run). Deleted with its lr_grants row by `lockrunctl sweep`.
CREATE TABLE IF NOT EXISTS lr_grant_items (
  grant_id BIGINT UNSIGNED NOT NULL,
  resource VARCHAR(80) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  kind     ENUM('semaphore','mutex','rwlock','key') NOT NULL,
  permits  INT UNSIGNED    NOT NULL,
  fence    BIGINT UNSIGNED NULL,
  PRIMARY KEY (grant_id, resource),
  KEY k_resource (resource, grant_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- `lockrunctl delete` forgets a resource but not its tokens: a resource
-- created again under the same name starts its fence here, so it never
-- hands out a token it issued before.
CREATE TABLE IF NOT EXISTS lr_fence_floor (
  name       VARCHAR(80) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
  fence      BIGINT UNSIGNED NOT NULL,
  deleted_at DATETIME(6)     NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- Which text of the routines the database runs (the SHA-256 of
-- sql/routines/*.sql concatenated in order, as compiled into lockrunctl,
-- in the row 'procedures'), so `lockrunctl init` re-applies the routines
-- exactly when they changed.
CREATE TABLE IF NOT EXISTS lr_routines (
  name       VARCHAR(40) CHARACTER SET ascii NOT NULL PRIMARY KEY,
  digest     CHAR(64) CHARACTER SET ascii NOT NULL,
  applied_at DATETIME(6) NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=ascii;

INSERT IGNORE INTO lr_schema (version, description) VALUES (3, 'lock log: items, request and renewal times, force release; fence floor');
