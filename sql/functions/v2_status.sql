-- Group: engine v2 - status, peek, leases, purge (templates, schema sluice_tmpl2)
--
-- These have the names of engine 1's (e_queue_status, e_peek, e_leases,
-- e_start_pos, e_purge), so that the public API calls a queue's copy
-- through EXECUTE whatever its engine.

-- e_queue_status: sluice.status of a queue of engine 2, one row per group.
-- Positions are per lane in engine 2: cursor and head are sums over the
-- lanes (how many positions the group has passed, how many are numbered),
-- lwm is the cursor less what is in flight or due again. ready counts
-- numbered positions after the cursors (a retry meant for another group
-- included; in the priority lane, those above its floor that their level
-- has not taken), positions of ended leases that are not completed (to be
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
CREATE OR REPLACE FUNCTION sluice_tmpl2.e_queue_status(q sluice.queue)
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
    SELECT q.name, g.name, s.head - s.cursor - p.passed + s.again + v_unnumbered, v_delayed, s.in_flight, d.dead,
           v_now - least(s.oldest, (SELECT min(m.sent_at) FROM msg m
                                    WHERE (m.txid >= c.snap_xmax OR m.txid = ANY (c.snap_xip))
                                      AND pg_visible_in_snapshot(m.txid, pg_current_snapshot())
                                      AND NOT pg_visible_in_snapshot(m.txid, c.snap)
                                      AND NOT coalesce(pg_visible_in_snapshot(m.txid, c.work_snap)
                                                       AND (m.txid, m.id) <= (c.work_txid, c.work_id), false))),
           s.head - s.cursor - p.passed + s.again + v_unnumbered + v_delayed + s.in_flight, s.cursor,
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
        FROM generate_series(0, q.lanes) l(lane)   -- (lanes: the priority lane)
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
        -- the priority lane's positions above its floor that are not ready:
        -- taken by their level, or meant for another group
        SELECT count(*) AS passed
        FROM (SELECT s.cursor, s.levels FROM lease s WHERE s.group_id = g.id AND s.lane = q.lanes
              ORDER BY s.lease_no DESC LIMIT 1) ps
        JOIN prio pp ON pp.pos > ps.cursor
        WHERE pp.target <> g.id OR pp.pos <= (SELECT l.cursor FROM unnest(ps.levels) l WHERE l.level = pp.level)
    ) p
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

