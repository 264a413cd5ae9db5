-- Group: engine v2 - status, peek, leases, purge (templates, schema sluice_tmpl2)
--
-- These have the names of engine 1's (e_queue_status, e_peek, e_leases,
-- e_start_pos, e_purge), so that the public API calls a queue's copy
-- through EXECUTE whatever its engine.

-- e2_status_unnumbered: what sluice.status counts of the messages no cut
-- has numbered yet (engine 2's e_unnumbered), read at most p_limit + 1 of
-- each of three kinds, so that status costs the same whatever the size of
-- a backlog nobody has received from; beyond that, an estimate (docs/sql.md,
-- sluice.status, gives the rule). Where the numbering stands is the newest
-- cut: every message visible in its snapshot is numbered, except, when it
-- numbered a snapshot only in part (work_snap), the messages of that
-- snapshot after (work_txid, work_id). So, in the index order the next cuts
-- take them (msg (txid, id)):
--
--   1. messages of the transactions in progress at the cut's snapshot (and,
--      of a snapshot numbered in part, those in progress at it that the cut
--      had not reached): point lookups by txid. More than p_limit: the rest
--      from each transaction's first and last id.
--   2. pending messages (numbered when due) that came due since the cut
--      (pending (due)). More than p_limit: the rest is not counted.
--   3. messages of the transactions that began after the cut's snapshot
--      (from where a cut in part stopped), in (txid, id) order. More than
--      p_limit: the rest is the ids the queue's sequence gave out after the
--      last one counted, less the delayed messages among them.
--
-- And every message due later (e2_status_delayed), whether a cut has seen
-- it (pending) or not: none of them has a position. O(delayed).
--
-- Parameters:
--   q                               the queue
--   p_xmax, p_xip                   the newest cut's snapshot's xmax and xip
--   p_work_snap, p_work_txid,       the snapshot it numbered in part, and
--   p_work_id                       where it stopped (NULL: none)
--   p_due_upto                      pending messages due by then are numbered
--   p_now                           the time status is computed for
--   p_limit                         how many of each kind to count at most
-- Calls: e2_status_span, e2_status_delayed
-- Returns: per target group (NULL: any group): tgs, due (due now), delayed
--   (due later, all of them), retries (of those, retry copies: a nack's),
--   oldest (earliest sent_at of both); ukeys, utgs: key hash and target of
--   the keyed due messages read; rest: estimated due messages beyond those
--   read (meant for any group); estimated: whether a kind had more than
--   p_limit messages
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_status_unnumbered(
    q sluice.queue, p_xmax xid8, p_xip xid8[], p_work_snap pg_snapshot, p_work_txid xid8,
    p_work_id bigint, p_due_upto timestamptz, p_now timestamptz, p_limit bigint,
    OUT tgs int[], OUT due bigint[], OUT delayed bigint[], OUT retries bigint[], OUT oldest timestamptz[],
    OUT ukeys bigint[], OUT utgs int[], OUT rest bigint, OUT estimated boolean)
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_part boolean := p_work_snap IS NOT NULL;
    -- not numbered from (v_rtxid, v_rid) on (3); of v_ptxid, the ids after
    -- v_pid (1: a cut in part stopped in a transaction of the xip)
    v_rtxid xid8 := CASE WHEN v_part AND p_work_txid >= p_xmax THEN p_work_txid ELSE p_xmax END;
    v_rid bigint := CASE WHEN v_part AND p_work_txid >= p_xmax THEN p_work_id ELSE -1 END;
    v_ptxid xid8 := CASE WHEN v_part AND p_work_txid < p_xmax THEN p_work_txid END;
    v_pid bigint := CASE WHEN v_part AND p_work_txid < p_xmax THEN p_work_id END;
    v_full xid8[];   -- transactions none of whose messages is numbered
    r record;
    v_last bigint;
    v_after bigint;
BEGIN
    v_full := ARRAY(SELECT x.x FROM unnest(p_xip) x(x)
                    WHERE NOT v_part OR NOT pg_visible_in_snapshot(x.x, p_work_snap) OR x.x > p_work_txid
                    UNION
                    SELECT x.x FROM pg_snapshot_xip(p_work_snap) x(x)
                    WHERE v_part AND x.x >= p_xmax AND x.x < p_work_txid);
    WITH t AS (
        SELECT x.x AS txid, (-1)::bigint AS after FROM unnest(v_full) x(x)
        UNION ALL
        SELECT v_ptxid, v_pid WHERE v_ptxid IS NOT NULL
    ), f AS MATERIALIZED (
        SELECT x.*, row_number() OVER () AS o
        FROM (SELECT m.* FROM t CROSS JOIN LATERAL (SELECT m.id, m.target, m.due, m.sent_at, m.khash FROM msg m
                                                    WHERE m.txid = t.txid AND m.id > t.after
                                                    ORDER BY m.id LIMIT p_limit + 1) m
              LIMIT p_limit + 1) x
    ), d AS MATERIALIZED (
        SELECT x.*, row_number() OVER (ORDER BY x.pdue) AS o
        FROM (SELECT p.due AS pdue, m.id, m.target, m.due, m.sent_at, m.khash
              FROM pending p JOIN msg m ON m.slot = p.mslot AND m.txid = p.txid AND m.id = p.id
              WHERE p.due > p_due_upto AND p.due <= p_now
              ORDER BY p.due LIMIT p_limit + 1) x
    ), b AS MATERIALIZED (
        SELECT x.*, row_number() OVER (ORDER BY x.txid, x.id) AS o
        FROM (SELECT m.id, m.txid, m.target, m.due, m.sent_at, m.khash FROM msg m
              WHERE (m.txid, m.id) > (v_rtxid, v_rid)
              ORDER BY m.txid, m.id LIMIT p_limit + 1) x
    ), rd AS (
        -- (those due later are counted below, with every delayed message)
        SELECT f.target, f.sent_at, f.khash FROM f WHERE f.o <= p_limit AND (f.due IS NULL OR f.due <= p_now)
        UNION ALL
        SELECT d.target, d.sent_at, d.khash FROM d WHERE d.o <= p_limit
        UNION ALL
        SELECT b.target, b.sent_at, b.khash FROM b WHERE b.o <= p_limit AND (b.due IS NULL OR b.due <= p_now)
    )
    SELECT EXISTS (SELECT 1 FROM f WHERE f.o > p_limit) AS f_over,
           EXISTS (SELECT 1 FROM d WHERE d.o > p_limit) AS d_over,
           EXISTS (SELECT 1 FROM b WHERE b.o > p_limit) AS b_over,
           -- the id of the last message of 3 counted (none: the one before the first)
           coalesce((SELECT b.id FROM b WHERE b.o = p_limit), (SELECT b.id - 1 FROM b WHERE b.o = 1)) AS b_last,
           (SELECT count(*) FROM f WHERE f.o <= p_limit) AS f_n,
           (SELECT array_agg(a.tg ORDER BY a.tg) FROM (SELECT rd.target AS tg FROM rd GROUP BY 1) a) AS tgs,
           (SELECT array_agg(a.n ORDER BY a.tg) FROM (SELECT rd.target AS tg, count(*) AS n FROM rd GROUP BY 1) a) AS due,
           (SELECT array_agg(a.o ORDER BY a.tg) FROM (SELECT rd.target AS tg, min(rd.sent_at) AS o FROM rd GROUP BY 1) a)
               AS oldest,
           (SELECT array_agg(rd.khash) FROM rd WHERE rd.khash IS NOT NULL) AS ukeys,
           (SELECT array_agg(rd.target) FROM rd WHERE rd.khash IS NOT NULL) AS utgs
    INTO r;
    ukeys := r.ukeys;
    utgs := r.utgs;
    estimated := r.f_over OR r.d_over OR r.b_over;
    rest := 0;
    v_last := CASE WHEN r.b_over THEN r.b_last END;
    IF r.f_over THEN
        rest := greatest(0, e2_status_span(v_full, v_ptxid, v_pid) - r.f_n);
    END IF;
    SELECT * INTO tgs, due, delayed, retries, oldest, v_after FROM e2_status_delayed(p_now, v_last, r.tgs, r.due, r.oldest);
    IF r.b_over THEN
        rest := rest + greatest(0, coalesce(pg_sequence_last_value(q.id_seq), 0) - v_last - v_after);
    END IF;
END
$$;

-- e2_status_span: how many messages the transactions in progress at the
-- newest cut have (e2_status_unnumbered's estimate of its kind 1): a
-- transaction's messages have the ids it drew, first to last. Two index
-- probes per transaction.
--
-- Parameters:
--   p_txids        transactions none of whose messages is numbered
--   p_ptxid, p_pid one whose messages after p_pid are not (NULL: none)
-- Returns: the sum of their id spans
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_status_span(p_txids xid8[], p_ptxid xid8, p_pid bigint)
RETURNS bigint
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN (SELECT coalesce(sum(s.hi - s.lo + 1), 0)
            FROM (SELECT x.x AS txid, (-1)::bigint AS after FROM unnest(p_txids) x(x)
                  UNION ALL
                  SELECT p_ptxid, p_pid WHERE p_ptxid IS NOT NULL) t
            CROSS JOIN LATERAL (
                SELECT (SELECT m.id FROM msg m WHERE m.txid = t.txid AND m.id > t.after ORDER BY m.id LIMIT 1) AS lo,
                       (SELECT m.id FROM msg m WHERE m.txid = t.txid AND m.id > t.after
                        ORDER BY m.id DESC LIMIT 1) AS hi) s
            WHERE s.lo IS NOT NULL);
END
$$;

-- e2_status_delayed: every message due later (msg (due), a partial index:
-- O(delayed)), by target group, merged into e2_status_unnumbered's arrays
-- of the messages due now (see there).
--
-- Parameters:
--   p_now                  the time status is computed for
--   p_last                 the last id of kind 3 counted (NULL: none)
--   p_tgs, p_due, p_oldest the messages due now read, by target group
-- Returns: tgs, due, delayed, retries, oldest (by target group, as
--   e2_status_unnumbered), after_last: the delayed messages of an id above
--   p_last
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_status_delayed(p_now timestamptz, p_last bigint, p_tgs int[], p_due bigint[],
                                                         p_oldest timestamptz[], OUT tgs int[], OUT due bigint[],
                                                         OUT delayed bigint[], OUT retries bigint[],
                                                         OUT oldest timestamptz[], OUT after_last bigint)
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    WITH dl AS (
        SELECT m.target AS tg, count(*) AS n, count(*) FILTER (WHERE m.orig IS NOT NULL) AS rt,
               min(m.sent_at) AS o, count(*) FILTER (WHERE m.id > p_last) AS after_last
        FROM msg m
        WHERE m.due > p_now
        GROUP BY 1
    ), a AS (
        SELECT coalesce(u.tg, dl.tg) AS tg, coalesce(u.due, 0) AS due, coalesce(dl.n, 0) AS delayed,
               coalesce(dl.rt, 0) AS rt, least(u.o, dl.o) AS o
        FROM unnest(p_tgs, p_due, p_oldest) AS u(tg, due, o)
        FULL JOIN dl ON coalesce(dl.tg, 0) = coalesce(u.tg, 0)   -- (group ids are above 0)
    )
    SELECT coalesce(array_agg(a.tg ORDER BY a.tg), '{}'), coalesce(array_agg(a.due ORDER BY a.tg), '{}'),
           coalesce(array_agg(a.delayed ORDER BY a.tg), '{}'), coalesce(array_agg(a.rt ORDER BY a.tg), '{}'),
           coalesce(array_agg(a.o ORDER BY a.tg), '{}'), (SELECT coalesce(sum(dl.after_last), 0) FROM dl)
    INTO tgs, due, delayed, retries, oldest, after_last
    FROM a;
END
$$;

-- e2_status_lane: what sluice.status counts of one lane of a group (engine
-- 2), from the lane's state (its newest lease row; no row: no state yet,
-- cursor NULL):
--
--   * the leases not scanned past (a deferral stands for the lease it puts
--     off): their positions not completed are in flight while the lease
--     has not ended (or was extended), else due again (ready);
--   * the positions numbered after the cursor that are the group's (not a
--     retry or redrive copy meant for another group; in the priority lane,
--     those above its floor that their level has not taken);
--   * the lane's waiting positions (keyed, passed while their key was
--     held): a single one (a retry in place, or one an expired lease
--     parked) and a key's tail (every position of the key meant for the
--     group from the tail's start up to the cursor). A retry in place whose
--     key is held until its backoff has passed is delayed (parked), the
--     others would be ready;
--   * the keyed ones among all these, for the waiting count (e_queue_status):
--     key hash, position, how many, and whether they would be ready (a
--     leased one is not, nor a parked retry); the keys' positions in leases
--     are listed by the lane's held keys (a key in flight is held by its
--     lease);
--   * the lane's low-water mark: its first position not completed (of a
--     lease not scanned past, or waiting), else cursor + 1; and the sent_at
--     of that position's message.
--
-- Costs O(leases not scanned past and their positions + batch rows after
-- the cursor (and in the tails) + waiting positions), index probes.
--
-- Parameters:
--   p_group  the group
--   p_lane   the lane (p_prio: the priority lane)
--   p_head   the lane's head (of the newest cut status read; a cursor
--            past it, from a later cut, counts as the head)
--   p_now    the time status is computed for
-- Returns: cur (the cursor), in_flight, again (due again), nafter (the group's
--   positions after the cursor), waits (waiting positions that would be
--   ready), parked (retries in place due later), lwm, oldest (sent_at at
--   lwm), kh, kpos, kn, kready (the keyed ones, see above)
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_status_lane(
    p_group int, p_lane smallint, p_prio boolean, p_head bigint, p_now timestamptz,
    OUT cur bigint, OUT in_flight bigint, OUT again bigint, OUT nafter bigint, OUT waits bigint, OUT parked bigint,
    OUT lwm bigint, OUT oldest timestamptz, OUT kh bigint[], OUT kpos bigint[], OUT kn bigint[], OUT kready boolean[])
