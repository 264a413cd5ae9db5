-- Group: engine v2 - status, peek, leases (templates, schema sluice_tmpl2)
--
-- These have the names of engine 1's (e_status, e_peek, e_leases,
-- e_start_pos, e_purge), so that the public API calls a queue's copy
-- through EXECUTE whatever its engine.

-- e_status: sluice.status of a queue of engine 2, one row per group.
-- Positions are per lane in engine 2: cursor and head are sums over the
-- lanes (how many positions the group has passed, how many are numbered),
-- lwm is the cursor less what is in flight or due again. ready counts
-- numbered positions after the cursors (a retry meant for another group
-- included), positions of ended leases that are not completed (to be
-- delivered again) and the committed messages not numbered yet; in_flight
-- the positions of leases not ended (or extended) and not completed;
-- delayed the messages due later; oldest_pending_age the oldest of the
-- next position's message, the delivery of a lease not completed and a
-- message not numbered. Costs O(groups x lanes + leases not scanned past +
-- messages not numbered + pending).
--
-- Parameters:
--   q  the queue's row
-- Returns: SETOF sluice.queue_status
CREATE OR REPLACE FUNCTION sluice_tmpl2.e_status(q sluice.queue)
RETURNS SETOF sluice.queue_status
LANGUAGE plpgsql
AS $$
DECLARE
    v_now constant timestamptz := clock_timestamp();
    c record;
    v_unnumbered bigint;
    v_delayed bigint;
    -- (epochs from the oldest not reclaimed to the current one, as engine 1
    -- counts them: from the catalog, not by reading the cuts)
    v_live constant int := (SELECT max(e.epoch) FROM sluice.epoch e WHERE e.queue_id = q.id)
                           - coalesce((SELECT max(r.epoch) + 1 FROM sluice.reclaim r WHERE r.queue_id = q.id), 0) + 1;
