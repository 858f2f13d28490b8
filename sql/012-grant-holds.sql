-- lockrun schema, migration 12: a grant says how many hold rows it made.
--
-- Apply with `lockrunctl init`, or by hand as an administrator with the
-- mariadb client, after the migrations before it and before sql/routines/:
--     mariadb lockrun < sql/012-grant-holds.sql
-- Idempotent: every statement may run again.
--
-- lockrun_check runs in the caller's transaction, at the caller's level,
-- which a one-shot SET TRANSACTION ISOLATION LEVEL SERIALIZABLE can make
-- SERIALIZABLE without the session saying so. Every read is a locking read
-- there, and reading a grant's holds by grant_id to the end of the range
-- would lock the gap after them: for the newest grant, the gap where every
-- later grant's holds go. With the number of holds known, the read stops
-- at the grant's last hold row and locks no further (NULL: a grant from
-- before this migration, read to the end of the range as before).
ALTER TABLE lr_grants ADD COLUMN IF NOT EXISTS holds SMALLINT UNSIGNED NULL AFTER ttl_ms;

INSERT IGNORE INTO lr_schema (version, description) VALUES (12, 'number of holds per grant');
