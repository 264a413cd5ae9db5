-- Group: engine templates - runs (see engine_cut.sql for what a template is)
--
-- A receive leases the unkeyed first deliveries it takes as runs: the
-- consecutive positions of one lane and slot that it picks in one call get
-- one row of table runs (pos = the run's first position, last_pos its last,
-- attempt 1, one token), and each message a receipt slot.pos.1.token.run
-- that names the run; a run of one position is an ordinary deliveries row.
-- An ack that completes all of a run's positions at once (the common case:
-- a consumer acks the batch it received) writes one row of run_acks for it;
-- any other completion (part of a run, a nack, a dead letter, a message
-- that is gone) writes an acks row per position, as before runs. An extend
-- or a redelivery of a message of a run writes a deliveries row of its own,
-- which is newer than the run.
--
-- Runs of a group never overlap: a run is made only of positions taken for
-- the first time (after the lane's cursor), and after a crash, which
-- empties runs and deliveries, the positions taken again are the ones not
-- completed. So run_acks rows never overlap either, and the run covering a
-- position is the nearest one at or before it. A position may be both in
-- an acked run and in an acks row (a nack or a dead letter racing an ack of
-- the run): it is completed either way, and counts of completed positions
-- count it once (e_completed_in).
--
-- These are SQL functions without SET clauses, so that the planner inlines
-- them into the statements that call them; their table names are resolved
-- when they are inlined, in the queue's schema (the entry points' search
-- path), so their bodies are not checked when they are created.
SET check_function_bodies = off;

-- e_completed: the rows by which a group has completed a position (its
-- acks row, or the run_acks row of its whole run): none if it has not. Asked
-- as EXISTS (SELECT FROM e_completed(...)). (Set-returning, because the
-- planner inlines such a function with its subqueries into the caller's
-- query; a scalar one with a subquery it would call row by row.)
--
-- Parameters:
--   p_group_id  group id
--   p_slot      the position's slot (its message's)
--   p_pos       the position
CREATE OR REPLACE FUNCTION sluice_tmpl.e_completed(p_group_id int, p_slot smallint, p_pos bigint)
RETURNS TABLE (pos bigint)
LANGUAGE sql STABLE
AS $$
    SELECT a.pos FROM acks a WHERE a.group_id = p_group_id AND a.pos = p_pos AND a.slot = p_slot
    UNION ALL
    SELECT r.pos
    FROM (SELECT a.pos, a.last_pos FROM run_acks a
          WHERE a.group_id = p_group_id AND a.slot = p_slot AND a.pos <= p_pos
          ORDER BY a.pos DESC LIMIT 1) r
    WHERE r.last_pos >= p_pos
$$;

-- e_any_completed: the rows by which a group has completed positions
-- from p_lo to p_hi (of any slot), a few at most: asked as EXISTS, it lets
-- a receive skip e_completed for each position of a range that nobody has
-- completed yet (the usual case after the cursor).
CREATE OR REPLACE FUNCTION sluice_tmpl.e_any_completed(p_group_id int, p_lo bigint, p_hi bigint)
RETURNS TABLE (pos bigint)
LANGUAGE sql STABLE
AS $$
    SELECT a.pos FROM acks a WHERE a.group_id = p_group_id AND a.pos BETWEEN p_lo AND p_hi
    UNION ALL
    SELECT a.pos FROM run_acks a WHERE a.group_id = p_group_id AND a.pos BETWEEN p_lo AND p_hi
    UNION ALL
    SELECT r.pos
    FROM (SELECT a.pos, a.last_pos FROM run_acks a
          WHERE a.group_id = p_group_id AND a.pos < p_lo
          ORDER BY a.pos DESC LIMIT 1) r
    WHERE r.last_pos >= p_lo
$$;

-- e_is_completed, e_has_completed: EXISTS over e_completed and
-- e_any_completed, in PL/pgSQL, for the checks a statement makes only when
-- something may be completed ahead of a lane's cursor (its state's ahead):
-- the take statements (e_take, e_take_fast, e_take_new). Inlined, those
-- checks put their index scans (a partition per slot each of acks and
-- run_acks) into the caller's plan, and a plan is set up whole each time
-- it runs, the parts it skips included: that set-up was most of what a take
-- cost while nothing was ahead (the usual case). Called, they cost a call
-- when they run and nothing when they do not.
--
-- Parameters:
--   p_group_id       group id
--   p_slot, p_pos    the position and its slot (e_is_completed)
--   p_lo, p_hi       the range of positions (e_has_completed)
-- Returns: whether the position, or any position of the range, is completed
CREATE OR REPLACE FUNCTION sluice_tmpl.e_is_completed(p_group_id int, p_slot smallint, p_pos bigint)
RETURNS boolean
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN EXISTS (SELECT FROM e_completed(p_group_id, p_slot, p_pos));
END
$$;

