-- Group: engine v2 - rotation and reclaim (templates, schema sluice_tmpl2)
--
-- A queue writes into the slot of its current epoch. Every rotate_interval
-- a new epoch starts in the next slot, if that slot is free (the ring of
-- slots is not full). The oldest epoch's slot is reclaimed, its nine leaves
-- truncated at once, when nothing in it is needed any more (e2_reclaimable).
-- Both run in sluice.maintain and in receives (about once a second per
-- session): no background process.

-- e_maintain: rotate and reclaim a queue of engine 2 (the caller holds the
-- queue's maint lock), finish its upgrade when every group has drained
-- its predecessor, and analyze the slot leaves that filled with the
-- statistics of an empty table (sluice._analyze_filled).
--
-- Parameters:
--   p_queue_id  queue id
-- Returns: rotated, reclaimed (slots truncated) and changed (anything written)
-- Calls: e2_carry_idle, e2_reclaim, e2_rotate, sluice._finish_upgrade, sluice._analyze_filled
CREATE OR REPLACE FUNCTION sluice_tmpl2.e_maintain(p_queue_id int, OUT rotated boolean, OUT reclaimed int,
                                                  OUT changed boolean)
LANGUAGE plpgsql
AS $$
DECLARE
    q sluice.queue;
    cur record;
    oldest bigint;
    v_slot smallint;
BEGIN
    rotated := false;
    reclaimed := 0;
    changed := false;
    SELECT * INTO STRICT q FROM sluice.queue qq WHERE qq.id = p_queue_id;
    IF EXISTS (SELECT 1 FROM sluice.consumer_group cg WHERE cg.queue_id = p_queue_id AND cg.ttl IS NOT NULL) THEN
        changed := sluice._expire_groups(p_queue_id) > 0;
    END IF;
    SELECT e.epoch, e.slot, e.started_at INTO cur FROM sluice.epoch e
    WHERE e.queue_id = p_queue_id ORDER BY e.epoch DESC LIMIT 1;
    oldest := coalesce((SELECT max(r.epoch) FROM sluice.reclaim r WHERE r.queue_id = p_queue_id) + 1, 0);
    WHILE oldest < cur.epoch LOOP
        v_slot := (oldest % q.slots)::smallint;
        changed := e2_carry_idle(q, v_slot, cur.slot) OR changed;
        EXIT WHEN NOT e2_reclaim(q, oldest, v_slot, cur.slot);
        oldest := oldest + 1;
        reclaimed := reclaimed + 1;
    END LOOP;
    -- Rotate when the current slot has traffic: positions numbered there,
    -- or messages sent since the newest cut. (Not for messages that reclaim
    -- moved here because they are due later: a queue that only holds those
    -- would rotate, and copy them, every rotate_interval.) After a reclaim
    -- in this transaction, which holds the truncated leaves' ACCESS
    -- EXCLUSIVE locks, only if the cut lock is free: its holder may be
    -- waiting to read those leaves (e2_rotate).
    IF clock_timestamp() >= cur.started_at + q.rotate_interval AND cur.epoch - oldest < q.slots - 1
       AND (EXISTS (SELECT 1 FROM batch b WHERE b.slot = cur.slot)
            OR EXISTS (SELECT 1 FROM prio p WHERE p.slot = cur.slot)
            OR EXISTS (SELECT 1 FROM msg m
                       WHERE m.slot = cur.slot
                         AND m.txid >= (SELECT c.snap_xmax FROM cut c ORDER BY c.cut_no DESC LIMIT 1))) THEN
        rotated := e2_rotate(q, cur.epoch + 1, reclaimed = 0);
    END IF;
    -- an upgrade whose every group has drained the old storage: it goes
    -- (the queue's upkeep, so that no background process is needed for it)
    IF q.predecessor IS NOT NULL THEN
        changed := sluice._finish_upgrade(q) OR changed;
    END IF;
    -- slot leaves whose statistics say "empty" while they fill (as engine 1)
    changed := sluice._analyze_filled(q, sluice._v2_tables()) > 0 OR changed OR rotated OR reclaimed > 0;
END
$$;

-- e2_rotate: start epoch p_epoch in its slot, under the cut lock (waited
-- for, at most 100 ms, a cut is short; or taken only if free, after this
-- transaction truncated a slot: the lock's holder may be waiting to read
-- the truncated leaves, which this transaction holds until it commits, and
-- the two would wait for each other: the next upkeep rotates), with a copy
-- of the newest cut there, which the hot path of the new slot reads the
-- lanes' heads from, and the state of every lane not held by a receive
-- carried there (e2_carry_idle). The lock taken is noted in the setting
-- sluice.holds_lock (see e2_wait_lane__s).
--
-- Parameters:
--   q        the queue
--   p_epoch  the new epoch (its slot is free)
--   p_wait   wait for the cut lock (else only take it if free)
-- Returns: whether it rotated (false: the cut lock was not free, within
--   100 ms when p_wait)
-- Calls: e2_carry_idle, sluice._lock_within
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_rotate(q sluice.queue, p_epoch bigint, p_wait boolean)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_slot constant smallint := (p_epoch % q.slots)::smallint;
BEGIN
    IF NOT (CASE WHEN p_wait THEN sluice._xact_lock_within(sluice._lock_ns('cut'), q.id, '100ms')
                 ELSE pg_try_advisory_xact_lock(sluice._lock_ns('cut'), q.id) END
            AND set_config('sluice.holds_lock', 'y', true) IS NOT NULL) THEN   -- (see e2_wait_lane__s)
        RETURN false;
    END IF;
    INSERT INTO sluice.epoch (queue_id, epoch, slot, started_at) VALUES (q.id, p_epoch, v_slot, clock_timestamp());
    INSERT INTO cut (slot, cut_no, snap, snap_xmax, snap_xip, heads, rr, due_upto, at, epoch, work_snap, work_txid,
                     work_id, next_due)
    SELECT v_slot, c.cut_no + 1, c.snap, c.snap_xmax, c.snap_xip, c.heads, c.rr, c.due_upto, clock_timestamp(), p_epoch,
           c.work_snap, c.work_txid, c.work_id, c.next_due
    FROM cut c ORDER BY c.cut_no DESC LIMIT 1;
    -- every lane no receive holds moves now, so that the hot path finds it
    -- here (one a receive holds moves with its next receive)
    PERFORM e2_carry_idle(q, ((p_epoch - 1) % q.slots)::smallint, v_slot);
    RETURN true;
END
$$;

-- e2_carry_idle: carry into the current slot the state of every lane whose
-- newest state is in slot p_slot (an idle lane: a lane in use moves with its
-- next receive), so that the slot can be reclaimed. A lane held by a
-- receive is left to it.
--
-- Parameters:
--   q       the queue
--   p_slot  the slot to empty of lane states
--   p_cur   the current slot
-- Returns: whether it wrote anything
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_carry_idle(q sluice.queue, p_slot smallint, p_cur smallint)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    n int;
BEGIN
    WITH st AS MATERIALIZED (
        SELECT s.*
        FROM sluice.consumer_group g CROSS JOIN generate_series(0, q.lanes) l(lane)   -- (lanes: the priority lane)
        CROSS JOIN LATERAL (SELECT s.* FROM lease s WHERE s.group_id = g.id AND s.lane = l.lane
                            ORDER BY s.lease_no DESC LIMIT 1) s
        WHERE g.queue_id = q.id AND s.slot = p_slot
          AND pg_try_advisory_xact_lock(sluice._lane_lock(s.group_id, s.lane))
    ), fence AS (
        -- (as e2_slow: a receive there with a stale state writes nothing)
        INSERT INTO lease (slot, group_id, lane, lease_no, kind, first_pos, last_pos, n, token, expires_at,
                           delivered_at, cursor, scan_t, scan_no, old_due, held, waiting, levels)
        SELECT st.slot, st.group_id, st.lane, st.lease_no + 1, 'f', 1, 0, 0, 0, '-infinity', clock_timestamp(),
               st.cursor, st.scan_t, st.scan_no, 'infinity', st.held, st.waiting, st.levels
        FROM st
        -- (the state read may predate a receive that committed before the
        -- lock was taken: its row has the key, and the lane is left to it)
        ON CONFLICT DO NOTHING
        RETURNING group_id, lane
    ), ins AS (
        INSERT INTO lease (slot, group_id, lane, lease_no, kind, first_pos, last_pos, n, token, expires_at,
                           delivered_at, cursor, scan_t, scan_no, old_due, next_exp, held, waiting, levels)
        SELECT p_cur, st.group_id, st.lane, st.lease_no + 2, 'c', 1, 0, 0, 0, '-infinity', clock_timestamp(),
               st.cursor, st.scan_t, st.scan_no, e2_old_due(st.group_id, st.lane, p_cur, st.scan_t, st.scan_no),
               e2_next_exp(st.group_id, st.lane, p_cur, st.scan_t, st.scan_no), st.held, st.waiting, st.levels
        FROM st JOIN fence f ON f.group_id = st.group_id AND f.lane = st.lane
        ON CONFLICT DO NOTHING
        RETURNING 1
    )
    SELECT count(*) INTO n FROM ins;
    RETURN n > 0;
END
$$;

-- e2_reclaimable: whether slot p_slot (of epoch p_epoch, not current) holds
-- nothing still needed: its retention passed (the next epoch began that
-- long ago); every message in it numbered (seen by a cut: one due later
-- waits in pending, and e2_reclaim moves it to the current slot);
-- its dedup keys, if it has any, not within the dedup window (the next
-- epoch began longer ago than that, as engine 1 counts it); no extension in
-- it not ended; and no group holds it (e2_group_holds). Groups dropped do
-- not count.
--
-- Parameters:
--   q        the queue
--   p_epoch  the epoch
--   p_slot   its slot
-- Returns: true when the slot can be truncated
-- Calls: e2_group_holds
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_reclaimable(q sluice.queue, p_epoch bigint, p_slot smallint)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    c record;
BEGIN
    IF (SELECT e.started_at FROM sluice.epoch e WHERE e.queue_id = q.id AND e.epoch = p_epoch + 1)
       > clock_timestamp() - q.retention THEN
        RETURN false;
    END IF;
    -- (dedup keys: remembered for the dedup window, as a send looks them up)
    IF (SELECT e.started_at FROM sluice.epoch e WHERE e.queue_id = q.id AND e.epoch = p_epoch + 1)
       > clock_timestamp() - q.dedup_window
       AND EXISTS (SELECT 1 FROM dedup d WHERE d.slot = p_slot) THEN
        RETURN false;
    END IF;
    SELECT * INTO STRICT c FROM cut x ORDER BY x.cut_no DESC LIMIT 1;
    IF EXISTS (SELECT 1 FROM msg m WHERE m.slot = p_slot AND NOT pg_visible_in_snapshot(m.txid, c.snap))
       OR EXISTS (SELECT 1 FROM ext x WHERE x.slot = p_slot AND x.expires_at > clock_timestamp()) THEN
        RETURN false;
    END IF;
    RETURN NOT EXISTS (SELECT 1 FROM sluice.consumer_group g WHERE g.queue_id = q.id AND e2_group_holds(q, g.id, p_slot));
END
$$;

-- e2_group_holds: whether a group still needs something in slot p_slot (so
-- that the slot is not reclaimed; status's holds_reclaim): for one of its
-- lanes, the lane's state is in the slot, or a position whose message or
-- batch is in the slot is not below the lane's low-water mark. The
-- low-water mark is the least of the cursor + 1, the first waiting keyed
-- position and the first position of each lease not yet scanned past that
-- is not settled (below it, everything is completed). A lease not scanned
-- past holds the slot too when it is not settled and lives in the slot, or
-- is a deferral (kind x). A settled lease (kind r, acked whole or every
-- position completed) holds nothing even before its end: its positions
-- need no message any more, and a scan that no longer finds it (its slot
-- truncated, with its acks) has nothing to do for it. So under steady
-- traffic a slot is reclaimed once its messages are completed, not a lease
-- duration later (leases end long after they are acked).
--
-- Parameters:
--   q        the queue
--   p_group  the group
--   p_slot   the slot
-- Returns: true when the group holds the slot
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_group_holds(q sluice.queue, p_group int, p_slot smallint)
RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
    RETURN EXISTS (
        SELECT 1
        FROM generate_series(0, q.lanes) l(lane)   -- (lanes: the priority lane)
        CROSS JOIN LATERAL (SELECT s.* FROM lease s WHERE s.group_id = p_group AND s.lane = l.lane
                            ORDER BY s.lease_no DESC LIMIT 1) s
        CROSS JOIN LATERAL (SELECT coalesce(CASE WHEN l.lane < q.lanes
                                                 THEN (SELECT max(b.last_pos) FROM batch b
                                                       WHERE b.lane = l.lane AND (b.slot = p_slot OR p_slot = ANY (b.mslots)))
                                                 ELSE (SELECT max(p.pos) FROM prio p WHERE p.slot = p_slot OR p.mslot = p_slot)
                                            END, 0) AS last) b
        WHERE s.slot = p_slot
           OR b.last > s.cursor
           OR b.last >= (SELECT min(x.pos) FROM unnest(s.waiting) x)
           OR EXISTS (
                -- a lease not scanned past that holds the slot and is not settled
                SELECT 1 FROM lease e
                WHERE e.group_id = p_group AND e.lane = l.lane AND e.expires_at > '-infinity'
                  AND e.expires_at >= s.scan_t AND (e.expires_at, e.lease_no) > (s.scan_t, s.scan_no)
                  AND (e.kind = 'x' OR e.slot = p_slot
                       OR e.last_pos >= e.first_pos AND e.first_pos <= b.last
                       OR (SELECT min(r) FROM unnest(e.redo_pos) r) <= b.last)
                  AND NOT (e.kind = 'r'
                           AND (EXISTS (SELECT 1 FROM ack a WHERE a.slot = e.slot AND a.group_id = p_group
                                                              AND a.lane = l.lane AND a.lease_no = e.lease_no
                                                              AND a.pos = 0)
                                OR (SELECT count(*) FROM ack a WHERE a.slot = e.slot AND a.group_id = p_group
                                                                 AND a.lane = l.lane AND a.lease_no = e.lease_no) = e.n))));
END
$$;

-- e2_reclaim: truncate slot p_slot (epoch p_epoch) if it is reclaimable,
-- checked again under ACCESS EXCLUSIVE locks on its nine leaves, taken
-- within 50 ms (else it is left for a later call: a reader of the slot, or
-- a transaction holding a lock on one of its leaves, keeps it). The
-- messages due later (in pending, not numbered yet) that the slot stores or
-- lists move first to the current slot (p_cur): the message copied there
-- as it is (same id and txid, which no cut numbers again: the cuts have
-- seen its transaction), and its pending row written there, naming where
-- the message now is. So a message delayed for months does not keep its
-- slot, and the queue keeps rotating (as engine 1's reclaim). A pending
-- row of another slot that named the message in this one names nothing
-- after the TRUNCATE: the cut's join to msg skips it, and status counts
-- the delayed messages, not the rows.
--
-- Parameters:
--   q        the queue
--   p_epoch  the oldest epoch kept
--   p_slot   its slot
--   p_cur    the current slot
-- Returns: whether it was truncated
-- Calls: e2_reclaimable
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_reclaim(q sluice.queue, p_epoch bigint, p_slot smallint, p_cur smallint)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_leaves constant text := (SELECT string_agg(format('%I.%I', sluice._qschema(q.id), t || '_' || p_slot), ', ')
                               FROM unnest(sluice._v2_tables()) t);
BEGIN
    IF NOT e2_reclaimable(q, p_epoch, p_slot) THEN
        RETURN false;
    END IF;
    IF NOT sluice._lock_within(format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', v_leaves), '50ms') THEN
        RETURN false;
    END IF;
    -- (held until the transaction ends: a receive that reclaimed waits for
    -- no lock after it, e2_wait_lane__s)
    PERFORM set_config('sluice.holds_lock', 'y', true);
    IF NOT e2_reclaimable(q, p_epoch, p_slot) THEN
        RETURN false;
    END IF;
    -- (no cut runs meanwhile: a cut reads pending and msg through their
    -- parents, so it waits for the locks just taken)
    WITH mv AS MATERIALIZED (
        SELECT DISTINCT p.due, p.txid, p.id, p.mslot
        FROM (SELECT x.due_upto FROM cut x ORDER BY x.cut_no DESC LIMIT 1) c
        JOIN pending p ON p.due > c.due_upto
        JOIN msg m ON m.slot = p.mslot AND m.txid = p.txid AND m.id = p.id
        WHERE p.slot = p_slot OR p.mslot = p_slot
    ), copied AS (
        INSERT INTO msg (slot, id, txid, orig, attempt, target, due, sent_at, headers, body, key, khash, priority)
        SELECT p_cur, m.id, m.txid, m.orig, m.attempt, m.target, m.due, m.sent_at, m.headers, m.body, m.key, m.khash,
               m.priority
        FROM mv JOIN msg m ON m.slot = mv.mslot AND m.txid = mv.txid AND m.id = mv.id
        WHERE mv.mslot = p_slot
    )
    INSERT INTO pending (slot, due, mslot, txid, id)
    SELECT p_cur, mv.due, CASE WHEN mv.mslot = p_slot THEN p_cur ELSE mv.mslot END, mv.txid, mv.id
    FROM mv;
    EXECUTE format('TRUNCATE %s', v_leaves);
    INSERT INTO sluice.reclaim (queue_id, epoch, reclaimed_at) VALUES (q.id, p_epoch, clock_timestamp());
    RETURN true;
END
$$;
