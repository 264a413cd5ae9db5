-- Group: engine templates - lanes (see engine_cut.sql for what a template is)
--
-- The cut splits a queue's positions into lanes (e_lanes). Each group keeps
-- one dispatch state per lane: a sequence of group_states rows (newest is
-- current) with the lane's cursor (the last position dispatched), its
-- low-water mark (the first position not completed), where its expiry scan
-- stopped, its blocked keys and its priority levels. A receive takes a lane
-- with a try-lock of (group, lane) held until it commits, so receives of one
-- group run side by side on different lanes and never wait for each other.

-- e_lane_state: the newest dispatch state of a group's lane, or where to
-- resume when there is none (first receive, after a crash, after a purge):
-- the lane's durable checkpoint, else the group's start. A state resumed
-- from a checkpoint may have completed positions after its cursor (acks are
-- logged, states are not): its ahead is the group's highest completed
-- position, so that the receives after it look for completions up to there
-- (ahead: see migration 0013); a lane without a checkpoint was never taken
-- from, and its ahead is its cursor (nothing to look for: with the group's
-- highest, every take of a lane first taken in the middle of a drain looked
-- until the lane's cursor got there). A state row written before ahead
-- existed gets the group's highest.
--
-- Parameters:
--   g       the group
--   p_lane  the lane
-- Returns: the state; changed is true when there was no state row
CREATE OR REPLACE FUNCTION sluice_tmpl.e_lane_state(g sluice.consumer_group, p_lane smallint)
RETURNS sluice.lane_state
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    st sluice.lane_state;
    r record;
BEGIN
    SELECT s.seq, s.cursor, s.lwm, s.scan_from, s.lwm_at, s.bkeys, s.bheads, s.lv_prio, s.lv_pos, s.ahead INTO r
    FROM group_states s WHERE s.group_id = g.id AND s.lane = p_lane ORDER BY s.seq DESC LIMIT 1;
    IF r.seq IS NOT NULL THEN
        RETURN ROW(p_lane, r.seq, r.cursor, r.lwm, r.scan_from, r.lwm_at, true,
                   coalesce(r.bkeys, '{}'), coalesce(r.bheads, '{}'), coalesce(r.lv_prio, '{}'),
                   coalesce(r.lv_pos, '{}'), false, coalesce(r.ahead, e_completed_max(g.id)))::sluice.lane_state;
    END IF;
    SELECT c.seq, c.lwm INTO r FROM checkpoints c
    WHERE c.group_id = g.id AND c.lane = p_lane ORDER BY c.seq DESC LIMIT 1;
    st := ROW(p_lane, coalesce(r.seq, 0), NULL, greatest(coalesce(r.lwm, g.start_pos), g.start_pos),
              '-infinity', '-infinity', false, '{}', '{}', '{}', '{}', true, NULL)::sluice.lane_state;
    st.cursor := st.lwm - 1;
    -- No checkpoint either: the group never took from the lane (its first
    -- take writes one, in the same transaction as the state, even when it
    -- took nothing: e_lane_checkpoint, migration 0014; reclaim keeps the
    -- newest; purge empties acks too), so nothing of it is completed.
    st.ahead := CASE WHEN r.seq IS NULL THEN st.cursor ELSE e_completed_max(g.id) END;
    RETURN st;
END
$$;

-- e_lane_lwm: the first position of a lane in [p_lwm, p_cursor] the group
-- has not completed (p_cursor + 1 when all are). Batch by batch: one
-- statement finds the next batch of the lane that is not passed whole, a
-- batch being passed when its positions are all completed (one count of
-- its completions each, a range scan of the acks and run_acks indexes, not
-- a probe per position); in that batch (or one with messages targeted at
-- single groups), the positions are looked at one by one. Stops at the
-- first one not completed, so it is cheap while the front of the lane is
-- in flight.
--
-- The count is a subquery of the batch statement, run again for each batch
-- it passes, rather than a call per batch: in steady traffic a lane's
-- batches hold a message or two each, so a walk of a second's worth passed
-- ~30 batches with a call and an executor start-up (12 index scans) each,
-- ~0.2 ms a batch, ~10% of a receive (PostgreSQL 15, one consumer).
CREATE OR REPLACE FUNCTION sluice_tmpl.e_lane_lwm(p_group_id int, p_lane smallint, p_lwm bigint, p_cursor bigint)
RETURNS bigint
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    b record;
    v bigint;
    v_after bigint := p_lwm - 1;   -- the batches looked at so far end here
BEGIN
    IF p_cursor < p_lwm THEN
        RETURN p_lwm;
    END IF;
    LOOP
        SELECT x.lo, x.hi, x.first_pos, x.last_pos, x.slots, x.targets INTO b
        FROM (SELECT greatest(bb.first_pos, p_lwm) AS lo, least(bb.last_pos, p_cursor) AS hi, bb.first_pos,
                     bb.last_pos, bb.slots, bb.targets
              FROM batches bb
              WHERE bb.lane = p_lane AND bb.last_pos > v_after AND bb.first_pos <= p_cursor
                AND bb.last_pos >= bb.first_pos
              ORDER BY bb.last_pos) x
        WHERE x.targets IS NOT NULL
           OR (SELECT count(*) FROM e_completed_in(p_group_id, x.lo, x.hi)) <> x.hi - x.lo + 1
        LIMIT 1;
        IF NOT FOUND THEN
            RETURN p_cursor + 1;
        END IF;
        SELECT b.first_pos + u.o - 1 INTO v
        FROM unnest(b.slots, b.targets) WITH ORDINALITY AS u(slot, tg, o)
        WHERE b.first_pos + u.o - 1 BETWEEN b.lo AND b.hi AND (u.tg IS NULL OR u.tg = p_group_id)
          AND NOT EXISTS (SELECT FROM e_completed(p_group_id, u.slot, b.first_pos + u.o - 1))
        ORDER BY u.o
        LIMIT 1;
        IF v IS NOT NULL THEN
            RETURN v;
        END IF;
        v_after := b.last_pos;
    END LOOP;
END
$$;

-- e_group_lwm: a group's low-water mark over all lanes: every position below
-- it is completed by the group. A lane whose dispatched positions are all
-- completed counts with its next position; a lane with nothing numbered
-- after its cursor does not count.
--
-- Parameters:
--   g        the group
--   p_lanes  the queue's number of lanes
--   p_exact  false: each lane's low-water mark as last stored (at most a
--            second old while messages are in flight: cheap, and never too
--            high, which is what reclaim needs); true: walk the lanes'
--            completions from there (what status shows)
-- Returns: the low-water mark (the last numbered position + 1 when every lane is done)
CREATE OR REPLACE FUNCTION sluice_tmpl.e_group_lwm(g sluice.consumer_group, p_lanes int, p_exact boolean DEFAULT false)
RETURNS bigint
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN coalesce(
        (SELECT min(CASE WHEN w.lwm <= s.cursor THEN w.lwm
                         ELSE (SELECT greatest(b.first_pos, s.cursor + 1) FROM batches b
                               WHERE b.lane = l.lane AND b.last_pos > s.cursor AND b.last_pos >= b.first_pos
                               ORDER BY b.last_pos LIMIT 1) END)
         FROM generate_series(0, p_lanes - 1) AS l(lane)
         CROSS JOIN LATERAL e_lane_state(g, l.lane::smallint) s
         CROSS JOIN LATERAL (SELECT CASE WHEN p_exact THEN e_lane_lwm(g.id, l.lane::smallint, s.lwm, s.cursor)
                                         ELSE s.lwm END AS lwm) w),
        (SELECT b.last_pos + 1 FROM batches b ORDER BY b.batch_no DESC LIMIT 1));
