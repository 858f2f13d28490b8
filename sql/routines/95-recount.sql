-- lockrun's stored routines, 95: the last statement, once every routine
-- is in place. (How these files are applied: 00-start.sql.)
--
-- No triggers: creating one needs SUPER on a server with binary logging
-- (managed databases give none), and rows applied by Galera do not fire
-- them. The routines keep `used`; every count is made exact once.
UPDATE lr_resources r
   SET r.used = (SELECT COALESCE(SUM(h.permits), 0) FROM lr_holds h WHERE h.resource = r.name)
 WHERE r.used <> (SELECT COALESCE(SUM(h.permits), 0) FROM lr_holds h WHERE h.resource = r.name);
