-- Group: engine templates - what one lane's receive takes (see engine_cut.sql
-- for what a template is)
--
-- e_take (engine_receive.sql) runs these steps on one lane of a group, under
-- the lane's lock, in this order, until it has p_need messages:
--   1. e_take_expired: leases that expired (and parked retries that came due);
--   2. e_take_blocked: messages of blocked keys whose earlier messages are
--      now completed;
--   3. e_take_prio (above 0): unkeyed messages with a priority above 0,
--      highest first, then by position;
--   4. e_take_new: the positions after the cursor, in order; keyed ones
--      whose key is busy are left for 2, those with a priority below 0 for 5;
--   5. e_take_prio (below 0): when 4 reached the end, unkeyed messages with a
--      priority below 0.
-- Each step gets the lane's state (st) and what was picked so far (pk), and
-- returns both, changed. A keyed message is taken only if every earlier
-- message of its key is completed or picked by this same receive (a consumer
-- may get a run of one key).

-- e_expiry_start: where a lane's look at expired leases starts. Leases of
-- positions below the low-water mark are of completed messages: pass them
-- in one read, to the first lease that is not (or past them all when there
-- is none). Window by window, a lane with thousands of them (keyed
-- messages lease a row each, and every lease runs out, acked or not) took
-- a statement per window of need + 32: ~50 ms a receive of one past 5,000,
-- measured on PostgreSQL 15.
--
-- Parameters:
--   p_group_id  group id
--   p_lane      the lane
--   p_lwm       the lane's low-water mark
--   p_from      the lane's scan_from
--   p_now       the receive's time
-- Returns: scan_from, where the look starts (NULL: no lease expired from
--          p_from to p_now), and live: whether a lease that expired in
--          that time is of a position at or above p_lwm (else there is
--          nothing to take and scan_from is past every one of them)
CREATE OR REPLACE FUNCTION sluice_tmpl.e_expiry_start(p_group_id int, p_lane smallint, p_lwm bigint,
                                                      p_from timestamptz, p_now timestamptz,
                                                      OUT scan_from timestamptz, OUT live boolean)
LANGUAGE plpgsql
AS $$
BEGIN
    scan_from := least((SELECT dd.expires_at FROM deliveries dd
                        WHERE dd.group_id = p_group_id AND dd.lane = p_lane AND dd.pos >= p_lwm
                          AND dd.expires_at >= p_from AND dd.expires_at <= p_now
                        ORDER BY dd.expires_at LIMIT 1),
                       (SELECT ru.expires_at FROM runs ru
                        WHERE ru.group_id = p_group_id AND ru.lane = p_lane AND ru.last_pos >= p_lwm
                          AND ru.expires_at >= p_from AND ru.expires_at <= p_now
                        ORDER BY ru.expires_at LIMIT 1));
    live := scan_from IS NOT NULL;
    IF live THEN
        RETURN;
    END IF;
    scan_from := greatest((SELECT dd.expires_at FROM deliveries dd
                           WHERE dd.group_id = p_group_id AND dd.lane = p_lane
                             AND dd.expires_at >= p_from AND dd.expires_at <= p_now
                           ORDER BY dd.expires_at DESC LIMIT 1),
                          (SELECT ru.expires_at FROM runs ru
                           WHERE ru.group_id = p_group_id AND ru.lane = p_lane
                             AND ru.expires_at >= p_from AND ru.expires_at <= p_now
                           ORDER BY ru.expires_at DESC LIMIT 1))
                 + interval '1 microsecond';
    -- Every lease up to the newest one read is passed: the scan goes on just
    -- after it. (A scan starts at scan_from inclusive, for a window left
    -- part-read at a time several leases share (e_take_expired): one
    -- receive's leases all expire at once. Left at the newest one, a lane
    -- whose scan had passed two such counted them as work on every receive,
    -- e_lanes_with_work: an idle group's polls then took the full path and
    -- noted nothing.) That is the newest lease read, so a lease written
    -- later is missed only if it expires before one already read, as with
    -- the inclusive scan, and none is written so (docs/design.md, Expiry):
    -- nack's parked rows are written under the lane's lock, due after it; a
    -- receive's leases are dated when it holds the lane (e_lease); extend
    -- never shortens a lease (e_extend).
END
$$;

