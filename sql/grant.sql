-- The least privilege a lockrun account needs: plain DML on lockrun's tables.
-- (Named locks, GET_LOCK/RELEASE_LOCK, need no privilege.)
-- `lockrunctl init` needs DDL besides (CREATE, ALTER, INDEX on the database):
-- run it once as an administrator, or apply sql/0*.sql by hand.
--
--     CREATE USER 'lockrun'@'%' IDENTIFIED BY '...';
GRANT SELECT, INSERT, UPDATE, DELETE ON lockrun.* TO 'lockrun'@'%';
