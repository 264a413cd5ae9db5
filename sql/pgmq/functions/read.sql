-- Group: pgmq compatibility, reading.
--
-- read is sluice.receive for the group 'pgmq' with lease = vt - now; msg_id
-- is sluice's message id (the same on every delivery), read_ct one more than
-- the message's newest logged delivery's (sluice's attempt when none is
-- logged). A message that set_vt made invisible while nobody held it (its
-- newest log row has no receipt and a vt still to come: a hold) goes back
-- until that vt, without counting as a read.
-- Each delivery is logged in _sl_r_<queue> (unlogged, append-only, rotated
-- by pgmq._rotate, which a session's reads try at most once per rotate_interval
-- of the sluice queue, a minute by default) so that
-- delete, archive and set_vt, which take msg_ids, find its receipt.
-- Messages sent with an x-pgmq-group header carry it as their ordering key:
-- every read form delivers them in order, none while an earlier one of the
-- group is read and not deleted, archived or visible again.

-- _t_deliver: the template of each queue's delivery function (copied by
-- _instantiate as pgmq._sl_read_<queue>, naming the queue's side tables
-- instead of pgmq._t_rlog and _t_dlog): receive up to p_qty messages and log
-- their deliveries. It has no SET clause of its own (a PL/pgSQL call with
-- one costs ~30 us): it runs under the SET clauses of the public read
-- functions (see _deliver), which plan its statements once per session
-- (generic plans) and keep them index probes whatever the statistics of a
-- side table that was just truncated say.
--
-- Parameters:
--   p_q     the sluice queue
--   p_slot  the side slot to write
--   p_lease the lease (vt - now, within sluice's bounds)
--   p_qty   how many, 1 to 10000
--   p_cond  NULL or a JSON object the message must contain (@>); a message
--           that does not is made visible again at once (it counts as a read)
--   p_mode  'r' read, 'p' pop (delete what is returned), 'h' one per group
-- Returns: the messages, as pgmq.message_record
-- Errors: SL010 outside READ COMMITTED
CREATE OR REPLACE FUNCTION pgmq._t_deliver(p_q text, p_slot smallint, p_lease interval, p_qty integer, p_cond jsonb,
                                           p_mode "char")
RETURNS SETOF pgmq.message_record
LANGUAGE plpgsql
AS $$
DECLARE
    got sluice.message[];
    keep sluice.message[];
    gone bigint[];
    held record;
    held_ids bigint[];
    n_held int;
    now_ts timestamptz;
    tries int := 0;
BEGIN
    LOOP
        tries := tries + 1;
        IF p_mode = 'h' THEN
            -- one receive per message: a receive never returns two messages of one key then
            got := '{}';
            FOR i IN 1 .. p_qty LOOP
                keep := ARRAY(SELECT m FROM sluice.receive(p_q, 'pgmq', 1, p_lease) m);
                EXIT WHEN cardinality(keep) = 0;
                got := got || keep;
            END LOOP;
        ELSE
            got := ARRAY(SELECT m FROM sluice.receive(p_q, 'pgmq', p_qty, p_lease) m);
        END IF;
        EXIT WHEN cardinality(got) = 0;
        now_ts := clock_timestamp();
        -- One look at the messages' side rows: those deleted or archived
        -- while not leased (gone), and how many of the others set_vt holds
        -- (below; none: the loop over them is not run).
        SELECT coalesce(array_agg(m.id) FILTER (WHERE d.gone), '{}'),
               count(*) FILTER (WHERE NOT d.gone AND x.receipt IS NULL AND x.vt > now_ts)
          INTO gone, n_held
          FROM unnest(got) m
         CROSS JOIN LATERAL (SELECT EXISTS (SELECT 1 FROM pgmq._t_dlog y WHERE y.msg_id = m.id) AS gone) d
          LEFT JOIN LATERAL (SELECT y.receipt, y.vt FROM pgmq._t_rlog y WHERE y.msg_id = m.id
                              ORDER BY y.at DESC LIMIT 1) x ON true;
        -- messages deleted or archived while not leased: complete them now
        IF cardinality(gone) > 0 THEN
            PERFORM sluice.ack(p_q, 'pgmq', ARRAY(SELECT m.receipt FROM unnest(got) m WHERE m.id = ANY (gone)));
            got := ARRAY(SELECT got[i] FROM generate_subscripts(got, 1) i WHERE NOT (got[i]).id = ANY (gone) ORDER BY i);
        END IF;
        -- held by set_vt while not leased: kept from the reader until the
        -- hold's vt (its lease made to end then, or, when the read's lease
        -- ends later, given back until then), logged again (newest) with the
        -- same read_ct: not a read. A set_vt or delete meanwhile finds the
        -- lease, as for a message read.
        held_ids := '{}';
        IF n_held > 0 THEN
            FOR held IN SELECT m.receipt AS m_receipt, m.lease_expires_at AS m_vt, x.msg_id, x.read_at, x.vt, x.read_ct,
                               x.enqueued_at, x.message, x.headers
                          FROM unnest(got) m
                         CROSS JOIN LATERAL (SELECT y.* FROM pgmq._t_rlog y WHERE y.msg_id = m.id ORDER BY y.at DESC LIMIT 1) x
                         WHERE x.receipt IS NULL AND x.vt > now_ts
            LOOP
                IF held.vt >= held.m_vt THEN
                    PERFORM sluice.extend(p_q, 'pgmq', ARRAY[held.m_receipt], pgmq._lease(held.vt));
                ELSE
                    PERFORM sluice.nack(p_q, 'pgmq', held.m_receipt, held.vt - now_ts);
                    held.m_receipt := NULL;
                END IF;
                INSERT INTO pgmq._t_rlog (slot, msg_id, at, read_at, vt, read_ct, receipt, enqueued_at, message, headers)
                VALUES (p_slot, held.msg_id, now_ts, held.read_at, held.vt, held.read_ct, held.m_receipt, held.enqueued_at,
                        held.message, held.headers);
                held_ids := held_ids || held.msg_id;
            END LOOP;
        END IF;
        IF cardinality(held_ids) > 0 THEN
            got := ARRAY(SELECT got[i] FROM generate_subscripts(got, 1) i WHERE NOT (got[i]).id = ANY (held_ids) ORDER BY i);
        END IF;
        IF p_cond IS NOT NULL THEN
            -- not matching: visible again at once, and it counts as a read (logged)
            INSERT INTO pgmq._t_rlog (slot, msg_id, at, read_at, vt, read_ct, receipt, enqueued_at, message, headers)
            SELECT p_slot, m.id, now_ts, now_ts, now_ts, coalesce(x.read_ct + 1, m.attempt), NULL, m.sent_at, m.body,
                   m.headers
              FROM unnest(got) m
              LEFT JOIN LATERAL (SELECT y.read_ct FROM pgmq._t_rlog y WHERE y.msg_id = m.id ORDER BY y.at DESC LIMIT 1) x
                ON true
             WHERE NOT m.body @> p_cond;
            PERFORM sluice.nack(p_q, 'pgmq', m.receipt, interval '0') FROM unnest(got) m WHERE NOT m.body @> p_cond;
            keep := ARRAY(SELECT got[i] FROM generate_subscripts(got, 1) i WHERE (got[i]).body @> p_cond ORDER BY i);
        ELSE
            keep := got;
        END IF;

        IF cardinality(keep) > 0 AND p_mode <> 'p' THEN
            -- returned and logged in one statement (its lookups see the log
            -- as it was before the rows it writes)
            RETURN QUERY
            WITH k AS MATERIALIZED (
                SELECT u.id, coalesce(x.read_ct + 1, u.attempt) AS read_ct, u.sent_at, u.lease_expires_at, u.body,
                       u.headers, u.receipt, u.ordinality
                  FROM unnest(keep) WITH ORDINALITY u
                  LEFT JOIN LATERAL (SELECT y.read_ct FROM pgmq._t_rlog y WHERE y.msg_id = u.id
                                      ORDER BY y.at DESC LIMIT 1) x ON true
            ), ins AS (
                INSERT INTO pgmq._t_rlog (slot, msg_id, at, read_at, vt, read_ct, receipt, enqueued_at, message, headers)
                SELECT p_slot, k.id, now_ts, now_ts, k.lease_expires_at, k.read_ct, k.receipt, k.sent_at, k.body,
                       k.headers
                  FROM k
            )
            SELECT k.id, k.read_ct, k.sent_at, now_ts, k.lease_expires_at, k.body, k.headers FROM k ORDER BY k.ordinality;
            RETURN;
        ELSIF cardinality(keep) > 0 THEN
            -- (pop: returned first, then completed)
            RETURN QUERY SELECT u.id, coalesce(x.read_ct + 1, u.attempt), u.sent_at, now_ts, u.lease_expires_at,
                                u.body, u.headers
                           FROM unnest(keep) WITH ORDINALITY u
                           LEFT JOIN LATERAL (SELECT y.read_ct FROM pgmq._t_rlog y WHERE y.msg_id = u.id
                                               ORDER BY y.at DESC LIMIT 1) x ON true
                          ORDER BY u.ordinality;
            PERFORM sluice.ack(p_q, 'pgmq', ARRAY(SELECT m.receipt FROM unnest(keep) m));
            INSERT INTO pgmq._t_dlog (slot, msg_id, kind, done_at)
            SELECT p_slot, m.id, 'p', now_ts FROM unnest(keep) m;
            RETURN;
        END IF;
        -- everything received was already deleted (or did not match): try again, a few times
        EXIT WHEN tries >= 5 OR p_cond IS NOT NULL;
    END LOOP;
