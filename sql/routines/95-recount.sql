-- lockrun's stored routines, 95: the last statements, once every routine
-- is in place. (How these files are applied: 00-start.sql.)
--
-- No triggers: creating one needs SUPER on a server with binary logging
-- (managed databases give none), and rows applied by Galera do not fire
-- them. The routines keep `used`; every count is made exact once.
UPDATE lr_resources r
   SET r.used = (SELECT COALESCE(SUM(h.permits), 0) FROM lr_holds h WHERE h.resource = r.name)
 WHERE r.used <> (SELECT COALESCE(SUM(h.permits), 0) FROM lr_holds h WHERE h.resource = r.name);

-- Routines of earlier versions that no longer exist, dropped last: until
-- the files before replaced them, the public procedures of an earlier
-- version called some of these, and a holder renewing through them while
-- init runs must not meet 1305.
DROP PROCEDURE IF EXISTS lr_req_open;
DROP PROCEDURE IF EXISTS lr_no_transaction;
DROP PROCEDURE IF EXISTS lr_check_id;
DROP PROCEDURE IF EXISTS lr_check_ttl;
DROP PROCEDURE IF EXISTS lr_server_me;
DROP FUNCTION IF EXISTS lr_bell;
DROP FUNCTION IF EXISTS lr_galera;
DROP FUNCTION IF EXISTS lr_ready;
DROP FUNCTION IF EXISTS lr_node;
DROP FUNCTION IF EXISTS lr_ahead;

