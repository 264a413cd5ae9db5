-- Group: engine templates - batch cutting
--
-- Functions in schema sluice_tmpl are templates: sluice._instantiate() copies
-- them into each queue's schema sluice_q<id>, where their unqualified table
-- names are that queue's tables. They are never called in sluice_tmpl itself.
--
-- A queue's messages get consecutive positions in commit order by "cutting":
-- the cutter takes a snapshot S and numbers the messages visible in S that
-- were not visible in the previous cut's snapshot S', plus the delayed
-- messages whose time came between the two cuts. Comparing transaction ids
-- with snapshots (as PgQ does with its ticks) means a message is numbered
-- when its transaction commits, whatever order ids were drawn in, and a long
-- transaction that does not send to the queue costs one index probe (its id
-- is in S's in-progress list), not a scan. Cuts are made by consumers when
-- they run out of numbered messages: there is no ticker.

-- e_snapshot: the current snapshot, with the caller's own transaction (if it
-- has an id) counted as in progress. pg_current_snapshot() leaves the own
-- transaction out of its in-progress list, so a cut made by a transaction
-- that has written would treat the messages it sends later as numbered.
CREATE OR REPLACE FUNCTION sluice_tmpl.e_snapshot()
RETURNS pg_snapshot
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    snap pg_snapshot := pg_current_snapshot();
    own xid8 := pg_current_xact_id_if_assigned();
BEGIN
    IF own IS NULL OR own >= pg_snapshot_xmax(snap) THEN
        RETURN snap;   -- no id yet, or already invisible (not below xmax)
    END IF;
    RETURN (least(pg_snapshot_xmin(snap), own)::text || ':' || pg_snapshot_xmax(snap)::text || ':' ||
            (SELECT string_agg(x::text, ',' ORDER BY x)
             FROM (SELECT pg_snapshot_xip(snap) AS x UNION SELECT own) u))::pg_snapshot;
END
$$;

-- e_lanes: the lane of each message of a cut, and the cut's arrays in the
-- order they are numbered: lane by lane, commit order within a lane. A keyed
-- message goes to the lane of its key's hash, so all of a key's messages
-- share a lane. Unkeyed ones are dealt out in chunks of consecutive
-- messages (sluice._lane_chunk), from the lane of the cut's first position
-- on, so that small cuts take turns.
--
-- Parameters:
--   p_lanes     the queue's number of lanes (2 or more)
--   p_last_pos  the last position numbered before this cut
--   p_ids .. p_prios  the cut's arrays, in commit order
-- Returns: the arrays in numbering order, and lanes: the lane of each
CREATE OR REPLACE FUNCTION sluice_tmpl.e_lanes(p_lanes int, p_last_pos bigint, p_ids bigint[], p_txids xid8[],
    p_slots smallint[], p_targets int[], p_keys bigint[], p_prios int[],
    OUT ids bigint[], OUT txids xid8[], OUT slots smallint[], OUT targets int[], OUT keys bigint[], OUT prios int[],
    OUT lanes smallint[])
LANGUAGE sql IMMUTABLE
AS $$
    -- One sort, then aggregates in that order (each ORDER BY would sort again).
    SELECT array_agg(l.id), array_agg(l.txid), array_agg(l.slot), array_agg(l.tg), array_agg(l.k), array_agg(l.pr),
           array_agg(l.ln)
    FROM (SELECT u.*,
                 (CASE WHEN u.k IS NOT NULL THEN ((u.k % p_lanes) + p_lanes) % p_lanes
                       ELSE (p_last_pos + 1 + (u.nth - 1) / sluice._lane_chunk(u.nun::int, p_lanes))
                            % p_lanes END)::smallint AS ln
          FROM (SELECT x.*, count(*) FILTER (WHERE x.k IS NULL) OVER (ORDER BY x.o) AS nth,
                       count(*) FILTER (WHERE x.k IS NULL) OVER () AS nun
                FROM unnest(p_ids, p_txids, p_slots, p_targets, p_keys, p_prios)
                     WITH ORDINALITY AS x(id, txid, slot, tg, k, pr, o)) u
          ORDER BY ln, u.o) l