LANGUAGE plpgsql STABLE
AS $$
#variable_conflict use_column
DECLARE
    st record;
    ls record;
    w record;
BEGIN
    SELECT s.cursor, s.scan_t, s.scan_no, s.held, s.waiting, s.levels INTO st
    FROM lease s WHERE s.group_id = p_group AND s.lane = p_lane ORDER BY s.lease_no DESC LIMIT 1;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    cur := st.cursor;
    -- (a cut committed after status read p_head and taken since leaves the
    -- cursor past it: this lane has nothing numbered after the cursor then)
    p_head := greatest(p_head, st.cursor);
    SELECT * INTO ls FROM e2_status_leases(p_group, p_lane, st.scan_t, st.scan_no, p_now);
    in_flight := ls.in_flight;
    again := ls.again;
    lwm := least(st.cursor + 1, ls.first_open);
    IF p_prio THEN
        -- above the floor: not the positions taken by their level, nor
        -- those meant for another group
        nafter := 0;
        waits := 0;
        parked := 0;
        IF p_head > st.cursor THEN
            nafter := p_head - st.cursor - (SELECT count(*) FROM prio pp
                                           WHERE pp.pos BETWEEN st.cursor + 1 AND p_head
                                             AND (pp.target <> p_group
                                                  OR pp.pos <= (SELECT l.cursor FROM unnest(st.levels) l
                                                                WHERE l.level = pp.level)));
        END IF;
        IF lwm <= p_head THEN
            SELECT m.sent_at INTO oldest
            FROM prio pp JOIN msg m ON m.slot = pp.mslot AND m.txid = pp.txid AND m.id = pp.id
            WHERE pp.pos = lwm LIMIT 1;
        END IF;
        RETURN;
    END IF;
    nafter := p_head - st.cursor;
    waits := 0;
    parked := 0;
    IF st.held IS NULL AND st.waiting IS NULL AND nafter > 0 THEN
        -- (nothing held or waiting: the positions after the cursor only,
        -- those meant for other groups and the keyed ones)
        SELECT nafter - count(*) FILTER (WHERE u.tg <> p_group),
               array_agg(u.k) FILTER (WHERE u.k IS NOT NULL AND (u.tg IS NULL OR u.tg = p_group)),
               array_agg(b.first_pos + u.o - 1) FILTER (WHERE u.k IS NOT NULL AND (u.tg IS NULL OR u.tg = p_group))
        INTO nafter, kh, kpos
        FROM batch b CROSS JOIN LATERAL unnest(b.targets, b.khashes) WITH ORDINALITY u(tg, k, o)
        WHERE b.lane = p_lane AND b.last_pos > st.cursor AND b.first_pos <= p_head
          AND (b.targets IS NOT NULL OR b.khashes IS NOT NULL)
          AND b.first_pos + u.o - 1 BETWEEN st.cursor + 1 AND p_head;
        IF kh IS NOT NULL THEN
            kn := array_fill(1::bigint, ARRAY[cardinality(kh)]);
            kready := array_fill(true, ARRAY[cardinality(kh)]);
        END IF;
    ELSIF st.held IS NOT NULL OR st.waiting IS NOT NULL OR nafter > 0 THEN
        SELECT * INTO w FROM e2_status_keyed(p_group, p_lane, st.cursor, p_head, st.held, st.waiting, p_now);
        nafter := nafter - w.others;
        waits := w.waits;
        parked := w.parked;
        lwm := least(lwm, w.first_wait);
        kh := w.kh;
        kpos := w.kpos;
        kn := w.kn;
        kready := w.kready;
    END IF;
    IF lwm <= p_head THEN
        SELECT m.sent_at INTO oldest
        FROM (SELECT b.* FROM batch b WHERE b.lane = p_lane AND b.last_pos >= lwm ORDER BY b.last_pos LIMIT 1) b
        JOIN msg m ON m.slot = b.mslots[lwm - b.first_pos + 1] AND m.txid = b.txids[lwm - b.first_pos + 1]
                  AND m.id = b.ids[lwm - b.first_pos + 1];
    END IF;
