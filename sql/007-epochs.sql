-- lockrun schema, migration 7: fail-over epochs, and the longest lease.
--
-- Apply with `lockrunctl init`, or by hand as an administrator with the
-- mariadb client, after 001-006 and before sql/routines/:
--     mariadb lockrun < sql/007-epochs.sql
-- Idempotent: every statement may run again.
--
-- An asynchronous replica promoted after its primary died may lack the
-- primary's last commits: grants, renewals, releases. lockrun must then
-- neither grant a lock the old primary may still have given out, nor hand
-- out a fencing token the old primary may have issued already. So the
-- tables remember which server writes them (lr_epoch). A routine that runs
-- on another one (a promoted replica, a dump loaded elsewhere) starts a
-- new epoch: no grant and no hand-off until every lease the old primary
-- may have granted or renewed has run out by this server's clock, which
-- is at most max_ttl_ms (every grant and renewal obeys it) plus the sweep
-- grace; and tokens from then on start above the new epoch's floor, this
-- server's clock in microseconds, which no token of an earlier epoch can
-- have reached (sql/routines/10-helpers.sql, lr_epoch, says why).

-- Per-database settings, written by `lockrunctl max-ttl`. max_ttl_ms: the
-- longest lease a grant or renewal may ask for, and so the quarantine of
-- a fail-over. 5 minutes, or more if a live grant has a longer lease now.
CREATE TABLE IF NOT EXISTS lr_settings (
  name       VARCHAR(40) CHARACTER SET ascii NOT NULL PRIMARY KEY,
  value      BIGINT NOT NULL,
  changed_at DATETIME(6) NOT NULL,
  changed_by VARCHAR(300) NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
INSERT IGNORE INTO lr_settings (name, value, changed_at, changed_by)
SELECT 'max_ttl_ms', GREATEST(300000, COALESCE(MAX(ttl_ms), 0)), UTC_TIMESTAMP(6), CURRENT_USER()
  FROM lr_grants WHERE ended_at IS NULL;

-- The current epoch, one row: which server writes the tables (empty until
-- a routine first runs), since when, until when it grants nothing, and
-- the floor of its tokens.
CREATE TABLE IF NOT EXISTS lr_epoch (
  id               TINYINT UNSIGNED NOT NULL PRIMARY KEY,
  epoch            INT UNSIGNED    NOT NULL,
  server           VARCHAR(255) CHARACTER SET ascii NOT NULL,
  started_at       DATETIME(6)     NOT NULL,
  quarantine_until DATETIME(6)     NOT NULL,
  fence_floor      BIGINT UNSIGNED NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
INSERT IGNORE INTO lr_epoch (id, epoch, server, started_at, quarantine_until, fence_floor)
VALUES (1, 1, '', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), 0);

-- Every epoch, for the lock log: when and where it started, the server
-- before it, the quarantine, and who ended that early, if anyone.
CREATE TABLE IF NOT EXISTS lr_epochs (
  epoch            INT UNSIGNED    NOT NULL PRIMARY KEY,
  server           VARCHAR(255) CHARACTER SET ascii NOT NULL,
  previous         VARCHAR(255) CHARACTER SET ascii NULL,
  started_at       DATETIME(6)     NOT NULL,
  quarantine_until DATETIME(6)     NOT NULL,
  fence_floor      BIGINT UNSIGNED NOT NULL,
  ended_by         VARCHAR(300) NULL,
  ended_at         DATETIME(6)  NULL,
  end_note         VARCHAR(255) NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

INSERT IGNORE INTO lr_schema (version, description) VALUES (7, 'fail-over epochs; max_ttl_ms');
