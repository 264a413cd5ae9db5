-- Group: engine v2 - priorities (templates, schema sluice_tmpl2)
--
-- An unkeyed message with a priority other than 0 is numbered in a lane of
-- its own, the priority lane (number: the queue's lanes), as a row of prio
-- (level, position). A group's state of that lane (its newest lease row, as
-- for any lane) is a floor, cursor (every position up to it is taken), and
-- levels: how far each level is taken above the floor. A receive takes the
-- levels above 0 first, highest first, each in position order; then the
-- other lanes; the levels below 0 last, only when the other lanes had
-- nothing more. Leases of the priority lane list their positions
-- (redo_pos), and expire, are redelivered and dead-lettered as any lane's
-- (e2_slow). Keyed messages keep their key's order whatever their priority.
-- A receive looks at the priority lane only once the queue has had an
-- unkeyed prioritized message (sluice.queue.prioritized: set by send,
-- send_batch and redrive, or by a receive when they could not,
-- sluice._mark_prioritized).

-- e2_prio_due__s: whether a receive has to look at the priority lane: a
-- prioritized message committed and not numbered yet (it must be numbered
-- before the receive takes from a backlog; in any slot: one sent before a
-- rotation is in the slot before, and the first receive after it numbers
-- it; past the newest cut's xmax, or of a transaction it found in progress,
-- as the cut's candidates are), positions in the lane past the group's
-- floor, or a lease of the lane ended.
--
-- Parameters:
--   p_group  group id
--   p_lane   the priority lane (the queue's lanes)
--   p_now    the receive's time
-- Returns: 'n' something to number first, 't' something to look at, NULL
--   nothing
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_prio_due__s(p_group int, p_lane smallint, p_now timestamptz)
RETURNS "char"
LANGUAGE plpgsql
AS $$
BEGIN
    RETURN (SELECT CASE WHEN EXISTS (SELECT 1 FROM msg m
                                     WHERE m.priority <> 0 AND m.khash IS NULL AND m.txid >= c.snap_xmax
                                       AND pg_visible_in_snapshot(m.txid, pg_current_snapshot()))
                              OR (cardinality(c.snap_xip) > 0
                                  AND EXISTS (SELECT 1 FROM msg m
                                              WHERE m.txid = ANY (c.snap_xip) AND m.priority <> 0 AND m.khash IS NULL
                                                AND pg_visible_in_snapshot(m.txid, pg_current_snapshot()))) THEN 'n'
                        WHEN c.heads[p_lane + 1] > coalesce(st.cursor, 0) OR st.next_exp <= p_now
                             OR st.old_due <= p_now OR st.slot IS NULL AND c.heads[p_lane + 1] > 0 THEN 't' END
            FROM (SELECT x.snap_xmax, x.snap_xip, x.heads FROM cut__s x ORDER BY x.cut_no DESC LIMIT 1) c
            LEFT JOIN LATERAL (SELECT s.slot, s.cursor, s.next_exp, s.old_due FROM lease__s s
                               WHERE s.group_id = p_group AND s.lane = p_lane
                               ORDER BY s.lease_no DESC LIMIT 1) st ON true);
END
$$;

-- e2_take_prio: take from the priority lane, if no other receive holds it:
-- its ended leases first (e2_slow), then up to p_need positions of the
-- levels of the sign asked for, highest level first, each in position
-- order.
--
-- Parameters:
--   q, g        queue and group
--   p_sign      1: the levels above 0; -1: those below 0
--   p_need, p_lease, p_consumer, p_now, p_slot: as e2_slow
-- Returns: the messages leased (as sluice.receive)
-- Calls: e2_slow, e2_prio_start
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_take_prio(q sluice.queue, g sluice.consumer_group, p_sign int, p_need int,
                                                    p_lease interval, p_consumer text, p_now timestamptz,
                                                    p_slot smallint)
RETURNS SETOF sluice.message
LANGUAGE plpgsql
AS $$
DECLARE
    v_lane constant smallint := q.lanes;
    st record;
    n int;
    v_levels sluice.e2_level[];
    v_out sluice.e2_wait[] := '{}';
    v_level int;
    v_cur bigint;
    v_got sluice.e2_wait[];
BEGIN
    IF NOT pg_try_advisory_xact_lock(sluice._lane_lock(g.id, v_lane)) THEN
        RETURN;
    END IF;
    p_now := clock_timestamp();   -- (its leases are dated from when the lane is held)
    SELECT s.* INTO st FROM lease s WHERE s.group_id = g.id AND s.lane = v_lane ORDER BY s.lease_no DESC LIMIT 1;
    IF NOT FOUND THEN
        -- (a group made before the lane: from the first position)
        PERFORM e2_prio_start(q.id, g.id, true, NULL);
        SELECT s.* INTO STRICT st FROM lease s WHERE s.group_id = g.id AND s.lane = v_lane ORDER BY s.lease_no DESC LIMIT 1;
    END IF;
    IF st.slot <> p_slot OR st.kind NOT IN ('r', 'c') OR st.next_exp <= p_now OR st.old_due <= p_now THEN
        -- the lane's ended leases, its state carried into the current slot
        RETURN QUERY SELECT * FROM e2_slow(q, g, v_lane, p_need, p_lease, p_consumer, p_now, p_slot);
        GET DIAGNOSTICS n = ROW_COUNT;
        p_need := p_need - n;
        SELECT s.* INTO STRICT st FROM lease s WHERE s.group_id = g.id AND s.lane = v_lane ORDER BY s.lease_no DESC LIMIT 1;
        IF p_need <= 0 OR st.slot <> p_slot THEN
            RETURN;
        END IF;
    END IF;
    v_levels := coalesce(st.levels, '{}');
    -- the levels of that sign, highest first (one probe each)
    v_level := CASE WHEN p_sign > 0 THEN (SELECT max(p.level) FROM prio p WHERE p.level > 0)
                    ELSE (SELECT max(p.level) FROM prio p WHERE p.level < 0) END;
    WHILE v_level IS NOT NULL AND cardinality(v_out) < p_need LOOP
        v_cur := greatest(st.cursor, (SELECT l.cursor FROM unnest(v_levels) l WHERE l.level = v_level));
        v_got := ARRAY(SELECT ROW(p.pos, NULL, p.id, p.txid, p.mslot, NULL)::sluice.e2_wait
                       FROM prio p WHERE p.level = v_level AND p.pos > v_cur AND (p.target IS NULL OR p.target = g.id)
                       ORDER BY p.pos LIMIT p_need - cardinality(v_out));
        IF cardinality(v_got) > 0 THEN
            v_out := v_out || v_got;
            v_levels := ARRAY(SELECT l FROM unnest(v_levels) l WHERE l.level <> v_level)
                        || ROW(v_level, v_got[cardinality(v_got)].pos)::sluice.e2_level;
        END IF;
        v_level := CASE WHEN p_sign > 0 THEN (SELECT max(p.level) FROM prio p WHERE p.level > 0 AND p.level < v_level)
                        ELSE (SELECT max(p.level) FROM prio p WHERE p.level < 0 AND p.level < v_level) END;
    END LOOP;
    IF cardinality(v_out) = 0 THEN
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM e2_lease_prio(g.id, st, v_out, v_levels, p_lease, p_consumer, p_now, p_slot);
END
$$;

-- e2_lease_prio: write the priority lane's new state, a lease of the
-- positions taken, and return their messages (e2_take_prio). The floor
-- rises to just below the first position above it not taken (of the next
-- 64: one look by the position index).
--
-- Parameters:
--   p_group     group id
--   st          the lane's state (its newest lease row)
--   p_out       the positions taken, by level then position
--   p_levels    the levels' cursors after the take
--   p_lease, p_consumer, p_now, p_slot: as e2_slow
-- Returns: the messages leased, highest level first
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_lease_prio(p_group int, st record, p_out sluice.e2_wait[],
                                                     p_levels sluice.e2_level[], p_lease interval, p_consumer text,
                                                     p_now timestamptz, p_slot smallint)
RETURNS SETOF sluice.message
LANGUAGE plpgsql
AS $$
DECLARE
    v_floor bigint := st.cursor;
    v_next bigint;
    v_last bigint;
BEGIN
    -- the floor: up to the first position above it not taken by its level
    -- (a position meant for another group counts as taken)
    SELECT min(p.pos) FILTER (WHERE (p.target IS NULL OR p.target = p_group)
                                AND p.pos > coalesce((SELECT l.cursor FROM unnest(p_levels) l WHERE l.level = p.level),
                                                     v_floor)),
           max(p.pos)
    INTO v_next, v_last
    FROM (SELECT p.pos, p.level, p.target FROM prio p WHERE p.pos > v_floor ORDER BY p.pos LIMIT 64) p;
    v_floor := coalesce(v_next - 1, v_last, v_floor);
    RETURN QUERY
    WITH o AS MATERIALIZED (
        SELECT o.pos, o.id, o.txid, o.k, m.attempt AS att, m.orig, m.body, m.headers, m.priority, m.sent_at
        FROM unnest(p_out) WITH ORDINALITY o(pos, khash, id, txid, mslot, attempt, k)
        JOIN msg m ON m.slot = o.mslot AND m.txid = o.txid AND m.id = o.id
    ), ins AS (
        INSERT INTO lease AS i (slot, group_id, lane, lease_no, kind, first_pos, last_pos, n, redo_pos, redo_att,
                                redo_ids, redo_txids, token, expires_at, delivered_at, cursor, scan_t, scan_no,
                                old_due, consumer, next_exp, levels)
        SELECT p_slot, p_group, st.lane, st.lease_no + 1, 'r', 1, 0, x.n, x.pos, x.att, x.ids, x.txids,
               1 + (random() * 4503599627370495)::bigint, p_now + p_lease, p_now, v_floor, st.scan_t, st.scan_no,
               st.old_due, p_consumer, least(st.next_exp, p_now + p_lease),
               nullif(ARRAY(SELECT l FROM unnest(p_levels) l WHERE l.cursor > v_floor), '{}')
        FROM (SELECT count(*)::int AS n, array_agg(o.pos ORDER BY o.k) AS pos, array_agg(o.att ORDER BY o.k) AS att,
                     array_agg(o.id ORDER BY o.k) AS ids, array_agg(o.txid ORDER BY o.k) AS txids FROM o) x
        ON CONFLICT DO NOTHING
        RETURNING i.lease_no, i.token, i.expires_at
    )
    SELECT coalesce(o.orig, o.id), o.body, o.headers, NULL::text, o.priority, o.att, o.sent_at,
           p_slot || '.' || o.pos || '.' || st.lane || '.' || ins.lease_no || '.' || ins.token, ins.expires_at, o.pos
    FROM ins CROSS JOIN o
    ORDER BY o.k;
END
$$;

-- e2_prio_start: the first state of a group's priority lane (as e2_start
-- for the other lanes): its floor before the first position it is to
-- receive.
--
-- Parameters: as e2_start
-- Tables: lease, one row (kind c)
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_prio_start(p_queue_id int, p_group int, p_earliest boolean,
                                                     p_ts timestamptz)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    q sluice.queue;
    v_slot smallint;
    v_head bigint;
BEGIN
    SELECT * INTO STRICT q FROM sluice.queue qq WHERE qq.id = p_queue_id;
    SELECT ns.slot INTO v_slot FROM sluice._slot_now(q.id) ns;
    SELECT coalesce(c.heads[q.lanes + 1], 0) INTO v_head FROM cut c ORDER BY c.cut_no DESC LIMIT 1;
    INSERT INTO lease (slot, group_id, lane, lease_no, kind, first_pos, last_pos, n, token, expires_at,
                       delivered_at, cursor, scan_t, scan_no, old_due, next_exp)
    VALUES (v_slot, p_group, q.lanes, 1, 'c', 1, 0, 0, 0, '-infinity', clock_timestamp(),
            CASE WHEN p_earliest THEN coalesce((SELECT min(p.pos) - 1 FROM prio p), v_head)
                 WHEN p_ts IS NULL THEN v_head
                 ELSE coalesce((SELECT max(p.pos) FROM prio p JOIN cut c ON c.cut_no = p.cut_no WHERE c.at < p_ts),
                               (SELECT min(p.pos) - 1 FROM prio p), v_head) END,
            '-infinity', 0, 'infinity', 'infinity')
    ON CONFLICT DO NOTHING;
END
$$;
