-- lockrun's stored routines, 80: run-once windows (lockrun --once-per,
-- migration 4). (How these files are applied: 00-start.sql.)
--
-- Internal: lr_once_items reads a request's once item, for
-- lockrun_acquire and lockrun_settle. What ends a window is lockrun_release
-- (50-renew-release.sql), which records a successful run in lr_once.

DELIMITER //

-- Rewrites a once item, 'once:KEY:PERIOD_MS[:OFFSET_MS]', into the key
-- item 'key:KEY' that lr_parse knows, and returns its window: KEY,
-- PERIOD_MS (1000-31622400000, i.e. 1 s to 366 days) and OFFSET_MS (0 to
-- PERIOD_MS - 1; default 0). At most one once item per request. Without
-- one, p_key is NULL and p_items unchanged. No table is read or written.
CREATE OR REPLACE DEFINER = 'lockrun_owner'@'localhost' PROCEDURE lr_once_items(
  INOUT p_items VARCHAR(4000), OUT p_key VARCHAR(64) CHARACTER SET ascii,
  OUT p_period BIGINT UNSIGNED, OUT p_offset BIGINT UNSIGNED)
  NO SQL SQL SECURITY DEFINER
proc: BEGIN
  DECLARE v_rest VARCHAR(4000) DEFAULT TRIM(COALESCE(p_items, ''));
  DECLARE v_out VARCHAR(4000) DEFAULT '';
  DECLARE v_item, v_per, v_off VARCHAR(4000);
  DECLARE v_colons INT;
  DECLARE v_msg VARCHAR(300);
  SET p_key = NULL, p_period = NULL, p_offset = NULL;
  IF v_rest REGEXP '[[:cntrl:]]' THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'lockrun: items must not contain control characters';
  END IF;
  IF LOCATE('once:', v_rest) = 0 THEN
    LEAVE proc;
  END IF;
  WHILE v_rest <> '' DO
    SET v_item = TRIM(SUBSTRING_INDEX(v_rest, ',', 1));
    SET v_rest = IF(LOCATE(',', v_rest) = 0, '', TRIM(SUBSTRING(v_rest, LOCATE(',', v_rest) + 1)));
    IF LEFT(v_item, 5) = 'once:' THEN
      SET v_colons = LENGTH(v_item) - LENGTH(REPLACE(v_item, ':', ''));
      SET v_per = IF(v_colons >= 2, SUBSTRING_INDEX(SUBSTRING_INDEX(v_item, ':', 3), ':', -1), '');
      SET v_off = IF(v_colons = 3, SUBSTRING_INDEX(v_item, ':', -1), '0');
      IF p_key IS NOT NULL THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'lockrun: give at most one once item';
      END IF;
      IF v_colons NOT IN (2, 3) OR v_per NOT REGEXP '^[0-9]{4,11}$' OR v_off NOT REGEXP '^[0-9]{1,11}$'
         OR v_per + 0 < 1000 OR v_per + 0 > 31622400000 OR v_off + 0 >= v_per + 0 THEN
        SET v_msg = CONCAT('lockrun: invalid once item ''', LEFT(v_item, 16),
                           ''': use once:KEY:PERIOD_MS[:OFFSET_MS]; PERIOD_MS 1000-31622400000',
                           ', above OFFSET_MS');
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_msg;
      END IF;
      SET p_key = LEFT(SUBSTRING_INDEX(SUBSTRING_INDEX(v_item, ':', 2), ':', -1), 64);
      SET p_period = v_per + 0, p_offset = v_off + 0;
      SET v_item = CONCAT('key:', SUBSTRING_INDEX(SUBSTRING_INDEX(v_item, ':', 2), ':', -1));
    END IF;
    SET v_out = CONCAT(v_out, IF(v_out = '', '', ','), v_item);
  END WHILE;
  SET p_items = v_out;
END//

DELIMITER ;
