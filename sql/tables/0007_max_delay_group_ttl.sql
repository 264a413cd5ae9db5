-- Bounded delays, expiring groups and an exact status (issue 15, items 4, 9
-- and 7).
--
-- * queue.max_delay: the longest delay send and send_batch accept, and the
--   longest explicit retry delay of nack (option max_delay, 365 days by
--   default: beyond it they raise SL006).
-- * consumer_group.ttl, used_at: a group created with a ttl is dropped by
--   maintenance once no receive has used it for that long (sluice tail
--   --no-ack makes its temporary group so, and it expires even after a
--   kill -9). used_at is refreshed by receive at most every ttl/10.
ALTER TABLE sluice.queue ADD COLUMN max_delay interval NOT NULL DEFAULT '365 days';
UPDATE sluice.queue SET options = options || '{"max_delay": "365 days"}' WHERE NOT options ? 'max_delay';

ALTER TABLE sluice.consumer_group ADD COLUMN ttl interval, ADD COLUMN used_at timestamptz;
CREATE INDEX consumer_group_ttl_idx ON sluice.consumer_group (queue_id) WHERE ttl IS NOT NULL;

-- create_group gains ttl: drop the old signature so that the new one does
-- not become an ambiguous overload.
DROP FUNCTION IF EXISTS sluice.create_group(text, text, text);

-- status gains waiting: keyed messages that wait for an earlier message of
-- their key (they were counted as ready). e_window returns their key hash:
-- drop its old template (the queues' copies are dropped by _instantiate).
ALTER TYPE sluice.queue_status ADD ATTRIBUTE waiting bigint;
DROP FUNCTION IF EXISTS sluice_tmpl.e_window(int, smallint, bigint, bigint);