END
$$;

-- e2_status_leases: e2_status_lane's look at a lane's leases not scanned
-- past (a deferral stands for the lease it puts off): their positions not
-- completed are in flight while the lease has not ended (its end, or its
-- latest extension's, is after now), else due again; and the first of
-- them. A lease's completions are read once (ack: the positions completed
-- one by one, 0 for the whole lease); a range with positions meant for
-- other groups (n short of the range) looks at its batch rows for them.
--
-- Parameters:
--   p_group, p_lane     the group and lane
--   p_scan_t, p_scan_no the lane's expiry scan point (its state)
--   p_now               the time status is computed for
-- Returns: in_flight, again, first_open (NULL: none)
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_status_leases(p_group int, p_lane smallint, p_scan_t timestamptz,
                                                        p_scan_no bigint, p_now timestamptz, OUT in_flight bigint,
                                                        OUT again bigint, OUT first_open bigint)
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    -- the leases not scanned past, with their completions (acked: the
    -- positions completed one by one; 0 for the whole lease)
    SELECT coalesce(sum(u.open) FILTER (WHERE u.live), 0), coalesce(sum(u.open) FILTER (WHERE NOT u.live), 0),
           min(u.first_open)
    INTO in_flight, again, first_open
    FROM (SELECT r.live, r.open,
                 CASE WHEN r.open = 0 THEN NULL
                      WHEN r.redo_pos IS NOT NULL
                      THEN (SELECT min(p.p) FROM unnest(r.redo_pos) p(p) WHERE p.p <> ALL (r.acked))
                      WHEN cardinality(r.acked) = 0 AND r.n = r.last_pos - r.first_pos + 1 THEN r.first_pos
                      WHEN r.n = r.last_pos - r.first_pos + 1
                      THEN (SELECT min(p.p) FROM generate_series(r.first_pos, r.last_pos) p(p) WHERE p.p <> ALL (r.acked))
                      -- (a range with positions meant for other groups)
                      ELSE (SELECT min(b.first_pos + t.o - 1)
                            FROM batch b CROSS JOIN LATERAL unnest(b.ids, b.targets) WITH ORDINALITY t(id, tg, o)
                            WHERE b.lane = p_lane AND b.last_pos >= r.first_pos AND b.first_pos <= r.last_pos
                              AND b.first_pos + t.o - 1 BETWEEN r.first_pos AND r.last_pos
                              AND (t.tg IS NULL OR t.tg = p_group) AND b.first_pos + t.o - 1 <> ALL (r.acked)) END
                 AS first_open
          FROM lease e
          -- (a deferral stands for the lease it puts off)
          CROSS JOIN LATERAL (
              SELECT y.*, CASE WHEN 0 = ANY (y.acked) THEN 0 ELSE y.n - cardinality(y.acked) END AS open
              FROM (SELECT x.lease_no, x.first_pos, x.last_pos, x.redo_pos, x.n,
                           greatest(x.expires_at, (SELECT max(t.expires_at) FROM ext t
                                                   WHERE t.group_id = p_group AND t.lane = p_lane
                                                     AND t.lease_no = x.lease_no)) > p_now AS live,
                           ARRAY(SELECT a.pos FROM ack a WHERE a.group_id = p_group AND a.lane = p_lane
                                                          AND a.lease_no = x.lease_no) AS acked
                    FROM lease x
                    WHERE x.group_id = p_group AND x.lane = p_lane
                      AND x.lease_no = CASE WHEN e.kind = 'x' THEN e.ref ELSE e.lease_no END
                    LIMIT 1) y) r
          WHERE e.group_id = p_group AND e.lane = p_lane AND e.expires_at > '-infinity'
            AND e.expires_at >= p_scan_t AND (e.expires_at, e.lease_no) > (p_scan_t, p_scan_no)) u;
