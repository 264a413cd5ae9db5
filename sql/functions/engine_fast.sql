-- Group: engine templates - the receive's fast path (see engine_cut.sql for
-- what a template is)
--
-- Most receives of a draining queue find the same thing: nothing new to
-- number, no priorities pending, and a lane whose next batches hold only unkeyed
-- messages, with no expired lease, blocked key or low-water mark due. For
-- those, e_receive replaces e_work_lanes, e_pick and e_take (a dozen
-- statements and as many PL/pgSQL calls per lane) by two statements:
-- e_fast_lane locks a lane with work, e_take_fast takes from its next
-- batches and writes its new state. Whatever else a lane needs (a
-- redelivery, a key, a priority, a checkpoint, a first state), e_take_fast
-- declines and the full path runs; the lock e_fast_lane took is the one
-- e_pick would take.

-- e_fast: the fast path of e_receive, for a receive with nothing to number
-- and no priorities pending: unless the session's idle note says the group is idle
-- (e_idle), lock a lane with work (e_fast_lane) and take from it
-- (e_take_fast). A lane whose only work was to move its scan past leases of
-- completed messages gives nothing: then the next lane with work, three
-- lanes at most. No free lane with work: the session notes it (e_idle_note)
-- unless a note holds; when the note says lanes with work are all held by
-- other receives, it waits for one of them, at most 100 ms
-- (e_wait_for_lane).
--
-- Parameters:
--   q, g          the queue and group
--   max_messages  how many to take at most
--   p_now         the receive's time
--   p_start       the lane to start from
-- Returns: pk, what was taken; lanes: '{}' when no free lane has work (so
--          nothing to pick), NULL when the full path is to look (a lane
--          declined, or three gave nothing)
CREATE OR REPLACE FUNCTION sluice_tmpl.e_fast(q sluice.queue, g sluice.consumer_group, max_messages int,
                                              p_now timestamptz, p_start int,
                                              OUT pk sluice.picks, OUT lanes smallint[])
LANGUAGE plpgsql
AS $$
DECLARE
    v_note constant text := sluice._idle_note_name(q.id);
    v_idle constant boolean := e_idle(current_setting(v_note, true), g.id, p_now);
    v_lane smallint;
    v_noted text;
    v_try int;
BEGIN
    pk := ROW('{}', '{}', '{}', '{}', '{}', '{}', '{}');
    IF v_idle THEN
        lanes := '{}';
        RETURN;
    END IF;
    FOR v_try IN 1..3 LOOP
        v_lane := e_fast_lane(g.id, q.lanes, p_now, p_start);
        IF v_lane IS NULL AND v_idle IS NULL THEN
            v_noted := e_idle_note(g.id, q.lanes, p_now);
            PERFORM set_config(v_note, v_noted, false);
        END IF;
        -- (the note, written before the wait, says whether any lane has
        -- work: an idle poll waits for nothing and looks at its lanes once
        -- more, for the note, as before, not twice)
        IF v_lane IS NULL AND v_try = 1 AND (v_idle IS FALSE OR v_noted LIKE '% busy') THEN
            -- every lane with work is held by another receive: wait for one
            v_lane := e_wait_for_lane(g.id, q.lanes, p_now, p_start);
        END IF;
        IF v_lane IS NULL THEN
            lanes := '{}';
            RETURN;
        END IF;
        pk := e_take_fast(q.id, g.id, v_lane, max_messages, p_now);
        IF pk.pos IS NULL THEN   -- declined: the full path
            pk := ROW('{}', '{}', '{}', '{}', '{}', '{}', '{}');
            RETURN;
        END IF;
        EXIT WHEN cardinality(pk.pos) > 0;
    END LOOP;
END
$$;

