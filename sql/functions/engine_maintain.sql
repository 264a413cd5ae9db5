-- Group: engine templates - rotation, reclaim, purge (see engine_cut.sql for what a template is)
--
-- A queue writes into the slot of its current epoch. Rotation starts a new
-- epoch (in the next slot) once rotate_interval has passed and a slot is
-- free; reclaim TRUNCATEs the oldest retired epoch's slot once its retention
-- (and, if it holds deduplication keys, the dedup window) has passed and no
-- group needs anything in it. Both run inside receive about
-- once a second while messages are in flight, and in sluice.maintain().

-- e_reclaimable: whether nothing in slot p_slot is needed any more: every
-- committed message in it is numbered or delayed past the newest cut (reclaim
-- moves those into the current slot), every group has completed every
-- position numbered from it, and the newest batch lives elsewhere. Reclaim
-- checks it before taking the slot's locks and again once it holds them.
CREATE OR REPLACE FUNCTION sluice_tmpl.e_reclaimable(q sluice.queue, p_slot smallint)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_slot constant smallint := p_slot;
    head record;
    v_min bigint;
    v_xip xid8[];
    v_prev_xip xid8[];
BEGIN
    SELECT * INTO head FROM batches ORDER BY batch_no DESC LIMIT 1;
    IF head.slot = v_slot OR (NOT head.done AND head.res_phase = 1) THEN
        RETURN false;   -- the newest batch lives in this slot, or delayed messages are half numbered
    END IF;
    -- Committed messages in the slot that are not numbered yet: committed
    -- after the newest cut, or left in a half-cut round. (Those still
    -- delayed at the newest cut were committed before it: e_reclaim moves
    -- them into the current slot, so that a message due in months does not
    -- keep its slot, and all the storage after it, from being reclaimed.)
    v_xip := ARRAY(SELECT pg_snapshot_xip(head.snap));
    v_prev_xip := ARRAY(SELECT pg_snapshot_xip(head.prev_snap));
    IF EXISTS (SELECT 1 FROM messages m WHERE m.slot = v_slot AND m.txid >= pg_snapshot_xmax(head.snap))
       OR EXISTS (SELECT 1 FROM messages m WHERE m.slot = v_slot AND m.txid = ANY (v_xip))
       OR (NOT head.done AND EXISTS (
              SELECT 1 FROM messages m
              WHERE m.slot = v_slot AND (m.txid, m.id) > (head.res_txid, head.res_id)
                AND m.txid < pg_snapshot_xmax(head.snap)
                AND (m.txid >= pg_snapshot_xmax(head.prev_snap) OR m.txid = ANY (v_prev_xip)))) THEN
        RETURN false;
    END IF;
    -- Positions some group has not completed, in batches that live in the slot
    -- or that number messages of the slot.
    v_min := coalesce(e_min_lwm(q), head.last_pos + 1);
    IF EXISTS (SELECT 1 FROM batches b WHERE b.last_pos >= v_min AND (b.slot = v_slot OR v_slot = ANY (b.slots))) THEN
        RETURN false;
    END IF;

    RETURN true;
END
$$;

-- e_reclaim: truncate the slot of retired epoch p_epoch if nothing in it is
-- needed any more. The caller holds the queue's maint lock.
--
-- Returns: true if the slot was truncated
CREATE OR REPLACE FUNCTION sluice_tmpl.e_reclaim(q sluice.queue, p_epoch bigint, p_current bigint)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_slot constant smallint := p_epoch % q.slots;
    v_cur_slot constant smallint := p_current % q.slots;
    v_retired_at timestamptz;
    v_lock_timeout text;
    t record;