END
$$;

-- _deliver: receive up to qty messages and log their deliveries (the queue's
-- copy of _t_deliver), then rotate the side tables if due (_try_rotate: the
-- generation is as old as the sluice queue's rotate_interval, a minute by
-- default, and this session has not tried within that time). Called
-- by the public read functions, whose SET clauses (search_path and the
-- engine's settings, sluice._engine_settings) are the settings of the
-- queue's copy, which has none of its own: one call with SET clauses per
-- read instead of two.
--
-- Parameters:
--   p_name  the queue
--   p_vt    the visibility timeout, as a time (clamped to now + 1 µs .. now + 7 days)
--   p_qty   how many (0 or less: none; more than 10000: 10000)
--   p_cond  '{}' or a JSON object the message must contain (@>); a message
--           that does not is made visible again at once (it counts as a read)
--   p_mode  'r' read, 'p' pop (delete what is returned), 'h' one per group
-- Returns: the messages, as pgmq.message_record
-- Errors: 42P01 no such queue; SL010 outside READ COMMITTED
CREATE OR REPLACE FUNCTION pgmq._deliver(p_name text, p_vt timestamptz, p_qty integer, p_cond jsonb, p_mode "char")
RETURNS SETOF pgmq.message_record
LANGUAGE plpgsql
AS $$
DECLARE
    m record;
    v_key text;
BEGIN
    SELECT * INTO m FROM pgmq._lookup(p_name);
    IF NOT FOUND THEN
        PERFORM pgmq._queue(p_name);   -- raises
    END IF;
    IF p_qty IS NULL OR p_qty < 1 THEN
        RETURN;
    END IF;
    RETURN QUERY EXECUTE format('SELECT * FROM pgmq.%I($1, $2, $3, $4, $5, $6)', pgmq._fn(m.q, 'deliver'))
        USING m.q, m.slot,
              CASE p_mode WHEN 'p' THEN interval '30 seconds' ELSE pgmq._lease(p_vt) END,
              least(p_qty, 10000), nullif(coalesce(p_cond, '{}'), '{}'), p_mode;
    -- Rotate last: a read holds the lanes it took until it commits, and the
    -- other readers take other lanes meanwhile. The session's note (see
    -- _try_rotate) says when it may try next, so that a read reads nothing
    -- more while it may not.
    IF m.due THEN
        v_key := 'sluice.pgmq_rotate_' || to_hex(hashtext(m.q));
        IF extract(epoch FROM clock_timestamp()) >= coalesce(nullif(current_setting(v_key, true), ''), '0')::float8 THEN
            PERFORM pgmq._try_rotate(m.q, v_key);
        END IF;
    END IF;
