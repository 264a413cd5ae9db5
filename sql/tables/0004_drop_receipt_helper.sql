-- sluice._receipt formatted receipts until receive built them inline; drop it
-- so that an upgraded database has the same functions as a fresh install.
DROP FUNCTION IF EXISTS sluice._receipt(int, bigint, int, bigint);