BEGIN
    -- The checks must see the latest commits: a snapshot held for the whole
    -- transaction could miss a send that committed into the slot meanwhile.
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RETURN false;
    END IF;
    SELECT e.started_at INTO v_retired_at FROM sluice.epoch e WHERE e.queue_id = q.id AND e.epoch = p_epoch + 1;
    IF clock_timestamp() < v_retired_at + q.retention THEN
        RETURN false;
    END IF;
    -- Deduplication keys sent in the slot are remembered for the dedup window.
    IF clock_timestamp() < v_retired_at + q.dedup_window AND EXISTS (SELECT 1 FROM dedup d WHERE d.slot = v_slot) THEN
        RETURN false;
    END IF;
    IF NOT e_reclaimable(q, v_slot) THEN
        RETURN false;
    END IF;

    v_lock_timeout := current_setting('lock_timeout');
    BEGIN
        -- Keep each group's newest lane states and checkpoints if they live in the slot.
        INSERT INTO group_states (slot, group_id, lane, seq, cursor, lwm, scan_from, lwm_at, bkeys, bheads, lv_prio, lv_pos,
                                  ahead)
        SELECT v_cur_slot, s.group_id, s.lane, s.seq, s.cursor, s.lwm, s.scan_from, s.lwm_at, s.bkeys, s.bheads,
               s.lv_prio, s.lv_pos, s.ahead
        FROM sluice.consumer_group cg
        CROSS JOIN generate_series(0, q.lanes - 1) AS l(lane)
        CROSS JOIN LATERAL (SELECT * FROM group_states gs WHERE gs.group_id = cg.id AND gs.lane = l.lane
                            ORDER BY gs.seq DESC LIMIT 1) s
        WHERE cg.queue_id = q.id AND s.slot = v_slot;
        INSERT INTO checkpoints (slot, group_id, lane, seq, lwm, at)
        SELECT v_cur_slot, c.group_id, c.lane, c.seq, c.lwm, c.at
        FROM sluice.consumer_group cg
        CROSS JOIN generate_series(0, q.lanes - 1) AS l(lane)
        CROSS JOIN LATERAL (SELECT * FROM checkpoints ck WHERE ck.group_id = cg.id AND ck.lane = l.lane
                            ORDER BY ck.seq DESC LIMIT 1) c
        WHERE cg.queue_id = q.id AND c.slot = v_slot;
        -- Never queue behind a long transaction that touched the slot: give up
        -- and try again at the next maintenance.
        PERFORM set_config('lock_timeout', '50ms', true);
        FOR t IN SELECT * FROM sluice._slot_tables() LOOP
            EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', sluice._table(q.id, t.name, v_slot));
        END LOOP;
        PERFORM set_config('lock_timeout', v_lock_timeout, true);
        -- Now no transaction can be writing into the slot: a send that was
        -- still in progress at the first check may have committed while we
        -- waited for the locks. Check again, and undo the copies if needed.
        IF NOT e_reclaimable(q, v_slot) THEN
            RAISE EXCEPTION USING ERRCODE = 'SL000', MESSAGE = 'slot no longer reclaimable';
        END IF;
        -- Messages delayed past the newest cut are not numbered yet: move
        -- them into the current slot, as they are (id, txid and due time
        -- kept), so that the cut numbers them there when they come due. Both
        -- copies are never visible at once: this transaction holds the
        -- slot's locks until it commits, and the slot is truncated with it.
        INSERT INTO messages (queue_id, slot, id, txid, sent_at, deliver_at, priority, attempt_base, target_group,
                              origin_id, key, dedup_key, headers, body)
        SELECT m.queue_id, v_cur_slot, m.id, m.txid, m.sent_at, m.deliver_at, m.priority, m.attempt_base,
               m.target_group, m.origin_id, m.key, m.dedup_key, m.headers, m.body
        FROM messages m
        WHERE m.slot = v_slot
          AND m.deliver_at > (SELECT b.t FROM batches b ORDER BY b.batch_no DESC LIMIT 1);
        FOR t IN SELECT * FROM sluice._slot_tables() LOOP
            EXECUTE format('TRUNCATE %s', sluice._table(q.id, t.name, v_slot));
        END LOOP;
    EXCEPTION
        WHEN lock_not_available THEN
            PERFORM set_config('lock_timeout', v_lock_timeout, true);
            RETURN false;
        WHEN SQLSTATE 'SL000' THEN
            RETURN false;
    END;
    INSERT INTO sluice.reclaim (queue_id, epoch, reclaimed_at) VALUES (q.id, p_epoch, clock_timestamp());
    RETURN true;