-- e_take_expired: step 1. Leases of the lane that expired since the last
-- look, oldest expiry first (a run's lease: each of its positions, read
-- from the lane's batches). A lease is redelivered if it is still the
-- message's newest delivery row (by attempt, then time: an extend writes a
-- newer row) and the message is not completed. Each lease's expiry is looked
-- at about once, whatever the number in flight. A parked retry (token 0)
-- that came due is delivered with its own attempt number.
--
-- The leases are read in windows of expiry times (e_expiry_window), each
-- of leases of about as many positions as still needed, plus a margin for
-- those no longer current, and all of the last expiry time it reaches: a
-- receive reads what it takes, not every lease that expired, but for those of
-- positions below the lane's low-water mark, which it passes in one read
-- (below). (Reading them all on
-- every receive made the redelivery of n expired leases cost O(n) per
-- receive: 3,000 expired single leases, 16,000 buffers and 93 ms a receive
-- of one message, measured on PostgreSQL 15.)
CREATE OR REPLACE FUNCTION sluice_tmpl.e_take_expired(p_group_id int, INOUT st sluice.lane_state,
                                                      INOUT pk sluice.picks, p_need int, p_now timestamptz)
LANGUAGE plpgsql
AS $$
DECLARE
    r record;
    x record;
    pv bigint;
    need int := p_need - cardinality(pk.pos);
    v_upto timestamptz;
    v_any boolean;
    -- A window's picks, the blocked keys and the scan's point in plain
    -- variables (see e_take_new: a field of pk or st is rebuilt whole on
    -- each assignment)
    a_pos bigint[];
    a_id bigint[];
    a_txid xid8[];
    a_slot smallint[];
    a_attempt int[];
    a_key bigint[];
    v_bkeys bigint[] := st.bkeys;
    v_bheads bigint[] := st.bheads;
    v_scan timestamptz;
BEGIN
    -- Past the leases of completed messages in one read (e_expiry_start).
    SELECT * INTO x FROM e_expiry_start(p_group_id, st.lane, st.lwm, st.scan_from, p_now) x;
    IF x.scan_from > st.scan_from THEN
        st.scan_from := x.scan_from;
        st.changed := true;
    END IF;
    IF NOT x.live THEN
        RETURN;
    END IF;
    LOOP
        v_upto := e_expiry_window(p_group_id, st.lane, st.scan_from, p_now, need + 32);
        EXIT WHEN v_upto IS NULL;
        a_pos := '{}'; a_id := '{}'; a_txid := '{}'; a_slot := '{}'; a_attempt := '{}'; a_key := '{}';
        v_scan := NULL;
        FOR r IN
            -- Every lease that expired in the window is returned, so that
            -- scan_from moves past it; only those at or above the low-water
            -- mark (below it everything is completed) are probed.
            SELECT e.pos, d.attempt, d.token, e.id AS msg_id, e.txid, d.slot, d.expires_at, d.key_hash,
                   e.pos >= st.lwm AND newer.hit IS NULL AND NOT EXISTS (SELECT FROM e_completed(p_group_id, d.slot, e.pos)) AS expired
            FROM (SELECT dd.pos, NULL::bigint AS last_pos, dd.attempt, dd.token, dd.msg_id, dd.txid, dd.slot, dd.lane,
                         dd.expires_at, dd.delivered_at, dd.key_hash
                  FROM deliveries dd
                  WHERE dd.group_id = p_group_id AND dd.lane = st.lane
                    AND dd.expires_at >= st.scan_from AND dd.expires_at <= v_upto
                  UNION ALL
                  SELECT ru.pos, ru.last_pos, 1, ru.token, NULL, NULL, ru.slot, ru.lane, ru.expires_at, ru.delivered_at, NULL
                  FROM runs ru
                  WHERE ru.group_id = p_group_id AND ru.lane = st.lane
                    AND ru.expires_at >= st.scan_from AND ru.expires_at <= v_upto) d
            -- a single delivery's position, or each position of a run
            -- (engine_runs.sql), read from the lane's batches that hold the
            -- run: from the one that holds its first position up to the one
            -- that holds its last (ub: both ends are index bounds; with the
            -- upper one a filter, each run scanned every later batch of the
            -- lane, thousands a run in traffic that outlasts the lease)
            -- (a run below the low-water mark is completed: its first
            -- position alone, not read from the batches)
            CROSS JOIN LATERAL (
                SELECT d.pos, d.msg_id AS id, d.txid WHERE d.last_pos IS NULL OR d.last_pos < st.lwm
                UNION ALL
                SELECT b.first_pos + w.lo + u.o - 2, u.id, u.txid
                FROM (SELECT b2.last_pos AS hi_pos FROM batches b2
                      WHERE d.last_pos >= st.lwm AND b2.lane = d.lane AND b2.last_pos >= d.last_pos
                      ORDER BY b2.last_pos LIMIT 1) ub
                JOIN batches b ON b.lane = d.lane AND b.last_pos >= d.pos AND b.last_pos <= ub.hi_pos
                CROSS JOIN LATERAL (SELECT greatest(d.pos, b.first_pos) - b.first_pos + 1 AS lo,
                                           least(d.last_pos, b.last_pos) - b.first_pos + 1 AS hi) w
                CROSS JOIN LATERAL unnest(b.ids[w.lo:w.hi], b.txids[w.lo:w.hi]) WITH ORDINALITY AS u(id, txid, o)
                WHERE b.first_pos <= d.last_pos AND b.last_pos >= b.first_pos) e
            LEFT JOIN LATERAL (SELECT 1 AS hit FROM deliveries d2
                               WHERE e.pos >= st.lwm
                                 AND d2.group_id = p_group_id AND d2.pos = e.pos AND d2.slot = d.slot
                                 AND (d2.attempt, d2.delivered_at, d2.token) > (d.attempt, d.delivered_at, d.token)
                               LIMIT 1) newer ON true
            ORDER BY d.expires_at, e.pos
        LOOP
            IF r.expired AND NOT (r.pos = ANY (pk.pos) OR r.pos = ANY (a_pos)) THEN
                IF r.key_hash IS NOT NULL THEN
                    pv := e_key_prev(p_group_id, r.key_hash, r.pos);
                    IF NOT (pv IS NULL OR pv < st.lwm OR pv = ANY (pk.pos) OR pv = ANY (a_pos)
                            OR e_done(p_group_id, pv)) THEN
                        -- An earlier message of the key is not completed: this
                        -- one waits for it (step 2 finds it again).
                        IF NOT r.key_hash = ANY (v_bkeys) THEN
                            v_bkeys := v_bkeys || r.key_hash;
                            v_bheads := v_bheads || e_key_head(p_group_id, r.key_hash, pv, st.lwm);
                        END IF;
                        v_scan := r.expires_at;
                        CONTINUE;
                    END IF;
                END IF;
                EXIT WHEN need = 0;
                a_pos := a_pos || r.pos; a_id := a_id || r.msg_id; a_txid := a_txid || r.txid;
                a_slot := a_slot || r.slot; a_attempt := a_attempt || (r.attempt + (r.token <> 0)::int);
                a_key := a_key || r.key_hash;
                need := need - 1;
            END IF;
            v_scan := r.expires_at;
        END LOOP;
        v_any := FOUND;
        pk.pos := pk.pos || a_pos; pk.id := pk.id || a_id; pk.txid := pk.txid || a_txid;
        pk.slot := pk.slot || a_slot; pk.attempt := pk.attempt || a_attempt; pk.key := pk.key || a_key;
        pk.lane := pk.lane || array_fill(st.lane, ARRAY[cardinality(a_pos)]);
        st.bkeys := v_bkeys;
        st.bheads := v_bheads;
        IF v_scan IS NOT NULL THEN
            st.scan_from := v_scan;
            st.changed := true;
        END IF;
        -- The next window starts where this one ended (st.scan_from: the
        -- expiry time of the last lease looked at): just after it when
        -- every lease of the window was looked at, else there, inclusive
        -- (others may share it). Left inclusive after a whole window, a
        -- lease passed there (of a message delivered again since, and in
        -- flight) sent every receive of the lane down this path until the
        -- message was completed. (Just after the last lease read, not after
        -- the window's end, which may be p_now: a lease that a receive which
        -- began earlier writes later, expiring between the two, would be
        -- passed unread; found in review.)
        -- (A window with no lease to look at, which only a run whose
        -- batches are gone would give, ends the look: taken again it would
        -- give the same window.)
        EXIT WHEN NOT v_any;
        IF need > 0 THEN
            st.scan_from := st.scan_from + interval '1 microsecond';
            st.changed := true;
        END IF;
        EXIT WHEN need = 0 OR v_upto >= p_now;
    END LOOP;