BEGIN
    SELECT * INTO STRICT c FROM cut x ORDER BY x.cut_no DESC LIMIT 1;
    SELECT count(*) FILTER (WHERE m.due IS NULL OR m.due <= v_now), count(*) FILTER (WHERE m.due > v_now)
    INTO v_unnumbered, v_delayed
    FROM msg m
    WHERE (m.txid >= c.snap_xmax OR m.txid = ANY (c.snap_xip))
      AND pg_visible_in_snapshot(m.txid, pg_current_snapshot()) AND NOT pg_visible_in_snapshot(m.txid, c.snap)
      -- (not those a partial cut numbered)
      AND NOT coalesce(pg_visible_in_snapshot(m.txid, c.work_snap) AND (m.txid, m.id) <= (c.work_txid, c.work_id), false);
    v_delayed := v_delayed + (SELECT count(*) FROM pending p WHERE p.due > v_now);
    RETURN QUERY
    SELECT q.name, g.name, s.head - s.cursor + s.again + v_unnumbered, v_delayed, s.in_flight, d.dead,
           v_now - least(s.oldest, (SELECT min(m.sent_at) FROM msg m
                                    WHERE (m.txid >= c.snap_xmax OR m.txid = ANY (c.snap_xip))
                                      AND pg_visible_in_snapshot(m.txid, pg_current_snapshot())
                                      AND NOT pg_visible_in_snapshot(m.txid, c.snap)
                                      AND NOT coalesce(pg_visible_in_snapshot(m.txid, c.work_snap)
                                                       AND (m.txid, m.id) <= (c.work_txid, c.work_id), false))),
           s.head - s.cursor + s.again + v_unnumbered + v_delayed + s.in_flight, s.cursor,
           s.cursor - s.in_flight - s.again, s.head,
           v_live, false, 0::bigint, false, d.dead_lettered, h.pid, h.held_for
    FROM sluice.consumer_group g
    LEFT JOIN sluice._numbering_holder(q.id) h ON true
    CROSS JOIN LATERAL (
        SELECT sum(st.cursor)::bigint AS cursor, sum(c.heads[st.lane + 1])::bigint AS head,
               coalesce(sum(w.in_flight), 0)::bigint AS in_flight, coalesce(sum(w.again), 0)::bigint AS again,
               least(min(w.oldest), min((SELECT m.sent_at FROM batch b JOIN msg m ON m.slot = b.mslots[st.cursor + 1 - b.first_pos + 1]
                                                             AND m.txid = b.txids[st.cursor + 1 - b.first_pos + 1]
                                                             AND m.id = b.ids[st.cursor + 1 - b.first_pos + 1]
                                         WHERE b.lane = st.lane AND b.last_pos > st.cursor ORDER BY b.last_pos LIMIT 1))) AS oldest
        FROM generate_series(0, q.lanes - 1) l(lane)
        CROSS JOIN LATERAL (SELECT s.lane, s.cursor, s.scan_t, s.scan_no FROM lease s WHERE s.group_id = g.id AND s.lane = l.lane
                            ORDER BY s.lease_no DESC LIMIT 1) st
        CROSS JOIN LATERAL (
            -- the lane's leases not scanned past: those not ended (or
            -- extended) are in flight, the positions of the others that are
            -- not completed are to be delivered again (ready)
            SELECT sum(u.open) FILTER (WHERE u.live) AS in_flight, sum(u.open) FILTER (WHERE NOT u.live) AS again,
                   min(u.delivered_at) AS oldest
            FROM (SELECT e.delivered_at,
                         e.kind = 'x' OR e.expires_at > v_now
                         OR EXISTS (SELECT 1 FROM ext x WHERE x.group_id = g.id AND x.lane = l.lane
                                                          AND x.lease_no = e.lease_no AND x.expires_at > v_now) AS live,
                         CASE WHEN EXISTS (SELECT 1 FROM ack a WHERE a.group_id = g.id AND a.lane = l.lane
                                                                 AND a.lease_no = r.lease_no AND a.pos = 0) THEN 0
                              ELSE r.n - (SELECT count(*) FROM ack a WHERE a.group_id = g.id AND a.lane = l.lane
                                                                       AND a.lease_no = r.lease_no) END AS open
                  FROM lease e
                  -- (a deferral stands for the lease it puts off)
                  JOIN LATERAL (SELECT r.lease_no, r.n FROM lease r
                                WHERE r.group_id = g.id AND r.lane = l.lane
                                  AND r.lease_no = CASE WHEN e.kind = 'x' THEN e.ref ELSE e.lease_no END
                                LIMIT 1) r ON true
                  WHERE e.group_id = g.id AND e.lane = l.lane AND e.expires_at > '-infinity'
                    AND e.expires_at >= st.scan_t AND (e.expires_at, e.lease_no) > (st.scan_t, st.scan_no)) u
        ) w
    ) s
    CROSS JOIN LATERAL (
        SELECT count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM sluice.redrive r WHERE r.dead_letter_id = dl.id)) AS dead,
               count(*) AS dead_lettered
        FROM sluice.dead_letter dl WHERE dl.queue_id = q.id AND dl.group_id = g.id
    ) d
    WHERE g.queue_id = q.id
    ORDER BY g.name;
END
$$;

-- e_start_pos: engine 1's start of a new group; in engine 2 the start is
-- written per lane once the group exists (e2_start): 0 here.
CREATE OR REPLACE FUNCTION sluice_tmpl2.e_start_pos(p_queue_id int, p_earliest boolean, p_ts timestamptz)
RETURNS bigint
LANGUAGE plpgsql
AS $$
BEGIN
    RETURN 0;
END
$$;

-- e_peek, e_leases, e_purge: not yet in engine 2 (SL011).
CREATE OR REPLACE FUNCTION sluice_tmpl2.e_peek(q sluice.queue, p_max int, p_after bigint)
RETURNS SETOF sluice.stored_message
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM sluice._v2_unsupported('peek');
END
$$;

CREATE OR REPLACE FUNCTION sluice_tmpl2.e_leases(q sluice.queue, p_group_id int, p_max int)
RETURNS SETOF sluice.lease_info
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM sluice._v2_unsupported('leases');
END
$$;

CREATE OR REPLACE FUNCTION sluice_tmpl2.e_purge(q sluice.queue)
RETURNS bigint
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM sluice._v2_unsupported('purge_queue');
    RETURN 0;
END
$$;