$$;

-- e_to_number: whether there may be messages to number, and why, in at most
-- four index probes: the last cut left its round unfinished (a backlog
-- larger than one cut), or a message was sent by a transaction that began
-- after the last cut or was in progress at it, or one came due since. (A
-- superset of what e_cut would number: visibility is not checked.) One
-- statement per probe, in the order they usually answer, rather than one
-- statement with all four: a plan is set up whole each time it runs, the
-- probes it never reaches included, and that one set up 37 nodes (16 index
-- scans) on every call, 11 of them usually never run.
--
-- Returns: NULL: a cut would find nothing; 'round': the last cut's round is
--          unfinished; 'new': messages sent or due since the last cut (or
--          no cut yet)
DROP FUNCTION IF EXISTS sluice_tmpl.e_uncut();   -- (before the reason)
CREATE OR REPLACE FUNCTION sluice_tmpl.e_to_number()
RETURNS text
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    last record;
    v_now timestamptz;
BEGIN
    SELECT b.done, b.snap, b.t INTO last FROM batches b ORDER BY b.batch_no DESC LIMIT 1;
    IF NOT FOUND THEN
        RETURN 'new';
    END IF;
    IF NOT last.done THEN
        RETURN 'round';
    END IF;
    IF EXISTS (SELECT 1 FROM messages m WHERE m.txid >= pg_snapshot_xmax(last.snap)) THEN
        RETURN 'new';
    END IF;
    IF EXISTS (SELECT 1 FROM messages m WHERE m.txid = ANY (ARRAY(SELECT pg_snapshot_xip(last.snap)))) THEN
        RETURN 'new';
    END IF;
    -- (the time in a variable: clock_timestamp() is volatile, so written in
    -- the condition it could not bound the index scan, which then read every
    -- message delayed past the newest cut, on every receive: 92 ms a receive
    -- beside 100,000 messages delayed by an hour, measured on PostgreSQL 15)
    v_now := clock_timestamp();
    IF EXISTS (SELECT 1 FROM messages m WHERE m.deliver_at > last.t AND m.deliver_at <= v_now) THEN
        RETURN 'new';
    END IF;
    RETURN NULL;
END
$$;

-- e_cut: number the next messages of the queue (at most 1000 per call).
-- The caller holds the queue's cut lock.
--
-- Phase 1 takes the delayed messages that came due since the previous cut,
-- phase 2 those committed since it; e_cut_store splits them into lanes and
-- writes the batch rows. Every row of a cut carries the cut's snapshots and
-- resume point; the newest row (highest batch_no) is where the next cut
-- starts.
--
-- Parameters:
--   p_queue_id  queue id
--   p_lanes     the queue's number of lanes
-- Returns: the last numbered position of the queue after the cut, or NULL
--          when there was nothing new to number (and nothing was written)
-- Tables: reads messages, sluice.epoch; writes through e_cut_store
CREATE OR REPLACE FUNCTION sluice_tmpl.e_cut(p_queue_id int, p_lanes int)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    cap constant int := 1000;
    last record;
    new_round boolean;
    v_prev_snap pg_snapshot;
    v_prev_t timestamptz;
    v_snap pg_snapshot;
    v_t timestamptz;
    v_xip xid8[];
    v_xmax xid8;
    v_phase smallint;
    v_res_due timestamptz;
    v_res_txid xid8;
    v_res_id bigint;
    v_lo_txid xid8;
    v_lo_id bigint;
    c sluice.cut := ROW('{}', '{}', '{}', '{}', '{}', '{}', false, false, false)::sluice.cut;
    r record;
    v_done boolean;
