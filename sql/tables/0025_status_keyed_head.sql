-- e2_status_keyed takes the lane's head as status counts it (the positions
-- after the cursor it lists stop there: those numbered by a cut committed
-- after status read its cut are counted as not numbered yet, once). A new
-- parameter makes a new function: the template of the old signature goes
-- (each queue's copy of it is dropped by the refresh, as a copy whose
-- template is gone).
DROP FUNCTION IF EXISTS sluice_tmpl2.e2_status_keyed(int, smallint, bigint, sluice.e2_held[], sluice.e2_wait[], timestamptz);