END
$$;

-- e2_status_keyed: e2_status_lane's look at a regular lane's keyed
-- positions and at the positions after its cursor (see there): the
-- positions after the cursor meant for another group, the waiting
-- positions (ready, parked, the first), and the keyed positions that are
-- not completed: in the held keys' leases, waiting, and after the cursor.
-- Reads the batch rows after the cursor that have targets or keys, and
-- those of the tails.
--
-- Parameters:
--   p_group, p_lane   the group and lane
--   p_cursor          the lane's cursor
--   p_head            the lane's head as status counts it (positions
--                     numbered after it, by a cut committed since status
--                     read its cut, are counted as not numbered yet)
--   p_held, p_waiting the lane state's held keys and waiting positions
--   p_now             the time status is computed for
-- Returns: others, waits, parked, first_wait, kh, kpos, kn, kready
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_status_keyed(
    p_group int, p_lane smallint, p_cursor bigint, p_head bigint, p_held sluice.e2_held[], p_waiting sluice.e2_wait[],
    p_now timestamptz, OUT others bigint, OUT waits bigint, OUT parked bigint, OUT first_wait bigint,
    OUT kh bigint[], OUT kpos bigint[], OUT kn bigint[], OUT kready boolean[])
LANGUAGE plpgsql STABLE
AS $$
#variable_conflict use_column
DECLARE
    -- holds until a retry's backoff has passed (with the retry's position;
    -- without: a hold of the whole key, an older engine's)
    v_until constant sluice.e2_held[] := ARRAY(SELECT h FROM unnest(p_held) h
                                               WHERE h.lease_no IS NULL AND h.until > p_now);