-- e_fast_lane: the first lane of a group, from p_start on, that has work
-- (e_lanes_with_work) and whose try-lock this receive gets. The lock is
-- tried only on a lane known to have work (a volatile condition stays
-- above the inlined function's), and the lanes after the first one locked
-- are not looked at (no ORDER BY: a sort would read, and lock, every lane
-- first; the function yields them in turn order).
--
-- Parameters:
--   p_group_id  group id
--   p_lanes     the queue's number of lanes
--   p_now       the receive's time
--   p_start     the lane to start from
-- Returns: the lane, locked until the transaction ends, or NULL: no lane
--          with work is free
CREATE OR REPLACE FUNCTION sluice_tmpl.e_fast_lane(p_group_id int, p_lanes int, p_now timestamptz, p_start int)
RETURNS smallint
LANGUAGE plpgsql
AS $$
BEGIN
    RETURN (SELECT w.lane FROM e_lanes_with_work(p_group_id, p_lanes, p_now, p_start, false, NULL) w
            WHERE pg_try_advisory_xact_lock(sluice._lane_lock(p_group_id, w.lane))
            LIMIT 1);
END
$$;

-- e_wait_for_lane: for a receive that found lanes of its group with work
-- but every one held by another receive (more consumers than lanes with
-- work): wait for the first of them in turn from p_start that has numbered
-- positions after its cursor, at most 100 ms, and keep its lock. A consumer
-- that polled again at once spent a receive's CPU on every poll, which the
-- receives holding the lanes then lacked: 32 consumers of a queue of 8
-- lanes drained at 0.59x the rate of 8 (batch 100, `bench overload`).
-- Waiting, it takes the lane when its holder commits, the way receives of a
-- queue of 1 lane wait for it. A holder whose transaction stays open delays
-- a waiter by 100 ms, not more: it gets nothing then, as it would have at
-- once. Waits only when the receive holds no lane (e_fast's first try): a
-- receive waiting for a lane while holding another could wait for one that
-- waits for it. Not for a lane whose only work is a blocked key or a lease
-- to look at: its holder is usually the consumer of that key, whose next
-- receive would then queue behind waiters that find the key still blocked
-- (`bench keyed` did not tell the two apart: Zipf keys, batch 10,
-- 2,488-3,056 msg/s with the wait, either form, against 2,315-2,918
-- without, four runs each). The lock is taken in a block, so that
-- lock_timeout ends the wait without ending the transaction; the block
-- commits and the lock stays held.
--
-- Parameters:
--   p_group_id  group id
--   p_lanes     the queue's number of lanes
--   p_now       the receive's time
--   p_start     the lane to start from
-- Returns: the lane, locked until the transaction ends, or NULL: no lane
--          has positions to take, or the one waited for stayed held for
--          100 ms
CREATE OR REPLACE FUNCTION sluice_tmpl.e_wait_for_lane(p_group_id int, p_lanes int, p_now timestamptz, p_start int)
RETURNS smallint
LANGUAGE plpgsql
AS $$
DECLARE
    v_timeout constant text := current_setting('lock_timeout');
    v_lane smallint;
BEGIN
    v_lane := (SELECT w.lane FROM e_lanes_with_work(p_group_id, p_lanes, p_now, p_start, false, NULL) w
               WHERE EXISTS (SELECT 1 FROM batches b
                             WHERE b.lane = w.lane AND b.last_pos > coalesce(w.cursor, -1) AND b.last_pos >= b.first_pos)
               LIMIT 1);
    IF v_lane IS NULL THEN
        RETURN NULL;
    END IF;
    PERFORM set_config('lock_timeout', '100ms', true);
    BEGIN
        PERFORM pg_advisory_xact_lock(sluice._lane_lock(p_group_id, v_lane));
    EXCEPTION
        WHEN lock_not_available THEN v_lane := NULL;
    END;
    PERFORM set_config('lock_timeout', v_timeout, true);
    RETURN v_lane;
END
$$;

-- e_take_fast: step 4 of e_take (engine_take.sql) on a lane the caller has
-- locked, in one statement, when the lane needs nothing else: it has a
-- state, no blocked key or priority level, no lease expired since its last
-- scan but of positions below its low-water mark (completed: a lease runs
-- out whether or not its message was acked, so in traffic that lasts
-- longer than the lease every lane has such leases; the new state's
-- scan_from moves past them), no low-water mark due; its next batches after
-- the cursor (up to four, as many as p_need calls for) have no keyed or
-- prioritized message, and nothing ahead of the cursor is completed. Takes
-- from those batches the positions after the cursor meant for the group, in
-- order, up to p_need, and writes the lane's new state (its cursor moved) in
-- the same statement. When it took those four whole and needs more (small
-- batches), it looks once more, at about as many batches as the ones taken
-- say are needed.
--
-- Parameters:
--   p_queue_id  queue id
--   p_group_id  group id
--   p_lane      the lane, locked by the caller
--   p_need      how many to take at most
--   p_now       the receive's time
-- Returns: the picks; none when there was nothing after the cursor and the
--          new state only moved the scan past leases of completed
--          messages; NULL when the lane needs the full path (then nothing
--          was written)
CREATE OR REPLACE FUNCTION sluice_tmpl.e_take_fast(p_queue_id int, p_group_id int, p_lane smallint, p_need int,
                                                   p_now timestamptz)
RETURNS sluice.picks
LANGUAGE plpgsql
AS $$
DECLARE
    pk sluice.picks := ROW('{}', '{}', '{}', '{}', '{}', '{}', '{}');
    r record;
    v_need int := p_need;
    v_limit int := least(p_need, 4);
    v_round int := 0;
BEGIN
    LOOP
        WITH s0 AS MATERIALIZED (
            SELECT s.seq, s.cursor, s.lwm, s.scan_from, s.lwm_at, s.ahead
            FROM (SELECT ss.* FROM group_states ss
                  WHERE ss.group_id = p_group_id AND ss.lane = p_lane ORDER BY ss.seq DESC LIMIT 1) s
            WHERE s.bkeys IS NULL AND s.lv_prio IS NULL
              AND NOT (s.lwm <= s.cursor AND s.lwm_at <= p_now - interval '1 second')
        ), s AS MATERIALIZED (
            -- the leases of the lane that expired since its last scan, when it
            -- may pass over them: scan_from moves past them, all read (just
            -- after the newest: a scan starts at scan_from inclusive)
            SELECT s0.seq, s0.cursor, s0.lwm, greatest(s0.scan_from, ex.upto + interval '1 microsecond') AS scan_from,
                   s0.lwm_at, s0.ahead
            FROM s0 CROSS JOIN LATERAL e_passable_expiries(p_group_id, p_lane, s0.scan_from, p_now, s0.lwm) ex
            WHERE ex.passable
        ), b AS MATERIALIZED (
            -- the next batches after the cursor (up to v_limit), and the window of
            -- each that would be looked at: a little more than needed, in case
            -- some positions are retries meant for other groups
            SELECT s.*, bb.first_pos, bb.last_pos, bb.ids, bb.txids, bb.slots, bb.targets,
                   bb.keys IS NULL AND bb.prios IS NULL AS plain,
                   greatest(s.cursor - bb.first_pos + 2, 1) AS vfrom,
                   least(bb.last_pos - bb.first_pos + 1, greatest(s.cursor - bb.first_pos + 2, 1) + 2 * v_need + 15) AS vto
            FROM s
            CROSS JOIN LATERAL (SELECT * FROM batches bb
                                WHERE bb.lane = p_lane AND bb.last_pos > s.cursor AND bb.last_pos >= bb.first_pos
                                ORDER BY bb.last_pos LIMIT v_limit) bb
        ), p AS MATERIALIZED (
            -- those needed, up to the first batch with a keyed or prioritized
            -- message or with completed positions in its window (completed
            -- ahead of the cursor: only up to ahead, after a crash or
            -- priorities, see e_lane_state; NULL: not known yet). The full path
            -- takes that batch, skipping what is completed; here it ends the
            -- take, or, first, declines the lane: a batch left out with later
            -- ones taken would move the cursor past its positions not completed,
            -- which then were never delivered.
            SELECT b.*, b.vto < b.last_pos - b.first_pos + 1 AS truncated
            FROM (SELECT b.*, bool_and(b.plain) OVER w AS all_plain,
                         coalesce(sum(b.vto - b.vfrom + 1) OVER w - (b.vto - b.vfrom + 1), 0) AS before
                  FROM (SELECT b.first_pos, b.last_pos, b.ids, b.txids, b.slots, b.targets, b.vfrom, b.vto,
                               -- (e_has_completed is called, not inlined: see there)
                               b.plain AND NOT (coalesce(b.first_pos + b.vfrom - 1 <= b.ahead, true)
                                                AND e_has_completed(p_group_id, b.first_pos + b.vfrom - 1,
                                                                    b.first_pos + b.vto - 1)) AS plain
                        FROM b) b
                  WINDOW w AS (ORDER BY b.last_pos ROWS UNBOUNDED PRECEDING)) b
            WHERE b.all_plain AND b.before < v_need
        ), t AS MATERIALIZED (
            SELECT count(*)::int AS n, max(f.pos) AS last_taken, array_agg(f.pos ORDER BY f.pos) AS pos,
                   array_agg(f.id ORDER BY f.pos) AS id, array_agg(f.txid ORDER BY f.pos) AS txid,
                   array_agg(f.slot ORDER BY f.pos) AS slot
            FROM (SELECT b.first_pos + b.vfrom + x.o - 2 AS pos, x.id, x.txid, x.slot
                  FROM p b
                  CROSS JOIN LATERAL unnest(b.ids[b.vfrom:b.vto], b.txids[b.vfrom:b.vto], b.slots[b.vfrom:b.vto],
                                            b.targets[b.vfrom:b.vto]) WITH ORDINALITY AS x(id, txid, slot, tg, o)
                  WHERE x.tg IS NULL OR x.tg = p_group_id
                  ORDER BY b.last_pos, x.o
                  LIMIT v_need) f
        ), nx AS (
            -- the new cursor: the last position taken, or, with fewer than
            -- v_need, the end of what was looked at (NULL: a window left part of
            -- its batch unseen; the full path goes on from there); nothing after
            -- the cursor: the same (the new state only moves the scan on)
            SELECT s.seq, s.lwm, s.scan_from, s.lwm_at, s.ahead,
                   CASE WHEN t.n = 0 THEN s.cursor
                        WHEN t.n = v_need THEN t.last_taken
                        WHEN NOT (SELECT bool_or(p.truncated) FROM p) THEN (SELECT max(p.last_pos) FROM p) END AS cursor
            FROM s CROSS JOIN t
            WHERE t.n > 0 OR (NOT EXISTS (SELECT FROM b) AND s.scan_from > (SELECT s0.scan_from FROM s0))
        ), st AS (
            INSERT INTO group_states (slot, group_id, lane, seq, cursor, lwm, scan_from, lwm_at, ahead)
            SELECT (SELECT ns.slot FROM sluice._slot_now(p_queue_id) ns),
                   p_group_id, p_lane, nx.seq + 1, nx.cursor, nx.lwm, nx.scan_from, nx.lwm_at, nx.ahead
            FROM nx
            WHERE nx.cursor IS NOT NULL
            RETURNING 1
        )
        SELECT coalesce(t.pos, '{}') AS pos, coalesce(t.id, '{}') AS id, coalesce(t.txid, '{}') AS txid,
               coalesce(t.slot, '{}') AS slot, t.n,
               -- every batch read was taken whole, and more are needed
               t.n < v_need AND (SELECT count(*) FROM p) = v_limit
               AND NOT (SELECT bool_or(p.truncated) FROM p) AS more
        INTO r
        FROM t
        WHERE EXISTS (SELECT FROM st);
        IF NOT FOUND THEN
            -- (NULL, not pk: a row of NULLs is not a NULL value to coalesce)
            RETURN CASE WHEN v_round > 0 THEN pk END;
        END IF;
        pk.pos := pk.pos || r.pos; pk.id := pk.id || r.id; pk.txid := pk.txid || r.txid;
        pk.slot := pk.slot || r.slot; pk.attempt := pk.attempt || array_fill(1, ARRAY[r.n]);
        pk.key := pk.key || array_fill(NULL::bigint, ARRAY[r.n]); pk.lane := pk.lane || array_fill(p_lane, ARRAY[r.n]);
        v_round := v_round + 1;
        v_need := v_need - r.n;
        EXIT WHEN NOT r.more OR v_round = 2;
        -- Small batches (one receive's cut each, as a group that keeps up
        -- numbers them in steady traffic): the rest in one more look, at as
        -- many batches as the ones just taken say are needed (at most 128).
        -- With four batches a receive, a group that fell behind such a
        -- group got four messages a receive of 100. The first look stays at
        -- four, which a drain's batches fill: reading up to 32 there cost a
        -- drain of 100s ~10% (pgbench, 8 clients, 200,000 preloaded,
        -- PostgreSQL 15).
        v_limit := least(v_need / greatest(r.n / v_limit, 1) + 2, 128);
    END LOOP;
    RETURN pk;
END
$$;
