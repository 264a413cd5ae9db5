-- Group: release 0.1.0's calls caught by an upgrade
--
-- An upgrade (sluice migrate) runs in one transaction behind a fence
-- (migrate.Apply): a call of the API that starts meanwhile has compiled its
-- function as it was before and waits, at its first read of sluice.queue,
-- until the upgrade commits; it then goes on with the old function's code
-- on the new schema. The old code calls by name what its release had: the
-- functions below are what release 0.1.0's receive, ack, nack, extend,
-- send and send_batch call that the current engine does not have as they
-- were. Each forwards to the current function. No current code calls them.
-- (e_ack, e_nack and e_extend kept their arguments; 0.1.0 called them with
-- search_path pg_catalog, pg_temp: they set the queue's path when they
-- find another, engine_ack.sql.)
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
SET search_path = sluice_tmpl, pg_catalog, pg_temp   -- (the queue's, in its copy)
AS $$
BEGIN
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
SET search_path = sluice_tmpl, pg_catalog, pg_temp   -- (the queue's, in its copy)
AS $$
BEGIN
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