BEGIN
    WITH nb AS MATERIALIZED (
        -- after the cursor up to the head: positions meant for another
        -- group, and keyed ones
        SELECT b.first_pos + u.o - 1 AS pos, u.tg, u.k
        FROM batch b CROSS JOIN LATERAL unnest(b.targets, b.khashes) WITH ORDINALITY u(tg, k, o)
        WHERE b.lane = p_lane AND b.last_pos > p_cursor AND b.first_pos <= p_head
          AND (b.targets IS NOT NULL OR b.khashes IS NOT NULL)
          AND b.first_pos + u.o - 1 BETWEEN p_cursor + 1 AND p_head AND (u.tg <> p_group OR u.k IS NOT NULL)
    ), wt AS MATERIALIZED (
        -- the waiting positions: a single one counts 1 (a retry whose delay
        -- holds its key is parked), a tail its
        -- positions up to the cursor (none: an empty tail an older engine's
        -- receive left, not counted)
        SELECT w.pos, w.khash, w.id IS NOT NULL AS single,
               CASE WHEN w.id IS NOT NULL THEN 1
                    ELSE (SELECT count(*) FROM batch b
                          CROSS JOIN LATERAL unnest(b.khashes, b.targets) WITH ORDINALITY u(k, tg, o)
                          WHERE b.lane = p_lane AND b.last_pos >= w.pos AND b.first_pos <= p_cursor
                            AND w.khash = ANY (b.khashes) AND u.k = w.khash
                            AND b.first_pos + u.o - 1 BETWEEN w.pos AND p_cursor
                            AND (u.tg IS NULL OR u.tg = p_group)) END AS n,
               w.id IS NOT NULL
               AND EXISTS (SELECT FROM unnest(v_until) h
                           WHERE h.khash = w.khash AND (w.pos = ANY (h.pos) OR h.pos IS NULL AND w.pos = w.first_single))
                   AS parked
        FROM (SELECT x.*, min(x.pos) FILTER (WHERE x.id IS NOT NULL) OVER (PARTITION BY x.khash) AS first_single
              FROM unnest(p_waiting) x) w
    ), kc AS MATERIALIZED (
        -- the keyed positions not completed
        SELECT h.khash AS k, p.p AS pos, 1::bigint AS n,
               greatest(l.expires_at, (SELECT max(t.expires_at) FROM ext t
                                       WHERE t.group_id = p_group AND t.lane = p_lane AND t.lease_no = h.lease_no))
               <= p_now AS ready
        FROM unnest(p_held) h
        -- (the lease by its key, in the primary key's order: see e2_ack__s)
        CROSS JOIN LATERAL (SELECT ll.expires_at FROM lease ll
                            WHERE ll.group_id = p_group AND ll.lane = p_lane AND ll.lease_no = h.lease_no
                            ORDER BY ll.slot LIMIT 1) l
        CROSS JOIN LATERAL unnest(h.pos) p(p)
        WHERE h.lease_no IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM ack a WHERE a.group_id = p_group AND a.lane = p_lane
                                                AND a.lease_no = h.lease_no AND a.pos IN (0, p.p))
        UNION ALL
        SELECT wt.khash, wt.pos, wt.n, NOT wt.parked FROM wt WHERE wt.n > 0
        UNION ALL
        SELECT nb.k, nb.pos, 1, true FROM nb WHERE nb.k IS NOT NULL AND (nb.tg IS NULL OR nb.tg = p_group)
    )
    SELECT (SELECT count(*) FROM nb WHERE nb.tg <> p_group),
           (SELECT coalesce(sum(wt.n) FILTER (WHERE NOT wt.parked), 0) FROM wt),
           (SELECT count(*) FILTER (WHERE wt.parked) FROM wt),
           (SELECT min(wt.pos) FROM wt WHERE wt.n > 0), ka.k, ka.pos, ka.n, ka.ready
    INTO others, waits, parked, first_wait, kh, kpos, kn, kready
    FROM (SELECT array_agg(kc.k) AS k, array_agg(kc.pos) AS pos, array_agg(kc.n) AS n, array_agg(kc.ready) AS ready
          FROM kc) ka;
