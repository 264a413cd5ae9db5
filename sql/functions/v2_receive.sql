-- Group: engine v2 - receive and a group's start (templates, schema sluice_tmpl2)

-- e2_receive__s: sluice.receive of a queue of engine 2 whose current slot
-- is this copy's. First the ack it carries, then what comes before any
-- look (e2_before_look__s: the queue's upkeep about once a second per
-- session, the session's note); when the upkeep rotated, the new slot's
-- copy serves the receive. After a receive of the session that found
-- every lane idle or had to number to take anything, it numbers first (a
-- few new messages at most), the steady state, where each receive takes
-- what was sent since the last. Then it takes from the first free lane with
-- positions to take (e2_lane_open; e2_take__s, or e2_take_one__s for one
-- position, or e2_take_keyed__s for keys, or the slow path e2_slow for a
-- lane the hot path does not serve);
-- while it has fewer than max_messages, from the next one. When no free
-- lane has positions, it numbers what is committed and not numbered yet,
-- if anything is and no other receive is at it (e2_number__s), and looks
-- again; then it looks at the lanes whose leases ended (to deliver them
-- again, or pass them when completed). So a backlog already numbered is
-- taken without probing for new messages (these come after it in every
-- lane anyway), and a lane taken for its positions looks at its own ended
-- leases first. A receive numbers once: what commits meanwhile is for the
-- next receive; one that wants more than a cut numbers (4,096) numbers
-- again while it still wants more once the lanes are drained (up to 8
-- cuts), and a lane that gave all it may in one take (256 positions) is
-- taken again.
-- A receive that has nothing and finds every lane with positions held by
-- other receives waits for one, at most 100 ms (e2_wait_lane__s). Eight
-- looks that take nothing at most. A receive that finds every lane of the
-- group idle (none with keys held or waiting: an ack may free a key at any
-- time) notes it in its session (the setting sluice.idle_<queue>_<group>,
-- cut_no:until): until a lease of the group may end, a second at most
-- (25 ms when no probe would see a lane open: e2_idle_until__s), the
-- session's receives of the group then only number what is new, or probe
-- for it (e2_before_look__s). A receive that had nothing before it
-- numbered notes n there: the next numbers first.
-- Prioritized messages first: the priority lane's levels above 0 (numbered
-- first when one waits to be; looked at again, as one of the eight looks,
-- when a cut after the lane look that followed it numbered more, the
-- receive's own as a rule: the lane look reads the priority lane's head),
-- then the lanes, then, when no lane had
-- anything more, the levels below 0 (e2_take_prio); only on a queue that
-- has had an unkeyed prioritized message (sluice.queue.prioritized, set by
-- the sends: the look is a statement each receive would pay; or by the
-- first receive that finds the priority lane numbered when no send could
-- set it, see sluice._mark_prioritized).
-- (The numbering, the take from the lane picked and the loop's accounting
-- stay inline, not functions of their own: they are the hot path, and a
-- call costs it. The take as a function, its rows copied once more, cost
-- a receive of one message ~3% more; docs/design.md, "The path of a
-- receive".)
--
-- Parameters: as sluice.receive (q and g looked up, lease resolved), and
--   p_epoch, p_started  the current epoch and when it started
--   p_slot              its slot (this copy's)
--   p_noted, p_probed   the session's idle note and what sluice.receive's
--                       probe found (e2_before_look__s)
-- Returns: the messages leased, as sluice.receive
-- Calls: e2_ack, e2_cut_most, e2_before_look__s (numbers first),
--   e2_receive_rotated, e2_prio_due__s, e2_number__s, e2_take_prio, e2_next_lane__s (inlined),
--   e2_wait_lane__s, e2_unnumbered__s, e2_expired__s, e2_take__s, e2_take_one__s,
--   e2_take_keyed__s, e2_slow, e2_idle_until__s (inlined)
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_receive__s(q sluice.queue, g sluice.consumer_group, max_messages int,
                                                     p_lease interval, p_consumer text, p_ack text[],
                                                     p_epoch bigint, p_started timestamptz, p_slot smallint,
                                                     p_noted bigint, p_probed boolean)
RETURNS SETOF sluice.message
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();   -- (again once a lane is held: leases are dated from then)
    v_at timestamptz;                         -- when it began to look (the idle note's)
    -- the lane to look at first; NULL: the one the next cut deals to first
    -- (the newest cut's rr): looking on from there, lane after lane, the
    -- lanes the cuts dealt to longest ago come first, so that one consumer
    -- takes unkeyed messages in the order they were numbered (the cuts deal
    -- in chunks, lane after lane), and consumers that start there together
    -- pass each other by the lanes' try-locks
    v_start int;
    v_need int := max_messages;
    -- cuts it may still make (or wait for): 0 once one numbered nothing, or
    -- numbered all that was committed for a receive that wants at most one
    -- cut's worth (e2_cut_most: see the loop)
    v_cuts int := 8;
    -- (NULL for false, 0 or none where a receive of a backlog does not read
    -- them: an initializer is an expression made ready in every receive,
    -- ~3k instructions)
    v_waited boolean;           -- waited for a lane held by another receive
    v_passes int;               -- settled ended leases passed
    v_ended boolean := false;   -- looking at lanes whose leases ended
    v_stop boolean;             -- every lane looked at: stop
    -- this copy makes the receive's commit asynchronous (_receive_commit),
    -- before it writes anything: sluice.receive does for an upgrade's
    -- queue, whose predecessor it receives from first
    v_async boolean := q.predecessor IS NULL;
    v_try int := 0;
    v_seen int[];               -- the lanes looked at (not looked at again, but after a cut)
    v_waits boolean;            -- a lane looked at has keys held or waiting: not idle
    v_begun int;                -- e2_before_look__s's answer: -2 rotated, -1 idle, a lane it numbered, NULL look
    v_prio "char";              -- the priority lane: NULL nothing, n to number first, t to look at
    v_prio_look boolean;        -- the priority lane to look at next (its levels above 0)
    v_prio_head bigint;         -- its head as the lane look after the last priority look read it (NULL: none yet)
    s record;                   -- the lane picked, and its state
    v_done boolean;             -- (calls made in expressions, as in sluice.receive)
    v_rr int; v_n int; v_before int;
    -- the lane's first ended lease past its scan point (e2_expired__s)
    v_ex_t timestamptz; v_ex_no bigint; v_settled boolean; v_next timestamptz;
BEGIN
    IF p_ack IS NOT NULL THEN
        IF v_async THEN
            v_done := sluice._receive_commit();
            v_async := false;
        END IF;
        -- (it may wait for a completion not committed: meanwhile another
        -- receive may scan the lanes past a lease dated from before)
        v_done := e2_ack(g.id, p_ack) IS NULL;
        v_now := clock_timestamp();
        p_noted := NULL;   -- (as the note was before the ack: not used)
    END IF;
    v_at := v_now;
    v_begun := e2_before_look__s(q.id, g.id, v_now, q.lanes, p_slot, p_epoch, v_async, max_messages, p_noted, p_probed);
    -- (the most frequent answer first: each condition tested is an
    -- expression made ready in every receive)
    IF v_begun IS NULL THEN
        -- (before_look numbered nothing, so no cut restored the caller's
        -- setting that this could undo; one that numbered made it first)
        v_done := CASE WHEN v_async THEN sluice._receive_commit() END;
    ELSIF v_begun = -1 THEN
        RETURN;   -- (nothing written)
    ELSIF v_begun >= 0 THEN
        v_start := v_begun;   -- (it numbered: the lane the cut dealt to first)
        -- (its short cut numbered all that was committed: what commits
        -- meanwhile is for the next receive, unless this one wants more
        -- than a cut numbers)
        v_cuts := CASE WHEN max_messages > e2_cut_most() THEN 7 ELSE 0 END;
    ELSIF v_begun = -2 THEN
        -- the queue rotated: the new slot's copy serves this receive
        RETURN QUERY SELECT * FROM e2_receive_rotated(q, g, max_messages, p_lease, p_consumer);
        RETURN;
    END IF;
    -- the priority lane's levels above 0 first (numbered first when a
    -- prioritized message waits to be: it jumps a backlog), at the first
    -- look (a queue that never had an unkeyed prioritized message: none)
    IF q.prioritized THEN
        v_prio_look := true;
    END IF;
    WHILE v_try < 8 LOOP
        IF v_prio_look THEN
            v_prio_look := false;
            v_prio_head := NULL;   -- (the lane look after this one reads the head it leaves)
            v_prio := e2_prio_due__s(g.id, q.lanes::smallint, v_now);
            IF v_prio = 'n' THEN
                v_cuts := 7;
                PERFORM e2_number__s(q.id, q.lanes, p_slot, p_epoch, v_now, true, NULL, v_need);
            END IF;
            IF v_prio IS NOT NULL THEN
                RETURN QUERY SELECT * FROM e2_take_prio(q, g, 1, v_need, p_lease, p_consumer, v_now, p_slot);
                GET DIAGNOSTICS v_n = ROW_COUNT;
                v_need := v_need - v_n;
                EXIT WHEN v_need = 0;
            END IF;
        END IF;
        -- the lane to take from, held, and its state; lane NULL: none
        SELECT * INTO s FROM e2_next_lane__s(g.id, q.lanes, v_start, v_seen, v_ended, v_now);
        v_now := s.at;
        IF s.prio_head > 0 THEN
            IF NOT q.prioritized THEN
                -- a cut numbered a prioritized message that no send could
                -- note in the queue's row (another transaction held it):
                -- this receive notes it and looks at the priority lane
                -- first, as the receives of a queue noted do
                -- (sluice._mark_prioritized; the lane it holds stays its
                -- until it commits: the look after is this one's again)
                v_done := sluice._mark_prioritized(q.id) IS NULL;
                q.prioritized := true;
                v_prio_look := true;
                v_start := coalesce(s.lane, v_start);   -- (the lane it holds: looked at first after)
                CONTINUE;
            ELSIF s.prio_head > v_prio_head THEN
                -- a cut since the lane look after the last priority look
                -- (this receive's own, as a rule: of messages committed
                -- after its probe) numbered prioritized messages: they come
                -- first. Each such look counts as one of the eight, so
                -- that prioritized messages committing all the while (of
                -- levels below 0, or for another group) end it.
                v_prio_look := true;
                v_try := v_try + 1;
                v_start := coalesce(s.lane, v_start);
                CONTINUE;
            END IF;
            v_prio_head := s.prio_head;
        END IF;
        IF s.lane IS NULL THEN
            IF v_ended THEN
                v_stop := true;   -- none of those either: stop
                EXIT;
            END IF;
            -- No free lane with positions: number (while cuts number
            -- something) and look again; or, with nothing yet, wait for a
            -- lane another receive holds (once); else the lanes with leases
            -- that ended. (Only a receive that has nothing yet waits for
            -- another's cut.)
            IF v_cuts > 0 THEN
                v_rr := e2_number__s(q.id, q.lanes, p_slot, p_epoch, v_now, v_need = max_messages, s.cut, v_need);
                v_now := clock_timestamp();   -- (it may have waited for another's cut)
                -- (a cut numbers all that was committed, up to 4,096: what
                -- commits meanwhile is for the next receive, unless this
                -- one wants more than that; in steady traffic each cut
                -- again numbered a few messages, for a take, a lease and
                -- looks at the lanes of their own)
                v_cuts := CASE WHEN v_rr IS NULL OR v_need <= e2_cut_most() THEN 0 ELSE v_cuts - 1 END;
                IF v_rr IS NOT NULL THEN
                    v_start := v_rr;   -- (the lane the cut dealt to first: looked at first)
                    v_seen := '{}';
                    IF v_need = max_messages AND v_begun IS NULL THEN
                        -- the session's next receive of the group numbers first
                        v_done := set_config(sluice._idle_note_name(q.id, g.id), 'n', false) IS NULL;
                    END IF;
                    CONTINUE;
                END IF;
            END IF;
            -- (only a receive that holds no lock other receives wait for:
            -- none of a lane, taken here, and none that sluice.holds_lock
            -- notes; see e2_wait_lane__s)
            IF v_waited IS NOT TRUE AND v_need = max_messages AND v_before IS NULL AND v_prio IS NULL
               AND current_setting('sluice.lane_busy', true) = 'y'
               AND current_setting('sluice.holds_lock', true) IS DISTINCT FROM 'y' THEN
                v_waited := true;
                v_rr := e2_wait_lane__s(g.id, q.lanes, coalesce(v_start, 0), coalesce(v_seen, '{}'), v_now);
                IF v_rr IS NOT NULL THEN
                    v_now := clock_timestamp();
                    v_start := v_rr;
                    CONTINUE;
                END IF;
            END IF;
            v_try := v_try + 1;
            v_ended := true;
            -- (no lane looked at had a lease that ended: the pass over them
            -- would find none)
            v_stop := current_setting('sluice.lane_ended', true) IS DISTINCT FROM 'y';
            EXIT WHEN v_stop;
            CONTINUE;
        END IF;
        -- The most frequent take first, one position (wanted, or all the
        -- lane had at its look) from a lane whose state is here and whose
        -- leases have not ended: the narrower take, which declines what is
        -- not plainly the group's next message (spliced as e2_take__s
        -- below). It comes before the accounting below, which a receive it
        -- gives all it wanted does not need.
        IF (v_need = 1 OR s.head = s.cursor + 1) AND s.held IS NULL AND s.waiting IS NULL AND s.kind IN ('r', 'c')
           AND s.old_due > v_now AND s.next_exp > v_now THEN
            RETURN QUERY SELECT * FROM e2_take_one__s(p_group => g.id, p_lane => s.lane, p_no => s.lease_no,
                p_cursor => s.cursor, p_scan_t => s.scan_t, p_scan_no => s.scan_no, p_old_due => s.old_due,
                p_next_exp => s.next_exp, p_lease => p_lease, p_consumer => p_consumer, p_now => v_now,
                p_slot => p_slot);
            GET DIAGNOSTICS v_n = ROW_COUNT;
            IF v_n = v_need THEN
                RETURN;   -- (all it wanted: what the loop's end does)
            END IF;
        ELSE
            v_n := 0;
        END IF;
        -- (v_n: what the narrower take gave, 0 or 1; the takes below run
        -- only when it gave nothing, and it ran only where the slow path
        -- does not)
        v_start := s.lane + 1;
        v_before := v_need;
        v_waits := v_waits OR s.waiting IS NOT NULL OR s.held IS NOT NULL;
        v_ex_t := NULL; v_ex_no := NULL; v_settled := NULL; v_next := s.next_exp;
        IF s.kind IN ('r', 'c') AND s.old_due > v_now AND s.next_exp <= v_now THEN
            SELECT * INTO v_ex_t, v_ex_no, v_settled, v_next FROM e2_expired__s(g.id, s.lane, s.scan_t, s.scan_no, v_now);
        END IF;
        IF s.lease_no IS NULL OR s.kind NOT IN ('r', 'c') OR s.old_due <= v_now OR v_settled IS FALSE THEN
            RETURN QUERY SELECT * FROM e2_slow(q, g, s.lane, v_need, p_lease, p_consumer, v_now, p_slot);
            GET DIAGNOSTICS v_n = ROW_COUNT;
            v_waits := v_waits OR (v_n = 0 AND s.head > s.cursor);   -- (positions it could not take: keys)
        ELSE
            IF s.held IS NULL AND s.waiting IS NULL AND v_n = 0 THEN
                -- (the copy has e2_take__s's statement here, these values in
                -- place of its parameters: sluice._splice_call)
                RETURN QUERY SELECT * FROM e2_take__s(p_group => g.id, p_lane => s.lane, p_no => s.lease_no,
                    p_cursor => s.cursor, p_scan_t => coalesce(v_ex_t, s.scan_t),
                    p_scan_no => coalesce(v_ex_no, s.scan_no), p_old_due => s.old_due, p_next_exp => v_next,
                    p_moved => v_settled IS TRUE OR v_next IS DISTINCT FROM s.next_exp, p_need => v_need,
                    p_lease => p_lease, p_consumer => p_consumer, p_now => v_now, p_slot => p_slot);
                GET DIAGNOSTICS v_n = ROW_COUNT;
            END IF;
            IF v_n = 0 AND (s.head > s.cursor OR s.held IS NOT NULL OR s.waiting IS NOT NULL) THEN
                -- keys held or waiting, or keyed positions next (e2_take__s
                -- declined them)
                v_waits := true;
                RETURN QUERY SELECT * FROM e2_take_keyed__s(g.id, s.lane, s.lease_no, s.cursor,
                                                            coalesce(v_ex_t, s.scan_t), coalesce(v_ex_no, s.scan_no),
                                                            s.old_due, v_next,
                                                            v_settled IS TRUE OR v_next IS DISTINCT FROM s.next_exp,
                                                            v_need, p_lease, p_consumer, v_now, p_slot, s.held,
                                                            s.waiting);
                GET DIAGNOSTICS v_n = ROW_COUNT;
            END IF;
            IF v_n = 0 AND s.head > s.cursor THEN
                -- the next positions are in another slot's batches (or the
                -- state read was stale): the slow path reads them
                RETURN QUERY SELECT * FROM e2_slow(q, g, s.lane, v_need, p_lease, p_consumer, v_now, p_slot);
                GET DIAGNOSTICS v_n = ROW_COUNT;
            END IF;
        END IF;
        IF v_n = 0 AND s.lease_no IS NOT NULL AND coalesce(v_passes, 0) < 64
           AND (v_settled IS TRUE OR s.kind NOT IN ('r', 'c') OR s.old_due <= v_now) THEN
            -- (passing a settled ended lease is progress, not a look: at
            -- most 64 a receive, so that leases acked and ended do not use
            -- up the looks before a lease to deliver again is reached; so
            -- is the slow path carrying a lane's state out of an older
            -- slot, as every lane needs after a rotation: else eight lanes
            -- use up the looks before anything new is numbered)
            v_passes := coalesce(v_passes, 0) + 1;
        ELSIF v_n = 0 AND s.lease_no IS NOT NULL THEN
            v_try := v_try + 1;   -- (a lane only carried here is not a look: at most once a lane)
        END IF;
        v_need := v_need - v_n;
        EXIT WHEN v_need = 0;
        -- (a lane that gave less than asked and more than nothing may have
        -- stopped at a take's bound, or at one ended lease of several:
        -- looked at again; the others not. So is a lane that passed an
        -- ended lease, settled or put off (extended: the slow path's
        -- deferral), when the next one past it has ended too, so that a
        -- redelivery due behind such leases is not left for later
        -- receives, one lease each, while this one returns empty; each
        -- put off is a look.)
        IF (v_n = 0 OR v_n >= v_before) AND NOT (v_settled IS NOT NULL AND v_next <= v_now) THEN
            v_seen := v_seen || s.lane::int;
        END IF;
    END LOOP;
    IF v_stop IS NOT TRUE THEN
        RETURN;
    ELSIF v_need = max_messages AND v_waits IS NOT TRUE AND v_prio IS NULL THEN
        -- every lane idle as of the newest cut its last look read: note it
        -- (a cut committed since is the next poll's to look at) until a
        -- lease may end (e2_idle_until__s)
        SELECT set_config(sluice._idle_note_name(q.id, g.id), s.cut || ':' || x.until, false) IS NULL INTO v_done
        FROM e2_idle_until__s(g.id, q.lanes, v_at, current_setting('sluice.lane_busy', true) = 'y') x;
    ELSIF v_need > 0 AND v_prio IS NOT NULL THEN
        -- the levels below 0: nothing else is ready
        RETURN QUERY SELECT * FROM e2_take_prio(q, g, -1, v_need, p_lease, p_consumer, v_now, p_slot);
    END IF;
END
$$;

-- e2_receive_rotated: the rest of a receive whose upkeep rotated the
-- queue (e2_before_look__s answered -2), served by the new slot's copy,
-- e2_receive_<slot>. The copy that was serving it names a slot that is no
-- longer current, whose lanes the rotation fenced: each lane would cost one
-- of its eight looks in the slow path, and what is not numbered yet would
-- wait for the next receive.
--
-- Parameters: q, g, max_messages, p_lease, p_consumer as e2_receive__s
--   (the ack it carried is done; the idle note not read)
-- Returns: the messages leased, as sluice.receive
-- Calls: e2_receive_<slot> of the current epoch (dynamic: the slot's name)
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_receive_rotated(q sluice.queue, g sluice.consumer_group, max_messages int,
                                                          p_lease interval, p_consumer text)
RETURNS SETOF sluice.message
LANGUAGE plpgsql
AS $$
DECLARE
    e record;
BEGIN
    SELECT x.epoch, x.slot, x.started_at INTO e
    FROM sluice.epoch x WHERE x.queue_id = q.id ORDER BY x.epoch DESC LIMIT 1;
    RETURN QUERY EXECUTE format('SELECT * FROM e2_receive_%s($1, $2, $3, $4, $5, NULL, $6, $7, $8, NULL, NULL)', e.slot)
        USING q, g, max_messages, p_lease, p_consumer, e.epoch, e.started_at, e.slot;
END
$$;

-- e2_next_lane__s: the lane a receive (e2_receive__s) takes from next:
-- the first in turn, from p_start, that e2_lane_open finds work in (or
-- that has no state here: the slow path looks) and whose lock is free,
-- taken (pg_try_advisory_xact_lock, held to the end of the transaction),
-- and its state (read before the lock: it may be stale, see e2_take__s).
-- A lane held by another receive sets sluice.lane_busy (for the wait,
-- e2_wait_lane__s); in the first pass, a lane whose lease ended sets
-- sluice.lane_ended (for the pass over those). A statement of the
-- receive's own, written as a function: a set-returning SQL function,
-- STABLE, not STRICT, without a SET clause, which the planner inlines
-- into the caller's statement (its volatile calls run as they would
-- there, once per lane tried).
--
-- Parameters:
--   p_group, p_lanes  the group and the queue's lanes
--   p_start           the lane to look at first; NULL: the one the newest
--                     cut deals to first (its rr)
--   p_seen            lanes not to look at again
--   p_ended           the pass over lanes whose leases ended
--   p_now             the receive's time
-- Returns: one row: the newest cut's number (a cut that commits after
--   this is the next look's: e2_number__s), the priority lane's head in it
--   (0: it never numbered a prioritized message), the time once the lane is
--   held (the lease is dated from it: the previous holder's leases and
--   nacks committed before), and the lane with its head and its state,
--   all NULL when no lane is to be taken
SET check_function_bodies = off;   -- (a SQL template names the queue's tables: see engine_runs.sql)
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_next_lane__s(p_group int, p_lanes int, p_start int, p_seen int[],
                                                       p_ended boolean, p_now timestamptz)
RETURNS TABLE (cut bigint, prio_head bigint, at timestamptz, lane smallint, head bigint, kind "char", lease_no bigint, "cursor" bigint,
               scan_t timestamptz, scan_no bigint, old_due timestamptz, next_exp timestamptz,
               held sluice.e2_held[], waiting sluice.e2_wait[])
LANGUAGE sql STABLE
AS $$
    SELECT h.cut_no, h.heads[p_lanes + 1], clock_timestamp(), x.*
    FROM (SELECT c.cut_no, c.heads, c.rr FROM cut__s c ORDER BY c.cut_no DESC LIMIT 1) h
    LEFT JOIN LATERAL (
        SELECT l.lane, h.heads[l.lane + 1], st.kind, st.lease_no, st.cursor, st.scan_t, st.scan_no,
               st.old_due, st.next_exp, st.held, st.waiting
        FROM generate_series(0, p_lanes - 1) o
        CROSS JOIN LATERAL (SELECT ((o + coalesce(p_start, h.rr)) % p_lanes)::smallint AS lane) l
        LEFT JOIN LATERAL (SELECT x.kind, x.lease_no, x.cursor, x.scan_t, x.scan_no, x.old_due, x.next_exp,
                                  x.held, x.waiting
                           FROM lease__s x WHERE x.group_id = p_group AND x.lane = l.lane
                           ORDER BY x.lease_no DESC LIMIT 1) st ON true
        WHERE CASE WHEN l.lane = ANY (p_seen) THEN false
                   WHEN e2_lane_open(p_ended, p_now, h.heads[l.lane + 1], st.kind, st.lease_no, st.cursor,
                                     st.old_due, st.waiting IS NOT NULL, st.next_exp)
                   THEN pg_try_advisory_xact_lock(sluice._lane_lock(p_group, l.lane))
                        OR set_config('sluice.lane_busy', 'y', true) IS NULL
                   WHEN NOT p_ended AND st.next_exp <= p_now
                   THEN set_config('sluice.lane_ended', 'y', true) IS NULL
                   ELSE false END
        LIMIT 1) x ON true
$$;
RESET check_function_bodies;

-- e2_before_look__s: what a receive (e2_receive__s), after the ack it
-- carries, does before it looks at a lane. The queue's upkeep (e_maintain:
-- groups past their ttl, reclaim, rotation when the epoch is older than
-- rotate_interval, statistics of slot leaves that filled), about once a
-- second per session (the setting sluice.maint_<queue>), if no other call
-- is at it, as in engine 1. Then the session's note of the group
-- (sluice.idle_<queue>_<group>, written by e2_receive__s; a setting of that
-- name that is no note of ours is ignored): after a receive that found
-- every lane idle (cut_no:until: e2_idle_until__s) or had to number to take
-- anything (n), the next one numbers first, a few new messages (the cut's
-- short path) or as many as it takes all of (up to 256), not more
-- (e2_cut_now__s: a backlog is numbered as it is taken), and looks from
-- the lane the cut dealt to first: in steady
-- traffic each receive numbers what was sent since the last, and would
-- otherwise look at every lane for nothing first. While the idle note
-- holds, the probe (e2_unnumbered__s) comes first: with nothing to number
-- and nothing numbered since the note, there is nothing to look at.
-- sluice.receive probes first itself when the upkeep is not due (an idle
-- group's polls, most calls, then cost no call of the copies) and passes
-- what it found (p_probed).
--
-- Parameters:
--   p_queue_id, p_group  queue and group id
--   p_now                the receive's time
--   p_lanes, p_slot, p_epoch  the queue's lanes, the slot and epoch read
--   p_async              make the receive's commit asynchronous before it
--                        numbers (sluice._receive_commit)
--   p_need               the receive's max_messages (e2_cut_now__s)
--   p_noted              the cut the session's idle note names while it
--                        holds (sluice._idle_note_cut; NULL: none, or a
--                        receive that carried an ack)
--   p_probed             NULL, or what sluice.receive's probe found while
--                        the note held (it returns at once when nothing was
--                        numbered since and nothing is to be): true, to
--                        number; false, numbered since the note
-- Returns: -2 the queue rotated (the receive goes on in the new slot's
--   copy), -1 the idle note holds (nothing to look at), a lane: it
--   numbered, look from there; NULL: look
-- Calls: e_maintain, e2_cut_now__s, e2_unnumbered__s, sluice._receive_commit
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_before_look__s(p_queue_id int, p_group int, p_now timestamptz, p_lanes int,
                                                         p_slot smallint, p_epoch bigint, p_async boolean,
                                                         p_need int, p_noted bigint, p_probed boolean)
RETURNS int
LANGUAGE plpgsql
AS $$
DECLARE
    v_n bigint;
    v_rr int;
    v_cut bigint;
    v_due boolean;
    v_done boolean;   -- (calls made in expressions, as in sluice.receive)
BEGIN
    IF sluice._upkeep_due(p_queue_id, p_now) AND pg_try_advisory_xact_lock(sluice._lock_ns('maint'), p_queue_id) THEN
        v_done := set_config('sluice.maint_' || p_queue_id, to_char(p_now, 'YYYYMMDDHH24MISSUS'), false) IS NULL;
        IF (SELECT m.rotated FROM e_maintain(p_queue_id) m) THEN
            RETURN -2;
        END IF;
    END IF;
    -- (the note's name made where it is read: an expression made ready
    -- costs each receive, and most read the note once)
    IF p_noted IS NULL AND current_setting(sluice._idle_note_name(p_queue_id, p_group), true) IS DISTINCT FROM 'n' THEN
        RETURN NULL;
    ELSIF p_noted IS NULL THEN
        NULL;   -- (the note says n: number first)
    ELSIF p_probed IS NULL THEN
        -- unless something was numbered since the note or is to be
        -- numbered, nothing to look at (the probe: cheaper than the cut's
        -- read, and most receives of an idle group find nothing)
        SELECT x.cut_no, x.due INTO v_cut, v_due FROM e2_unnumbered__s(p_now) x;
        IF NOT v_due THEN
            RETURN CASE WHEN v_cut = p_noted THEN -1 END;
        END IF;
    ELSIF NOT p_probed THEN
        RETURN NULL;   -- (sluice.receive probed: numbered since the note, nothing to number)
    END IF;
    IF p_async THEN
        -- (before the cut: one that numbers keyed messages restores the
        -- caller's setting, which this would undo after it)
        v_done := sluice._receive_commit();
    END IF;
    IF pg_try_advisory_xact_lock(sluice._lock_ns('cut'), p_queue_id)
       AND set_config('sluice.holds_lock', 'y', true) IS NOT NULL THEN   -- (see e2_wait_lane__s)
        SELECT x.n, x.rr INTO v_n, v_rr FROM e2_cut_now__s(p_queue_id, p_lanes, p_slot, p_epoch, true, p_need) x;
        IF v_n > 0 THEN
            RETURN v_rr;
        ELSIF p_noted IS NULL THEN
            v_done := set_config(sluice._idle_note_name(p_queue_id, p_group), '', false) IS NULL;   -- (numbering first was for nothing)
        END IF;
    END IF;
    RETURN NULL;
END
$$;

-- e2_idle_until__s: until when a receive that found every lane of a group
-- idle notes it (e2_receive__s), in microseconds since the epoch: a
-- second after it began to look, or, sooner, the first time a lease of
-- the group may end (each lane's state: next_exp in this slot, old_due in
-- older ones), so that a lease that ends is looked at by the first poll
-- after it; 25 ms at least, as a lane whose lease ended and that the look
-- could not move on (its completion held by an open transaction) would
-- otherwise leave no note at all. No probe sees what else makes a lane
-- open without a cut: a key freed or retried in place by another session
-- (a lane holding keys or with keyed positions waiting), a lane without
-- its state here (after a rotation), one in another receive's hands
-- (p_busy); the note then holds 25 ms. A message stored in an older slot by a transaction that
-- commits after the newest cut is seen once the note has run out, or by
-- the upkeep's probe (e2_before_look__s, about once a second), whichever
-- comes first. (SQL, a set of one row, inlined into the caller's
-- statement.)
--
-- Parameters:
--   p_group, p_lanes  the group and the queue's lanes
--   p_at              when the receive began to look
--   p_busy            a lane was held by another receive
-- Returns: until (microseconds since the epoch)
SET check_function_bodies = off;   -- (a SQL template names the queue's tables: see engine_runs.sql)
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_idle_until__s(p_group int, p_lanes int, p_at timestamptz, p_busy boolean)
RETURNS TABLE (until bigint)
LANGUAGE sql STABLE
AS $$
    -- (one aggregate: each costs its setup at every run)
    SELECT (extract(epoch FROM greatest(p_at + interval '25 milliseconds',
                least(p_at + CASE WHEN p_busy THEN interval '25 milliseconds' ELSE interval '1 second' END,
                      min(CASE WHEN st.kind IS NULL AND o = p_lanes THEN NULL   -- (the priority lane: if any)
                               WHEN st.kind IN ('r', 'c') AND st.held IS NULL AND st.waiting IS NULL
                               THEN least(st.next_exp, st.old_due)
                               ELSE p_at + interval '25 milliseconds' END)))) * 1000000)::bigint
    FROM generate_series(0, p_lanes) o
    LEFT JOIN LATERAL (SELECT x.kind, x.next_exp, x.old_due, x.held, x.waiting FROM lease__s x
                       WHERE x.group_id = p_group AND x.lane = o
                       ORDER BY x.lease_no DESC LIMIT 1) st ON true
$$;
RESET check_function_bodies;

-- e2_lane_open: whether a lane is one for a receive to take from, by its
-- state (the newest lease row of the group's lane in the slot, NULL when it
-- has none there: the slow path looks) and the slot's newest head: in the
-- first pass, one with positions past its cursor, keyed positions waiting,
-- an older slot's lease due, a fence or no state here; in the pass over
-- ended leases, one whose next lease has ended. The one condition of
-- e2_receive__s's lane statement and of e2_wait_lane__s's look for a lane
-- another receive holds; an expression the planner inlines into both.
--
-- Parameters:
--   p_ended     the pass over lanes whose leases ended
--   p_now       the receive's time
--   p_head      the lane's head (the newest cut's)
--   p_kind, p_lease_no, p_cursor, p_old_due, p_next_exp  the lane's state
--   p_waiting   the state lists keyed positions waiting
-- Returns: whether to try the lane
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_lane_open(p_ended boolean, p_now timestamptz, p_head bigint, p_kind "char",
                                                    p_lease_no bigint, p_cursor bigint, p_old_due timestamptz,
                                                    p_waiting boolean, p_next_exp timestamptz)
RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE WHEN p_ended THEN p_next_exp <= p_now
                ELSE p_lease_no IS NULL OR p_kind = 'f' OR p_head > p_cursor OR p_old_due <= p_now OR p_waiting END
$$;

-- e2_wait_lane__s: for a receive that has nothing and found no free lane
-- with positions (and numbered nothing): every lane with positions is held
-- by another receive. Wait for the first in turn (at most 100 ms:
-- sluice._lock_within), then the receive takes from it: more consumers
-- than lanes wait rather than poll. A lane of the group with a state in
-- this slot that e2_lane_open would try in the first pass, less the lock.
-- The receive calls it only while it holds no lock other receives wait
-- for: no lane's (it took none), not the cut lock, no slot it truncated
-- (the setting sluice.holds_lock, which whoever takes those sets in the
-- transaction). A receive that held one and waited for a lane could wait
-- for a receive that waits for it (the cut lock's holder for a lane whose
-- holder waits for the cut, e2_number__s), both until their waits ran out
-- (100 ms), or one failed with "deadlock detected" under a
-- deadlock_timeout below that. The holders of lanes wait for the cut lock
-- at most, and its holder waits for nothing but a truncated slot's
-- leaves, whose holder waits for nothing.
--
-- Parameters:
--   p_group, p_lanes  group id and the queue's lanes
--   p_start           the lane to look at first
--   p_seen            the lanes the receive looked at (not these)
--   p_now             the receive's time
-- Returns: the lane waited for, its lock held; NULL: none, or the wait
--   timed out
-- Calls: e2_lane_open (inlined), sluice._lane_lock, sluice._lock_within
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_wait_lane__s(p_group int, p_lanes int, p_start int, p_seen int[],
                                                       p_now timestamptz)
RETURNS smallint
LANGUAGE plpgsql
AS $$
DECLARE
    v_busy smallint;
BEGIN
    SELECT l.lane INTO v_busy
    FROM (SELECT c.heads FROM cut__s c ORDER BY c.cut_no DESC LIMIT 1) h
    CROSS JOIN generate_series(0, p_lanes - 1) o
    CROSS JOIN LATERAL (SELECT ((o + p_start) % p_lanes)::smallint AS lane) l
    JOIN LATERAL (SELECT x.kind, x.lease_no, x.cursor, x.old_due, x.next_exp, x.waiting FROM lease__s x
                  WHERE x.group_id = p_group AND x.lane = l.lane ORDER BY x.lease_no DESC LIMIT 1) st ON true
    WHERE NOT l.lane = ANY (p_seen)
      AND e2_lane_open(false, p_now, h.heads[l.lane + 1], st.kind, st.lease_no, st.cursor, st.old_due,
                       st.waiting IS NOT NULL, st.next_exp)
    LIMIT 1;
    IF v_busy IS NOT NULL
       AND sluice._xact_lock_within(sluice._lane_lock(p_group, v_busy), NULL, '100ms') THEN
        RETURN v_busy;
    END IF;
    RETURN NULL;
END
$$;

-- e2_number__s: for a receive that found no free lane with positions:
-- number what is committed and not numbered yet, if anything is (the probe,
-- e2_unnumbered__s, then the cut, e2_cut_now__s, under the queue's cut
-- lock). When another receive holds the lock, wait for that receive's
-- positions, at most 100 ms, and number what came since.
--
-- Parameters:
--   p_queue_id, p_lanes  queue id and lanes
--   p_slot, p_epoch      the current slot and epoch, as the receive read them
--   p_now                the receive's time
--   p_wait               wait for another receive's numbering (else
--                        return NULL at once when it holds the lock)
--   p_seen               the newest cut the receive's look saw (NULL: none)
--   p_need               how many the receive still wants (e2_cut_now__s)
-- Returns: the lane the cut dealt to first (to look at first), or NULL when
--   nothing was numbered and no other receive's numbering was waited for
--   or committed since the receive looked (a newer cut than p_seen: its
--   positions are to look at, though nothing is left to number)
-- Calls: e2_cut_now__s, e2_unnumbered__s, e2_wait_cut
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_number__s(p_queue_id int, p_lanes int, p_slot smallint, p_epoch bigint,
                                                    p_now timestamptz, p_wait boolean, p_seen bigint, p_need int)
RETURNS int
LANGUAGE plpgsql
AS $$
DECLARE
    v_due boolean;
    v_rr int;
    v_cut bigint;
    v_n bigint;
    v_loops int := 0;
BEGIN
    SELECT x.due, x.rr, x.cut_no INTO v_due, v_rr, v_cut FROM e2_unnumbered__s(p_now) x;
    IF NOT v_due THEN
        RETURN CASE WHEN v_cut > p_seen THEN v_rr END;
    ELSIF NOT (pg_try_advisory_xact_lock(sluice._lock_ns('cut'), p_queue_id)
               AND set_config('sluice.holds_lock', 'y', true) IS NOT NULL) THEN   -- (see e2_wait_lane__s)
        -- another receive is numbering: its positions (committed once the
        -- lock is free), and what came since (looked at first when there is
        -- any: this receive's share is in the lane its cut dealt to first)
        IF p_wait AND e2_wait_cut(p_queue_id) THEN
            SELECT CASE WHEN x.n > 0 THEN x.rr ELSE v_rr END INTO v_rr
            FROM e2_cut_now__s(p_queue_id, p_lanes, p_slot, p_epoch, false, p_need) x;
            RETURN v_rr;
        END IF;
        RETURN NULL;
    END IF;
    SELECT x.n, x.rr INTO v_n, v_rr FROM e2_cut_now__s(p_queue_id, p_lanes, p_slot, p_epoch, false, p_need) x;
    -- a cut that only put messages due later aside (a large batch sent with
    -- a delay, 4,096 a cut) and left more to number: again, up to 16 cuts,
    -- so that ready messages behind such a batch are not held back
    WHILE v_n = 0 AND v_loops < 16
          AND EXISTS (SELECT 1 FROM (SELECT c.work_snap FROM cut__s c ORDER BY c.cut_no DESC LIMIT 1) c
                      WHERE c.work_snap IS NOT NULL) LOOP
        v_loops := v_loops + 1;
        v_n := (SELECT x.n FROM e2_cut_now__s(p_queue_id, p_lanes, p_slot, p_epoch, false, p_need) x);
    END LOOP;
    RETURN CASE WHEN v_n > 0 THEN v_rr END;
END
$$;

-- e2_expired__s: a lane's first lease in this slot past its scan point that
-- has ended, and whether it is settled (acked whole, or every position
-- completed, and not extended): the hot path passes a settled one, the slow
-- path handles the rest. Also when the next lease past it (or past the scan
-- point, when none has ended) ends: the lane's new next_exp.
--
-- Parameters:
--   p_group, p_lane    group and lane
--   p_scan_t, p_scan_no  the lane's scan point
--   p_now              now
-- Returns: expires_at, lease_no (NULL: none has ended), settled, next_exp
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_expired__s(p_group int, p_lane smallint, p_scan_t timestamptz,
                                                     p_scan_no bigint, p_now timestamptz,
                                                     OUT expires_at timestamptz, OUT lease_no bigint,
                                                     OUT settled boolean, OUT next_exp timestamptz)
LANGUAGE plpgsql
AS $$
BEGIN
    SELECT x.expires_at, x.lease_no,
           x.kind = 'r' AND (EXISTS (SELECT 1 FROM ack__s a WHERE a.group_id = p_group AND a.lane = p_lane
                                                           AND a.lease_no = x.lease_no AND a.pos = 0)
                             OR (SELECT count(*) FROM ack__s a WHERE a.group_id = p_group AND a.lane = p_lane
                                                                 AND a.lease_no = x.lease_no) = x.n)
           AND NOT EXISTS (SELECT 1 FROM ext__s t WHERE t.group_id = p_group AND t.lane = p_lane
                                                    AND t.lease_no = x.lease_no AND t.expires_at > p_now),
           coalesce((SELECT y.expires_at FROM lease__s y
                     WHERE y.group_id = p_group AND y.lane = p_lane AND y.expires_at > '-infinity'
                       AND y.expires_at >= coalesce(x.expires_at, p_scan_t)
                       AND (y.expires_at, y.lease_no) > (coalesce(x.expires_at, p_scan_t), coalesce(x.lease_no, p_scan_no))
                     ORDER BY y.expires_at, y.lease_no LIMIT 1), 'infinity')
    INTO expires_at, lease_no, settled, next_exp
    FROM (SELECT 1) one
    LEFT JOIN LATERAL (SELECT x.* FROM lease__s x
                       WHERE x.group_id = p_group AND x.lane = p_lane AND x.expires_at > '-infinity'
                         AND x.expires_at >= p_scan_t AND x.expires_at <= p_now
                         AND (x.expires_at, x.lease_no) > (p_scan_t, p_scan_no)
                       ORDER BY x.expires_at, x.lease_no LIMIT 1) x ON true;
END
$$;

-- e2_start: write the first state of every lane of a new group: its
-- cursor before the first position it is to receive. 'earliest': the
-- oldest position kept; 'latest': after everything committed now (numbered
-- first, under the queue's cut lock, waited for); a time: after the
-- positions numbered before it.
--
-- Parameters:
--   p_queue_id  queue id
--   p_group     the new group's id
--   p_earliest  start from the oldest kept
--   p_ts        start time (when not earliest; NULL: now, 'latest')
-- Tables: lease, one row (kind c) per lane (and the priority lane's:
--   e2_prio_start)
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_start(p_queue_id int, p_group int, p_earliest boolean, p_ts timestamptz)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    q sluice.queue;
    v_epoch bigint;
    v_slot smallint;
BEGIN
    SELECT * INTO STRICT q FROM sluice.queue qq WHERE qq.id = p_queue_id;
    SELECT ns.epoch, ns.slot INTO v_epoch, v_slot FROM sluice._slot_now(q.id) ns;
    IF NOT p_earliest AND p_ts IS NULL THEN
        PERFORM pg_advisory_xact_lock(sluice._lock_ns('cut'), q.id);
        PERFORM e2_cut_store(q.lanes, v_slot, v_epoch, clock_timestamp(), 0);
    END IF;
    INSERT INTO lease (slot, group_id, lane, lease_no, kind, first_pos, last_pos, n, token, expires_at,
                       delivered_at, cursor, scan_t, scan_no, old_due, next_exp)
    SELECT v_slot, p_group, l.lane, 1, 'c', 1, 0, 0, 0, '-infinity', clock_timestamp(),
           CASE WHEN p_earliest THEN coalesce((SELECT min(b.first_pos) - 1 FROM batch b WHERE b.lane = l.lane), h.heads[l.lane + 1])
                WHEN p_ts IS NULL THEN h.heads[l.lane + 1]
                ELSE coalesce((SELECT max(b.last_pos) FROM batch b JOIN cut c ON c.cut_no = b.cut_no
                               WHERE b.lane = l.lane AND c.at < p_ts),
                              (SELECT min(b.first_pos) - 1 FROM batch b WHERE b.lane = l.lane), h.heads[l.lane + 1]) END,
           '-infinity', 0, 'infinity', 'infinity'
    FROM (SELECT c.heads FROM cut c ORDER BY c.cut_no DESC LIMIT 1) h
    CROSS JOIN LATERAL generate_series(0, q.lanes - 1) AS l(lane);
    PERFORM e2_prio_start(p_queue_id, p_group, p_earliest, p_ts);
END
$$;
