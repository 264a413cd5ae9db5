-- Group: engine templates - observability (see engine_cut.sql for what a template is)

-- e_window: the positions of a lane a group has dispatched and not
-- completed (from the low-water mark to the cursor, and those after the
-- cursor taken out of order for their priority), with their key hash (NULL
-- if unkeyed) and their newest delivery (e_newest, as receipts see it):
-- its attempt, its expiry (NULL if none survives) and whether it is a
-- parked retry or a released run of a key (token 0: due at expires) rather
-- than a lease.
--
-- Parameters:
--   p_group_id       group id
--   p_lane           the lane
--   p_lwm, p_cursor  the range to look at
-- Returns: (pos, id, txid, slot, attempt, expires, parked, key) by position
CREATE OR REPLACE FUNCTION sluice_tmpl.e_window(p_group_id int, p_lane smallint, p_lwm bigint, p_cursor bigint)
RETURNS TABLE (pos bigint, id bigint, txid xid8, slot smallint, attempt int, expires timestamptz, parked boolean,
               key bigint)
LANGUAGE plpgsql STABLE
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT w.pos, w.id, w.txid, w.slot, d.attempt, d.expires_at, d.token = 0, w.k
    FROM (SELECT v.* FROM (SELECT b.first_pos + u.o - 1 AS pos, u.id, u.txid, u.slot, u.tg, u.k
                           FROM batches b
                           CROSS JOIN LATERAL unnest(b.ids, b.txids, b.slots, b.targets, b.keys)
                                WITH ORDINALITY AS u(id, txid, slot, tg, k, o)
                           WHERE b.lane = p_lane AND b.last_pos >= p_lwm AND b.first_pos <= p_cursor) v
          WHERE v.pos BETWEEN p_lwm AND p_cursor
          UNION ALL
          -- prioritized positions after the cursor, taken out of order
          SELECT p.pos, p.id, p.txid, p.mslot, p.target, NULL::bigint
          FROM prio p
          WHERE p.lane = p_lane AND p.priority > 0 AND p.pos > p_cursor
            AND EXISTS (SELECT 1 FROM e_newest(p_group_id, p.mslot, p.pos))) w
    LEFT JOIN LATERAL e_newest(p_group_id, w.slot, w.pos) d ON true
    WHERE (w.tg IS NULL OR w.tg = p_group_id) AND NOT EXISTS (SELECT FROM e_completed(p_group_id, w.slot, w.pos))
    ORDER BY w.pos;
END
$$;

-- e_key_waiting: how many of a group's messages that would be ready wait
-- for an earlier message of their key: every incomplete keyed message that
-- is not leased or parked, except the first incomplete one of its key when
-- that one is not leased or parked either (it is the one ready). The keyed
-- messages looked at are the lanes' windows (low-water mark to cursor),
-- their positions numbered after the cursor (never dispatched: nothing
-- takes a keyed position ahead of the cursor), and the committed messages
-- not numbered yet (due now; after every numbered one, in any order).
-- Costs O(window + keyed messages after the cursors + messages not
-- numbered), in array operations; a queue without keyed messages in its
-- live epochs pays two probes.
--
-- Parameters:
--   p_group_id          group id
--   p_cursors           each lane's cursor, by lane
--   p_wkeys, p_wpos,    the keyed positions of the lanes' windows (e_window):
--   p_wready            key hash, position, and whether it is neither leased
--                       nor parked
--   p_xmax, p_xip, p_t  the newest cut's snapshot (xmax, in progress) and time
--   p_now               the time status is computed for
-- Returns: the number of waiting messages
CREATE OR REPLACE FUNCTION sluice_tmpl.e_key_waiting(p_group_id int, p_cursors bigint[],
                                                     p_wkeys bigint[], p_wpos bigint[], p_wready boolean[],
                                                     p_xmax xid8, p_xip xid8[], p_t timestamptz, p_now timestamptz)