END
$$;

-- e_queue_status: sluice.status of a queue of engine 2, one row per group (one
-- row with group_name NULL if none). Positions are per lane in engine 2:
-- cursor and head are sums over the lanes (how many positions the group
-- has passed, how many are numbered), and lwm is 1 + the sum over the
-- lanes of the positions before each lane's first one not completed (so
-- head + 1 when the group has completed everything numbered; with one lane
-- and no priorities, the first position not completed, as on engine 1).
-- ready counts the group's positions after the cursors, those of ended
-- leases not completed (to be delivered again), the waiting positions that
-- would be ready and the committed messages not numbered yet that are due,
-- less waiting: the keyed ones of all these behind an earlier message of
-- their key not completed (in flight, parked or ready; as engine 1's
-- e_key_waiting). delayed counts the messages due later meant for the group
-- (delayed sends and retry copies) and the keyed retries in place not due
-- yet; lag counts ready, waiting, in flight and the retries due later, not
-- the delayed sends. The messages not numbered yet are read once for every
-- group (e2_status_unnumbered), at most sluice.status_exact_limit (10,000)
-- of each kind. holds_reclaim: the group holds the oldest epoch's slot once
-- its retention passed (e2_group_holds, as reclaim asks). Costs O(groups x
-- lanes x (leases not scanned past + batch rows after the cursor with
-- targets or keys + waiting positions) + delayed messages + dead letters),
-- plus the messages not numbered yet read.
--
-- Parameters:
--   q  the queue's row
-- Returns: SETOF sluice.queue_status
-- Errors: SL006 when the setting sluice.status_exact_limit is not a
--         number from 0 to 1000000000
-- Calls: e2_status_unnumbered, e2_status_lane (e2_status_leases, e2_status_keyed), e2_group_holds,
--   sluice._numbering_holder, sluice._status_row (each row starts from it), sluice._dead_letter_counts
CREATE OR REPLACE FUNCTION sluice_tmpl2.e_queue_status(q sluice.queue)
RETURNS SETOF sluice.queue_status
LANGUAGE plpgsql
AS $$
DECLARE
    v_now constant timestamptz := clock_timestamp();
    v_limit constant text := coalesce(nullif(current_setting('sluice.status_exact_limit', true), ''), '10000');
    c record;
    un record;
    u record;
    g record;
    l record;
    s sluice.queue_status;
    v_row sluice.queue_status;   -- (sluice._status_row)
    h_pid int;
    h_for interval;
    any_group boolean := false;
    -- (epochs from the oldest not reclaimed to the current one, as engine 1
    -- counts them: from the catalog, not by reading the cuts)
    v_live constant int := (SELECT max(e.epoch) FROM sluice.epoch e WHERE e.queue_id = q.id)
                           - coalesce((SELECT max(r.epoch) + 1 FROM sluice.reclaim r WHERE r.queue_id = q.id), 0) + 1;
    -- the slot of the oldest epoch kept, when it is not the current one and
    -- its retention has passed: a group that holds it holds reclaim
    v_old_slot constant smallint := (
        SELECT e.slot FROM sluice.epoch e
        WHERE e.queue_id = q.id AND v_live > 1
          AND e.epoch = coalesce((SELECT max(r.epoch) + 1 FROM sluice.reclaim r WHERE r.queue_id = q.id), 0)
          AND (SELECT n.started_at FROM sluice.epoch n WHERE n.queue_id = q.id AND n.epoch = e.epoch + 1)
              <= clock_timestamp() - q.retention);
