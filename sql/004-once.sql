-- lockrun schema, migration 4: run-once windows (lockrun --once-per).
--
-- Apply with `lockrunctl init`, or by hand with the mariadb client:
--     mariadb lockrun < sql/004-once.sql
-- Idempotent.
--
-- lr_once: the successful runs of once-per keys, what lockrun_acquire
-- looks up to answer 'done'. lockrun_release writes a row, in its own
-- transaction, when a grant that has a window (lr_grants.once_window)
-- ends with reason 'exited' and exit status 0; nothing else does, so a
-- failed, killed, lost or expired run leaves its window open. A window is
-- done when a row of its key was GRANTED inside it (granted_at in
-- [window start, window start + period)): the run counts for the window
-- it started in, however long it took, and keys used with two different
-- periods still never run twice inside either window.
--
-- Rows are only a decision index (the history is lr_grants, whose
-- once_window and once_period_ms say which window each run was for).
-- A row may be deleted once its window ended more than the longer of one
-- day and three periods ago (window_end < now - GREATEST(1 day, 3 *
-- period)): lockrun_release trims up to 10 such rows of the key it
-- writes, and `lockrunctl sweep` removes the rest.
CREATE TABLE IF NOT EXISTS lr_once (
  idem_key     VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  granted_at   DATETIME(6)     NOT NULL,  -- the run's lr_grants.acquired_at
  grant_id     BIGINT UNSIGNED NOT NULL,
  window_start DATETIME(6)     NOT NULL,  -- lr_grants.once_window
  period_ms    BIGINT UNSIGNED NOT NULL,
  window_end   DATETIME(6)     NOT NULL,  -- window_start + period_ms
  done_at      DATETIME(6)     NOT NULL,  -- the release that recorded it
  PRIMARY KEY (idem_key, granted_at, grant_id),
  KEY k_window_end (window_end)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

INSERT IGNORE INTO lr_schema (version, description) VALUES (4, 'run-once windows');
