-- Queues made by pgmq.create before this migration kept their completed
-- messages for sluice's default retention (an hour), and the side tables'
-- rotation waited for them: their storage grew with an hour of traffic.
-- Nothing reads a completed message of a pgmq queue again (a deleted one is
-- gone in PGMQ, an archived one is copied into the archive), so give them the
-- retention pgmq.create now gives (0): storage is reclaimed at the next
-- rotations. Only queues whose retention is one hour, the default (one set
-- to an hour by hand cannot be told apart); any other retention is kept.
SELECT sluice.alter_queue(m.sluice_queue, '{"retention": "0 seconds"}')
FROM pgmq.meta m
JOIN sluice.queue q ON q.name = m.sluice_queue
WHERE q.retention = interval '1 hour'
ORDER BY m.sluice_queue;