END
$$;

-- _analyze_filled: ANALYZE the queue's slot partitions (of the tables
-- named, either engine's) whose statistics say "empty or nearly" (0 <=
-- reltuples < 50) but that have 50 live rows or more now, so that every
-- session plans its statements on them again, for their real size. Called
-- by both engines' maintenance (e_analyze_filled here, engine 2's
-- e_maintain).
--
-- Why (issue 16). A slot's partitions wait empty between the TRUNCATE of
-- reclaim (or their creation) and the epoch that writes into them, and
-- autovacuum analyzes them then, since they changed before the TRUNCATE; a
-- database-wide ANALYZE does the same. That sets reltuples = 0, where a new
-- or truncated table has -1, which the planner reads as "never analyzed,
-- assume at least 10 pages". A session that plans while such a partition is
-- empty (any TRUNCATE or ANALYZE of a partition makes every session plan
-- again) estimates it at no rows; with reltuples = 0 and pages (an ANALYZE
-- that found only uncommitted rows, as the first receives of a new slot
-- make) every session does, whatever its size; and an ANALYZE of a handful
-- of rows can find group_id "unique" (one row, one value), which estimates
-- group_id = $1 at one row whatever the size too. The generic plan may then
-- probe the partition with a weaker index condition, since every probe of a
-- one-row table costs the same: the low-water mark's walk (e_lane_lwm, NOT
-- EXISTS over acks) became an index scan on group_id alone with pos and slot
-- in a filter, so each probe read every completion of the group in the slot
-- (with an xid held, each with a heap fetch: vacuum cannot mark the pages
-- all-visible), and an ack's lookup of its delivery (e_current_deliveries)
-- scanned the (group_id, lane, expires_at) index with pos in a filter.
-- Sessions kept those plans while the slot filled, until something made
-- them plan again (the next autovacuum round). Issue 16 measured consumed/s
-- at a quarter for one minute; with the empty slots analyzed by hand, the
-- walk read 1,257 to 7,677 blocks a call instead of 5, growing with the slot.
--
-- 50 live rows (as counted by the statistics collector, which lags by about
-- a second), as autovacuum's analyze threshold: enough for the sample to
-- tell a column with one value from a unique one. ANALYZE of all columns:
-- with the row count alone, group_id = $1 would be estimated at the default
-- 0.5% of the rows and the weak probe would still look cheapest. It takes
-- SHARE UPDATE EXCLUSIVE, which reads and writes of the slot do not wait
-- for; a partition that autovacuum is working on is left for the next call
-- (lock_timeout). At most 9 a call: each ANALYZE is a subtransaction that
-- writes, and a transaction with more than 64 of them would make every
-- snapshot look ids up in pg_subtrans.
--
-- Parameters:
--   q         the queue
--   p_tables  its slot-partitioned tables (sluice._slot_tables' names for
--             engine 1, sluice._v2_tables() for engine 2)
-- Returns: how many partitions were analyzed
CREATE OR REPLACE FUNCTION sluice._analyze_filled(q sluice.queue, p_tables text[])
RETURNS int
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_lock_timeout constant text := current_setting('lock_timeout');
    v_names constant name[] := ARRAY(SELECT st.name || '_' || s.slot FROM unnest(p_tables) st(name)
                                     CROSS JOIN generate_series(0, q.slots - 1) AS s(slot));
    t record;
    n int := 0;
