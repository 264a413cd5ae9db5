-- Group: engine templates - receiving (see engine_cut.sql for what a template is)

-- e_receive: the body of sluice.receive for this queue (see there).
--
-- 0. Complete p_ack, if given (e_ack).
-- 1. With nothing to number (or another receive numbering a backlog
--    larger than one cut) and no priorities pending (e_prio_pending), the fast path
--    (engine_fast.sql): lock one lane with work and take from it, if that
--    is all it needs. Else, or when it took nothing:
-- 2. Number what committed since the last cut (e_cut), unless another
--    receive of the queue is cutting: then take what is numbered, and only
--    if that is nothing, wait for the cut (at most 100 ms) and try again once,
--    at the lanes that cut numbered into.
-- 3. Take from the group's lanes that have work, each under
--    its try-lock: a lane another receive holds is skipped, not waited for
--    (with lanes = 1, waited for: e_lock_lane).
--    Lanes with prioritized messages come first, then
--    the others from a random lane on, until max_messages are picked;
--    then, if it has room, messages with a priority below 0 of the lanes
--    it holds (a second pass: they go only when nothing else is ready).
-- 4. Lease what was picked (e_lease, engine_lease.sql), dated when the
--    lanes are held.
-- 5. About once a second per session, reclaim and rotate (e_maintain) unless
--    another session is doing it.
CREATE OR REPLACE FUNCTION sluice_tmpl.e_receive(q sluice.queue, g sluice.consumer_group, max_messages int,
                                                 p_lease interval, p_consumer text, p_ack text[])
RETURNS SETOF sluice.message
LANGUAGE plpgsql
AS $$
DECLARE
    v_now constant timestamptz := clock_timestamp();
    v_start constant int := floor(random() * q.lanes)::int;
    v_maint constant text := 'sluice.maintained_' || q.id;
    pk sluice.picks;
    r record;
    v_pass int;
    v_to_number text;
    v_uncut boolean;
    v_lanes smallint[];
    v_tops int[];
    v_prio boolean;
    v_cutting boolean := false;
    v_seen bigint;
