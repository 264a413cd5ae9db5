-- Upgrading a queue of engine 1 to engine 2 in place (issue 37;
-- sluice.upgrade_queue, docs/operations.md, "Upgrading a queue to engine 2").
--
-- * queue.predecessor: on a queue of engine 2 made by upgrade_queue, the id
--   of the engine 1 queue it replaces (renamed out of the way) until every
--   group has drained it; NULL otherwise.
-- * consumer_group.drained: on the groups of such a predecessor, set once
--   the group has nothing left there (nothing ready, in flight or delayed).
ALTER TABLE sluice.queue ADD COLUMN predecessor int REFERENCES sluice.queue (id);
ALTER TABLE sluice.consumer_group ADD COLUMN drained boolean NOT NULL DEFAULT false;
