-- Group: engine v2 - the receive's hot path (templates, schema sluice_tmpl2)
--
-- A lane of a group is served by one receive at a time (its try-lock, held
-- until the receive commits); a receive takes the first lane, in turn from
-- a start that differs per session, that has work and whose lock is free.
-- e2_lane__s and e2_take__s are copied once per slot (see
-- sluice._instantiate_v2): their statements name only that slot's leaves, so the planner sets up no scan of
-- another slot. It serves a lane whose state is in the slot and needs
-- nothing but new positions (and passing expired leases that were settled);
-- whatever else (a redelivery, a lane whose state or next batch lies in an
-- older slot, a deferred lease) it declines, keeping the lane's lock for the
-- slow path (e2_slow), which reads through the parents. The template is
-- copied a last time with __s replaced by nothing: e2_take, the same
-- statement over the parents, which the slow path calls for new positions.

-- e2_lane__s: the first lane of a group, in turn from p_start, that has
-- work (new positions, an expired lease past its scan point, an older slot's
-- lease due, or no state in this slot) and whose try-lock this receive gets.
-- The statement's snapshot precedes the lock: the take reads the lane in a
-- statement of its own, after it.
--
-- Parameters:
--   p_group  group id
--   p_lanes  the queue's lanes
--   p_start  the lane to look at first
--   p_now    the receive's time
-- Returns: the lane, locked until the transaction ends; NULL: no free lane
--   has work
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_lane__s(p_group int, p_lanes int, p_start int, p_now timestamptz)
RETURNS smallint
LANGUAGE plpgsql
AS $$
BEGIN
    RETURN (
        SELECT l.lane
        FROM (SELECT c.heads FROM cut__s c ORDER BY c.cut_no DESC LIMIT 1) h
        CROSS JOIN generate_series(0, p_lanes - 1) o
        CROSS JOIN LATERAL (SELECT ((o + p_start) % p_lanes)::smallint AS lane) l
        LEFT JOIN LATERAL (SELECT s.lease_no, s.cursor, s.scan_t, s.scan_no, s.old_due FROM lease__s s
                           WHERE s.group_id = p_group AND s.lane = l.lane
                           ORDER BY s.lease_no DESC LIMIT 1) st ON true
        WHERE CASE WHEN st.lease_no IS NULL OR h.heads[l.lane + 1] > st.cursor OR st.old_due <= p_now
                        OR EXISTS (SELECT 1 FROM lease__s e
                                   WHERE e.group_id = p_group AND e.lane = l.lane
                                     AND e.expires_at >= st.scan_t AND e.expires_at > '-infinity' AND e.expires_at <= p_now
                                     AND (e.expires_at, e.lease_no) > (st.scan_t, st.scan_no))
                   THEN pg_try_advisory_xact_lock(sluice._lane_lock(p_group, l.lane)) ELSE false END
        LIMIT 1);
END
$$;

-- e2_take__s: take up to p_need new positions from a lane the caller has
-- locked, in one statement, and write the lane's new state. Its snapshot
-- follows the lock, so it reads the lane's newest state; it serves the lane
-- only while this copy's slot is still the current one (else a newer
-- slot may hold the lane's state: the slow path looks).
--
-- Parameters:
--   p_queue_id  queue id
--   p_group     group id
--   p_lane      the lane (locked)
--   p_need      how many positions to take at most
--   p_lease     lease duration
--   p_consumer  the consumer's name (or NULL)
--   p_now       the receive's time
--   p_slot      the current slot as the receive read it (this copy's; for
--               the copy through the parents, where its row goes)
-- Returns: declined (true: the slow path is to serve the lane; nothing was
--   written), or what was leased: lease_no, token, expires_at (NULL when
--   nothing: the new state only passed settled leases) and the positions
--   with their message ids and txids
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_take__s(p_queue_id int, p_group int, p_lane smallint, p_need int,
                                                  p_lease interval, p_consumer text, p_now timestamptz,
                                                  p_slot smallint,
                                                  OUT declined boolean, OUT lease_no bigint,
                                                  OUT token bigint, OUT expires_at timestamptz,
                                                  OUT pos bigint[], OUT ids bigint[], OUT txids xid8[])
