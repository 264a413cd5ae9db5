-- sluice._mark_prioritized returned void; it returns whether it set the
-- flag, and no longer waits for the queue's row. A function's result type
-- is not changed by CREATE OR REPLACE: the old one goes first (the function
-- files make the new one).
DROP FUNCTION IF EXISTS sluice._mark_prioritized(int);