BEGIN
    IF (CASE WHEN v_limit ~ '^\s*[0-9]{1,10}\s*$' THEN v_limit::bigint > 1000000000 ELSE true END) THEN
        RAISE EXCEPTION USING ERRCODE = 'SL006',
            MESSAGE = format('sluice.status_exact_limit must be a number from 0 to 1000000000, not %s',
                             quote_literal(v_limit));
    END IF;
    SELECT x.pid, x.held_for INTO h_pid, h_for FROM sluice._numbering_holder(q.id) x;
    SELECT * INTO STRICT c FROM cut x ORDER BY x.cut_no DESC LIMIT 1;
    SELECT * INTO un FROM e2_status_unnumbered(q, c.snap_xmax, c.snap_xip, c.work_snap, c.work_txid, c.work_id,
                                               c.due_upto, v_now, v_limit::bigint);
    v_row := sluice._status_row(q.name, (SELECT sum(x.h) FROM unnest(c.heads) x(h))::bigint, v_live, h_pid, h_for);
    FOR g IN SELECT cg.id, cg.name FROM sluice.consumer_group cg WHERE cg.queue_id = q.id ORDER BY cg.name LOOP
        any_group := true;
        s := v_row;
        -- The group's messages not numbered yet: due now (as read, plus the
        -- estimate beyond them), due later, the retries among them, the
        -- oldest, and the keys of those due.
        SELECT coalesce(sum(x.due), 0) + un.rest AS due, coalesce(sum(x.delayed), 0) AS delayed,
               coalesce(sum(x.rt), 0) AS retries, min(x.o) AS oldest,
               ARRAY(SELECT k.k FROM unnest(un.ukeys, un.utgs) AS k(k, tg) WHERE k.tg IS NULL OR k.tg = g.id) AS ukeys
        INTO u
        FROM unnest(un.tgs, un.due, un.delayed, un.retries, un.oldest) AS x(tg, due, delayed, rt, o)
        WHERE x.tg IS NULL OR x.tg = g.id;
        WITH ls AS MATERIALIZED (
            SELECT x.*, greatest(c.heads[n.lane + 1], x.cur) AS head   -- (see e2_status_lane)
            FROM generate_series(0, q.lanes) n(lane)   -- (lanes: the priority lane)
            CROSS JOIN LATERAL e2_status_lane(g.id, n.lane::smallint, n.lane = q.lanes, c.heads[n.lane + 1], v_now) x
            WHERE x.cur IS NOT NULL
        )
        SELECT sum(ls.cur)::bigint AS cur, sum(ls.head)::bigint AS head, sum(ls.in_flight)::bigint AS in_flight,
               sum(ls.again + ls.nafter + ls.waits)::bigint AS ready, sum(ls.parked)::bigint AS parked,
               (1 + sum(ls.lwm - 1))::bigint AS lwm, min(ls.oldest) AS oldest,
               -- keyed messages behind an earlier one of their key: per key,
               -- those that would be ready, but the first when it is one
               (SELECT coalesce(sum(y.nr - CASE WHEN y.head THEN 1 ELSE 0 END), 0)
                FROM (SELECT k.k, sum(k.n) FILTER (WHERE k.r) AS nr, (array_agg(k.r ORDER BY k.pos))[1] AS head
                      FROM (SELECT k.* FROM ls CROSS JOIN LATERAL unnest(ls.kh, ls.kpos, ls.kn, ls.kready) k(k, pos, n, r)
                            UNION ALL
                            -- (not numbered yet: after every numbered one)
                            SELECT k.k, 9223372036854775807, 1, true FROM unnest(u.ukeys) k(k)) k
                      GROUP BY k.k) y)::bigint AS waiting
        INTO l
        FROM ls;
        s.group_name := g.name;
        s.waiting := l.waiting;
        s.ready := l.ready + u.due - l.waiting;
        s.delayed := u.delayed + l.parked;
        s.in_flight := l.in_flight;
        s.lag := l.ready + u.due + l.in_flight + l.parked + u.retries;
        s.cursor := l.cur;
        s.lwm := l.lwm;
        s.head := l.head;
        s.oldest_pending_age := v_now - least(l.oldest, u.oldest);
        SELECT x.dead, x.dead_lettered INTO s.dead, s.dead_lettered FROM sluice._dead_letter_counts(q.id, g.id) x;
        s.holds_reclaim := coalesce(v_old_slot IS NOT NULL AND e2_group_holds(q, g.id, v_old_slot), false);
        s.estimated := un.estimated;
        RETURN NEXT s;
    END LOOP;
    IF NOT any_group THEN
        RETURN NEXT v_row;
    END IF;