RETURNS record
LANGUAGE plpgsql
AS $$
BEGIN
    WITH ln AS MATERIALIZED (
        SELECT p_lane AS lane, c.heads[p_lane + 1] AS head, st.lease_no, st.cursor, st.scan_t, st.scan_no, st.old_due
        FROM (SELECT c.heads FROM cut__s c ORDER BY c.cut_no DESC LIMIT 1) c
        CROSS JOIN LATERAL (SELECT s.lease_no, s.cursor, s.scan_t, s.scan_no, s.old_due FROM lease__s s
                            WHERE s.group_id = p_group AND s.lane = p_lane
                            ORDER BY s.lease_no DESC LIMIT 1) st
        WHERE (SELECT ns.slot FROM sluice._slot_now(p_queue_id) ns) = p_slot
    ), ex AS MATERIALIZED (
        -- the lane's next expired lease past its scan point, and whether it
        -- is settled (acked whole, or every position acked, nacked or dead)
        SELECT e.expires_at, e.lease_no,
               e.kind = 'r' AND (EXISTS (SELECT 1 FROM ack__s a WHERE a.group_id = p_group AND a.lane = ln.lane
                                                               AND a.lease_no = e.lease_no AND a.pos = 0)
                                 OR (SELECT count(*) FROM ack__s a WHERE a.group_id = p_group AND a.lane = ln.lane
                                                                     AND a.lease_no = e.lease_no)
                                    = e.n)
               AND NOT EXISTS (SELECT 1 FROM ext__s x WHERE x.group_id = p_group AND x.lane = ln.lane
                                                        AND x.lease_no = e.lease_no AND x.expires_at > p_now) AS settled
        FROM ln CROSS JOIN LATERAL (
            SELECT e.* FROM lease__s e
            WHERE e.group_id = p_group AND e.lane = ln.lane
              AND e.expires_at >= ln.scan_t AND e.expires_at > '-infinity' AND e.expires_at <= p_now
              AND (e.expires_at, e.lease_no) > (ln.scan_t, ln.scan_no)
            ORDER BY e.expires_at, e.lease_no LIMIT 1) e
    ), ok AS MATERIALIZED (
        -- served here: a state, no old lease due, no unsettled expired lease
        SELECT ln.*, ex.expires_at AS ex_t, ex.lease_no AS ex_no
        FROM ln LEFT JOIN ex ON true
        WHERE ln.lease_no IS NOT NULL AND ln.old_due > p_now AND coalesce(ex.settled, true)
    ), b AS MATERIALIZED (
        -- the batches after the cursor, and the window of each to look at
        SELECT bb.first_pos, bb.last_pos, bb.ids, bb.txids, bb.targets,
               greatest(ok.cursor - bb.first_pos + 2, 1)::int AS vfrom,
               least(bb.last_pos - bb.first_pos + 1, greatest(ok.cursor - bb.first_pos + 2, 1) + p_need + 15)::int AS vto
        FROM ok CROSS JOIN LATERAL (SELECT * FROM batch__s bb
                                    WHERE bb.lane = ok.lane AND bb.last_pos > ok.cursor
                                    ORDER BY bb.last_pos LIMIT least(p_need, 4)) bb
    ), t AS MATERIALIZED (
        SELECT count(*)::int AS n, max(f.pos) AS last, array_agg(f.pos ORDER BY f.pos) AS pos,
               array_agg(f.id ORDER BY f.pos) AS ids, array_agg(f.txid ORDER BY f.pos) AS txids
        FROM (SELECT b.first_pos + b.vfrom + x.o - 2 AS pos, x.id, x.txid
              FROM b CROSS JOIN LATERAL unnest(b.ids[b.vfrom:b.vto], b.txids[b.vfrom:b.vto], b.targets[b.vfrom:b.vto])
                                        WITH ORDINALITY AS x(id, txid, tg, o)
              WHERE x.tg IS NULL OR x.tg = p_group
              ORDER BY b.last_pos, x.o LIMIT p_need) f
    ), nx AS MATERIALIZED (
        -- the new cursor: the last taken with p_need taken, else the end of
        -- what was looked at; NULL when the next position is not in this
        -- slot's batches (the slow path reads the older ones)
        SELECT ok.*, t.n, t.pos, t.ids, t.txids,
               CASE WHEN t.n = p_need THEN t.last
                    WHEN NOT EXISTS (SELECT FROM b) THEN CASE WHEN ok.head > ok.cursor THEN NULL ELSE ok.cursor END
                    WHEN (SELECT min(b.first_pos + b.vfrom - 1) FROM b) <> ok.cursor + 1 THEN NULL
                    ELSE (SELECT max(b.first_pos + b.vto - 1) FROM b) END AS new_cursor
        FROM ok CROSS JOIN t
    ), ins AS (
        INSERT INTO lease__s AS i (slot, group_id, lane, lease_no, kind, first_pos, last_pos, n, token, expires_at,
                                   delivered_at, cursor, scan_t, scan_no, old_due, consumer)
        SELECT p_slot, p_group, nx.lane, nx.lease_no + 1, CASE WHEN nx.n > 0 THEN 'r' ELSE 'c' END,
               coalesce(nx.pos[1], 1), coalesce(nx.pos[nx.n], 0), nx.n,
               1 + (random() * 4503599627370495)::bigint,
               CASE WHEN nx.n > 0 THEN p_now + p_lease ELSE '-infinity' END, p_now, nx.new_cursor,
               coalesce(nx.ex_t, nx.scan_t), coalesce(nx.ex_no, nx.scan_no), nx.old_due, p_consumer
        FROM nx
        WHERE nx.new_cursor IS NOT NULL AND (nx.n > 0 OR nx.ex_no IS NOT NULL OR nx.new_cursor > nx.cursor)
        RETURNING i.lane, i.lease_no, i.token, i.expires_at
    )
    SELECT NOT EXISTS (SELECT FROM nx WHERE nx.new_cursor IS NOT NULL),
           ins.lease_no, ins.token, ins.expires_at, nx.pos, nx.ids, nx.txids
    INTO declined, lease_no, token, expires_at, pos, ids, txids
    FROM (SELECT 1) one LEFT JOIN ins ON true LEFT JOIN nx ON true;
END
$$;
