-- Group: pgmq compatibility, install hook
--
-- Loaded last by every install: (re)creates each queue's copies of the
-- template functions just loaded (pgmq._instantiate), so that an upgrade
-- reaches every queue, including those created by an older sluice.
SELECT pgmq._instantiate(m.sluice_queue) FROM pgmq.meta m ORDER BY m.sluice_queue;
-- Insert notification markers (_mark_notify): made for the queues that
-- notify, among them those from before the markers.
SELECT pgmq._mark_notify(m.sluice_queue) FROM pgmq.meta m ORDER BY m.sluice_queue;