-- e_peek: sluice.peek of a queue of engine 2 (see there): the messages the
-- queue stores (committed, not reclaimed), one row per message id, by id,
-- the first p_max after p_after. A retry copy (a nack's) or a redrive's
-- keeps its message's id (orig), body, headers, key and sent_at: it gets no
-- row of its own, its group (target) is named in resent_to (a keyed
-- message is retried in place, without a copy, as in engine 1). The row
-- shown is the one first sent while it is stored, else (reclaimed) the
-- earliest copy.
--
-- msg has no index on id (sends would pay for it): this reads it twice, the
-- first time for the ids only (the page's last id), the second for the rows
-- of the page, by sequential scans (enable_seqscan on, for this call only).
-- O(messages stored).
--
-- Parameters:
--   q        the queue
--   p_max    how many messages (1 to 1000, checked by the caller)
--   p_after  only ids above it (NULL: from the first)
-- Returns: SETOF sluice.stored_message, by id
CREATE OR REPLACE FUNCTION sluice_tmpl2.e_peek(q sluice.queue, p_max int, p_after bigint)
RETURNS SETOF sluice.stored_message
LANGUAGE plpgsql
AS $$
DECLARE
    v_after constant bigint := coalesce(p_after, -9223372036854775808);
    v_last bigint;
BEGIN
    -- (restored when the call returns: the copy's SET clause names it)
    PERFORM set_config('enable_seqscan', 'on', true);
    -- The page's last id: the p_max-th distinct id after p_after.
    SELECT max(x.pid) INTO v_last
    FROM (SELECT DISTINCT coalesce(m.orig, m.id) AS pid FROM msg m
          WHERE coalesce(m.orig, m.id) > v_after
          ORDER BY 1
          LIMIT p_max) x;
    IF v_last IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH page AS MATERIALIZED (
        SELECT coalesce(m.orig, m.id) AS pid, m.id, m.orig, m.target, m.body, m.headers, m.key, m.priority,
               m.sent_at, m.due
        FROM msg m
        WHERE coalesce(m.orig, m.id) > v_after AND coalesce(m.orig, m.id) <= v_last
    ), resent AS (
        SELECT c.pid, array_agg(DISTINCT g.name ORDER BY g.name) AS names
        FROM page c JOIN sluice.consumer_group g ON g.id = c.target
        GROUP BY c.pid
    )
    -- the row as first sent if it is still stored, else its earliest copy
    SELECT o.pid, o.body, o.headers, o.key, o.priority, o.sent_at, o.due, r.names
    FROM (SELECT DISTINCT ON (p.pid) p.* FROM page p ORDER BY p.pid, p.orig IS NOT NULL, p.id) o
    LEFT JOIN resent r ON r.pid = o.pid
    ORDER BY o.pid;
END
$$;

-- e_leases: sluice.leases of a queue of engine 2 (see there): the
-- deliveries in flight, the earliest expiry first, at most p_max. Engine 2
-- delivers a position again only once its lease has ended, so a lease that
-- has not ended holds the newest delivery of each of its positions: the
-- positions in flight are those of the leases (kind r) of a lane not
-- scanned past (or put off: a deferral, kind x, stands for the lease it
-- puts off) whose end (expires_at, or its latest extension's) is later than
-- now, that are not completed (acked, nacked, dead-lettered: ack rows, pos
-- 0 for the whole lease). A lease's positions are its range (those meant
-- for the group: a retry copy is for one group) and those it redelivers
-- (redo_pos, with their attempts). Each position shows its own end: its
-- lease's, or the latest extension of the whole lease or of the position. consumer and delivered_at are the
-- receive's that made the lease.
--
-- Costs O(groups x lanes + leases not scanned past + their positions), a
-- few index probes each.
--
-- Parameters:
--   q           the queue
--   p_group_id  one group's (NULL: every group of the queue)
--   p_max       how many rows (1 to 1000, checked by the caller)
-- Returns: SETOF sluice.lease_info, by expiry, then group name and position
CREATE OR REPLACE FUNCTION sluice_tmpl2.e_leases(q sluice.queue, p_group_id int, p_max int)
RETURNS SETOF sluice.lease_info
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_now constant timestamptz := clock_timestamp();
BEGIN
    RETURN QUERY
    WITH st AS MATERIALIZED (
        -- each lane's state: its newest lease row
        SELECT g.id AS group_id, g.name, l.lane::smallint AS lane, s.scan_t, s.scan_no
        FROM sluice.consumer_group g
        CROSS JOIN generate_series(0, q.lanes) l(lane)   -- (lanes: the priority lane)
        CROSS JOIN LATERAL (SELECT s.scan_t, s.scan_no FROM lease s WHERE s.group_id = g.id AND s.lane = l.lane
                            ORDER BY s.lease_no DESC LIMIT 1) s
        WHERE g.queue_id = q.id AND (p_group_id IS NULL OR g.id = p_group_id)
    ), cand AS MATERIALIZED (
        -- the leases not scanned past (a deferral: the lease it puts off)
        SELECT DISTINCT st.group_id, st.name, st.lane, CASE WHEN e.kind = 'x' THEN e.ref ELSE e.lease_no END AS lease_no
        FROM st
        JOIN lease e ON e.group_id = st.group_id AND e.lane = st.lane AND e.kind IN ('r', 'x')
                    AND e.expires_at > '-infinity' AND e.expires_at >= st.scan_t
                    AND (e.expires_at, e.lease_no) > (st.scan_t, st.scan_no)
    ), live AS MATERIALIZED (
        -- those not ended nor acked whole, with their end
        SELECT c.group_id, c.name, c.lane, r.lease_no, r.first_pos, r.last_pos, r.redo_pos, r.redo_ids, r.redo_txids,
               r.redo_att, r.consumer, r.delivered_at, x.ends
        FROM cand c
        JOIN lease r ON r.group_id = c.group_id AND r.lane = c.lane AND r.lease_no = c.lease_no AND r.kind = 'r'
        CROSS JOIN LATERAL (SELECT greatest(r.expires_at, (SELECT max(t.expires_at) FROM ext t
                                                           WHERE t.group_id = c.group_id AND t.lane = c.lane
                                                             AND t.lease_no = r.lease_no)) AS ends) x   -- (its latest position's)
        WHERE x.ends > v_now
          AND NOT EXISTS (SELECT 1 FROM ack a WHERE a.group_id = c.group_id AND a.lane = c.lane
                                                AND a.lease_no = r.lease_no AND a.pos = 0)
    ), pos AS (
        -- their positions: the range (those meant for the group), and the
        -- ones delivered again with their attempts
        SELECT l.group_id, l.name, l.lane, l.lease_no, l.consumer, l.delivered_at, l.ends, p.pos, b.id, b.txid,
               NULL::int AS att
        FROM live l
        CROSS JOIN LATERAL generate_series(l.first_pos, l.last_pos) p(pos)
        CROSS JOIN LATERAL (SELECT bb.ids[p.pos - bb.first_pos + 1] AS id, bb.txids[p.pos - bb.first_pos + 1] AS txid,
                                   bb.targets[p.pos - bb.first_pos + 1] AS tg
                            FROM batch bb WHERE bb.lane = l.lane AND bb.last_pos >= p.pos
                            ORDER BY bb.last_pos LIMIT 1) b
        WHERE b.tg IS NULL OR b.tg = l.group_id
        UNION ALL
        SELECT l.group_id, l.name, l.lane, l.lease_no, l.consumer, l.delivered_at, l.ends, u.pos, u.id, u.txid, u.att
        FROM live l CROSS JOIN LATERAL unnest(l.redo_pos, l.redo_ids, l.redo_txids, l.redo_att) u(pos, id, txid, att)
    )
    SELECT p.name, coalesce(m.orig, m.id), p.pos, coalesce(p.att, m.attempt), p.consumer, p.delivered_at, e.ends
    FROM pos p
    -- (each position's own end: the lease's, or its extensions', of the
    -- whole lease or of the position)
    CROSS JOIN LATERAL (SELECT greatest(r.expires_at, (SELECT max(t.expires_at) FROM ext t
                                                       WHERE t.group_id = p.group_id AND t.lane = p.lane
                                                         AND t.lease_no = p.lease_no AND t.pos IN (0, p.pos))) AS ends
                        FROM lease r WHERE r.group_id = p.group_id AND r.lane = p.lane AND r.lease_no = p.lease_no
                        LIMIT 1) e
    JOIN msg m ON m.txid = p.txid AND m.id = p.id
    WHERE e.ends > v_now
      AND NOT EXISTS (SELECT 1 FROM ack a WHERE a.group_id = p.group_id AND a.lane = p.lane
                                          AND a.lease_no = p.lease_no AND a.pos = p.pos)
    ORDER BY e.ends, p.name, p.pos
    LIMIT p_max;
END
$$;

-- e_purge: sluice.purge_queue of a queue of engine 2 (see there), as
-- engine 1's: every message the queue stores is removed, delivered or not,
-- due or delayed, with its leases, completions and dedup keys; groups stay
-- and go on with the messages sent afterwards; dead letters (in the
-- catalog) stay. The caller holds the queue's lock exclusively, so no call
-- on the queue is running; this takes the maint and cut locks (as engine
-- 1's) and the queue's nine tables in ACCESS EXCLUSIVE mode, counts the
-- messages stored, and truncates every slot (TRUNCATE, the engine's only
-- way of removing rows: no row is updated or deleted). Then, in the current
-- slot, a new cut that numbered nothing (snapshot 3:3:: the next cut
-- numbers every message committed from now on) with the lanes' heads kept
-- (positions go on), and every lane's new state (its lease_no after the
-- last, so that no receipt given before names a lease again; its cursor at
-- the head; nothing to scan).
--
-- Parameters:
--   q  the queue
-- Returns: how many messages were removed (retry and redrive copies count)
CREATE OR REPLACE FUNCTION sluice_tmpl2.e_purge(q sluice.queue)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    v_tables constant text := (SELECT string_agg(format('%I.%I', sluice._qschema(q.id), t), ', ')
                               FROM unnest(sluice._v2_tables()) t);
    c record;
    n bigint;
    v_gids int[];
    v_lanes smallint[];
    v_nos bigint[];
    v_epoch bigint;
    v_slot smallint;
BEGIN
    PERFORM pg_advisory_xact_lock(sluice._lock_ns('maint'), q.id);
    PERFORM pg_advisory_xact_lock(sluice._lock_ns('cut'), q.id);
    EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', v_tables);
    SELECT count(*) INTO n FROM msg;
    SELECT * INTO STRICT c FROM cut x ORDER BY x.cut_no DESC LIMIT 1;
    SELECT array_agg(g.id), array_agg(l.lane::smallint), array_agg(coalesce(s.lease_no, 0))
    INTO v_gids, v_lanes, v_nos
    FROM sluice.consumer_group g
    CROSS JOIN generate_series(0, q.lanes) l(lane)   -- (lanes: the priority lane)
    CROSS JOIN LATERAL (SELECT max(s.lease_no) AS lease_no FROM lease s WHERE s.group_id = g.id AND s.lane = l.lane) s
    WHERE g.queue_id = q.id;
    EXECUTE format('TRUNCATE %s', v_tables);
    SELECT ns.epoch, ns.slot INTO v_epoch, v_slot FROM sluice._slot_now(q.id) ns;
    INSERT INTO cut (slot, cut_no, snap, snap_xmax, snap_xip, heads, rr, due_upto, at, epoch)
    VALUES (v_slot, c.cut_no + 1, '3:3:', '3', '{}', c.heads, c.rr, clock_timestamp(), clock_timestamp(), v_epoch);
    INSERT INTO lease (slot, group_id, lane, lease_no, kind, first_pos, last_pos, n, token, expires_at,
                       delivered_at, cursor, scan_t, scan_no, old_due, next_exp)
    SELECT v_slot, u.g, u.l, u.no + 1, 'c', 1, 0, 0, 0, '-infinity', clock_timestamp(), coalesce(c.heads[u.l + 1], 0),
           '-infinity', 0, 'infinity', 'infinity'
    FROM unnest(v_gids, v_lanes, v_nos) u(g, l, no);
    RETURN n;
END
$$;