RETURNS bigint
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    -- A queue without keyed messages (numbered or not) skips the walk.
    IF p_wkeys IS NULL AND NOT EXISTS (SELECT 1 FROM keyed)
       AND NOT EXISTS (SELECT 1 FROM messages m
                       WHERE m.key IS NOT NULL
                         AND (m.txid >= p_xmax OR m.txid = ANY (p_xip) OR m.deliver_at > p_t)) THEN
        RETURN 0;
    END IF;
    RETURN (
        SELECT coalesce(sum(k.n_ready - CASE WHEN k.head_ready THEN 1 ELSE 0 END), 0)
        FROM (SELECT x.key, count(*) FILTER (WHERE x.ready) AS n_ready, (array_agg(x.ready ORDER BY x.pos))[1] AS head_ready
              FROM (-- dispatched and not completed
                    SELECT w.key, w.pos, w.ready
                    FROM unnest(p_wkeys, p_wpos, p_wready) AS w(key, pos, ready)
                    UNION ALL
                    -- numbered after the cursor
                    SELECT u.k, b.first_pos + u.o - 1, true
                    FROM generate_series(1, cardinality(p_cursors)) AS l(i)
                    JOIN batches b ON b.lane = l.i - 1 AND b.last_pos > p_cursors[l.i] AND b.keys IS NOT NULL
                    CROSS JOIN LATERAL unnest(b.keys, b.targets) WITH ORDINALITY AS u(k, tg, o)
                    WHERE u.k IS NOT NULL AND b.first_pos + u.o - 1 > p_cursors[l.i]
                      AND (u.tg IS NULL OR u.tg = p_group_id)
                    UNION ALL
                    -- committed, due, not numbered yet
                    SELECT hashtextextended(m.key, 0), 9223372036854775807, true
                    FROM messages m
                    WHERE m.key IS NOT NULL
                      AND (m.txid >= p_xmax OR m.txid = ANY (p_xip) OR m.deliver_at > p_t)
                      AND (m.deliver_at IS NULL OR m.deliver_at <= p_now)
                      AND (m.target_group IS NULL OR m.target_group = p_group_id)) x
              GROUP BY x.key) k);
END
$$;

-- e_status: the rows of sluice.status for this queue (see there).
CREATE OR REPLACE FUNCTION sluice_tmpl.e_status(q sluice.queue)
RETURNS SETOF sluice.queue_status
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    g sluice.consumer_group;
    head record;
    u record;
    s sluice.queue_status;
    v_now timestamptz := clock_timestamp();
    v_cur bigint := sluice._current_epoch(q.id);
    v_oldest bigint;
    v_retired_at timestamptz;
    v_min bigint := e_min_lwm(q);
    v_lwm bigint;
    ls record;
    v_xip xid8[];
    v_waiting bigint;
    any_group boolean := false;