BEGIN
    -- Every slot: the current one fills, the others get leases and
    -- completions (those of a message live in its slot), and one that just
    -- stopped being current may not have been looked at yet. 11 probes per slot of
    -- pg_class by name; then, for the few whose statistics say "(nearly)
    -- empty", the size (a file system call); then, for those with pages,
    -- the live rows (statistics, which on PostgreSQL 14 means reading the
    -- collector's file). About 0.3 ms (80 buffers) when there is nothing to
    -- do. A held xmin keeps the old versions of these pg_class rows that
    -- each TRUNCATE of reclaim leaves, and the probes walk them: 180 buffers
    -- after 10 minutes of rotating every 10 s (every other lookup of these
    -- tables' catalog rows pays the same).
    FOR t IN
        SELECT f.oid::regclass AS rel
        FROM (SELECT c.oid, c.relname
              FROM (SELECT c.oid, c.relname FROM pg_catalog.pg_class c
                    WHERE c.relname = ANY (v_names)
                      AND c.relnamespace = (SELECT ns.oid FROM pg_catalog.pg_namespace ns
                                            WHERE ns.nspname = sluice._qschema(q.id))
                      AND c.reltuples >= 0 AND c.reltuples < 50
                    OFFSET 0) c
              WHERE pg_catalog.pg_relation_size(c.oid) > 0
              OFFSET 0) f
        WHERE pg_catalog.pg_stat_get_live_tuples(f.oid) >= 50
        ORDER BY f.relname
        LIMIT 9
    LOOP
        BEGIN
            PERFORM set_config('lock_timeout', '50ms', true);
            EXECUTE format('ANALYZE %s', t.rel);
            n := n + 1;
        EXCEPTION
            WHEN lock_not_available THEN NULL;
        END;
        PERFORM set_config('lock_timeout', v_lock_timeout, true);
    END LOOP;
    RETURN n;
END
$$;

-- e_analyze_filled: sluice._analyze_filled of an engine 1 queue's tables.
--
-- Parameters:
--   q  the queue
-- Returns: how many partitions were analyzed
CREATE OR REPLACE FUNCTION sluice_tmpl.e_analyze_filled(q sluice.queue)
RETURNS int
LANGUAGE plpgsql
AS $$
BEGIN
    RETURN sluice._analyze_filled(q, ARRAY(SELECT st.name FROM sluice._slot_tables() st));
END
$$;

-- e_maintain: drop the queue's groups whose ttl ran out, reclaim what can
-- be reclaimed, then rotate if due, then analyze the partitions that have
-- rows but the statistics of an empty table (e_analyze_filled). The caller
-- holds the queue's maint lock.
--
-- Returns: (rotated, reclaimed, changed): whether a new epoch started, how
--          many slots were truncated, and whether it wrote anything at all
--          (those, a group dropped, a partition analyzed): when not, the
--          caller may roll it back (sluice.maintain)
DROP FUNCTION IF EXISTS sluice_tmpl.e_maintain(int);   -- (before changed)
CREATE OR REPLACE FUNCTION sluice_tmpl.e_maintain(p_queue_id int, OUT rotated boolean, OUT reclaimed int,
                                                  OUT changed boolean)
LANGUAGE plpgsql
AS $$
DECLARE
    q sluice.queue;
    cur record;
    oldest bigint;
BEGIN
    rotated := false;
    reclaimed := 0;
    changed := false;
    SELECT * INTO q FROM sluice.queue qq WHERE qq.id = p_queue_id;
    IF EXISTS (SELECT 1 FROM sluice.consumer_group cg WHERE cg.queue_id = p_queue_id AND cg.ttl IS NOT NULL) THEN
        changed := sluice._expire_groups(p_queue_id) > 0;   -- before reclaim: what they held back goes now
    END IF;
    SELECT e.epoch, e.slot, e.started_at INTO cur FROM sluice.epoch e
    WHERE e.queue_id = p_queue_id ORDER BY e.epoch DESC LIMIT 1;
    oldest := coalesce((SELECT max(r.epoch) FROM sluice.reclaim r WHERE r.queue_id = p_queue_id) + 1, 0);
    WHILE oldest < cur.epoch AND e_reclaim(q, oldest, cur.epoch) LOOP
        oldest := oldest + 1;
        reclaimed := reclaimed + 1;
    END LOOP;
    -- Rotate when the current slot has traffic: batches that number
    -- messages, or messages sent since the newest cut. (Not for messages
    -- that reclaim moved here because they are due later: a queue that only
    -- holds those would rotate, and copy them, every rotate_interval.)
    IF clock_timestamp() >= cur.started_at + q.rotate_interval AND cur.epoch - oldest < q.slots - 1
       AND (EXISTS (SELECT 1 FROM batches b WHERE b.slot = cur.slot AND b.last_pos >= b.first_pos)
            OR EXISTS (SELECT 1 FROM messages m
                       WHERE m.slot = cur.slot
                         AND m.txid >= (SELECT pg_snapshot_xmax(b.snap) FROM batches b
                                        ORDER BY b.batch_no DESC LIMIT 1))) THEN
        INSERT INTO sluice.epoch (queue_id, epoch, slot, started_at)
        VALUES (p_queue_id, cur.epoch + 1, (cur.epoch + 1) % q.slots, clock_timestamp());
        rotated := true;
    END IF;
    changed := e_analyze_filled(q) > 0 OR changed OR rotated OR reclaimed > 0;
END
$$;

-- e_purge: the body of sluice.purge_queue for this queue (see there).
CREATE OR REPLACE FUNCTION sluice_tmpl.e_purge(q sluice.queue)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    n bigint;
    head record;
    t record;
BEGIN
    PERFORM pg_advisory_xact_lock(sluice._lock_ns('maint'), q.id);
    PERFORM pg_advisory_xact_lock(sluice._lock_ns('cut'), q.id);
    FOR t IN SELECT * FROM sluice._slot_tables() LOOP
        EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', sluice._table(q.id, t.name));
    END LOOP;
    SELECT count(*) INTO n FROM messages;
    SELECT * INTO head FROM batches ORDER BY batch_no DESC LIMIT 1;
    FOR t IN SELECT * FROM sluice._slot_tables() LOOP
        EXECUTE format('TRUNCATE %s', sluice._table(q.id, t.name));
    END LOOP;
    -- A new base: positions continue, and nothing is visible in snapshot 3:3:,
    -- so the next cut takes every message committed from now on.
    INSERT INTO batches (slot, batch_no, first_pos, last_pos, done, cut_at, prev_t, t, prev_snap, snap,
                         ids, txids, slots)
    VALUES ((SELECT ns.slot FROM sluice._slot_now(q.id) ns), head.batch_no + 1, head.last_pos + 1, head.last_pos, true,
            clock_timestamp(), '-infinity', '-infinity', '3:3:', '3:3:', '{}', '{}', '{}');
    RETURN n;
END
$$;

-- e_start_pos: the first position of a new group (see sluice.create_group).
-- The caller holds the queue's maint lock.
--
-- Parameters:
--   p_queue_id   queue id
--   p_earliest   true for 'earliest'
--   p_ts         for a timestamp start (NULL for 'latest')
CREATE OR REPLACE FUNCTION sluice_tmpl.e_start_pos(p_queue_id int, p_earliest boolean, p_ts timestamptz)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    v bigint;
BEGIN
    IF p_earliest THEN
        SELECT min(b.first_pos) INTO v FROM batches b;
        RETURN v;
    END IF;
    IF p_ts IS NOT NULL THEN
        SELECT min(b.first_pos) INTO v FROM batches b WHERE b.cut_at >= p_ts AND b.last_pos >= b.first_pos;
        IF v IS NOT NULL THEN
            RETURN v;
        END IF;
    END IF;
    -- 'latest', or a time after the last batch: number everything visible now.
    PERFORM pg_advisory_xact_lock(sluice._lock_ns('cut'), p_queue_id);
    RETURN e_cut_all(p_queue_id, (SELECT qq.lanes FROM sluice.queue qq WHERE qq.id = p_queue_id)) + 1;
END
$$;

-- e_base: write the base batch of a new queue: nothing is visible in
-- snapshot 3:3:, so the first cut takes every committed message.
CREATE OR REPLACE FUNCTION sluice_tmpl.e_base()
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO batches (slot, batch_no, first_pos, last_pos, done, cut_at, prev_t, t, prev_snap, snap,
                         ids, txids, slots)
    VALUES (0, 0, 1, 0, true, clock_timestamp(), '-infinity', '-infinity', '3:3:', '3:3:', '{}', '{}', '{}');
END
$$;