END
$$;

-- e_min_lwm: the smallest low-water mark over the queue's groups (every
-- position below it is completed by every group), or NULL without groups.
CREATE OR REPLACE FUNCTION sluice_tmpl.e_min_lwm(q sluice.queue)
RETURNS bigint
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN (SELECT min(e_group_lwm(g, q.lanes)) FROM sluice.consumer_group g WHERE g.queue_id = q.id);
END
$$;

-- e_lanes_with_work: the lanes of a group worth a try, in turn from p_start
-- on: those with numbered positions after their cursor, leases that expired
-- since their last scan (one of a message not completed, or two of any: a
-- lease runs out even when its message was acked, and in traffic longer
-- than the lease such leases expire all the time; a visit moves the lane's
-- scan past them, e_fast, and is worth it for two, not for each one; each
-- lease read costs a heap fetch, which is why not more: eight made a
-- receive under a held xmin read ~1.3-1.5x the buffers per message),
-- blocked keys, a low-water mark due for an update
-- (once a second while messages are in flight), messages with a priority
-- below 0 that may be left behind their cursor (only when p_prio), or no
-- state yet. Read without the lanes' locks: whoever takes a lane reads its
-- state again once it holds it. A set-returning SQL function, so that the
-- planner inlines it into the caller's statement (e_work_lanes,
-- e_fast_lane), and yields the lanes in turn order as it goes.
--
-- Parameters:
--   p_group_id  group id
--   p_lanes     the queue's number of lanes
--   p_now       the receive's time
--   p_start     the first lane in turn
--   p_prio      whether the group may have prioritized messages pending (e_prio_pending)
--   p_only      only these lanes (NULL: all)
-- Returns: (lane, turn, cursor): turn 0 for p_start; cursor NULL for a lane
--          with no state
SET check_function_bodies = off;   -- (a SQL template names the queue's tables: see engine_runs.sql)
DROP FUNCTION IF EXISTS sluice_tmpl.e_lanes_with_work(int, int, timestamptz, int, boolean);   -- (before p_only)
CREATE OR REPLACE FUNCTION sluice_tmpl.e_lanes_with_work(p_group_id int, p_lanes int, p_now timestamptz,
                                                         p_start int, p_prio boolean, p_only smallint[])
RETURNS TABLE (lane smallint, turn int, cursor bigint)
LANGUAGE sql STABLE
AS $$
    SELECT l.lane, t.i, s.cursor
    FROM generate_series(0, p_lanes - 1) AS t(i)
    CROSS JOIN LATERAL (SELECT ((p_start + t.i) % p_lanes)::smallint AS lane) l
    LEFT JOIN LATERAL (SELECT s.cursor, s.lwm, s.scan_from, s.lwm_at, s.bkeys FROM group_states s
                       WHERE s.group_id = p_group_id AND s.lane = l.lane ORDER BY s.seq DESC LIMIT 1) s ON true
    WHERE (p_only IS NULL OR l.lane = ANY (p_only))
      AND (s.cursor IS NULL
       OR s.bkeys IS NOT NULL
       OR (s.lwm <= s.cursor AND s.lwm_at <= p_now - interval '1 second')
       OR EXISTS (SELECT 1 FROM batches b
                  WHERE b.lane = l.lane AND b.last_pos > s.cursor AND b.last_pos >= b.first_pos)
       -- leases expired since the lane's scan: one of a message not
       -- completed (at or above the low-water mark), or two of any
       OR (SELECT count(*) FILTER (WHERE x.last_pos >= s.lwm) > 0 OR count(*) >= 2
           FROM (SELECT x.last_pos FROM e_expiries(p_group_id, l.lane, s.scan_from, p_now) x LIMIT 2) x)
       -- (called, not inlined: a plan sets up what it skips, see e_is_completed)
       OR (p_prio AND e_low_behind(l.lane, s.lwm, s.cursor)))
$$;
RESET check_function_bodies;

-- e_low_behind: whether a lane has messages with a priority below 0 from
-- its low-water mark up to its cursor (they may be left behind it: a
-- receive takes them only when nothing else is ready). For
-- e_lanes_with_work, which asks only when the queue has prioritized
-- messages: PL/pgSQL, so that its index scans are set up only then.
--
-- Parameters:
--   p_lane            the lane
--   p_lwm, p_cursor   the lane's low-water mark and cursor
CREATE OR REPLACE FUNCTION sluice_tmpl.e_low_behind(p_lane smallint, p_lwm bigint, p_cursor bigint)
RETURNS boolean
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM prio p WHERE p.lane = p_lane AND p.priority < 0
                                          AND p.pos >= p_lwm AND p.pos <= p_cursor);
END
$$;