BEGIN
    IF cardinality(p_ack) > 0 THEN
        PERFORM e_ack(g.id, p_ack);   -- the previous batch of a consumer loop
    END IF;
    -- With one lane, receives of a group wait for each other, as before
    -- lanes: the lane first, so that a receive that finds the cut taken
    -- waits for what the cutter numbers rather than returning nothing.
    IF q.lanes = 1 THEN
        PERFORM e_lock_lane(g.id, 0::smallint, 1);
    END IF;
    pk := ROW('{}', '{}', '{}', '{}', '{}', '{}', '{}');
    -- Nothing to number (or the rest of a backlog's round that another
    -- receive is numbering) and no priorities pending: the fast path (e_fast). New
    -- messages to number: the cut first (e_pick); a look at the lanes before
    -- it cost more than it found in steady traffic, where lanes are mostly
    -- empty (measured). The cut lock, when free, is this receive's.
    v_to_number := e_to_number();
    v_uncut := v_to_number IS NOT NULL;
    v_prio := EXISTS (SELECT 1 FROM prio);   -- (then not those the group completed; a call, set up only then)
    IF v_prio THEN v_prio := e_prio_pending(q, g, v_now); END IF;
    IF v_to_number = 'round' AND NOT v_prio THEN
        v_cutting := NOT pg_try_advisory_xact_lock(sluice._lock_ns('cut'), q.id);
    END IF;
    IF (NOT v_uncut OR v_cutting) AND NOT v_prio THEN
        SELECT * INTO r FROM e_fast(q, g, max_messages, v_now, v_start);
        pk := r.pk;
        v_lanes := r.lanes;
    END IF;
    IF NOT v_uncut AND v_lanes IS NULL AND cardinality(pk.pos) = 0 THEN
        SELECT w.lanes, w.tops INTO v_lanes, v_tops FROM e_work_lanes(g.id, q.lanes, v_now, v_start, v_prio, NULL) w;
    END IF;
    -- A receive that finds nothing while another one of the queue is
    -- cutting waits for that cut (at most 100 ms: e_wait_for_cut) and looks
    -- again at the lanes that cut numbered into (the batches newer than the
    -- newest one before the wait, or than the idle note's), not at every
    -- lane (in steady traffic that cost the second look ~2 ms, measured).
    FOR v_pass IN 1..2 LOOP
        EXIT WHEN cardinality(pk.pos) > 0 OR (NOT v_uncut AND cardinality(v_lanes) = 0);
        SELECT * INTO r FROM e_pick(q, g, max_messages, v_now, v_start, v_uncut, v_lanes, v_tops);
        pk := r.pk;
        EXIT WHEN cardinality(pk.pos) > 0 OR NOT r.cut_busy OR v_pass = 2;
        v_seen := (SELECT b.batch_no FROM batches b ORDER BY b.batch_no DESC LIMIT 1);
        EXIT WHEN NOT e_wait_for_cut(q.id);
        v_uncut := false;
        v_lanes := NULL; v_tops := NULL;
        -- (that cut may have numbered the group's first pending prioritized message)
        v_prio := EXISTS (SELECT 1 FROM prio); IF v_prio THEN v_prio := e_prio_pending(q, g, v_now); END IF;
        -- (with an idle note, e_pick looks at the lanes of the batches newer
        -- than the note's: those numbered since include the cut's)
        IF v_prio OR NOT coalesce((e_note(current_setting(sluice._idle_note_name(q.id), true), g.id, v_now)).idle,
                                  false) THEN
            SELECT w.lanes, w.tops INTO v_lanes, v_tops
            FROM e_work_lanes(g.id, q.lanes, v_now, v_start, v_prio,
                              ARRAY(SELECT DISTINCT b.lane FROM batches b WHERE b.batch_no > coalesce(v_seen, -1))) w;
        END IF;
    END LOOP;
    -- Lease what was picked (e_lease), with the lanes held.
    IF cardinality(pk.pos) > 0 THEN
        RETURN QUERY SELECT * FROM e_lease(q, g, pk, p_lease, p_consumer);
    END IF;
    IF extract(epoch FROM v_now) >= coalesce(nullif(current_setting(v_maint, true), ''), '0')::float8 + 1 THEN
        PERFORM set_config(v_maint, extract(epoch FROM v_now)::text, false);
        IF pg_try_advisory_xact_lock(sluice._lock_ns('maint'), q.id) THEN
            PERFORM e_maintain(q.id);
        END IF;
    END IF;
END
$$;

-- e_work_lanes: the lanes of a group worth a try (e_lanes_with_work), in
-- the order to try them: those with a prioritized message after their
-- cursor first, highest first, then every lane from p_start on.
--
-- Parameters:
--   p_group_id  group id
--   p_lanes     the queue's number of lanes
--   p_now       the receive's time
--   p_start     the lane to start from after the prioritized ones
--   p_prio      whether the group may have prioritized messages pending (else prio is not read)
--   p_only      only these lanes (NULL: all)
-- Returns: lanes, in the order to try them, and tops, the highest priority
--          above 0 after each one's cursor (NULL: none)
DROP FUNCTION IF EXISTS sluice_tmpl.e_work_lanes(int, int, timestamptz, int, boolean);   -- (before p_only)
CREATE OR REPLACE FUNCTION sluice_tmpl.e_work_lanes(p_group_id int, p_lanes int, p_now timestamptz, p_start int,
                                                    p_prio boolean, p_only smallint[],
                                                    OUT lanes smallint[], OUT tops int[])
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    SELECT coalesce(array_agg(c.lane ORDER BY c.top DESC NULLS LAST, c.turn), '{}'),
           coalesce(array_agg(c.top ORDER BY c.top DESC NULLS LAST, c.turn), '{}')
    INTO lanes, tops
    FROM (SELECT w.lane, w.turn, CASE WHEN p_prio THEN e_lane_top(w.lane, coalesce(w.cursor, 0)) END AS top
          FROM e_lanes_with_work(p_group_id, p_lanes, p_now, p_start, p_prio, p_only) w) c;
END
$$;

-- e_prio_pending: whether the queue has a prioritized message the group
-- may still have to deliver: a prio row at or after the group's low-water
-- mark. Below it every position is completed by the group, so the prio rows
-- there (kept until their slot is reclaimed: an hour by default) no longer
-- count; a queue that once had a prioritized message took the full path on
-- every receive for that long, and noted nothing idle (17% fewer receives at
-- batch 1, PostgreSQL 15, pgbench). The mark is e_group_lwm's stored one
-- (never too high), kept in a session setting for a second
-- (sluice.prio_floor_<queue id>_<group id>: 'mark until_microseconds'),
-- since reading it costs a look at every lane. A stale mark is lower, so it
-- only counts more rows; rows cut after it was read have higher positions
-- (a mark is at most the last numbered position + 1), and a seek gives the
-- group a new id, so a new setting.
--
-- Parameters:
--   q, g   the queue and group
--   p_now  the receive's time
-- Returns: true when a prio row at or after the group's mark exists
CREATE OR REPLACE FUNCTION sluice_tmpl.e_prio_pending(q sluice.queue, g sluice.consumer_group, p_now timestamptz)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_name constant text := 'sluice.prio_floor_' || q.id || '_' || g.id;
    v_now_us constant bigint := (extract(epoch FROM p_now) * 1000000)::bigint;
    f text[] := string_to_array(current_setting(v_name, true), ' ');
    v_floor bigint;
BEGIN
    IF cardinality(f) = 2 AND f[2] ~ '^[0-9]{1,19}$' AND f[2]::bigint > v_now_us AND f[1] ~ '^-?[0-9]{1,19}$' THEN
        v_floor := f[1]::bigint;
    ELSE
        v_floor := coalesce(e_group_lwm(g, q.lanes), 0);
        PERFORM set_config(v_name, v_floor || ' ' || (v_now_us + 1000000), false);
    END IF;
    RETURN EXISTS (SELECT 1 FROM prio p WHERE p.pos >= v_floor);
END
$$;

-- e_lane_top: the highest priority above 0 among a lane's messages after
-- its cursor (NULL: none). For e_work_lanes, which asks only when the queue
-- has prioritized messages: PL/pgSQL, so that its index scans are set up
-- only then (see e_is_completed).
--
-- Parameters:
--   p_lane    the lane
--   p_cursor  its cursor (0 for a lane without a state)
CREATE OR REPLACE FUNCTION sluice_tmpl.e_lane_top(p_lane smallint, p_cursor bigint)
RETURNS int
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN (SELECT max(p.priority) FROM prio p WHERE p.lane = p_lane AND p.priority > 0 AND p.pos > p_cursor);
END
$$;

-- e_pick: steps 1 and 2 of e_receive: cut if the cut lock is free, then
-- pick from the lanes of the group that have work. Which lanes, when the
-- caller did not say: with an idle note of the group (engine_note.sql), the
-- lanes of the batches newer than the note's (e_note_lanes); else every
-- lane (e_work_lanes). When this receive took all there was in the lanes
-- it looked at, it notes the group idle but for batches newer than the
-- newest one it saw before looking.
--
-- Parameters:
--   q, g          the queue and group
--   max_messages  how many to pick at most
--   v_now         the receive's time
--   v_start       the lane to start from after the prioritized ones
--   p_uncut       whether there may be committed messages to number (e_to_number)
--   p_lanes, p_tops  the lanes worth a try (e_work_lanes) as the caller
--                 found them, or NULL: find them here
-- Returns: pk, the picks in the order to return them; cut_busy, whether
--          another receive held the cut lock (so this one did not cut)
CREATE OR REPLACE FUNCTION sluice_tmpl.e_pick(q sluice.queue, g sluice.consumer_group, max_messages int,
                                              v_now timestamptz, v_start int, p_uncut boolean,
                                              p_lanes smallint[], p_tops int[],
                                              OUT pk sluice.picks, OUT cut_busy boolean)
LANGUAGE plpgsql
AS $$
DECLARE
    v_prio boolean;
    v_held smallint[] := '{}';
    v_lanes smallint[];
    v_tops int[];
    v_note record;
    v_newest bigint;
    v_until timestamptz;   -- NOT NULL: the lanes were found here, and a note may follow
    v_drained boolean := true;
    t record;
    i int;
    ln smallint;
    n int;
BEGIN
    pk := ROW('{}', '{}', '{}', '{}', '{}', '{}', '{}');
    -- Number what committed since the last cut: at most four cuts (a round
    -- larger than one cut takes several), or as many as max_messages needs
    -- when that is more (a cut numbers at most 1,000: a receive of 10,000
    -- over a backlog not yet numbered returned 4,000), before taking, so
    -- that the runs of a key numbered by them can be taken together. A cut
    -- changes which lanes have work: find them again then.
    v_lanes := p_lanes;
    v_tops := p_tops;
    cut_busy := false;
    IF p_uncut THEN
        cut_busy := NOT pg_try_advisory_xact_lock(sluice._lock_ns('cut'), q.id);
        IF NOT cut_busy THEN
            FOR n IN 1..greatest(4, (max_messages + 999) / 1000) LOOP
                EXIT WHEN e_cut(q.id, q.lanes) IS NULL;
                v_lanes := NULL;
                EXIT WHEN (SELECT b.done FROM batches b ORDER BY b.batch_no DESC LIMIT 1);
            END LOOP;
        END IF;
    END IF;
    v_prio := EXISTS (SELECT 1 FROM prio);
    IF v_prio THEN v_prio := e_prio_pending(q, g, v_now); END IF;
    IF v_lanes IS NULL AND NOT v_prio THEN
        v_note := e_note(current_setting(sluice._idle_note_name(q.id), true), g.id, v_now);
        v_newest := (SELECT b.batch_no FROM batches b ORDER BY b.batch_no DESC LIMIT 1);
        IF v_note.idle THEN
            v_lanes := e_note_lanes(g.id, q.lanes, v_start, v_note.batch_no);
            v_tops := '{}';
            v_until := v_note.until;
        ELSE
            v_until := v_now + interval '25 ms';
        END IF;
    END IF;
    IF v_lanes IS NULL THEN
        SELECT w.lanes, w.tops INTO v_lanes, v_tops FROM e_work_lanes(g.id, q.lanes, v_now, v_start, v_prio, NULL) w;
    END IF;
    -- First the prioritized messages of the lanes that have some, highest
    -- lane first (steps 1 to 3 of e_take), then every lane in turn (all of
    -- e_take but step 5), so that a lane's messages of priority 0 never go
    -- before another lane's higher ones.
    FOR i IN 1..cardinality(v_lanes) LOOP
        EXIT WHEN v_tops[i] IS NULL OR cardinality(pk.pos) >= max_messages;
        CONTINUE WHEN NOT e_lock_lane(g.id, v_lanes[i], q.lanes);
        v_held := v_held || v_lanes[i];
        pk := (e_take(q, g, v_lanes[i], pk, max_messages, true, false, false, v_now)).pk;
    END LOOP;
    FOREACH ln IN ARRAY v_lanes LOOP
        EXIT WHEN cardinality(pk.pos) >= max_messages;
        IF NOT ln = ANY (v_held) THEN
            IF NOT e_lock_lane(g.id, ln, q.lanes) THEN
                v_drained := false;   -- (another receive holds it)
                CONTINUE;
            END IF;
            v_held := v_held || ln;
        END IF;
        t := e_take(q, g, ln, pk, max_messages, v_prio, true, false, v_now);
        pk := t.pk;
        v_drained := v_drained AND t.drained;
    END LOOP;
    -- Took all there was in every lane it looked at: the group is idle but
    -- for batches newer than v_newest (engine_note.sql).
    IF v_until IS NOT NULL AND v_drained AND cardinality(pk.pos) < max_messages AND v_newest IS NOT NULL THEN
        PERFORM e_note_idle(q.id, g.id, v_newest, v_until);
    END IF;
    -- Messages with a priority below 0 only once no lane this receive holds
    -- has anything else: a second pass over those lanes.
    IF v_prio AND cardinality(pk.pos) < max_messages THEN
        FOREACH ln IN ARRAY v_held LOOP
            CONTINUE WHEN NOT EXISTS (SELECT 1 FROM prio p WHERE p.lane = ln AND p.priority < 0);
            pk := (e_take(q, g, ln, pk, max_messages, true, true, true, v_now)).pk;
            EXIT WHEN cardinality(pk.pos) >= max_messages;
        END LOOP;
    END IF;
END
$$;

-- e_lock_lane: take the lock of a group's lane for the rest of the
-- transaction. With several lanes, only if it is free (a receive never
-- waits: another lane or the next call will do); with one lane, waiting for
-- it, as receives of a group did before lanes: a queue that keeps strict
-- commit order has nothing else to offer.
--
-- Returns: whether the lock is held
CREATE OR REPLACE FUNCTION sluice_tmpl.e_lock_lane(p_group_id int, p_lane smallint, p_lanes int)
RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_lanes = 1 THEN
        PERFORM pg_advisory_xact_lock(sluice._lane_lock(p_group_id, p_lane));
        RETURN true;
    END IF;
    RETURN pg_try_advisory_xact_lock(sluice._lane_lock(p_group_id, p_lane));
END
$$;

-- e_wait_for_cut: wait until no receive of the queue holds its cut lock
-- (the cutter has committed, so what it numbered is visible to the next
-- statement), for at most 100 ms: a cutter whose transaction stays open
-- delays other receives by that much, it does not stop them. The lock is
-- taken in a block that is then rolled back (SL900, caught), which releases
-- it at once: nothing is held afterwards, whatever interrupts the wait (a
-- session-level lock would outlive a cancelled statement).
--
-- Parameters:
--   p_queue_id  queue id
-- Returns: whether the cut lock was free within the time
CREATE OR REPLACE FUNCTION sluice_tmpl.e_wait_for_cut(p_queue_id int)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_timeout constant text := current_setting('lock_timeout');
    v_free boolean;
BEGIN
    PERFORM set_config('lock_timeout', '100ms', true);
    BEGIN
        PERFORM pg_advisory_xact_lock_shared(sluice._lock_ns('cut'), p_queue_id);
        RAISE EXCEPTION USING ERRCODE = 'SL900', MESSAGE = 'release the cut lock';
    EXCEPTION
        WHEN SQLSTATE 'SL900' THEN v_free := true;
        WHEN lock_not_available THEN v_free := false;
    END;
    PERFORM set_config('lock_timeout', v_timeout, true);
    RETURN v_free;
END
$$;

-- e_take: what one receive picks from one lane of a group, under the lane's
-- lock: the steps of engine_take.sql, then the lane's low-water mark
-- (e_lane_checkpoint) and its new state row. The caller leases the picks.
--
-- Parameters:
--   q, g    the queue and group
--   p_lane  the lane
--   pk      what the receive picked so far (from other lanes; INOUT: with
--           this lane's picks added)
--   p_need  how many the receive wants in all
--   p_prio  whether the group may have prioritized messages pending (else step 3 is skipped)
--   p_new   whether to take the positions after the cursor (step 4)
--   p_low   whether to take messages with a priority below 0 (step 5)
--   p_now   the receive's time
-- Returns: pk, and drained: whether the lane was left with nothing to do
--          (fewer than p_need picked in all, so every step ran out, with
--          step 4 taken and no key left blocked), for the idle note
--          (engine_note.sql)
DROP FUNCTION IF EXISTS sluice_tmpl.e_take(sluice.queue, sluice.consumer_group, smallint, sluice.picks, int, boolean,
                                           boolean, boolean, timestamptz);   -- (before drained)
CREATE OR REPLACE FUNCTION sluice_tmpl.e_take(q sluice.queue, g sluice.consumer_group, p_lane smallint,
                                              INOUT pk sluice.picks,
                                              p_need int, p_prio boolean, p_new boolean, p_low boolean,
                                              p_now timestamptz, OUT drained boolean)
LANGUAGE plpgsql
AS $$
DECLARE
    st sluice.lane_state := e_lane_state(g, p_lane);
    r record;
    v_slot smallint;
BEGIN
    -- Step 1, the leases expired since the lane's last scan: passed over by
    -- moving the scan on when e_passable_expiries says so (as e_take_fast
    -- does), else redelivered by e_take_expired.
    SELECT * INTO r FROM e_passable_expiries(g.id, p_lane, st.scan_from, p_now, st.lwm);
    IF NOT r.passable THEN
        SELECT * INTO r FROM e_take_expired(g.id, st, pk, p_need, p_now);
        st := r.st; pk := r.pk;
    ELSIF r.n > 0 THEN   -- (all read: the scan goes on just after the newest, see e_take_expired)
        st.scan_from := r.upto + interval '1 microsecond';
        st.changed := true;
    END IF;
    IF cardinality(st.bkeys) > 0 THEN
        SELECT * INTO r FROM e_take_blocked(g.id, st, pk, p_need, p_now);
        st := r.st; pk := r.pk;
    END IF;
    IF p_prio THEN
        SELECT * INTO r FROM e_take_prio(g.id, st, pk, p_need, true);
        st := r.st; pk := r.pk;
    END IF;
    -- Step 4: a batch without keyed or prioritized messages (the common
    -- case) is taken here in one statement; e_take_new does the others.
    WHILE p_new AND cardinality(pk.pos) < p_need LOOP
        SELECT b.plain, b.first_pos + b.vto - 1 AS upto, t.n, t.last_taken,
               pk.pos || t.pos AS pos, pk.id || t.id AS id, pk.txid || t.txid AS txid, pk.slot || t.slot AS slot,
               pk.attempt || array_fill(1, ARRAY[t.n]) AS attempt,
               pk.key || array_fill(NULL::bigint, ARRAY[t.n]) AS key, pk.lane || array_fill(p_lane, ARRAY[t.n]) AS lane
        INTO r
        FROM (SELECT bb.*, bb.keys IS NULL AND bb.prios IS NULL AS plain,
                     greatest(st.cursor - bb.first_pos + 2, 1) AS vfrom,
                     least(bb.last_pos - bb.first_pos + 1,
                           greatest(st.cursor - bb.first_pos + 2, 1) + 2 * (p_need - cardinality(pk.pos)) + 15) AS vto
              FROM batches bb
              WHERE bb.lane = p_lane AND bb.last_pos > st.cursor AND bb.last_pos >= bb.first_pos
              ORDER BY bb.last_pos LIMIT 1) b
        -- (completed ahead of the cursor: only up to st.ahead, see e_lane_state)
        -- (e_has_completed and e_is_completed are called, not inlined: see there)
        CROSS JOIN LATERAL (SELECT b.first_pos + b.vfrom - 1 <= st.ahead
                                   AND e_has_completed(g.id, b.first_pos + b.vfrom - 1, b.first_pos + b.vto - 1)
                                AS hit OFFSET 0) pre
        CROSS JOIN LATERAL (
            SELECT count(*)::int AS n, max(f.pos) AS last_taken, coalesce(array_agg(f.pos), '{}') AS pos,
                   coalesce(array_agg(f.id), '{}') AS id, coalesce(array_agg(f.txid), '{}') AS txid,
                   coalesce(array_agg(f.slot), '{}') AS slot
            FROM (SELECT b.first_pos + b.vfrom + x.o - 2 AS pos, x.id, x.txid, x.slot
                  FROM unnest(b.ids[b.vfrom:b.vto], b.txids[b.vfrom:b.vto], b.slots[b.vfrom:b.vto],
                              b.targets[b.vfrom:b.vto]) WITH ORDINALITY AS x(id, txid, slot, tg, o)
                  WHERE b.plain AND (x.tg IS NULL OR x.tg = g.id)
                    AND NOT (pre.hit AND e_is_completed(g.id, x.slot, b.first_pos + b.vfrom + x.o - 2))
                  ORDER BY x.o
                  LIMIT p_need - cardinality(pk.pos)) f) t;
        EXIT WHEN r.plain IS NULL;   -- no batch after the cursor
        IF NOT r.plain THEN
            SELECT * INTO r FROM e_take_new(g.id, st, pk, p_need);
            st := r.st; pk := r.pk;
            EXIT;
        END IF;
        pk := ROW(r.pos, r.id, r.txid, r.slot, r.attempt, r.key, r.lane)::sluice.picks;
        st.cursor := CASE WHEN cardinality(pk.pos) < p_need THEN r.upto ELSE r.last_taken END;
        st.changed := true;
    END LOOP;
    IF p_low THEN
        SELECT * INTO r FROM e_take_prio(g.id, st, pk, p_need, false);
        st := r.st; pk := r.pk;
    END IF;
    -- A key picked more than once here (a run) is blocked behind its first
    -- position picked, as a key met while busy is: its messages are leased
    -- together and may be acked in any order, and step 4 looks only at the
    -- position just before a keyed one, so a run whose last message was
    -- acked first let the key's next message go while the others were
    -- still leased.
    IF cardinality(array_remove(pk.key, NULL)) > 1 THEN
        SELECT st.bkeys || coalesce(array_agg(x.k ORDER BY x.h), '{}'),
               st.bheads || coalesce(array_agg(x.h ORDER BY x.h), '{}'),
               st.changed OR count(*) > 0
        INTO st.bkeys, st.bheads, st.changed
        FROM (SELECT u.k, min(u.pos) AS h
              FROM unnest(pk.key, pk.pos, pk.lane) AS u(k, pos, ln)
              WHERE u.ln = p_lane AND u.k IS NOT NULL
              GROUP BY u.k
              HAVING count(*) > 1) x
        WHERE NOT x.k = ANY (st.bkeys);
    END IF;
    -- Forget levels the cursor (above 0) or the low-water mark (below 0) passed.
    IF cardinality(st.lv_prio) > 0 THEN
        SELECT coalesce(array_agg(l.p ORDER BY l.o), '{}'), coalesce(array_agg(l.pos ORDER BY l.o), '{}')
        INTO st.lv_prio, st.lv_pos
        FROM unnest(st.lv_prio, st.lv_pos) WITH ORDINALITY AS l(p, pos, o)
        WHERE (l.p > 0 AND l.pos > st.cursor) OR (l.p < 0 AND l.pos >= st.lwm);
    END IF;
    v_slot := (SELECT ns.slot FROM sluice._slot_now(q.id) ns);
    st := e_lane_checkpoint(g.id, st, v_slot, p_now);
    IF st.changed THEN
        INSERT INTO group_states (slot, group_id, lane, seq, cursor, lwm, scan_from, lwm_at, bkeys, bheads, lv_prio, lv_pos,
                                  ahead)
        VALUES (v_slot, g.id, p_lane, st.seq + 1, st.cursor, st.lwm, st.scan_from, st.lwm_at,
                nullif(st.bkeys, '{}'), nullif(st.bheads, '{}'), nullif(st.lv_prio, '{}'), nullif(st.lv_pos, '{}'),
                st.ahead);
    END IF;
    drained := p_new AND cardinality(pk.pos) < p_need AND coalesce(cardinality(st.bkeys), 0) = 0;
END
$$;

-- e_lane_checkpoint: about once a second while a lane has messages in
-- flight, advance its low-water mark, and checkpoint it durably when it
-- moved, so that a crash resumes from there; and checkpoint a lane that had
-- no state, even when nothing was taken, so that every lane a group has
-- taken from has a checkpoint (e_lane_state relies on it).
--
-- Parameters:
--   p_group_id  group id
--   st          the lane's state
--   p_slot      the current slot
--   p_now       the receive's time
-- Returns: the state, with lwm and lwm_at updated
CREATE OR REPLACE FUNCTION sluice_tmpl.e_lane_checkpoint(p_group_id int, st sluice.lane_state, p_slot smallint,
                                                         p_now timestamptz)
RETURNS sluice.lane_state
LANGUAGE plpgsql
AS $$
DECLARE
    v_ckpt constant bigint := st.lwm;
BEGIN
    IF st.cursor >= st.lwm AND p_now >= st.lwm_at + interval '1 second' THEN
        st.lwm := e_lane_lwm(p_group_id, st.lane, st.lwm, st.cursor);
        st.lwm_at := p_now;
        st.changed := true;
        IF st.lwm <> v_ckpt OR NOT st.found THEN
            INSERT INTO checkpoints (slot, group_id, lane, seq, lwm, at)
            VALUES (p_slot, p_group_id, st.lane, st.seq + 1, st.lwm, p_now);
        END IF;
    ELSIF NOT st.found THEN
        INSERT INTO checkpoints (slot, group_id, lane, seq, lwm, at)
        VALUES (p_slot, p_group_id, st.lane, st.seq + 1, st.lwm, p_now);
    END IF;
    RETURN st;
END
$$;