END
$$;

-- _try_rotate: rotate the side tables of a queue (pgmq._rotate) if their
-- generation is as old as the sluice queue's rotate_interval, and note in
-- the session when to try next, which _deliver reads before calling this
-- (the setting p_key, sluice.pgmq_rotate_<hash of the queue>, holds that
-- time in epoch seconds). After a try, rotated or refused (the old slot is still needed,
-- possibly for as long as sluice keeps the completed messages), the next is
-- a rotate_interval later; before the generation is due, when it comes due.
-- A role that may not read sluice's own tables (the layer's functions run
-- as the caller: docs/pgmq.md, Privileges) does not rotate, and its reads
-- go on: it looks again a minute later. No SET clause: it runs under the
-- search_path of the public read function that called _deliver, and names
-- everything it reads by schema (a SET clause would cost every read that
-- tries, and TestHotPathsCallNoSQLFunctionsOrSettings counts them).
--
-- Parameters:
--   q      the sluice queue
--   p_key  the name of the session's setting that notes the next try
-- Returns: whether it rotated
CREATE OR REPLACE FUNCTION pgmq._try_rotate(q text, p_key text)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_now constant timestamptz := clock_timestamp();
    v_iv interval;
    v_started timestamptz;
BEGIN
    BEGIN
        SELECT sq.rotate_interval INTO v_iv FROM sluice.queue sq WHERE sq.name = q;
        SELECT s.started_at INTO v_started FROM pgmq.side_generation s
        WHERE s.sluice_queue = q ORDER BY s.gen DESC LIMIT 1;
        IF v_started > v_now - v_iv THEN
            PERFORM set_config(p_key, extract(epoch FROM v_started + v_iv)::text, false);
            RETURN false;
        END IF;
        PERFORM set_config(p_key, extract(epoch FROM v_now + v_iv)::text, false);
        RETURN pgmq._rotate(q);
    EXCEPTION WHEN insufficient_privilege THEN
        PERFORM set_config(p_key, extract(epoch FROM v_now + interval '1 minute')::text, false);
        RETURN false;
    END;
