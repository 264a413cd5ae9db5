-- Group: pgmq compatibility, delete, archive, set_vt.
--
-- These take msg_ids. The newest delivery of a msg_id in _sl_r_<queue> gives
-- its receipt: delete and archive ack it (sluice.ack), set_vt extends it
-- (sluice.extend) or, to make the message visible sooner, gives it back
-- with a delay (sluice.nack). A message deleted or archived without a
-- current lease (never read, or its vt passed) gets only its tombstone in
-- _sl_d_<queue>: the next read that receives it completes it and skips it.

-- _t_complete: the template of each queue's completion function (copied by
-- _instantiate as pgmq._sl_done_<queue>, see _t_deliver; no SET clauses
-- either): delete or archive
-- messages.
--
-- The usual case, messages read and deleted before their vt, takes one
-- lookup per message: their newest receipts, which sluice.ack completes. A
-- message with a current receipt was not deleted, archived or popped
-- before (those ack theirs), so when every receipt acks, the tombstones are
-- not looked at. Otherwise they are: what has one is not in the queue any
-- more, and what was never read is looked for in the view.
--
-- Parameters:
--   p_q     the sluice queue
--   p_slot  the side slot to write
--   p_ids   the msg_ids
--   p_kind  'd' delete, 'a' archive (also copy into a_<queue>)
-- Returns: the msg_ids that were in the queue, now deleted or archived, in order
CREATE OR REPLACE FUNCTION pgmq._t_complete(p_q text, p_slot smallint, p_ids bigint[], p_kind "char")
RETURNS SETOF bigint
LANGUAGE plpgsql
AS $$
DECLARE
    ids bigint[] := p_ids;
    read_ids bigint[];
    receipts text[];
    unread bigint[] := '{}';
    done bigint[];
    acked boolean := false;
    all_current boolean := false;
    now_ts constant timestamptz := clock_timestamp();
BEGIN
    -- (one id, the usual delete, needs no look for duplicates and NULLs)
    IF cardinality(p_ids) <> 1 OR p_ids[1] IS NULL THEN
        ids := ARRAY(SELECT DISTINCT i FROM unnest(p_ids) i WHERE i IS NOT NULL);
        IF cardinality(ids) = 0 THEN
            RETURN;
        END IF;
    END IF;
    -- those read: the receipt of their newest delivery (NULL after a set_vt that gave it back)
    SELECT coalesce(array_agg(i), '{}'), coalesce(array_agg(r.receipt) FILTER (WHERE r.receipt IS NOT NULL), '{}')
      INTO read_ids, receipts
      FROM unnest(ids) i
     CROSS JOIN LATERAL (SELECT x.receipt FROM pgmq._t_rlog x WHERE x.msg_id = i ORDER BY x.at DESC LIMIT 1) r;
    IF cardinality(receipts) = cardinality(ids) THEN
        acked := true;
        all_current := sluice.ack(p_q, 'pgmq', receipts) = cardinality(ids);
    END IF;
    IF NOT all_current THEN
        -- not every one read and leased: leave out those deleted, archived or popped already
        done := ARRAY(SELECT DISTINCT d.msg_id FROM pgmq._t_dlog d WHERE d.msg_id = ANY (ids));
        IF cardinality(done) > 0 THEN
            ids := ARRAY(SELECT i FROM unnest(ids) i WHERE NOT i = ANY (done));
            read_ids := ARRAY(SELECT i FROM unnest(read_ids) i WHERE NOT i = ANY (done));
        END IF;
        IF cardinality(read_ids) < cardinality(ids) THEN
            -- never read: is it in the queue at all? (reads the view: a scan)
            unread := ARRAY(SELECT v.msg_id FROM pgmq._t_view v
                             WHERE v.msg_id = ANY (ARRAY(SELECT i FROM unnest(ids) i WHERE NOT i = ANY (read_ids))));
        END IF;
        IF NOT acked AND cardinality(receipts) > 0 THEN
            PERFORM sluice.ack(p_q, 'pgmq', receipts);
        END IF;
    END IF;
    IF p_kind = 'a' THEN
        INSERT INTO pgmq._t_arch (msg_id, read_ct, enqueued_at, last_read_at, archived_at, vt, message, headers)
        SELECT i, r.read_ct, r.enqueued_at, r.read_at, now_ts, r.vt, r.message, r.headers
          FROM unnest(read_ids) i
         CROSS JOIN LATERAL (SELECT x.* FROM pgmq._t_rlog x WHERE x.msg_id = i ORDER BY x.at DESC LIMIT 1) r;
        INSERT INTO pgmq._t_arch (msg_id, read_ct, enqueued_at, last_read_at, archived_at, vt, message, headers)
        SELECT v.msg_id, v.read_ct, v.enqueued_at, v.last_read_at, now_ts, v.vt, v.message, v.headers
          FROM pgmq._t_view v WHERE v.msg_id = ANY (unread);
    END IF;
    -- (the tombstones written and their ids returned in one statement)
    RETURN QUERY
    WITH ins AS (
        INSERT INTO pgmq._t_dlog (slot, msg_id, kind, done_at)
        SELECT p_slot, i, p_kind, now_ts FROM unnest(read_ids || unread) i
        RETURNING msg_id
    )
    SELECT ins.msg_id FROM ins ORDER BY 1;