BEGIN
    -- A snapshot held for the whole transaction would number from an old
    -- view of the batches and of the messages.
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        PERFORM sluice._isolation_error('numbering messages');
    END IF;
    SELECT * INTO last FROM batches ORDER BY batch_no DESC LIMIT 1;
    new_round := last.done;
    -- The common case of a receive that finds nothing new (e_to_number).
    IF new_round AND e_to_number() IS NULL THEN
        RETURN NULL;
    END IF;
    IF new_round THEN
        v_prev_snap := last.snap;
        v_prev_t := last.t;
        v_snap := e_snapshot();
        v_t := greatest(clock_timestamp(), last.t);
        v_phase := 1;
    ELSE
        v_prev_snap := last.prev_snap;
        v_prev_t := last.prev_t;
        v_snap := last.snap;
        v_t := last.t;
        v_phase := last.res_phase;
        v_res_due := last.res_due;
        v_res_txid := last.res_txid;
        v_res_id := last.res_id;
    END IF;

    -- Each phase reads its messages in numbering order in a subquery and
    -- aggregates them in that order (an ORDER BY per aggregate would sort
    -- six times), noting whether any is targeted, keyed or prioritized.
    -- Phase 1: committed before the previous cut, due in (prev_t, t].
    IF v_phase = 1 THEN
        SELECT ROW(array_agg(s.id), array_agg(s.txid), array_agg(s.slot), array_agg(s.target_group), array_agg(s.k),
                   array_agg(s.pr), bool_or(s.target_group IS NOT NULL), bool_or(s.k IS NOT NULL),
                   bool_or(s.pr <> 0))::sluice.cut AS c, max(s.deliver_at) AS last_due
        INTO r
        FROM (SELECT m.id, m.txid, m.slot, m.target_group, m.deliver_at,
                     hashtextextended(m.key, 0) AS k, CASE WHEN m.key IS NULL THEN m.priority ELSE 0 END AS pr
              FROM messages m
              WHERE m.deliver_at > v_prev_t AND m.deliver_at <= v_t
                AND pg_visible_in_snapshot(m.txid, v_prev_snap)
                AND (v_res_due IS NULL OR (m.deliver_at, m.id) > (v_res_due, v_res_id))
              ORDER BY m.deliver_at, m.id
              LIMIT cap) s;
        c := e_cut_add(c, r.c);
        IF cardinality(c.ids) = cap THEN
            v_done := false;
            v_res_due := r.last_due;
            v_res_id := c.ids[cap];
        ELSE
            v_phase := 2;
            v_res_txid := NULL;
            v_res_id := NULL;
        END IF;
    END IF;

    -- Phase 2: committed between the two snapshots and due by t, in (txid, id)
    -- order: first the transactions that were in progress at the previous cut
    -- (all below its xmax), then an index range scan from its xmax on.
    IF v_phase = 2 THEN
        v_xip := ARRAY(SELECT pg_snapshot_xip(v_prev_snap));
        v_xmax := pg_snapshot_xmax(v_prev_snap);
        IF cardinality(v_xip) > 0 AND (v_res_txid IS NULL OR v_res_txid < v_xmax) THEN
            SELECT ROW(array_agg(s.id), array_agg(s.txid), array_agg(s.slot), array_agg(s.target_group), array_agg(s.k),
                       array_agg(s.pr), bool_or(s.target_group IS NOT NULL), bool_or(s.k IS NOT NULL),
                       bool_or(s.pr <> 0))::sluice.cut AS c
            INTO r
            FROM (SELECT x.* FROM (
                      -- OFFSET 0 keeps the planner from walking the whole
                      -- (txid, id) index in order to serve the LIMIT: the
                      -- in-progress list (a long transaction's id, say) is
                      -- looked up in the index, then the few rows sorted.
                      SELECT m.id, m.txid, m.slot, m.target_group, hashtextextended(m.key, 0) AS k,
                             CASE WHEN m.key IS NULL THEN m.priority ELSE 0 END AS pr
                      FROM messages m
                      WHERE m.txid = ANY (v_xip)
                        AND pg_visible_in_snapshot(m.txid, v_snap)
                        AND (m.deliver_at IS NULL OR m.deliver_at <= v_t)
                        AND (v_res_txid IS NULL OR (m.txid, m.id) > (v_res_txid, v_res_id))
                      OFFSET 0) x
                  ORDER BY x.txid, x.id
                  LIMIT cap - cardinality(c.ids)) s;
            c := e_cut_add(c, r.c);
        END IF;
        IF cardinality(c.ids) < cap THEN
            IF v_res_txid IS NULL OR v_res_txid < v_xmax THEN
                v_lo_txid := v_xmax;
                v_lo_id := -1;
            ELSE
                v_lo_txid := v_res_txid;
                v_lo_id := v_res_id;
            END IF;
            SELECT ROW(array_agg(s.id), array_agg(s.txid), array_agg(s.slot), array_agg(s.target_group), array_agg(s.k),
                       array_agg(s.pr), bool_or(s.target_group IS NOT NULL), bool_or(s.k IS NOT NULL),
                       bool_or(s.pr <> 0))::sluice.cut AS c
            INTO r
            FROM (SELECT m.id, m.txid, m.slot, m.target_group, hashtextextended(m.key, 0) AS k,
                         CASE WHEN m.key IS NULL THEN m.priority ELSE 0 END AS pr
                  FROM messages m
                  WHERE (m.txid, m.id) > (v_lo_txid, v_lo_id)
                    -- nothing at or above the snapshot's xmax is visible in
                    -- it: stop there rather than walk newer sends
                    AND m.txid < pg_snapshot_xmax(v_snap)
                    AND pg_visible_in_snapshot(m.txid, v_snap)
                    AND (m.deliver_at IS NULL OR m.deliver_at <= v_t)
                  ORDER BY m.txid, m.id
                  LIMIT cap - cardinality(c.ids)) s;
            c := e_cut_add(c, r.c);
        END IF;
        v_done := cardinality(c.ids) < cap;
        IF NOT v_done THEN
            v_res_txid := c.txids[cap];
            v_res_id := c.ids[cap];
        END IF;
    END IF;

    IF cardinality(c.ids) = 0 AND new_round THEN
        RETURN NULL;   -- nothing new: write nothing
    END IF;
    PERFORM e_cut_store(p_queue_id, p_lanes, last.batch_no, last.last_pos, c,
                        ROW(v_done, CASE WHEN NOT v_done THEN v_phase END,
                            CASE WHEN NOT v_done AND v_phase = 1 THEN v_res_due END,
                            CASE WHEN NOT v_done AND v_phase = 2 THEN v_res_txid END,
                            CASE WHEN NOT v_done THEN v_res_id END,
                            v_prev_t, v_t, v_prev_snap, v_snap)::sluice.cut_point);
    RETURN last.last_pos + cardinality(c.ids);
END
$$;

-- e_cut_add: append one phase's messages to a cut (p's arrays are NULL
-- when the phase found none).
CREATE OR REPLACE FUNCTION sluice_tmpl.e_cut_add(c sluice.cut, p sluice.cut)
RETURNS sluice.cut
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF cardinality(p.ids) > 0 THEN
        c.ids := c.ids || p.ids;
        c.txids := c.txids || p.txids;
        c.slots := c.slots || p.slots;
        c.targets := c.targets || p.targets;
        c.keys := c.keys || p.keys;
        c.prios := c.prios || p.prios;
        c.any_target := c.any_target OR p.any_target;
        c.any_key := c.any_key OR p.any_key;
        c.any_prio := c.any_prio OR p.any_prio;
    END IF;
    RETURN c;