BEGIN
    SELECT * INTO head FROM batches ORDER BY batch_no DESC LIMIT 1;
    v_xip := ARRAY(SELECT pg_snapshot_xip(head.snap));
    v_oldest := coalesce((SELECT max(r.epoch) FROM sluice.reclaim r WHERE r.queue_id = q.id) + 1, 0);
    SELECT e.started_at INTO v_retired_at FROM sluice.epoch e WHERE e.queue_id = q.id AND e.epoch = v_oldest + 1;
    FOR g IN SELECT * FROM sluice.consumer_group cg WHERE cg.queue_id = q.id ORDER BY cg.name LOOP
        any_group := true;
        -- Over the group's lanes: the positions dispatched and not completed
        -- (leased, or expired and not redelivered yet), and those numbered
        -- after each lane's cursor. The keyed ones of the window and after
        -- the cursor, and the keyed messages not numbered yet, go to
        -- e_key_waiting.
        -- (the window is walked once: its counts and its keyed positions)
        WITH st AS MATERIALIZED (
            SELECT l.lane::smallint AS lane, s_.lwm, s_.cursor
            FROM generate_series(0, q.lanes - 1) AS l(lane)
            CROSS JOIN LATERAL e_lane_state(g, l.lane::smallint) s_
        ), win AS MATERIALIZED (
            SELECT x.pos, x.key, x.expires, x.parked
            FROM st CROSS JOIN LATERAL e_window(g.id, st.lane, st.lwm, st.cursor) x
        )
        SELECT (SELECT max(st.cursor) FROM st) AS cursor,
               (SELECT count(*) FROM win WHERE win.expires > v_now AND NOT win.parked) AS in_flight,
               (SELECT count(*) FROM win WHERE win.expires > v_now AND win.parked) AS parked,
               (SELECT count(*) FROM win WHERE win.expires IS NULL OR win.expires <= v_now) AS expired,
               (SELECT array_agg(st.cursor ORDER BY st.lane) FROM st) AS cursors,
               (SELECT array_agg(win.key ORDER BY win.pos) FROM win WHERE win.key IS NOT NULL) AS wkeys,
               (SELECT array_agg(win.pos ORDER BY win.pos) FROM win WHERE win.key IS NOT NULL) AS wpos,
               (SELECT array_agg(NOT coalesce(win.expires > v_now, false) ORDER BY win.pos)
                FROM win WHERE win.key IS NOT NULL) AS wready,
               -- numbered after the cursor: not the ones meant for other
               -- groups (retries), nor those taken out of order (counted by
               -- e_window, or completed)
               (SELECT coalesce(sum(nb.n), 0) FROM st CROSS JOIN LATERAL (
                    SELECT coalesce(sum(b.last_pos - greatest(b.first_pos, st.cursor + 1) + 1), 0)
                           - coalesce(sum((SELECT count(*) FROM unnest(b.targets) WITH ORDINALITY AS t(tg, o)
                                           WHERE t.tg <> g.id AND b.first_pos + t.o - 1 > st.cursor)), 0)
                           - (SELECT count(*) FROM prio p
                              WHERE p.lane = st.lane AND p.priority > 0 AND p.pos > st.cursor
                                AND (p.target IS NULL OR p.target = g.id)
                                AND (EXISTS (SELECT 1 FROM e_newest(g.id, p.mslot, p.pos))
                                     OR EXISTS (SELECT FROM e_completed(g.id, p.mslot, p.pos)))) AS n
                    FROM batches b
                    WHERE b.lane = st.lane AND b.last_pos > st.cursor AND b.last_pos >= b.first_pos) nb) AS numbered
        INTO ls;
        v_lwm := e_group_lwm(g, q.lanes, true);
        -- Committed messages not numbered yet: due now, and the oldest of them.
        SELECT count(*) FILTER (WHERE m.deliver_at IS NULL OR m.deliver_at <= v_now) AS due,
               min(m.sent_at) AS oldest
        INTO u
        FROM messages m
        WHERE (m.txid >= pg_snapshot_xmax(head.snap) OR m.txid = ANY (v_xip) OR m.deliver_at > head.t)
          AND (m.target_group IS NULL OR m.target_group = g.id);
        s.queue := q.name;
        s.group_name := g.name;
        s.cursor := ls.cursor;
        s.lwm := v_lwm;
        s.head := head.last_pos;
        s.in_flight := ls.in_flight;
        v_waiting := e_key_waiting(g.id, ls.cursors, ls.wkeys, ls.wpos, ls.wready,
                                   pg_snapshot_xmax(head.snap), v_xip, head.t, v_now);
        s.waiting := v_waiting;
        s.ready := ls.numbered + ls.expired + u.due - v_waiting;
        SELECT count(*) + ls.parked INTO s.delayed FROM messages m
        WHERE m.deliver_at > v_now AND (m.target_group IS NULL OR m.target_group = g.id);
        SELECT count(*) INTO s.dead FROM sluice.dead_letter d
        WHERE d.group_id = g.id AND NOT EXISTS (SELECT 1 FROM sluice.redrive r WHERE r.dead_letter_id = d.id);
        s.lag := ls.numbered + ls.in_flight + ls.expired + ls.parked + u.due;   -- (waiting: in numbered, expired, due)
        s.oldest_pending_age := NULL;
        IF v_lwm <= head.last_pos THEN
            SELECT v_now - m.sent_at INTO s.oldest_pending_age
            FROM batches b
            JOIN messages m ON m.slot = b.slots[v_lwm - b.first_pos + 1]
                           AND m.txid = b.txids[v_lwm - b.first_pos + 1]
                           AND m.id = b.ids[v_lwm - b.first_pos + 1]
            WHERE b.first_pos <= v_lwm AND b.last_pos >= v_lwm
            LIMIT 1;
        END IF;
        IF s.oldest_pending_age IS NULL AND u.oldest IS NOT NULL THEN
            s.oldest_pending_age := v_now - u.oldest;
        END IF;
        s.live_epochs := v_cur - v_oldest + 1;
        -- (v_min is made of the stored low-water marks, as reclaim sees them)
        s.holds_reclaim := v_oldest < v_cur AND e_group_lwm(g, q.lanes) = v_min AND v_now >= v_retired_at + q.retention;
        RETURN NEXT s;
    END LOOP;
    IF NOT any_group THEN
        s := NULL;
        s.queue := q.name;
        s.head := head.last_pos;
        s.live_epochs := v_cur - v_oldest + 1;
        s.holds_reclaim := false;
        RETURN NEXT s;
    END IF;
END
$$;
