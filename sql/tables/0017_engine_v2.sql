-- Engine v2 (issue 37; docs/design.md, "Engine v2"): a queue's engine
-- version, and the schema of v2's function templates.
--
-- * queue.engine: 1 for the engine every queue has had so far, 2 for a queue
--   whose storage is v2's (tables msg, cut, batch, lease, ack, ext, pending
--   in its own schema, with no table shared with other queues). Chosen at
--   creation (option engine); existing queues keep 1.
-- * sluice_tmpl2: v2's templates. A queue of engine 2 gets copies of them
--   (sluice._instantiate_v2); a template whose name ends in __s is copied
--   once per slot, __s in its name and body replaced by _<slot>, so that
--   its statements name one slot's partitions (leaves) and plan no others.
ALTER TABLE sluice.queue ADD COLUMN engine smallint NOT NULL DEFAULT 1 CHECK (engine IN (1, 2));
UPDATE sluice.queue SET options = options || '{"engine": 1}';
CREATE SCHEMA sluice_tmpl2;
REVOKE ALL ON SCHEMA sluice_tmpl2 FROM PUBLIC;
-- * queue_status.held_by_pid, held_for: the backend whose open transaction
--   holds the queue's numbering (a receive that numbered new messages and has
--   not committed: they reach no group until it does), and for how long.
ALTER TYPE sluice.queue_status ADD ATTRIBUTE held_by_pid int;
ALTER TYPE sluice.queue_status ADD ATTRIBUTE held_for interval;
