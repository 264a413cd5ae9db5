-- Slots per queue (issue 11; docs/design.md, "Storage: slots, epochs and
-- TRUNCATE"): how many slot partitions a queue's tables have, 2 to 4.
--
-- Every statement on a slot-partitioned table sets up a scan of each of
-- its partitions, whatever it reads, so the hot paths cost about a quarter
-- less with two slots than with four (instructions per receive and ack);
-- fewer slots keep fewer epochs, so an epoch lasts longer when retention
-- holds the older ones (up to about retention x slots / (slots - 1) of
-- traffic kept, against retention x 4/3 with four).
--
-- * queue.slots: fixed when the queue is created; queues made before keep 4
--   (their options say so, so that alter_queue finds them unchanged);
-- * epoch.slot: the slot an epoch writes into (epoch % slots), written with
--   the epoch, so that the hot paths read it with the epoch
--   (sluice._epoch_now) instead of the queue's slots.
ALTER TABLE sluice.queue ADD COLUMN slots smallint NOT NULL DEFAULT 4 CHECK (slots BETWEEN 2 AND 4);
UPDATE sluice.queue SET options = options || '{"slots": 4}';
ALTER TABLE sluice.epoch ADD COLUMN slot smallint;
UPDATE sluice.epoch SET slot = epoch % 4;
ALTER TABLE sluice.epoch ALTER COLUMN slot SET NOT NULL;