END
$$;

-- e_start_pos: engine 1's start of a new group; in engine 2 the start is
-- written per lane once the group exists (e2_start): 0 here. It checks
-- what e2_start would refuse, before the caller (create_group, seek_group)
-- writes the group's row: a start at 'latest' numbers messages (a cut),
-- which needs READ COMMITTED; refused only later, the row's insert would
-- have drawn an id from consumer_group_id_seq, which no rollback gives back.
--
-- Parameters:
--   p_queue_id   queue id
--   p_earliest   true for 'earliest'
--   p_ts         for a timestamp start (NULL for 'latest')
-- Returns: 0
-- Errors: SL010 invalid_isolation ('latest' outside READ COMMITTED)
CREATE OR REPLACE FUNCTION sluice_tmpl2.e_start_pos(p_queue_id int, p_earliest boolean, p_ts timestamptz)
RETURNS bigint
LANGUAGE plpgsql
AS $$
BEGIN
    IF NOT p_earliest AND p_ts IS NULL AND current_setting('transaction_isolation') <> 'read committed' THEN
        PERFORM sluice._isolation_error('numbering messages');
    END IF;
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
        -- (each lease by its key, in the primary key's order: see e2_ack__s)
        CROSS JOIN LATERAL (SELECT rr.* FROM lease rr
                            WHERE rr.group_id = c.group_id AND rr.lane = c.lane AND rr.lease_no = c.lease_no
                            ORDER BY rr.slot LIMIT 1) r
        CROSS JOIN LATERAL (SELECT greatest(r.expires_at, (SELECT max(t.expires_at) FROM ext t
                                                           WHERE t.group_id = c.group_id AND t.lane = c.lane
                                                             AND t.lease_no = r.lease_no)) AS ends) x   -- (its latest position's)
        WHERE r.kind = 'r' AND x.ends > v_now
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
                        ORDER BY r.slot LIMIT 1) e   -- (the primary key's order: see e2_ack__s)
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
    INSERT INTO cut (slot, cut_no, snap, snap_xmax, snap_xip, heads, rr, due_upto, at, epoch, next_due)
    VALUES (v_slot, c.cut_no + 1, '3:3:', '3', '{}', c.heads, c.rr, clock_timestamp(), clock_timestamp(), v_epoch,
            'infinity');
    INSERT INTO lease (slot, group_id, lane, lease_no, kind, first_pos, last_pos, n, token, expires_at,
                       delivered_at, cursor, scan_t, scan_no, old_due, next_exp)
    SELECT v_slot, u.g, u.l, u.no + 1, 'c', 1, 0, 0, 0, '-infinity', clock_timestamp(), coalesce(c.heads[u.l + 1], 0),
           '-infinity', 0, 'infinity', 'infinity'
    FROM unnest(v_gids, v_lanes, v_nos) u(g, l, no);
    RETURN n;
END
$$;
