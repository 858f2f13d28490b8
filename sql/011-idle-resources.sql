-- lockrun schema, migration 11: idle resource rows are found by age.
--
-- Apply with `lockrunctl init`, or by hand as an administrator with the
-- mariadb client, after the migrations before it and before sql/routines/:
--     mariadb lockrun < sql/011-idle-resources.sql
-- Idempotent: every statement may run again.
--
-- An acquire creates the row of a mutex, read-write lock or key it names
-- for the first time, so any account with the API role could fill the
-- table without bound. An acquire that creates rows now also deletes up to
-- two rows of those kinds that nobody has granted, released or waited for
-- in ten minutes (lr_reclaim): this index finds the oldest ones without a
-- scan. Their tokens live on in lr_fence_floor, in one of 4096 rows per
-- hash of the name (named '~' and 3 hex digits: no resource name starts
-- with '~'), so a name made again starts above every token it had.
ALTER TABLE lr_resources ADD INDEX IF NOT EXISTS k_updated (updated_at);

INSERT IGNORE INTO lr_schema (version, description) VALUES (11, 'idle resource rows reclaimed');
