-- lockrun schema, migration 1.
--
-- Apply with `lockrunctl init`, or by hand with the mariadb client:
--     mariadb lockrun < sql/001-initial.sql
-- Every statement is idempotent, so re-applying a migration is harmless.
--
-- Design rules (see doc/design.md, "How it stays correct"):
--  * All times are written with the server's NOW(6); the client clock is never
--    stored or compared.
--  * A grant writes the row of every resource it takes (fence = fence + 1), so
--    contenders conflict on a written row: InnoDB serialises them and Galera
--    certification aborts all but one. The new fence value is the fencing
--    token; AUTO_INCREMENT ids are only row identities.
--  * Live leases are rows of lr_holds with a server-clock expiry. A renewal and
--    an acquirer that sweeps an expired hold both write the same row, so they
--    conflict instead of both succeeding.

CREATE TABLE IF NOT EXISTS lr_schema (
  version     INT UNSIGNED NOT NULL PRIMARY KEY,
  description VARCHAR(200) NOT NULL,
  applied_at  DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- One row per lockable thing. capacity counts permits: a mutex has 1, a
-- read-write lock has 2147483647 (a reader takes 1, a writer takes them all),
-- an idempotency key ("id:" prefix) has 1.
CREATE TABLE IF NOT EXISTS lr_resources (
  name       VARCHAR(80) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
  kind       ENUM('semaphore','mutex','rwlock','key') NOT NULL,
  capacity   INT UNSIGNED    NOT NULL,
  fence      BIGINT UNSIGNED NOT NULL DEFAULT 0,
  ticket     BIGINT UNSIGNED NOT NULL DEFAULT 0,
  created_at DATETIME(6)     NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  updated_at DATETIME(6)     NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- The lock log: one row per grant, from acquisition to its end.
CREATE TABLE IF NOT EXISTS lr_grants (
  id          BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  request_id  CHAR(32) CHARACTER SET ascii NOT NULL,
  idem_key    VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL,
  host        VARCHAR(255) NOT NULL,
  pid         INT UNSIGNED NOT NULL,
  os_user     VARCHAR(64)  NOT NULL,
  db_user     VARCHAR(300) NOT NULL,
  command     VARCHAR(1024) NOT NULL,
  ttl_ms      INT UNSIGNED NOT NULL,
  acquired_at DATETIME(6)  NOT NULL,
  ended_at    DATETIME(6)  NULL,
  end_reason  ENUM('exited','signaled','lost','expired','spawn_failed','aborted') NULL,
  exit_status INT NULL,
  term_signal INT NULL,
  UNIQUE KEY uq_request (request_id),
  KEY k_acquired (acquired_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- Live leases: one row per (resource, grant). Deleted on release or when an
-- acquirer sweeps it after expires_at.
CREATE TABLE IF NOT EXISTS lr_holds (
  resource   VARCHAR(80) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  grant_id   BIGINT UNSIGNED NOT NULL,
  permits    INT UNSIGNED    NOT NULL,
  fence      BIGINT UNSIGNED NOT NULL,
  expires_at DATETIME(6)     NOT NULL,
  PRIMARY KEY (resource, grant_id),
  KEY k_grant (grant_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- Queued requests, in arrival order per resource (ticket comes from the
-- resource row's counter, taken in the same transaction for all resources of
-- a request). Waiters renew their row like holders; a dead waiter's row
-- expires and is swept.
CREATE TABLE IF NOT EXISTS lr_waiters (
  resource   VARCHAR(80) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  ticket     BIGINT UNSIGNED NOT NULL,
  request_id CHAR(32) CHARACTER SET ascii NOT NULL,
  permits    INT UNSIGNED    NOT NULL,
  host       VARCHAR(255) NOT NULL,
  pid        INT UNSIGNED NOT NULL,
  os_user    VARCHAR(64)  NOT NULL,
  command    VARCHAR(1024) NOT NULL,
  since      DATETIME(6)  NOT NULL,
  expires_at DATETIME(6)  NOT NULL,
  PRIMARY KEY (resource, ticket),
  KEY k_request (request_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- Every capacity change: who, from where, when, old and new.
CREATE TABLE IF NOT EXISTS lr_capacity_audit (
  id           BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  resource     VARCHAR(80) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  old_capacity INT UNSIGNED NULL,
  new_capacity INT UNSIGNED NULL,
  db_user      VARCHAR(300) NOT NULL,
  os_user      VARCHAR(64)  NOT NULL,
  host         VARCHAR(255) NOT NULL,
  changed_at   DATETIME(6)  NOT NULL,
  KEY k_resource (resource, changed_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

INSERT IGNORE INTO lr_schema (version, description) VALUES (1, 'initial schema');