CREATE OR REPLACE FUNCTION sluice_tmpl.e_has_completed(p_group_id int, p_lo bigint, p_hi bigint)
RETURNS boolean
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN EXISTS (SELECT FROM e_any_completed(p_group_id, p_lo, p_hi));
END
$$;

-- e_completed_max: the highest position a group has completed (of any
-- slot and lane; 0 when none): a bound on what a lane state resumed from
-- its checkpoint may find completed ahead of its cursor (e_lane_state).
-- Eight index probes, made when a lane state is resumed (and by status for
-- a lane without a state), not per receive. PL/pgSQL, so that the plan is
-- kept for the session (see e_completed_in).
CREATE OR REPLACE FUNCTION sluice_tmpl.e_completed_max(p_group_id int)
RETURNS bigint
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN greatest(coalesce((SELECT a.pos FROM acks a WHERE a.group_id = p_group_id
                              ORDER BY a.pos DESC LIMIT 1), 0),
                    coalesce((SELECT a.last_pos FROM run_acks a WHERE a.group_id = p_group_id
                              ORDER BY a.pos DESC LIMIT 1), 0));   -- (runs do not overlap)
END
$$;

-- e_completed_in: the positions from p_lo to p_hi a group has completed
-- (of any slot), each once: its own rows, and the part of the acked runs
-- inside the range (the run reaching in from below included). Counted by
-- e_lane_lwm's batch statement, into which the planner inlines it (as a
-- subquery run again for each batch: called from an expression, a SQL
-- function with a UNION is not inlined but planned again on every call,
-- ~2.2M instructions a call, callgrind, PostgreSQL 15).
CREATE OR REPLACE FUNCTION sluice_tmpl.e_completed_in(p_group_id int, p_lo bigint, p_hi bigint)
RETURNS TABLE (pos bigint)
LANGUAGE sql STABLE
AS $$
    SELECT a.pos FROM acks a
    WHERE a.group_id = p_group_id AND a.pos BETWEEN p_lo AND p_hi
    UNION
    SELECT generate_series(a.pos, least(a.last_pos, p_hi)) FROM run_acks a
    WHERE a.group_id = p_group_id AND a.pos BETWEEN p_lo AND p_hi
    UNION
    SELECT generate_series(p_lo, least(s.last_pos, p_hi))
    FROM (SELECT a.last_pos FROM run_acks a
          WHERE a.group_id = p_group_id AND a.pos < p_lo
          ORDER BY a.pos DESC LIMIT 1) s
    WHERE s.last_pos >= p_lo
$$;

DROP FUNCTION IF EXISTS sluice_tmpl.e_completed_count(int, bigint, bigint);   -- (counted in e_lane_lwm's statement)

-- e_newest: a group's newest delivery of a position: its newest deliveries
-- row (by attempt, then time, then token: extends write newer rows with the
-- same token; nack and release write parked rows with token 0), or else the
-- run that covers it. No row: the position was never delivered (or its rows
-- were lost in a crash).
--
-- Parameters:
--   p_group_id  group id
--   p_slot      the position's slot
--   p_pos       the position
-- Returns: at most one row (attempt, token, expires_at, delivered_at, run:
--          the run's first position, NULL for a row of its own)
CREATE OR REPLACE FUNCTION sluice_tmpl.e_newest(p_group_id int, p_slot smallint, p_pos bigint)
RETURNS TABLE (attempt int, token bigint, expires_at timestamptz, delivered_at timestamptz, run bigint)
LANGUAGE sql STABLE
AS $$
    SELECT x.attempt, x.token, x.expires_at, x.delivered_at, x.run
    FROM (SELECT d.attempt, d.token, d.expires_at, d.delivered_at, NULL::bigint AS run, 1 AS o
          FROM deliveries d
          WHERE d.slot = p_slot AND d.group_id = p_group_id AND d.pos = p_pos
          UNION ALL
          SELECT 1, r.token, r.expires_at, r.delivered_at, r.pos, 2
          FROM (SELECT r.token, r.expires_at, r.delivered_at, r.pos, r.last_pos FROM runs r
                WHERE r.slot = p_slot AND r.group_id = p_group_id AND r.pos <= p_pos
                ORDER BY r.pos DESC LIMIT 1) r
          WHERE r.last_pos >= p_pos) x
    ORDER BY x.o, x.attempt DESC, x.delivered_at DESC, x.token DESC
    LIMIT 1
$$;

-- e_run_message: the message at a position of a lane (its id and txid),
-- read from the lane's batches (a run's row names no message).
CREATE OR REPLACE FUNCTION sluice_tmpl.e_run_message(p_lane smallint, p_pos bigint)
RETURNS TABLE (id bigint, txid xid8)
LANGUAGE sql STABLE
AS $$
    SELECT b.ids[p_pos - b.first_pos + 1], b.txids[p_pos - b.first_pos + 1]
    FROM batches b
    WHERE b.lane = p_lane AND b.last_pos >= p_pos AND b.first_pos <= p_pos
    ORDER BY b.last_pos
    LIMIT 1
$$;

RESET check_function_bodies;
