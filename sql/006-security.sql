-- lockrun schema, migration 6: the SQL API as the only way in.
--
-- Apply with `lockrunctl init`, or by hand as an administrator with the
-- mariadb client, after 001-005 and before sql/routines/:
--     mariadb lockrun < sql/006-security.sql
-- Idempotent: every statement may run again.
--
-- Only schema here; the role that may call the public routines, and the
-- move of accounts off the old database-wide EXECUTE grant, come with the
-- routines (sql/routines/90-access.sql), because a grant names a
-- routine that must exist.

-- When the request that a release handed a grant to claimed it
-- (lockrun_acquire with that request and the lease it queued with). A
-- handed grant is claimed once; until then only its own request may
-- claim it or give it back (lockrun_dequeue).
ALTER TABLE lr_grants ADD COLUMN IF NOT EXISTS claimed_at DATETIME(6) NULL AFTER queued_as;

-- lockrun_check on a Galera node writes the hold rows it vouches for
-- (checks + 1), so they are in the application's write set: certification
-- then orders the application's COMMIT and any release or sweep of the
-- grant on another node, and the later of the two fails. A share lock is
-- local to one node and would not.
ALTER TABLE lr_holds ADD COLUMN IF NOT EXISTS checks INT UNSIGNED NOT NULL DEFAULT 0;

INSERT IGNORE INTO lr_schema (version, description) VALUES (6, 'security: claimed hand-offs, written checks');