END
$$;

-- e_expiries: a lane's leases (deliveries and runs rows) that expire from
-- p_from to p_to: their expiry time, last position (a run's last, a single
-- delivery's own) and how many positions they lease (a run's length, 1),
-- for e_expiry_window, and for e_lanes_with_work and
-- e_passable_expiries, which tell leases of completed positions (below the
-- lane's low-water mark) from the others. A set-returning SQL function without SET
-- clauses, so that the planner inlines it into the calling statement (see
-- engine_runs.sql for why its body is not checked).
SET check_function_bodies = off;
DROP FUNCTION IF EXISTS sluice_tmpl.e_expiries(int, smallint, timestamptz, timestamptz);   -- (before last_pos)
CREATE OR REPLACE FUNCTION sluice_tmpl.e_expiries(p_group_id int, p_lane smallint, p_from timestamptz,
                                                  p_to timestamptz)
RETURNS TABLE (expires_at timestamptz, last_pos bigint, n bigint)
LANGUAGE sql STABLE
AS $$
    SELECT dd.expires_at, dd.pos, 1::bigint FROM deliveries dd
    WHERE dd.group_id = p_group_id AND dd.lane = p_lane AND dd.expires_at >= p_from AND dd.expires_at <= p_to
    UNION ALL
    SELECT ru.expires_at, ru.last_pos, ru.last_pos - ru.pos + 1 FROM runs ru
    WHERE ru.group_id = p_group_id AND ru.lane = p_lane AND ru.expires_at >= p_from AND ru.expires_at <= p_to
$$;

-- e_passable_expiries: whether a receive may pass over the leases of a lane
-- that expired since its last scan by moving the scan on, without
-- redelivering (e_take_expired): a lease runs out whether or not its message
-- was acked, so in traffic that lasts longer than the lease every lane has
-- such leases. It may when all of them are of positions below the lane's
-- low-water mark (completed) and there are at most 100 (read here). For
-- e_take and e_take_fast; inlined into their statements like e_expiries.
--
-- Parameters:
--   p_group_id  group id
--   p_lane      the lane
--   p_from      the lane's scan_from
--   p_now       the receive's time
--   p_lwm       the lane's low-water mark
-- Returns: one row: n, how many expired (101: more than 100); upto, the
--          newest expiry among them (NULL: none); passable
CREATE OR REPLACE FUNCTION sluice_tmpl.e_passable_expiries(p_group_id int, p_lane smallint, p_from timestamptz,
                                                           p_now timestamptz, p_lwm bigint)
RETURNS TABLE (n bigint, upto timestamptz, passable boolean)
LANGUAGE sql STABLE
AS $$
    SELECT count(*), max(x.expires_at), count(*) <= 100 AND NOT coalesce(bool_or(x.last_pos >= p_lwm), false)
    FROM (SELECT x.* FROM e_expiries(p_group_id, p_lane, p_from, p_now) x LIMIT 101) x
$$;
RESET check_function_bodies;

-- e_expiry_window: where the next window of e_take_expired ends: the
-- expiry time of the lease of the lane (deliveries and runs rows, expired
-- at or after p_from, by expiry time) with which the positions leased reach
-- p_positions (a run counts its length); a later one when all of those
-- expired at p_from itself (so that each window moves on); p_now when fewer
-- expired. A window reads every lease up to and including that time. (By
-- rows, a window of expired runs of 100 held 100 times the positions a
-- receive needed, each probed and sorted, on every receive until the runs
-- were redelivered: 20 ms a receive of 100, measured on PostgreSQL 15.)
--
-- Parameters:
--   p_group_id     group id
--   p_lane         the lane
--   p_from         where the window starts (the lane's scan_from)
--   p_now          the receive's time
--   p_positions    about how many positions the window should hold
-- Returns: the window's last expiry time, or NULL when no lease of the lane
--          expired from p_from to p_now
DROP FUNCTION IF EXISTS sluice_tmpl.e_expiry_window(int, smallint, timestamptz, timestamptz, int);   -- (p_rows before)
CREATE OR REPLACE FUNCTION sluice_tmpl.e_expiry_window(p_group_id int, p_lane smallint, p_from timestamptz,
                                                       p_now timestamptz, p_positions int)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_upto timestamptz;
BEGIN
    IF NOT EXISTS (SELECT FROM e_expiries(p_group_id, p_lane, p_from, p_now)) THEN
        RETURN NULL;
    END IF;
    -- The first p_positions rows of each table by expiry hold the window's
    -- end (each row leases at least one position), and the limit makes each
    -- an ordered index read that stops there (a merge of the slots). Over
    -- e_expiries (both tables, unlimited) the plan read and sorted every lease
    -- expired since p_from on each call, and e_take_expired calls this once a
    -- window until it reaches p_now when the leases are of acked messages:
    -- quadratic in the leases of a lane (keyed messages lease a row each),
    -- 0.2-1.8 s receives in a keyed drain of batches of 100.
    v_upto := (SELECT x.expires_at
               FROM (SELECT x.expires_at, sum(x.n) OVER (ORDER BY x.expires_at ROWS UNBOUNDED PRECEDING) AS upto_n
                     FROM ((SELECT dd.expires_at, 1::bigint AS n FROM deliveries dd
                            WHERE dd.group_id = p_group_id AND dd.lane = p_lane
                              AND dd.expires_at >= p_from AND dd.expires_at <= p_now
                            ORDER BY dd.expires_at LIMIT p_positions)
                           UNION ALL
                           (SELECT ru.expires_at, ru.last_pos - ru.pos + 1 FROM runs ru
                            WHERE ru.group_id = p_group_id AND ru.lane = p_lane
                              AND ru.expires_at >= p_from AND ru.expires_at <= p_now
                            ORDER BY ru.expires_at LIMIT p_positions)) x) x
               WHERE x.upto_n >= p_positions
               ORDER BY x.expires_at LIMIT 1);
    IF v_upto = p_from THEN
        v_upto := least((SELECT dd.expires_at FROM deliveries dd
                         WHERE dd.group_id = p_group_id AND dd.lane = p_lane
                           AND dd.expires_at > p_from AND dd.expires_at <= p_now
                         ORDER BY dd.expires_at LIMIT 1),
                        (SELECT ru.expires_at FROM runs ru
                         WHERE ru.group_id = p_group_id AND ru.lane = p_lane
                           AND ru.expires_at > p_from AND ru.expires_at <= p_now
                         ORDER BY ru.expires_at LIMIT 1));
    END IF;
    RETURN coalesce(v_upto, p_now);
END
$$;

-- e_take_blocked: step 2. A key is blocked while its earliest incomplete
-- position (its head) is in flight or parked; once the head is completed,
-- walk the key's positions up to the cursor: the first incomplete one that
-- is neither in flight nor parked is taken, with the ones after it (a run,
-- in order). A key with nothing left up to the cursor is free. A receive
-- looks at no more keys than 4 x p_need + 32, in turn (those it did not
-- look at come first the next time), and stops when it has enough.
CREATE OR REPLACE FUNCTION sluice_tmpl.e_take_blocked(p_group_id int, INOUT st sluice.lane_state,
                                                      INOUT pk sluice.picks, p_need int, p_now timestamptz)
LANGUAGE plpgsql
AS $$
DECLARE
    need int := p_need - cardinality(pk.pos);
    n_bkeys bigint[] := '{}';
    n_bheads bigint[] := '{}';
    v_stop bigint;
    v_budget constant int := 4 * need + 32;
    v_keep bigint;
    bk record;
    nx record;
    -- the picks in plain variables (see e_take_new)
    a_pos bigint[] := '{}';
    a_id bigint[] := '{}';
    a_txid xid8[] := '{}';
    a_slot smallint[] := '{}';
    a_attempt int[] := '{}';
    a_key bigint[] := '{}';
BEGIN
    IF cardinality(st.bkeys) = 0 OR need = 0 THEN
        RETURN;
    END IF;
    FOR bk IN
        SELECT u.k, u.h, u.o, ak.hit IS NOT NULL AS done, dl.attempt, dl.parked, dl.expires_at
        FROM unnest(st.bkeys, st.bheads) WITH ORDINALITY AS u(k, h, o)
        LEFT JOIN LATERAL (SELECT 1 AS hit FROM acks a WHERE a.group_id = p_group_id AND a.pos = u.h LIMIT 1) ak ON true
        LEFT JOIN LATERAL (SELECT d.attempt, d.token = 0 AS parked, d.expires_at FROM deliveries d
                           WHERE d.group_id = p_group_id AND d.pos = u.h
                           ORDER BY d.attempt DESC, d.delivered_at DESC, d.token DESC LIMIT 1) dl ON true
        ORDER BY u.o
    LOOP
        IF need = 0 OR bk.o > v_budget THEN
            v_stop := bk.o;
            EXIT;
        END IF;
        IF bk.h >= st.lwm AND NOT bk.done AND bk.expires_at > p_now AND NOT (bk.h = ANY (pk.pos) OR bk.h = ANY (a_pos)) THEN
            n_bkeys := n_bkeys || bk.k;   -- head in flight or parked: still blocked
            n_bheads := n_bheads || bk.h;
            CONTINUE;
        END IF;
        -- Walk the key's positions from its head up to the cursor. One taken
        -- by step 1 (a redelivered head) counts as taken.
        v_keep := NULL;
        FOR nx IN
            SELECT k.pos, k.mslot, k.id, k.txid, ak.hit IS NOT NULL AS done, dl.attempt, dl.parked, dl.expires_at
            FROM keyed k
            LEFT JOIN LATERAL (SELECT 1 AS hit FROM acks a
                               WHERE a.group_id = p_group_id AND a.pos = k.pos AND a.slot = k.mslot LIMIT 1) ak ON true
            LEFT JOIN LATERAL (SELECT d.attempt, d.token = 0 AS parked, d.expires_at FROM deliveries d
                               WHERE d.group_id = p_group_id AND d.pos = k.pos AND d.slot = k.mslot
                               ORDER BY d.attempt DESC, d.delivered_at DESC, d.token DESC LIMIT 1) dl ON true
            WHERE k.key_hash = bk.k AND k.pos >= bk.h AND k.pos <= st.cursor
              AND (k.target IS NULL OR k.target = p_group_id)
            ORDER BY k.pos
        LOOP
            EXIT WHEN v_keep IS NOT NULL AND need = 0;
            IF nx.pos = ANY (pk.pos) OR nx.pos = ANY (a_pos) THEN
                v_keep := coalesce(v_keep, nx.pos);
                CONTINUE;
            END IF;
            CONTINUE WHEN nx.done OR nx.pos < st.lwm;
            v_keep := coalesce(v_keep, nx.pos);   -- the earliest incomplete position
            EXIT WHEN nx.attempt IS NOT NULL AND nx.expires_at > p_now;   -- in flight or parked
            EXIT WHEN need = 0;
            -- Take it, and go on with the next ones (a run).
            a_pos := a_pos || nx.pos; a_id := a_id || nx.id; a_txid := a_txid || nx.txid;
            a_slot := a_slot || nx.mslot; a_key := a_key || bk.k;
            a_attempt := a_attempt || CASE WHEN nx.attempt IS NULL THEN 1
                                           WHEN nx.parked THEN nx.attempt ELSE nx.attempt + 1 END;
            need := need - 1;
        END LOOP;
        IF v_keep IS NOT NULL THEN
            n_bkeys := n_bkeys || bk.k;
            n_bheads := n_bheads || v_keep;
        END IF;
    END LOOP;
    IF v_stop IS NOT NULL THEN
        -- Not looked at this time: first in line the next time.
        n_bkeys := st.bkeys[v_stop:] || n_bkeys;
        n_bheads := st.bheads[v_stop:] || n_bheads;
    END IF;
    pk.pos := pk.pos || a_pos; pk.id := pk.id || a_id; pk.txid := pk.txid || a_txid;
    pk.slot := pk.slot || a_slot; pk.attempt := pk.attempt || a_attempt; pk.key := pk.key || a_key;
    pk.lane := pk.lane || array_fill(st.lane, ARRAY[cardinality(a_pos)]);
    st.bkeys := n_bkeys;
    st.bheads := n_bheads;
    st.changed := true;
END
$$;

-- e_prio_take: the next messages of a lane with a priority above 0 (p_above)
-- or below 0, level by level from the highest, each level in position order
-- after greatest(p_after, the level's last position taken in p_lv_pos) and
-- up to p_upto (NULL: no bound), not completed and meant for the group.
--
-- Parameters:
--   p_group_id         group id
--   p_lane             the lane
--   p_above            true: levels above 0; false: below 0
--   p_after, p_upto    the range of positions
--   p_limit            the most rows to return
--   p_lv_prio, p_lv_pos  the lane's levels and their last positions taken
-- Returns: (priority, pos, mslot, id, txid), in the order to take them
CREATE OR REPLACE FUNCTION sluice_tmpl.e_prio_take(p_group_id int, p_lane smallint, p_above boolean, p_after bigint,
                                                   p_upto bigint, p_limit int, p_lv_prio int[], p_lv_pos bigint[])
RETURNS TABLE (priority int, pos bigint, mslot smallint, id bigint, txid xid8)
LANGUAGE plpgsql STABLE
AS $$
#variable_conflict use_column
DECLARE
    lvl int;
    n int;
    left_ int := p_limit;
    v_lo constant int := CASE WHEN p_above THEN 1 ELSE -2147483648 END;
    v_hi constant int := CASE WHEN p_above THEN 2147483647 ELSE -1 END;
BEGIN
    LOOP
        EXIT WHEN left_ <= 0;
        -- the next level down: a range scan of the (lane, priority, pos) index
        SELECT p.priority INTO lvl FROM prio p
        WHERE p.lane = p_lane AND p.priority >= v_lo AND p.priority <= coalesce(lvl::bigint - 1, v_hi)
        ORDER BY p.priority DESC LIMIT 1;
        EXIT WHEN NOT FOUND;
        RETURN QUERY
        SELECT p.priority, p.pos, p.mslot, p.id, p.txid
        FROM prio p
        WHERE p.lane = p_lane AND p.priority = lvl
          AND p.pos > greatest(p_after, p_lv_pos[array_position(p_lv_prio, lvl)])
          AND (p_upto IS NULL OR p.pos <= p_upto)
          AND (p.target IS NULL OR p.target = p_group_id) AND NOT EXISTS (SELECT FROM e_completed(p_group_id, p.mslot, p.pos))
        ORDER BY p.pos
        LIMIT left_;
        GET DIAGNOSTICS n = ROW_COUNT;
        left_ := left_ - n;
    END LOOP;
END
$$;

-- e_take_prio: steps 3 (p_above) and 5. Above 0: every level from the
-- cursor on (what is after the cursor and prioritized goes first). Below 0:
-- from the low-water mark up to the cursor, once step 4 took everything
-- else numbered. Records each level's last position taken (lv_prio,
-- lv_pos), so that step 4 skips what was taken out of order.
CREATE OR REPLACE FUNCTION sluice_tmpl.e_take_prio(p_group_id int, INOUT st sluice.lane_state,
                                                   INOUT pk sluice.picks, p_need int, p_above boolean)
LANGUAGE plpgsql
AS $$
DECLARE
    r record;
    i int;
    need int := p_need - cardinality(pk.pos);
    -- the picks and the levels' positions in plain variables (see e_take_new)
    a_pos bigint[] := '{}';
    a_id bigint[] := '{}';
    a_txid xid8[] := '{}';
    a_slot smallint[] := '{}';
    v_lv_prio int[] := st.lv_prio;
    v_lv_pos bigint[] := st.lv_pos;
BEGIN
    IF need = 0 OR NOT EXISTS (SELECT 1 FROM prio p
                               WHERE p.lane = st.lane
                                 AND p.priority >= CASE WHEN p_above THEN 1 ELSE -2147483648 END
                                 AND p.priority <= CASE WHEN p_above THEN 2147483647 ELSE -1 END) THEN
        RETURN;   -- (a lane that never saw a priority skips the call)
    END IF;
    FOR r IN SELECT * FROM e_prio_take(p_group_id, st.lane, p_above,
                                       CASE WHEN p_above THEN st.cursor ELSE st.lwm - 1 END,
                                       CASE WHEN p_above THEN NULL ELSE st.cursor END,
                                       need, st.lv_prio, st.lv_pos) LOOP
        a_pos := a_pos || r.pos; a_id := a_id || r.id; a_txid := a_txid || r.txid;
        a_slot := a_slot || r.mslot;
        i := array_position(v_lv_prio, r.priority);
        IF i IS NULL THEN
            v_lv_prio := v_lv_prio || r.priority;
            v_lv_pos := v_lv_pos || r.pos;
        ELSE
            v_lv_pos[i] := r.pos;
        END IF;
    END LOOP;
    IF cardinality(a_pos) > 0 THEN
        pk.pos := pk.pos || a_pos; pk.id := pk.id || a_id; pk.txid := pk.txid || a_txid;
        pk.slot := pk.slot || a_slot;
        pk.attempt := pk.attempt || array_fill(1, ARRAY[cardinality(a_pos)]);
        pk.key := pk.key || array_fill(NULL::bigint, ARRAY[cardinality(a_pos)]);
        pk.lane := pk.lane || array_fill(st.lane, ARRAY[cardinality(a_pos)]);
        st.lv_prio := v_lv_prio;
        st.lv_pos := v_lv_pos;
        -- taken ahead of the cursor
        st.ahead := greatest(st.ahead, (SELECT max(x) FROM unnest(a_pos) x));
        st.changed := true;
    END IF;
END
$$;

-- e_take_new: step 4. The lane's positions after the cursor, batch by batch,
-- in order, until p_need are picked or the lane's numbered positions run out.
-- Moves the cursor past what it looked at.
CREATE OR REPLACE FUNCTION sluice_tmpl.e_take_new(p_group_id int, INOUT st sluice.lane_state,
                                                  INOUT pk sluice.picks, p_need int)
LANGUAGE plpgsql
AS $$
DECLARE
    need int := p_need - cardinality(pk.pos);
    b record;
    r record;
    i int;
    v_from int;
    v_to int;
    last_taken bigint;
    -- A keyed batch's picks and the blocked keys, in plain variables:
    -- appending to a field of pk or st rebuilds the whole composite (every
    -- array of it) on each append, quadratic in the batch; a variable's
    -- array grows in place.
    a_pos bigint[];
    a_id bigint[];
    a_txid xid8[];
    a_slot smallint[];
    a_key bigint[];
    v_bkeys bigint[] := st.bkeys;
    v_bheads bigint[] := st.bheads;
BEGIN
    WHILE need > 0 LOOP
        SELECT * INTO b FROM batches bb
        WHERE bb.lane = st.lane AND bb.last_pos > st.cursor AND bb.last_pos >= bb.first_pos
        ORDER BY bb.last_pos LIMIT 1;
        EXIT WHEN NOT FOUND;
        last_taken := NULL;
        -- The next part of the batch after the cursor, in order (a function
        -- scan returns array order); a little more than needed, in case some
        -- positions are retries meant for other groups or already completed.
        v_from := greatest(st.cursor - b.first_pos + 2, 1);
        v_to := least(b.last_pos - b.first_pos + 1, v_from + 2 * need + 15);
        IF b.keys IS NULL AND b.prios IS NULL THEN
            -- No keyed or prioritized message in the batch: take in one statement.
            SELECT pk.pos || coalesce(array_agg(f.pos ORDER BY f.pos), '{}'), pk.id || coalesce(array_agg(f.id ORDER BY f.pos), '{}'),
                   pk.txid || coalesce(array_agg(f.txid ORDER BY f.pos), '{}'),
                   pk.slot || coalesce(array_agg(f.slot ORDER BY f.pos), '{}'),
                   pk.attempt || coalesce(array_agg(1 ORDER BY f.pos), '{}'),
                   pk.key || coalesce(array_agg(NULL::bigint ORDER BY f.pos), '{}'),
                   pk.lane || coalesce(array_agg(st.lane ORDER BY f.pos), '{}'), count(*), max(f.pos)
            INTO pk.pos, pk.id, pk.txid, pk.slot, pk.attempt, pk.key, pk.lane, i, last_taken
            FROM (SELECT b.first_pos + v_from + x.o - 2 AS pos, x.id, x.txid, x.slot
                  FROM unnest(b.ids[v_from:v_to], b.txids[v_from:v_to], b.slots[v_from:v_to], b.targets[v_from:v_to])
                       WITH ORDINALITY AS x(id, txid, slot, tg, o)
                  WHERE (x.tg IS NULL OR x.tg = p_group_id)
                    AND NOT (b.first_pos + v_from + x.o - 2 <= st.ahead
                             AND e_is_completed(p_group_id, x.slot, b.first_pos + v_from + x.o - 2))
                  ORDER BY x.o
                  LIMIT need) f;
            need := need - i;
            st.cursor := CASE WHEN need > 0 THEN b.first_pos + v_to - 1 ELSE last_taken END;
            st.changed := true;
            CONTINUE;
        END IF;
        a_pos := '{}'; a_id := '{}'; a_txid := '{}'; a_slot := '{}'; a_key := '{}';
        FOR r IN
            SELECT b.first_pos + v_from + x.o - 2 AS pos, x.id, x.txid, x.slot, x.k, coalesce(x.pr, 0) AS pr,
                   kp.pos AS pv, pd.hit IS NOT NULL AS pv_done
            FROM unnest(b.ids[v_from:v_to], b.txids[v_from:v_to], b.slots[v_from:v_to], b.targets[v_from:v_to],
                        b.keys[v_from:v_to], b.prios[v_from:v_to])
                 WITH ORDINALITY AS x(id, txid, slot, tg, k, pr, o)
            -- for a keyed message: the key's previous position, and whether it is completed
            LEFT JOIN LATERAL (SELECT kk.pos, kk.mslot FROM keyed kk
                               WHERE x.k IS NOT NULL AND kk.key_hash = x.k AND kk.pos < b.first_pos + v_from + x.o - 2
                                 AND (kk.target IS NULL OR kk.target = p_group_id)
                               ORDER BY kk.pos DESC LIMIT 1) kp ON true
            LEFT JOIN LATERAL (SELECT 1 AS hit FROM acks a
                               WHERE kp.pos IS NOT NULL AND a.group_id = p_group_id AND a.pos = kp.pos
                                 AND a.slot = kp.mslot LIMIT 1) pd ON true
            WHERE (x.tg IS NULL OR x.tg = p_group_id)
              AND NOT (b.first_pos + v_from + x.o - 2 <= st.ahead
                       AND e_is_completed(p_group_id, x.slot, b.first_pos + v_from + x.o - 2))
        LOOP
            IF r.k IS NOT NULL THEN
                -- A blocked key waits for step 2, unless this receive picked
                -- its messages so far (then this one may continue the run).
                CONTINUE WHEN r.k = ANY (v_bkeys)
                              AND NOT coalesce(r.k = ANY (pk.key) OR r.k = ANY (a_key), false);
                IF NOT (r.pv IS NULL OR r.pv < st.lwm OR r.pv = ANY (pk.pos) OR r.pv = ANY (a_pos)) THEN
                    IF r.k = ANY (v_bkeys) THEN
                        CONTINUE;   -- step 2 takes it in turn
                    ELSIF NOT r.pv_done THEN
                        v_bkeys := v_bkeys || r.k;   -- busy: block the key behind its head
                        v_bheads := v_bheads || e_key_head(p_group_id, r.k, r.pv, st.lwm);
                        CONTINUE;
                    END IF;
                END IF;
            ELSIF r.pr > 0 THEN
                i := array_position(st.lv_prio, r.pr);
                CONTINUE WHEN i IS NOT NULL AND r.pos <= st.lv_pos[i];   -- taken by step 3
            ELSIF r.pr < 0 THEN
                CONTINUE;   -- step 5
            END IF;
            a_pos := a_pos || r.pos; a_id := a_id || r.id; a_txid := a_txid || r.txid;
            a_slot := a_slot || r.slot; a_key := a_key || r.k;
            need := need - 1;
            last_taken := r.pos;
            EXIT WHEN need = 0;
        END LOOP;
        pk.pos := pk.pos || a_pos; pk.id := pk.id || a_id; pk.txid := pk.txid || a_txid;
        pk.slot := pk.slot || a_slot; pk.key := pk.key || a_key;
        pk.attempt := pk.attempt || array_fill(1, ARRAY[cardinality(a_pos)]);
        pk.lane := pk.lane || array_fill(st.lane, ARRAY[cardinality(a_pos)]);
        st.cursor := CASE WHEN need > 0 THEN b.first_pos + v_to - 1 ELSE last_taken END;
        st.changed := true;
    END LOOP;
    st.bkeys := v_bkeys;
    st.bheads := v_bheads;
END
$$;