END
$$;

-- _complete: delete or archive messages (the queue's copy of _t_complete).
-- Called by delete and archive, which pin search_path.
--
-- Parameters:
--   p_name  the queue
--   p_ids   the msg_ids
--   p_kind  'd' delete, 'a' archive (also copy into a_<queue>)
-- Returns: the msg_ids that were in the queue, now deleted or archived
-- Errors: 42P01 no such queue
CREATE OR REPLACE FUNCTION pgmq._complete(p_name text, p_ids bigint[], p_kind "char")
RETURNS SETOF bigint
LANGUAGE plpgsql
AS $$
DECLARE
    m record;
BEGIN
    SELECT * INTO m FROM pgmq._lookup(p_name);
    IF NOT FOUND THEN
        PERFORM pgmq._queue(p_name);   -- raises
    END IF;
    RETURN QUERY EXECUTE format('SELECT * FROM pgmq.%I($1, $2, $3, $4)', pgmq._fn(m.q, 'complete'))
        USING m.q, m.slot, p_ids, p_kind;
END
$$;

-- delete: delete one message, whatever its vt.
--
-- Parameters:
--   queue_name  the queue
--   msg_id      the message
-- Returns: true if it was in the queue
-- Errors: 42P01 no such queue
CREATE OR REPLACE FUNCTION pgmq.delete(queue_name text, msg_id bigint)
RETURNS boolean LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp   -- (and the engine's settings: end of file)
AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM pgmq._complete(queue_name, ARRAY[msg_id], 'd'));
END
$$;

-- delete: delete messages. Parameters: queue_name, msg_ids.
-- Returns: the msg_ids deleted. Errors: as delete
CREATE OR REPLACE FUNCTION pgmq.delete(queue_name text, msg_ids bigint[])
RETURNS SETOF bigint LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp   -- (and the engine's settings: end of file)
AS $$
BEGIN
    RETURN QUERY SELECT * FROM pgmq._complete(queue_name, msg_ids, 'd');
END
$$;

-- archive: move one message to the archive table a_<queue>.
--
-- Parameters:
--   queue_name  the queue
--   msg_id      the message
-- Returns: true if it was in the queue
-- Errors: 42P01 no such queue
CREATE OR REPLACE FUNCTION pgmq.archive(queue_name text, msg_id bigint)
RETURNS boolean LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp   -- (and the engine's settings: end of file)
AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM pgmq._complete(queue_name, ARRAY[msg_id], 'a'));
END
$$;

-- archive: archive messages. Parameters: queue_name, msg_ids.
-- Returns: the msg_ids archived. Errors: as archive
CREATE OR REPLACE FUNCTION pgmq.archive(queue_name text, msg_ids bigint[])
RETURNS SETOF bigint LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp   -- (and the engine's settings: end of file)
AS $$
BEGIN
    RETURN QUERY SELECT * FROM pgmq._complete(queue_name, msg_ids, 'a');
END
$$;

-- _t_set_vt: the template of each queue's set_vt function (copied by
-- _instantiate as pgmq._sl_setvt_<queue>, see _t_deliver; no SET clauses).
--
-- Parameters:
--   p_q     the sluice queue
--   p_slot  the side slot to write
--   p_ids   the msg_ids
--   p_vt    the new visibility time
-- Returns: the changed messages, with their new vt: those leased by msg_id,
--          then the others by msg_id
CREATE OR REPLACE FUNCTION pgmq._t_set_vt(p_q text, p_slot smallint, p_ids bigint[], p_vt timestamptz)
RETURNS SETOF pgmq.message_record
LANGUAGE plpgsql
AS $$
DECLARE
    r record;
    ok boolean;
    new_receipt text;
    leased bigint[] := '{}';
    rest bigint[];
BEGIN
    FOR r IN SELECT x.* FROM unnest(ARRAY(SELECT DISTINCT i FROM unnest(p_ids) i WHERE i IS NOT NULL)) i
              CROSS JOIN LATERAL (SELECT y.* FROM pgmq._t_rlog y WHERE y.msg_id = i ORDER BY y.at DESC LIMIT 1) x
             WHERE x.receipt IS NOT NULL AND x.vt > clock_timestamp()
               AND NOT EXISTS (SELECT 1 FROM pgmq._t_dlog d WHERE d.msg_id = x.msg_id)
             ORDER BY x.msg_id
    LOOP
        leased := leased || r.msg_id;
        IF p_vt >= r.vt THEN
            ok := sluice.extend(p_q, 'pgmq', ARRAY[r.receipt], pgmq._lease(p_vt)) = 1;
            new_receipt := r.receipt;
        ELSE
            ok := sluice.nack(p_q, 'pgmq', r.receipt, greatest(p_vt - clock_timestamp(), interval '0'));
            new_receipt := NULL;
        END IF;
        CONTINUE WHEN NOT ok;
        INSERT INTO pgmq._t_rlog (slot, msg_id, at, read_at, vt, read_ct, receipt, enqueued_at, message, headers)
        VALUES (p_slot, r.msg_id, clock_timestamp(), r.read_at, p_vt, r.read_ct, new_receipt, r.enqueued_at, r.message,
                r.headers);
        RETURN NEXT (r.msg_id, r.read_ct, r.enqueued_at, r.read_at, p_vt, r.message, r.headers)::pgmq.message_record;
    END LOOP;
    -- Not leased (never read, or its vt passed): set its vt as PGMQ does, as a
    -- hold (a log row without a receipt) that the next read honours: the
    -- message goes back until then, its read_ct unchanged.
    rest := ARRAY(SELECT DISTINCT i FROM unnest(p_ids) i WHERE i IS NOT NULL AND NOT i = ANY (leased));
    IF cardinality(rest) > 0 THEN
        FOR r IN SELECT v.* FROM pgmq._t_view v WHERE v.msg_id = ANY (rest) ORDER BY v.msg_id LOOP
            INSERT INTO pgmq._t_rlog (slot, msg_id, at, read_at, vt, read_ct, receipt, enqueued_at, message, headers)
            VALUES (p_slot, r.msg_id, clock_timestamp(), r.last_read_at, p_vt, r.read_ct, NULL, r.enqueued_at,
                    r.message, r.headers);
            RETURN NEXT (r.msg_id, r.read_ct, r.enqueued_at, r.last_read_at, p_vt, r.message, r.headers)::pgmq.message_record;
        END LOOP;
    END IF;
END
$$;

-- _set_vt: change the visibility timeout of read messages (the queue's
-- copy of _t_set_vt; the body of every set_vt, which pin the settings).
--
-- Parameters:
--   p_name  the queue
--   p_ids   the msg_ids
--   p_vt    the new visibility time (NULL: now)
-- Returns: the changed messages, with their new vt
-- Errors: 42P01 no such queue
CREATE OR REPLACE FUNCTION pgmq._set_vt(p_name text, p_ids bigint[], p_vt timestamptz)
RETURNS SETOF pgmq.message_record
LANGUAGE plpgsql
AS $$
DECLARE
    m record;
BEGIN
    SELECT * INTO m FROM pgmq._lookup(p_name);
    IF NOT FOUND THEN
        PERFORM pgmq._queue(p_name);   -- raises
    END IF;
    RETURN QUERY EXECUTE format('SELECT * FROM pgmq.%I($1, $2, $3, $4)', pgmq._fn(m.q, 'set_vt'))
        USING m.q, m.slot, p_ids, coalesce(p_vt, clock_timestamp());
END
$$;

-- set_vt: change the visibility timeout of messages. Of a message read and
-- leased, a later vt extends the lease (sluice.extend); an earlier one gives
-- the message back with a delay of vt - now (sluice.nack), its next read
-- counting one more. A message in the queue without a current lease (never
-- read, or its vt has passed) is held until vt, as PGMQ sets its vt: the
-- next read that receives it before then gives it back until vt, without
-- counting a read. Every message changed is returned, read_ct unchanged.
--
-- Parameters:
--   queue_name  the queue
--   msg_ids     the messages
--   vt          the new visibility time
-- Returns: the changed messages, with their new vt
-- Errors: 42P01 no such queue
CREATE OR REPLACE FUNCTION pgmq.set_vt(queue_name text, msg_ids bigint[], vt timestamptz)
RETURNS SETOF pgmq.message_record LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp   -- (and the engine's settings: end of file)
AS $$
BEGIN
    RETURN QUERY SELECT * FROM pgmq._set_vt(queue_name, msg_ids, vt);
END
$$;

-- set_vt: vt in seconds from now. Parameters: queue_name, msg_ids, vt.
-- Returns: the changed messages. Errors: as set_vt
CREATE OR REPLACE FUNCTION pgmq.set_vt(queue_name text, msg_ids bigint[], vt integer)
RETURNS SETOF pgmq.message_record LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp   -- (and the engine's settings: end of file)
AS $$
BEGIN
    RETURN QUERY SELECT * FROM pgmq._set_vt(queue_name, msg_ids, clock_timestamp() + make_interval(secs => vt));
END
$$;

-- set_vt: one message. Parameters: queue_name, msg_id, vt (a time).
-- Returns: the message with its new vt, or no row. Errors: as set_vt
CREATE OR REPLACE FUNCTION pgmq.set_vt(queue_name text, msg_id bigint, vt timestamptz)
RETURNS SETOF pgmq.message_record LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp   -- (and the engine's settings: end of file)
AS $$
BEGIN
    RETURN QUERY SELECT * FROM pgmq._set_vt(queue_name, ARRAY[msg_id], vt);
END
$$;

-- set_vt: one message, vt in seconds from now. Parameters: queue_name,
-- msg_id, vt. Returns: the message with its new vt, or no row. Errors: as set_vt
CREATE OR REPLACE FUNCTION pgmq.set_vt(queue_name text, msg_id bigint, vt integer)
RETURNS SETOF pgmq.message_record LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp   -- (and the engine's settings: end of file)
AS $$
BEGIN
    RETURN QUERY SELECT * FROM pgmq._set_vt(queue_name, ARRAY[msg_id], clock_timestamp() + make_interval(secs => vt));
END
$$;

-- The engine's settings for the functions above that call a queue's copy
-- (sluice._engine_settings).
SELECT sluice._apply_engine_settings('pgmq', ARRAY['delete', 'archive', 'set_vt']);
