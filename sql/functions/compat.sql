-- Group: release 0.1.0's calls caught by an upgrade
--
-- An upgrade (sluice migrate) runs in one transaction behind a fence
-- (migrate.Apply): a call of the API that starts meanwhile has compiled its
-- function as it was before and waits, at its first read of sluice.queue,
-- until the upgrade commits; it then goes on with the old function's code
-- on the new schema. The old code calls by name what its release had: the
-- functions below are what release 0.1.0's receive, ack, nack, extend,
-- send, send_batch and status call that the current engine does not have
-- as they were. Each forwards to the current function; no current code
-- calls them. 0.1.0 called its queue's copies with search_path pg_catalog, pg_temp (the
-- current API sets the queue's first): e_dedup_lookup and e_dedup_record
-- set the queue's path, and so do e_ack, e_nack and e_extend, which kept
-- their arguments, when they find another (engine_ack.sql). 0.1.0's
-- callers' SET search_path clause restores it when they return.
--
-- Kept for one release (tested by TestUpgradeFrom010CatchesOldCalls):
-- the release after the next drops them, and upgrading from 0.1.0 then goes
-- through a release that has them (docs/operations.md, "Upgrading a
-- running deployment").

-- e_receive, 0.1.0's arguments: the receive of release 0.1.0 (no p_ack),
-- which called its queue's copy with search_path pg_catalog, pg_temp.
--
-- Parameters: as sluice.receive's queue's copy, without p_ack
-- Returns: SETOF sluice.message, as sluice.receive
-- Errors: as sluice.receive
-- Calls: sluice.receive (all of it: the current path, engine settings included)
CREATE OR REPLACE FUNCTION sluice_tmpl.e_receive(q sluice.queue, g sluice.consumer_group, max_messages int,
                                                 p_lease interval, p_consumer text)
RETURNS SETOF sluice.message
LANGUAGE plpgsql
AS $$
BEGIN
    RETURN QUERY SELECT * FROM sluice.receive(q.name, g.name, max_messages, p_lease, p_consumer);
END
$$;

-- e_status: the status rows of release 0.1.0 (the columns sluice.queue_status
-- had then): its status, caught by an upgrade, expects them, and failed
-- with 42804 on the current rows (e_queue_status, named e_status before).
--
-- Parameters:
--   q  the queue
-- Returns: e_queue_status's rows, their first 13 columns
-- Calls: e_queue_status
DROP FUNCTION IF EXISTS sluice_tmpl.e_status(sluice.queue);   -- (a template: its result type changed)
CREATE OR REPLACE FUNCTION sluice_tmpl.e_status(q sluice.queue)
RETURNS TABLE (queue text, group_name text, ready bigint, delayed bigint, in_flight bigint, dead bigint,
               oldest_pending_age interval, lag bigint, cursor bigint, lwm bigint, head bigint,
               live_epochs int, holds_reclaim boolean)
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN QUERY SELECT s.queue, s.group_name, s.ready, s.delayed, s.in_flight, s.dead, s.oldest_pending_age,
                        s.lag, s.cursor, s.lwm, s.head, s.live_epochs, s.holds_reclaim
                 FROM sluice_tmpl.e_queue_status(q) s;
END
$$;

-- e_dedup_lookup: release 0.1.0's send looked one deduplication key up with
-- it (now e_dedup_lookup_all).
--
-- Parameters:
--   p_key     the key
--   p_window  the queue's dedup_window
-- Returns: the id of the message sent with the key last within the window,
--          or NULL
-- Calls: e_dedup_lookup_all
CREATE OR REPLACE FUNCTION sluice_tmpl.e_dedup_lookup(p_key text, p_window interval)
RETURNS bigint
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    -- (the queue's path: 0.1.0's send's SET clause restores its own)
    PERFORM set_config('search_path', 'sluice_tmpl, pg_catalog, pg_temp', true);
    RETURN (SELECT x.msg_id FROM sluice_tmpl.e_dedup_lookup_all(ARRAY[p_key], p_window) x);
END
$$;

-- e_dedup_record: release 0.1.0's send recorded one deduplication key with
-- it (now e_dedup_record_all).
--
-- Parameters:
--   p_slot  the slot the message was written to
--   p_key   its key
--   p_id    its id
-- Calls: e_dedup_record_all
CREATE OR REPLACE FUNCTION sluice_tmpl.e_dedup_record(p_slot smallint, p_key text, p_id bigint)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    -- (the queue's path: 0.1.0's send's SET clause restores its own)
    PERFORM set_config('search_path', 'sluice_tmpl, pg_catalog, pg_temp', true);
    PERFORM sluice_tmpl.e_dedup_record_all(p_slot, ARRAY[p_key], ARRAY[p_id]);
END
$$;

-- _dedup_lock: release 0.1.0's send and send_batch took one deduplication
-- key's lock with it (now _dedup_lock_all).
--
-- Parameters:
--   p_queue_id  queue id
--   p_key       the key
-- Errors: SL010 invalid_isolation (not READ COMMITTED)
-- Calls: _dedup_lock_all
CREATE OR REPLACE FUNCTION sluice._dedup_lock(p_queue_id int, p_key text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM sluice._dedup_lock_all(p_queue_id, ARRAY[p_key]);
END
$$;