END
$$;

-- _deliver_pinned: _deliver with the SET clauses of the public read
-- functions (see _deliver), for _poll, whose own statements (sluice.status)
-- keep the caller's settings.
--
-- Parameters: as _deliver
-- Returns: the messages
-- Errors: as _deliver
CREATE OR REPLACE FUNCTION pgmq._deliver_pinned(p_name text, p_vt timestamptz, p_qty integer, p_cond jsonb,
                                                p_mode "char")
RETURNS SETOF pgmq.message_record
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp   -- (and the engine's settings: end of file)
AS $$
BEGIN
    RETURN QUERY SELECT * FROM pgmq._deliver(p_name, p_vt, p_qty, p_cond, p_mode);
END
$$;

-- _poll: _deliver until it returns messages or max_poll_seconds have passed.
-- Between tries it only reads sluice.status: a receive holds the lanes it
-- took until the end of the transaction, so an empty receive in a polling
-- loop could make the other readers of the queue skip those lanes.
--
-- Parameters:
--   p_name, p_vt, p_qty, p_cond, p_mode  as _deliver
--   p_max_poll_seconds                   how long to wait
--   p_poll_interval_ms                   pause between tries
-- Returns: the messages
-- Errors: as _deliver
CREATE OR REPLACE FUNCTION pgmq._poll(p_name text, p_vt timestamptz, p_qty integer, p_max_poll_seconds integer,
                                      p_poll_interval_ms integer, p_cond jsonb, p_mode "char")
RETURNS SETOF pgmq.message_record
LANGUAGE plpgsql
AS $$
DECLARE
    q constant text := coalesce((SELECT m.q FROM pgmq._lookup(p_name) m), pgmq._queue(p_name));
    stop_at constant timestamptz := clock_timestamp() + make_interval(secs => coalesce(p_max_poll_seconds, 5));
    vt_left constant interval := coalesce(p_vt, clock_timestamp()) - clock_timestamp();
BEGIN
    LOOP
        IF EXISTS (SELECT 1 FROM sluice.status(q) s WHERE s.group_name = 'pgmq' AND s.ready > 0) THEN
            -- vt is relative to when the messages are read, as in PGMQ's loop
            RETURN QUERY SELECT * FROM pgmq._deliver_pinned(p_name, clock_timestamp() + vt_left, p_qty, p_cond, p_mode);
            IF FOUND THEN
                RETURN;
            END IF;
        END IF;
        EXIT WHEN clock_timestamp() >= stop_at;
        PERFORM pg_sleep(greatest(coalesce(p_poll_interval_ms, 100), 1)::numeric / 1000);
    END LOOP;
END
$$;

-- read: vt in seconds from now. Parameters: queue_name, vt, qty, conditional.
-- Returns: pgmq.message_record rows. Errors: as read
CREATE OR REPLACE FUNCTION pgmq.read(queue_name text, vt integer, qty integer, conditional jsonb DEFAULT '{}')
RETURNS SETOF pgmq.message_record LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp   -- (and the engine's settings: end of file)
AS $$
BEGIN
    RETURN QUERY SELECT * FROM pgmq._deliver(queue_name, clock_timestamp() + make_interval(secs => vt), qty,
                                             conditional, 'r');
END
$$;

-- read_with_poll: vt in seconds. Parameters: as read_with_poll.
-- Returns: pgmq.message_record rows. Errors: as read
CREATE OR REPLACE FUNCTION pgmq.read_with_poll(queue_name text, vt integer, qty integer,
                                               max_poll_seconds integer DEFAULT 5, poll_interval_ms integer DEFAULT 100,
                                               conditional jsonb DEFAULT '{}')
RETURNS SETOF pgmq.message_record LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN QUERY SELECT * FROM pgmq._poll(queue_name, clock_timestamp() + make_interval(secs => vt), qty,
                                          max_poll_seconds, poll_interval_ms, conditional, 'r');
END
$$;

-- read_grouped: vt in seconds. Parameters: queue_name, vt, qty.
-- Returns: pgmq.message_record rows. Errors: as read
CREATE OR REPLACE FUNCTION pgmq.read_grouped(queue_name text, vt integer, qty integer)
RETURNS SETOF pgmq.message_record LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp   -- (and the engine's settings: end of file)
AS $$
BEGIN
    RETURN QUERY SELECT * FROM pgmq._deliver(queue_name, clock_timestamp() + make_interval(secs => vt), qty,
                                             '{}', 'r');
END
$$;

-- read_grouped_with_poll: vt in seconds. Parameters: as above.
-- Returns: rows. Errors: as read
CREATE OR REPLACE FUNCTION pgmq.read_grouped_with_poll(queue_name text, vt integer, qty integer,
                                                       max_poll_seconds integer DEFAULT 5, poll_interval_ms integer DEFAULT 100)
RETURNS SETOF pgmq.message_record LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN QUERY SELECT * FROM pgmq._poll(queue_name, clock_timestamp() + make_interval(secs => vt), qty,
                                          max_poll_seconds, poll_interval_ms, '{}', 'r');
END
$$;

-- read_grouped_rr: vt in seconds. Parameters: queue_name, vt, qty.
-- Returns: rows. Errors: as read
CREATE OR REPLACE FUNCTION pgmq.read_grouped_rr(queue_name text, vt integer, qty integer)
RETURNS SETOF pgmq.message_record LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp   -- (and the engine's settings: end of file)
AS $$
BEGIN
    RETURN QUERY SELECT * FROM pgmq._deliver(queue_name, clock_timestamp() + make_interval(secs => vt), qty,
                                             '{}', 'r');
END
$$;

-- read_grouped_rr_with_poll: vt in seconds. Parameters: as above.
-- Returns: rows. Errors: as read
CREATE OR REPLACE FUNCTION pgmq.read_grouped_rr_with_poll(queue_name text, vt integer, qty integer,
                                                          max_poll_seconds integer DEFAULT 5, poll_interval_ms integer DEFAULT 100)
RETURNS SETOF pgmq.message_record LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN QUERY SELECT * FROM pgmq._poll(queue_name, clock_timestamp() + make_interval(secs => vt), qty,
                                          max_poll_seconds, poll_interval_ms, '{}', 'r');
END
$$;

-- read_grouped_head: the head message of up to qty different groups.
-- Parameters: queue_name, vt (seconds), qty. Returns: rows. Errors: as read
CREATE OR REPLACE FUNCTION pgmq.read_grouped_head(queue_name text, vt integer, qty integer)
RETURNS SETOF pgmq.message_record LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp   -- (and the engine's settings: end of file)
AS $$
BEGIN
    RETURN QUERY SELECT * FROM pgmq._deliver(queue_name, clock_timestamp() + make_interval(secs => vt), qty,
                                             '{}', 'h');
END
$$;

-- read_grouped_head_with_poll: read_grouped_head, waiting. Parameters:
-- queue_name, vt, qty, max_poll_seconds, poll_interval_ms. Returns: rows.
-- Errors: as read
CREATE OR REPLACE FUNCTION pgmq.read_grouped_head_with_poll(queue_name text, vt integer, qty integer,
                                                            max_poll_seconds integer DEFAULT 5, poll_interval_ms integer DEFAULT 100)
RETURNS SETOF pgmq.message_record LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN QUERY SELECT * FROM pgmq._poll(queue_name, clock_timestamp() + make_interval(secs => vt), qty,
                                          max_poll_seconds, poll_interval_ms, '{}', 'h');
END
$$;

-- pop: read and delete up to qty messages in one call (at-most-once: the
-- caller's transaction completes them as it returns them).
--
-- Parameters:
--   queue_name  the queue
--   qty         how many (1)
-- Returns: pgmq.message_record rows
-- Errors: as read
CREATE OR REPLACE FUNCTION pgmq.pop(queue_name text, qty integer DEFAULT 1)
RETURNS SETOF pgmq.message_record LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp   -- (and the engine's settings: end of file)
AS $$
BEGIN
    RETURN QUERY SELECT * FROM pgmq._deliver(queue_name, NULL, qty, '{}', 'p');
END
$$;

-- The engine's settings for the functions above that call a queue's copy
-- (sluice._engine_settings).
SELECT sluice._apply_engine_settings('pgmq', ARRAY['read', 'pop', 'read_grouped', 'read_grouped_head', 'read_grouped_rr', '_deliver_pinned']);