END
$$;

-- e_cut_store: write a cut: split its messages into lanes and number them
-- lane by lane, in commit order within a lane, one batch row per lane with
-- new positions (one empty row when a round ends with nothing new, so that
-- the next cut starts a new round); then the key and priority indexes,
-- what a receive looks up out of position order. Most cuts have no keyed
-- message: their lanes are chunks of consecutive messages (as e_lanes
-- deals them), copied as array slices without a sort.
--
-- Parameters:
--   p_queue_id    queue id
--   p_lanes       the queue's number of lanes
--   p_batch_no    the newest batch row's number before this cut
--   p_last_pos    the last position numbered before this cut
--   c             the cut's messages, in commit order
--   pt            where the cut stands: done, resume point, times, snapshots
-- Tables: inserts one row per lane into batches, and one row into keyed per
--         keyed message and into prio per unkeyed message with a priority
--         other than 0
CREATE OR REPLACE FUNCTION sluice_tmpl.e_cut_store(p_queue_id int, p_lanes int, p_batch_no bigint, p_last_pos bigint,
                                                   c sluice.cut, pt sluice.cut_point)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    n constant int := cardinality(c.ids);
    v_first constant bigint := p_last_pos + 1;
    v_slot smallint;
    v_lanes smallint[] := '{}';
    l_lane smallint[] := '{}';
    l_lo int[] := '{}';
    l_hi int[] := '{}';
    o_ids bigint[] := '{}';
    o_txids xid8[] := '{}';
    o_slots smallint[] := '{}';
    o_targets int[] := '{}';
    o_prios int[] := '{}';
    v_chunk int;
    a int;
    b int;
    r record;
