-- Group: engine v2 - idempotent send (templates, schema sluice_tmpl2)
--
-- A send with a dedup_key to a queue of engine 2 works as engine 1's (see
-- sluice.send and engine_dedup.sql): the caller takes the advisory lock of
-- each (queue, key) (sluice._dedup_lock_all, which also refuses anything but
-- READ COMMITTED with SL010), looks the keys up in the queue's dedup table
-- (the rows younger than the queue's dedup_window), sends what is new, and
-- records the new keys. The dedup table is slot-partitioned like the
-- queue's other tables (sluice._v2_dedup_ddl): it is emptied by the
-- TRUNCATE of its slot, which e2_reclaimable holds back while the slot has
-- keys within the window. sluice.send and send_batch call these through the
-- queue's path (set by the caller).

-- e2_dedup_lookup: lock deduplication keys and find those sent within the
-- window: the ids of their messages, in one statement whatever the number
-- of keys.
--
-- Parameters:
--   p_queue_id  queue id
--   p_keys      the keys (NULLs and repeats allowed)
--   p_window    the queue's dedup_window
-- Returns: (dedup_key, msg_id): one row per key sent within the window,
--   with the id of the message sent with it last
-- Errors: SL010 invalid_isolation (not READ COMMITTED), when a key is given
-- Calls: sluice._dedup_lock_all
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_dedup_lookup(p_queue_id int, p_keys text[], p_window interval)
RETURNS TABLE (dedup_key text, msg_id bigint)
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM sluice._dedup_lock_all(p_queue_id, p_keys);
    RETURN QUERY
    SELECT DISTINCT ON (d.dedup_key) d.dedup_key, d.msg_id FROM dedup d
    WHERE d.dedup_key = ANY (p_keys) AND d.at > clock_timestamp() - p_window
    ORDER BY d.dedup_key, d.at DESC;
END
$$;

-- e2_dedup_record: remember that these messages were sent with these keys,
-- in one statement, in the slot of the current epoch.
--
-- Parameters:
--   p_queue_id  queue id
--   p_keys      their keys (a NULL key records nothing)
--   p_ids       their ids, one per key
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_dedup_record(p_queue_id int, p_keys text[], p_ids bigint[])
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO dedup (slot, dedup_key, msg_id, at)
    SELECT ns.slot, u.k, u.id, clock_timestamp()
    FROM sluice._slot_now(p_queue_id) ns CROSS JOIN unnest(p_keys, p_ids) AS u(k, id)
    WHERE u.k IS NOT NULL;
END
$$;

-- e2_send_batch_dedup: sluice.send_batch with dedup_keys on a queue of
-- engine 2 (the batch checked, no priority): as engine 1's
-- (sluice._send_batch_dedup): lock every key, find those sent within the
-- window, send (e2_send_batch, ids drawn in body order) the bodies without
-- a key and the first body of each key not sent before, and remember their
-- keys; a statement for each step, whatever the number of keys. Notifies
-- when it sent anything (the queue's option notify).
--
-- Parameters:
--   q           the queue's row
--   p_due       when the messages are due (NULL: at once)
--   p_now       sent_at
--   p_headers   headers per body, or NULL
--   p_bodies    bodies
--   p_keys      ordering keys per body, or NULL
--   p_priorities  priorities per body, or NULL (0)
--   p_dedup     dedup keys per body (NULLs allowed)
-- Returns: one id per body, in the order of bodies (for a duplicate, the id
--   of the message first sent with its key)
-- Errors: SL010 invalid_isolation (not READ COMMITTED), when a key is given
-- Calls: e2_dedup_lookup, e2_send_batch, e2_dedup_record, sluice._dedup_batch_ids
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_send_batch_dedup(q sluice.queue, p_due timestamptz, p_now timestamptz,
                                                           p_headers jsonb[], p_bodies jsonb[], p_keys text[],
                                                           p_priorities int[], p_dedup text[])
RETURNS SETOF bigint
LANGUAGE plpgsql
AS $$
DECLARE
    -- key -> id of the keys sent before (a jsonb object: a lookup is a
    -- binary search, see sluice._send_batch_dedup)
    old jsonb;
    v_bodies jsonb[];   -- the bodies to send, in body order, with their other arguments
    v_headers jsonb[];
    v_keys text[];
    v_prios int[];
    v_dedup text[];
    ids bigint[];
BEGIN
    SELECT coalesce(jsonb_object_agg(x.dedup_key, x.msg_id), '{}') INTO old
    FROM e2_dedup_lookup(q.id, p_dedup, q.dedup_window) x;
    -- The bodies to send: no dedup key, or the first body of a key not sent
    -- before (one pass over the arrays: a subscript of a jsonb[] walks it).
    SELECT array_agg(u.b ORDER BY u.ord), array_agg(u.h ORDER BY u.ord), array_agg(u.k ORDER BY u.ord),
           array_agg(u.p ORDER BY u.ord), array_agg(u.dk ORDER BY u.ord)
    INTO v_bodies, v_headers, v_keys, v_prios, v_dedup
    FROM (SELECT x.*, row_number() OVER (PARTITION BY x.dk ORDER BY x.ord) AS nth
          FROM unnest(p_bodies, p_headers, p_keys, p_priorities, p_dedup) WITH ORDINALITY AS x(b, h, k, p, dk, ord)) u
    WHERE u.dk IS NULL OR (u.nth = 1 AND old ->> u.dk IS NULL);
    IF v_bodies IS NOT NULL THEN
        ids := ARRAY(SELECT x FROM e2_send_batch(q, p_due, p_now, v_headers, v_bodies, v_keys, v_prios) x);
        PERFORM e2_dedup_record(q.id, v_dedup, ids);
        IF q.notify AND pg_try_advisory_xact_lock(sluice._lock_ns('notify'), q.id) THEN
            PERFORM pg_notify('sluice', q.name);
        END IF;
    END IF;
    -- One id per body (sluice._dedup_batch_ids).
    RETURN QUERY SELECT x FROM sluice._dedup_batch_ids(p_dedup, old, ids) x;
END
$$;
