-- sluice._receive_commit returned void; it returns whether it made the
-- commit asynchronous now, so that its callers call it in an expression
-- (no executor start, as a PERFORM has). A function's result type is not
-- changed by CREATE OR REPLACE: the old one goes first (the function files
-- make the new one; a PERFORM compiled before still finds it by name).
DROP FUNCTION IF EXISTS sluice._receive_commit();