BEGIN
    v_slot := (SELECT ns.slot FROM sluice._slot_now(p_queue_id) ns);
    IF n > 0 AND NOT c.any_key THEN
        -- Chunk j (from 0) holds messages j*chunk+1 .. (j+1)*chunk and goes
        -- to lane (p_last_pos + 1 + j) % lanes (as e_lanes deals them); a
        -- lane's chunks in order.
        v_chunk := sluice._lane_chunk(n, p_lanes);
        FOR r IN SELECT j.j, ((p_last_pos + 1 + j.j) % p_lanes)::smallint AS ln
                 FROM generate_series(0, (n + v_chunk - 1) / v_chunk - 1) AS j(j) ORDER BY 2, 1 LOOP
            a := r.j * v_chunk + 1;
            b := least((r.j + 1) * v_chunk, n);
            IF cardinality(l_lane) = 0 OR l_lane[cardinality(l_lane)] <> r.ln THEN
                l_lane := l_lane || r.ln;
                l_lo := l_lo || (cardinality(o_ids) + 1);
                l_hi := l_hi || 0;
            END IF;
            o_ids := o_ids || c.ids[a:b];
            o_txids := o_txids || c.txids[a:b];
            o_slots := o_slots || c.slots[a:b];
            IF c.any_target THEN
                o_targets := o_targets || c.targets[a:b];
            END IF;
            IF c.any_prio THEN
                o_prios := o_prios || c.prios[a:b];
                v_lanes := v_lanes || array_fill(r.ln, ARRAY[b - a + 1]);
            END IF;
            l_hi[cardinality(l_hi)] := cardinality(o_ids);
        END LOOP;
        INSERT INTO batches (slot, batch_no, first_pos, last_pos, lane, done, res_phase, res_due, res_txid, res_id,
                             cut_at, prev_t, t, prev_snap, snap, ids, txids, slots, targets, keys, prios)
        SELECT v_slot, p_batch_no + u.o, v_first + u.lo - 1, v_first + u.hi - 1, u.ln,
               pt.done, pt.res_phase, pt.res_due, pt.res_txid, pt.res_id,
               clock_timestamp(), pt.prev_t, pt.t, pt.prev_snap, pt.snap,
               o_ids[u.lo:u.hi], o_txids[u.lo:u.hi], o_slots[u.lo:u.hi],
               CASE WHEN c.any_target THEN o_targets[u.lo:u.hi] END, NULL,
               CASE WHEN c.any_prio THEN o_prios[u.lo:u.hi] END
        FROM unnest(l_lane, l_lo, l_hi) WITH ORDINALITY AS u(ln, lo, hi, o);
        IF c.any_prio THEN
            INSERT INTO prio (slot, priority, pos, target, mslot, id, txid, lane)
            SELECT v_slot, u.pr, v_first + u.o - 1, u.tg, u.slot, u.id, u.txid, u.ln
            FROM unnest(o_ids, o_txids, o_slots, CASE WHEN c.any_target THEN o_targets END, o_prios, v_lanes)
                 WITH ORDINALITY AS u(id, txid, slot, tg, pr, ln, o)
            WHERE u.pr <> 0;
        END IF;
        RETURN;
    END IF;
    IF p_lanes > 1 AND n > 0 THEN
        SELECT l.ids, l.txids, l.slots, l.targets, l.keys, l.prios, l.lanes
        INTO c.ids, c.txids, c.slots, c.targets, c.keys, c.prios, v_lanes
        FROM e_lanes(p_lanes, p_last_pos, c.ids, c.txids, c.slots, c.targets, c.keys, c.prios) l;
    ELSE
        v_lanes := array_fill(0::smallint, ARRAY[n]);
    END IF;
    INSERT INTO batches (slot, batch_no, first_pos, last_pos, lane, done, res_phase, res_due, res_txid, res_id,
                         cut_at, prev_t, t, prev_snap, snap, ids, txids, slots, targets, keys, prios)
    SELECT v_slot, p_batch_no + row_number() OVER (ORDER BY b.lane), v_first + b.lo - 1, v_first + b.hi - 1, b.lane,
           pt.done, pt.res_phase, pt.res_due, pt.res_txid, pt.res_id,
           clock_timestamp(), pt.prev_t, pt.t, pt.prev_snap, pt.snap, b.ids, b.txids, b.slots,
           CASE WHEN c.any_target THEN b.targets END,
           CASE WHEN c.any_key THEN b.keys END,
           CASE WHEN c.any_prio THEN b.prios END
    FROM (SELECT u.ln AS lane, min(u.o) AS lo, max(u.o) AS hi, array_agg(u.id ORDER BY u.o) AS ids,
                 array_agg(u.txid ORDER BY u.o) AS txids, array_agg(u.slot ORDER BY u.o) AS slots,
                 array_agg(u.tg ORDER BY u.o) AS targets, array_agg(u.k ORDER BY u.o) AS keys,
                 array_agg(coalesce(u.pr, 0) ORDER BY u.o) AS prios
          FROM unnest(c.ids, c.txids, c.slots, c.targets, c.keys, c.prios, v_lanes)
               WITH ORDINALITY AS u(id, txid, slot, tg, k, pr, ln, o)
          GROUP BY u.ln
          UNION ALL
          SELECT 0, 1, 0, '{}', '{}', '{}', NULL, NULL, NULL WHERE n = 0) b;
    IF c.any_key THEN
        -- keyed positions are handed out only once on disk (see e2_cut's
        -- file header: a cut lost in a crash is made again in txid order)
        IF current_setting('sluice.caller_synchronous_commit', true) <> '' THEN
            PERFORM sluice._durable_commit();
        END IF;
        INSERT INTO keyed (slot, key_hash, pos, target, mslot, id, txid)
        SELECT v_slot, u.k, v_first + u.o - 1, u.tg, u.slot, u.id, u.txid
        FROM unnest(c.ids, c.txids, c.slots, c.targets, c.keys) WITH ORDINALITY AS u(id, txid, slot, tg, k, o)
        WHERE u.k IS NOT NULL;
    END IF;
    IF c.any_prio THEN
        INSERT INTO prio (slot, priority, pos, target, mslot, id, txid, lane)
        SELECT v_slot, u.pr, v_first + u.o - 1, u.tg, u.slot, u.id, u.txid, u.ln
        FROM unnest(c.ids, c.txids, c.slots, c.targets, c.prios, v_lanes) WITH ORDINALITY AS u(id, txid, slot, tg, pr, ln, o)
        WHERE u.pr <> 0;
    END IF;
END
$$;

-- e_cut_all: cut until every message visible now is numbered.
-- The caller holds the queue's cut lock.
--
-- Parameters:
--   p_queue_id  queue id
--   p_lanes     the queue's number of lanes
-- Returns: the last numbered position
CREATE OR REPLACE FUNCTION sluice_tmpl.e_cut_all(p_queue_id int, p_lanes int)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    head bigint;
BEGIN
    LOOP
        head := e_cut(p_queue_id, p_lanes);
        EXIT WHEN head IS NULL OR (SELECT b.done FROM batches b ORDER BY b.batch_no DESC LIMIT 1);
    END LOOP;
    RETURN (SELECT b.last_pos FROM batches b ORDER BY b.batch_no DESC LIMIT 1);
END
$$;
