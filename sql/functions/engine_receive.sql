-- Group: engine templates - receiving (see engine_cut.sql for what a template is)

-- e_group_state: the newest cursor of a group, or where to resume when there
-- is none (first receive, after a crash, after a purge).
--
-- Parameters:
--   g  the group
-- Returns: (seq, cursor, lwm, scan_from, lwm_at, found, bkeys, bheads, lv_prio,
--          lv_pos); the arrays are empty when there is no cursor row
CREATE OR REPLACE FUNCTION sluice_tmpl.e_group_state(g sluice.consumer_group,
    OUT seq bigint, OUT cursor bigint, OUT lwm bigint, OUT scan_from timestamptz,
    OUT lwm_at timestamptz, OUT found boolean, OUT bkeys bigint[], OUT bheads bigint[],
    OUT lv_prio int[], OUT lv_pos bigint[])
LANGUAGE plpgsql STABLE
SET search_path = sluice_tmpl, pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    r record;
BEGIN
    SELECT s.seq, s.cursor, s.lwm, s.scan_from, s.lwm_at, s.bkeys, s.bheads, s.lv_prio, s.lv_pos INTO r
    FROM group_states s WHERE s.group_id = g.id ORDER BY s.seq DESC LIMIT 1;
    IF r.seq IS NOT NULL THEN
        seq := r.seq; cursor := r.cursor; lwm := r.lwm;
        scan_from := r.scan_from; lwm_at := r.lwm_at; found := true;
        bkeys := coalesce(r.bkeys, '{}'); bheads := coalesce(r.bheads, '{}');
        lv_prio := coalesce(r.lv_prio, '{}'); lv_pos := coalesce(r.lv_pos, '{}');
        RETURN;
    END IF;
    SELECT c.seq, c.lwm INTO r FROM checkpoints c WHERE c.group_id = g.id ORDER BY c.seq DESC LIMIT 1;
    seq := coalesce(r.seq, 0);
    lwm := greatest(coalesce(r.lwm, g.start_pos), g.start_pos);
    cursor := lwm - 1;
    scan_from := '-infinity';
    lwm_at := '-infinity';
    found := false;
    bkeys := '{}'; bheads := '{}'; lv_prio := '{}'; lv_pos := '{}';
END
$$;

-- e_done: whether a group has completed a position.
CREATE OR REPLACE FUNCTION sluice_tmpl.e_done(p_group_id int, p_pos bigint)
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = sluice_tmpl, pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM acks a WHERE a.group_id = p_group_id AND a.pos = p_pos);
END
$$;

-- e_pos: a group's view of one position: whether it is completed, and its
-- newest delivery row (attempt NULL if none; newest by attempt, then time):
-- the attempt, whether it is a parked retry (token 0) rather than a lease,
-- and when it expires (or is due).
CREATE OR REPLACE FUNCTION sluice_tmpl.e_pos(p_group_id int, p_pos bigint,
    OUT done boolean, OUT attempt int, OUT parked boolean, OUT expires timestamptz)
LANGUAGE plpgsql STABLE
SET search_path = sluice_tmpl, pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
AS $$
BEGIN
    done := e_done(p_group_id, p_pos);
    SELECT d.attempt, d.token = 0, d.expires_at INTO attempt, parked, expires
    FROM deliveries d WHERE d.group_id = p_group_id AND d.pos = p_pos
    ORDER BY d.attempt DESC, d.delivered_at DESC, d.token DESC LIMIT 1;
END
$$;

-- e_key_prev: the position of a key before p_pos that is meant for the group
-- (NULL if none is left).
CREATE OR REPLACE FUNCTION sluice_tmpl.e_key_prev(p_group_id int, p_key bigint, p_pos bigint)
RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path = sluice_tmpl, pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
AS $$
BEGIN
    RETURN (SELECT k.pos FROM keyed k
            WHERE k.key_hash = p_key AND k.pos < p_pos AND (k.target IS NULL OR k.target = p_group_id)
            ORDER BY k.pos DESC LIMIT 1);
END
$$;

-- e_key_head: the earliest incomplete position of a key, given an
-- incomplete one (p_pos): the messages of a run are in flight together, so
-- the ones before p_pos may be too.
CREATE OR REPLACE FUNCTION sluice_tmpl.e_key_head(p_group_id int, p_key bigint, p_pos bigint, p_lwm bigint)
RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path = sluice_tmpl, pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    v bigint := p_pos;
    pv bigint;
BEGIN
    LOOP
        pv := e_key_prev(p_group_id, p_key, v);
        EXIT WHEN pv IS NULL OR pv < p_lwm OR e_done(p_group_id, pv);
        v := pv;
    END LOOP;
    RETURN v;
END
$$;

-- e_key_next: the position of a key after p_pos that is meant for the group,
-- with its message (pos NULL if none).
CREATE OR REPLACE FUNCTION sluice_tmpl.e_key_next(p_group_id int, p_key bigint, p_pos bigint,
    OUT pos bigint, OUT mslot smallint, OUT id bigint, OUT txid xid8)
LANGUAGE plpgsql STABLE
SET search_path = sluice_tmpl, pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
AS $$
BEGIN
    SELECT k.pos, k.mslot, k.id, k.txid INTO pos, mslot, id, txid
    FROM keyed k
    WHERE k.key_hash = p_key AND k.pos > p_pos AND (k.target IS NULL OR k.target = p_group_id)
    ORDER BY k.pos LIMIT 1;
END
$$;

-- e_window: the positions a group has dispatched and not completed, with
-- their newest lease (attempt and expiry; NULL if none survives).
--
-- Parameters:
--   p_group_id       group id
--   p_lwm, p_cursor  the range to look at
-- Returns: (pos, id, txid, slot, attempt, expires) by position
CREATE OR REPLACE FUNCTION sluice_tmpl.e_window(p_group_id int, p_lwm bigint, p_cursor bigint)
RETURNS TABLE (pos bigint, id bigint, txid xid8, slot smallint, attempt int, expires timestamptz)
LANGUAGE plpgsql STABLE
SET search_path = sluice_tmpl, pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT w.pos, w.id, w.txid, w.slot, d.attempt, d.expires
    FROM (SELECT b.first_pos + u.o - 1 AS pos, u.id, u.txid, u.slot, u.tg
          FROM batches b
          CROSS JOIN LATERAL unnest(b.ids, b.txids, b.slots, b.targets) WITH ORDINALITY AS u(id, txid, slot, tg, o)
          WHERE b.last_pos >= p_lwm AND b.first_pos <= p_cursor) w
    LEFT JOIN LATERAL (
        SELECT dd.attempt, max(dd.expires_at) AS expires
        FROM deliveries dd
        WHERE dd.slot = w.slot AND dd.group_id = p_group_id AND dd.pos = w.pos
        GROUP BY dd.attempt ORDER BY dd.attempt DESC LIMIT 1) d ON true
    LEFT JOIN LATERAL (SELECT 1 AS hit FROM acks a
                       WHERE a.group_id = p_group_id AND a.pos = w.pos AND a.slot = w.slot LIMIT 1) ak ON true
    WHERE w.pos BETWEEN p_lwm AND p_cursor AND (w.tg IS NULL OR w.tg = p_group_id) AND ak.hit IS NULL
    ORDER BY w.pos;
END
$$;

-- e_lwm: the first position in [p_lwm, p_cursor] the group has not completed
-- (p_cursor + 1 when all are). Stops at the first one, so it is cheap while
-- the front of the window is in flight.
CREATE OR REPLACE FUNCTION sluice_tmpl.e_lwm(p_group_id int, p_lwm bigint, p_cursor bigint)
RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path = sluice_tmpl, pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    v bigint;
BEGIN
    IF p_cursor < p_lwm THEN
        RETURN p_lwm;
    END IF;
    SELECT w.pos INTO v
    FROM (SELECT b.first_pos + u.o - 1 AS pos, u.slot, u.tg
          FROM (SELECT * FROM batches bb
                WHERE bb.last_pos >= p_lwm AND bb.first_pos <= p_cursor
                ORDER BY bb.last_pos) b
          CROSS JOIN LATERAL unnest(b.slots, b.targets) WITH ORDINALITY AS u(slot, tg, o)) w
    LEFT JOIN LATERAL (SELECT 1 AS hit FROM acks a
                       WHERE a.group_id = p_group_id AND a.pos = w.pos AND a.slot = w.slot LIMIT 1) ak ON true
    WHERE w.pos BETWEEN p_lwm AND p_cursor AND (w.tg IS NULL OR w.tg = p_group_id) AND ak.hit IS NULL
    LIMIT 1;
    RETURN coalesce(v, p_cursor + 1);
END
$$;

-- e_dead_letter: move one delivery to the dead-letter store and complete its
-- position for the group.
--
-- Returns: false if the position was already completed
CREATE OR REPLACE FUNCTION sluice_tmpl.e_dead_letter(p_queue_id int, p_group_id int, p_slot smallint, p_pos bigint,
                                                     p_msg_txid xid8, p_msg_id bigint, p_attempts int, p_error text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = sluice_tmpl, pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    INSERT INTO acks (slot, group_id, pos, kind, acked_at)
    VALUES (p_slot, p_group_id, p_pos, 'd', v_now)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    INSERT INTO sluice.dead_letter (queue_id, group_id, message_id, attempts, error, died_at,
                                    sent_at, priority, key, headers, body)
    SELECT p_queue_id, p_group_id, coalesce(m.origin_id, m.id), p_attempts, p_error, v_now,
           m.sent_at, m.priority, m.key, m.headers, m.body
    FROM messages m
    WHERE m.slot = p_slot AND m.txid = p_msg_txid AND m.id = p_msg_id;
    RETURN true;
END
$$;

-- e_prio_take: the next messages with a priority above 0 (p_above) or below
-- 0, level by level from the highest, each level in position order after
-- greatest(p_after, the level's last position taken in p_lv_pos) and up to
-- p_upto (NULL: no bound), not completed and meant for the group.
--
-- Parameters:
--   p_group_id         group id
--   p_above            true: levels above 0; false: below 0
--   p_after, p_upto    the range of positions
--   p_limit            the most rows to return
--   p_lv_prio, p_lv_pos  the group's levels and their last positions taken
-- Returns: (priority, pos, mslot, id, txid), in the order to take them
CREATE OR REPLACE FUNCTION sluice_tmpl.e_prio_take(p_group_id int, p_above boolean, p_after bigint, p_upto bigint,
                                                   p_limit int, p_lv_prio int[], p_lv_pos bigint[])
RETURNS TABLE (priority int, pos bigint, mslot smallint, id bigint, txid xid8)
LANGUAGE plpgsql STABLE
SET search_path = sluice_tmpl, pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
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
        -- the next level down: a range scan of the (priority, pos) index
        SELECT p.priority INTO lvl FROM prio p
        WHERE p.priority >= v_lo AND p.priority <= coalesce(lvl::bigint - 1, v_hi)
        ORDER BY p.priority DESC LIMIT 1;
        EXIT WHEN NOT FOUND;
        RETURN QUERY
        SELECT p.priority, p.pos, p.mslot, p.id, p.txid
        FROM prio p
        LEFT JOIN LATERAL (SELECT 1 AS hit FROM acks a
                           WHERE a.group_id = p_group_id AND a.pos = p.pos AND a.slot = p.mslot LIMIT 1) ak ON true
        WHERE p.priority = lvl
          AND p.pos > greatest(p_after, p_lv_pos[array_position(p_lv_prio, lvl)])
          AND (p_upto IS NULL OR p.pos <= p_upto)
          AND (p.target IS NULL OR p.target = p_group_id) AND ak.hit IS NULL
        ORDER BY p.pos
        LIMIT left_;
        GET DIAGNOSTICS n = ROW_COUNT;
        left_ := left_ - n;
    END LOOP;
END
$$;

-- e_receive: the body of sluice.receive for this queue (see there).
-- Runs under the group's dispatch lock, taken here.
--
-- What a receive takes, in this order, until it has max_messages:
--   1. leases that expired (and parked retries that came due);
--   2. messages of blocked keys whose earlier messages are now completed;
--   3. unkeyed messages with a priority above 0, highest first, then by position;
--   4. the positions after the cursor, in order (cutting new batches when the
--      numbered ones run out); keyed ones whose key is busy are left for 2,
--      those with a priority below 0 for 5;
--   5. when 4 reached the end: unkeyed messages with a priority below 0.
-- A keyed message is taken only if every earlier message of its key is
-- completed or taken by this same receive (a consumer may get a run of one key).
CREATE OR REPLACE FUNCTION sluice_tmpl.e_receive(q sluice.queue, g sluice.consumer_group, max_messages int,
                                                 p_lease interval, p_consumer text)
RETURNS SETOF sluice.message
LANGUAGE plpgsql
SET search_path = sluice_tmpl, pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    v_now timestamptz;
    v_expires timestamptz;
    st record;
    v_seq bigint;
    v_cursor bigint;
    v_lwm bigint;
    v_scan_from timestamptz;
    v_lwm_at timestamptz;
    v_changed boolean;
    v_slot smallint;
    v_ckpt bigint;
    need int := max_messages;
    cuts int := 0;
    v_cut_locked boolean := false;
    last_taken bigint;
    v_from int;
    v_to int;
    b record;
    r record;
    bk record;
    nx record;
    o sluice.message;
    pv bigint;
    i int;
    v_keep bigint;
    v_stop bigint;
    v_budget int;
    -- blocked keys (each with its earliest incomplete position) and priority
    -- levels dispatched out of position order (each with its last position)
    v_bkeys bigint[];
    v_bheads bigint[];
    n_bkeys bigint[];
    n_bheads bigint[];
    v_lvp int[];
    v_lvpos bigint[];
    -- picked positions, in the order they are returned
    k_pos bigint[] := '{}';
    k_id bigint[] := '{}';
    k_txid xid8[] := '{}';
    k_slot smallint[] := '{}';
    k_attempt int[] := '{}';
    k_key bigint[] := '{}';
    -- leases to write
    d_slot smallint[] := '{}';
    d_pos bigint[] := '{}';
    d_attempt int[] := '{}';
    d_token bigint[] := '{}';
    d_id bigint[] := '{}';
    d_txid xid8[] := '{}';
    d_key bigint[] := '{}';
    v_token bigint;
    v_fetched int := 0;
BEGIN
    PERFORM pg_advisory_xact_lock(sluice._lock_ns('group'), g.id);
    v_now := clock_timestamp();
    v_expires := v_now + p_lease;
    st := e_group_state(g);
    v_seq := st.seq;
    v_cursor := st.cursor;
    v_lwm := st.lwm;
    v_scan_from := st.scan_from;
    v_lwm_at := st.lwm_at;
    v_changed := NOT st.found;
    v_bkeys := st.bkeys;
    v_bheads := st.bheads;
    v_lvp := st.lv_prio;
    v_lvpos := st.lv_pos;

    -- 1. Leases that expired since the last look, oldest expiry first. A lease
    -- is redelivered if it is still the message's newest delivery row (by
    -- attempt, then time: an extend writes a newer row) and the message is
    -- not completed. Each lease's expiry is looked at about once, whatever the
    -- number in flight. A parked retry (token 0) that came due is delivered
    -- with its own attempt number.
    FOR r IN
        -- Every lease that expired since scan_from is returned, so that
        -- scan_from moves past it; only those at or above the low-water mark
        -- (below it everything is completed) are probed.
        SELECT d.pos, d.attempt, d.token, d.msg_id, d.txid, d.slot, d.expires_at, d.key_hash,
               d.pos >= v_lwm AND newer.hit IS NULL AND ak.hit IS NULL AS expired
        FROM deliveries d
        LEFT JOIN LATERAL (SELECT 1 AS hit FROM deliveries d2
                           WHERE d.pos >= v_lwm
                             AND d2.group_id = g.id AND d2.pos = d.pos AND d2.slot = d.slot
                             AND (d2.attempt, d2.delivered_at, d2.token) > (d.attempt, d.delivered_at, d.token)
                           LIMIT 1) newer ON true
        LEFT JOIN LATERAL (SELECT 1 AS hit FROM acks a
                           WHERE d.pos >= v_lwm
                             AND a.group_id = g.id AND a.pos = d.pos AND a.slot = d.slot LIMIT 1) ak ON true
        WHERE d.group_id = g.id AND d.expires_at >= v_scan_from AND d.expires_at <= v_now
        ORDER BY d.expires_at, d.pos
    LOOP
        IF r.expired AND NOT r.pos = ANY (k_pos) THEN
            IF r.key_hash IS NOT NULL THEN
                pv := e_key_prev(g.id, r.key_hash, r.pos);
                IF NOT (pv IS NULL OR pv < v_lwm OR pv = ANY (k_pos) OR e_done(g.id, pv)) THEN
                    -- An earlier message of the key is not completed: this
                    -- one waits for it (step 2 finds it again).
                    IF NOT r.key_hash = ANY (v_bkeys) THEN
                        v_bkeys := v_bkeys || r.key_hash;
                        v_bheads := v_bheads || e_key_head(g.id, r.key_hash, pv, v_lwm);
                    END IF;
                    v_scan_from := r.expires_at;
                    v_changed := true;
                    CONTINUE;
                END IF;
            END IF;
            EXIT WHEN need = 0;
            k_pos := k_pos || r.pos;
            k_id := k_id || r.msg_id;
            k_txid := k_txid || r.txid;
            k_slot := k_slot || r.slot;
            k_attempt := k_attempt || (r.attempt + (r.token <> 0)::int);
            k_key := k_key || r.key_hash;
            need := need - 1;
        END IF;
        v_scan_from := r.expires_at;
        v_changed := true;
    END LOOP;

    -- 2. Blocked keys. A key is blocked while its earliest incomplete
    -- position (its head) is in flight or parked; once the head is completed,
    -- walk the key's positions up to the cursor: the first incomplete one
    -- that is neither in flight nor parked is taken, with the ones after it
    -- (a run, in order). A key with nothing left up to the cursor is free.
    -- A receive looks at no more keys than 4 x max_messages + 32, in turn
    -- (those it did not look at come first the next time), and stops when
    -- it has enough.
    IF cardinality(v_bkeys) > 0 AND need > 0 THEN
        n_bkeys := '{}';
        n_bheads := '{}';
        v_stop := NULL;
        v_budget := 4 * need + 32;
        FOR bk IN
            SELECT u.k, u.h, u.o, ak.hit IS NOT NULL AS done, dl.attempt, dl.parked, dl.expires_at
            FROM unnest(v_bkeys, v_bheads) WITH ORDINALITY AS u(k, h, o)
            LEFT JOIN LATERAL (SELECT 1 AS hit FROM acks a WHERE a.group_id = g.id AND a.pos = u.h LIMIT 1) ak ON true
            LEFT JOIN LATERAL (SELECT d.attempt, d.token = 0 AS parked, d.expires_at FROM deliveries d
                               WHERE d.group_id = g.id AND d.pos = u.h
                               ORDER BY d.attempt DESC, d.delivered_at DESC, d.token DESC LIMIT 1) dl ON true
            ORDER BY u.o
        LOOP
            IF need = 0 OR bk.o > v_budget THEN
                v_stop := bk.o;
                EXIT;
            END IF;
            IF bk.h >= v_lwm AND NOT bk.done AND bk.expires_at > v_now AND NOT bk.h = ANY (k_pos) THEN
                n_bkeys := n_bkeys || bk.k;   -- head in flight or parked: still blocked
                n_bheads := n_bheads || bk.h;
                CONTINUE;
            END IF;
            -- Walk the key's positions from its head up to the cursor. One
            -- taken by step 1 (a redelivered head) counts as taken.
            v_keep := NULL;
            FOR nx IN
                SELECT k.pos, k.mslot, k.id, k.txid, ak.hit IS NOT NULL AS done, dl.attempt, dl.parked, dl.expires_at
                FROM keyed k
                LEFT JOIN LATERAL (SELECT 1 AS hit FROM acks a
                                   WHERE a.group_id = g.id AND a.pos = k.pos AND a.slot = k.mslot LIMIT 1) ak ON true
                LEFT JOIN LATERAL (SELECT d.attempt, d.token = 0 AS parked, d.expires_at FROM deliveries d
                                   WHERE d.group_id = g.id AND d.pos = k.pos AND d.slot = k.mslot
                                   ORDER BY d.attempt DESC, d.delivered_at DESC, d.token DESC LIMIT 1) dl ON true
                WHERE k.key_hash = bk.k AND k.pos >= bk.h AND k.pos <= v_cursor
                  AND (k.target IS NULL OR k.target = g.id)
                ORDER BY k.pos
            LOOP
                EXIT WHEN v_keep IS NOT NULL AND need = 0;
                IF nx.pos = ANY (k_pos) THEN
                    v_keep := coalesce(v_keep, nx.pos);
                    CONTINUE;
                END IF;
                CONTINUE WHEN nx.done OR nx.pos < v_lwm;
                v_keep := coalesce(v_keep, nx.pos);   -- the earliest incomplete position
                EXIT WHEN nx.attempt IS NOT NULL AND nx.expires_at > v_now;   -- in flight or parked
                EXIT WHEN need = 0;
                -- Take it, and go on with the next ones (a run).
                k_pos := k_pos || nx.pos;
                k_id := k_id || nx.id;
                k_txid := k_txid || nx.txid;
                k_slot := k_slot || nx.mslot;
                k_attempt := k_attempt || CASE WHEN nx.attempt IS NULL THEN 1
                                               WHEN nx.parked THEN nx.attempt ELSE nx.attempt + 1 END;
                k_key := k_key || bk.k;
                need := need - 1;
            END LOOP;
            IF v_keep IS NOT NULL THEN
                n_bkeys := n_bkeys || bk.k;
                n_bheads := n_bheads || v_keep;
            END IF;
        END LOOP;
        IF v_stop IS NOT NULL THEN
            -- Not looked at this time: first in line the next time.
            n_bkeys := v_bkeys[v_stop:] || n_bkeys;
            n_bheads := v_bheads[v_stop:] || n_bheads;
        END IF;
        v_bkeys := n_bkeys;
        v_bheads := n_bheads;
        v_changed := true;
    END IF;

    -- 3. Unkeyed messages with a priority above 0, level by level from the
    -- highest, each level in position order from the last one taken. What
    -- committed before this receive is numbered first, so that a message
    -- sent behind a backlog competes with it.
    IF need > 0 THEN
        v_cut_locked := pg_try_advisory_xact_lock(sluice._lock_ns('cut'), q.id);
        IF v_cut_locked THEN
            cuts := 1;
            PERFORM e_cut(q.id);
        END IF;
        FOR r IN SELECT * FROM e_prio_take(g.id, true, v_cursor, NULL, need, v_lvp, v_lvpos)
                 -- (a queue that never saw a priority skips the call)
                 WHERE EXISTS (SELECT 1 FROM prio p WHERE p.priority > 0) LOOP
            k_pos := k_pos || r.pos;
            k_id := k_id || r.id;
            k_txid := k_txid || r.txid;
            k_slot := k_slot || r.mslot;
            k_attempt := k_attempt || 1;
            k_key := k_key || NULL::bigint;
            need := need - 1;
            i := array_position(v_lvp, r.priority);
            IF i IS NULL THEN
                v_lvp := v_lvp || r.priority;
                v_lvpos := v_lvpos || r.pos;
            ELSE
                v_lvpos[i] := r.pos;
            END IF;
            v_changed := true;
        END LOOP;
    END IF;

    -- 4. New messages, cutting a new batch when the numbered ones run out.
    WHILE need > 0 LOOP
        SELECT * INTO b FROM batches
        WHERE last_pos > v_cursor AND last_pos >= first_pos ORDER BY last_pos LIMIT 1;
        IF NOT FOUND THEN
            -- Cut while cutting makes progress (a round larger than one cut
            -- takes several; a few per call bound the time under the lock).
            -- Never wait for another cutter: what it cuts is there at the next call.
            EXIT WHEN cuts >= 4;
            IF NOT v_cut_locked THEN
                v_cut_locked := pg_try_advisory_xact_lock(sluice._lock_ns('cut'), q.id);
                EXIT WHEN NOT v_cut_locked;
            END IF;
            cuts := cuts + 1;
            EXIT WHEN e_cut(q.id) IS NULL;
            CONTINUE;
        END IF;
        last_taken := NULL;
        -- The next part of the batch after the cursor, in order (a function
        -- scan returns array order); a little more than needed, in case some
        -- positions are retries meant for other groups or already completed.
        v_from := greatest(v_cursor - b.first_pos + 2, 1);
        v_to := least(b.last_pos - b.first_pos + 1, v_from + 2 * need + 15);
        FOR r IN
            SELECT b.first_pos + v_from + x.o - 2 AS pos, x.id, x.txid, x.slot, x.k, coalesce(x.pr, 0) AS pr,
                   pk.pos AS pv, pd.hit IS NOT NULL AS pv_done
            FROM unnest(b.ids[v_from:v_to], b.txids[v_from:v_to], b.slots[v_from:v_to], b.targets[v_from:v_to],
                        b.keys[v_from:v_to], b.prios[v_from:v_to])
                 WITH ORDINALITY AS x(id, txid, slot, tg, k, pr, o)
            LEFT JOIN LATERAL (SELECT 1 AS hit FROM acks a
                               WHERE a.group_id = g.id AND a.pos = b.first_pos + v_from + x.o - 2 AND a.slot = x.slot
                               LIMIT 1) ak ON true
            -- for a keyed message: the key's previous position, and whether it is completed
            LEFT JOIN LATERAL (SELECT kp.pos, kp.mslot FROM keyed kp
                               WHERE x.k IS NOT NULL AND kp.key_hash = x.k AND kp.pos < b.first_pos + v_from + x.o - 2
                                 AND (kp.target IS NULL OR kp.target = g.id)
                               ORDER BY kp.pos DESC LIMIT 1) pk ON true
            LEFT JOIN LATERAL (SELECT 1 AS hit FROM acks a
                               WHERE pk.pos IS NOT NULL AND a.group_id = g.id AND a.pos = pk.pos AND a.slot = pk.mslot
                               LIMIT 1) pd ON true
            WHERE (x.tg IS NULL OR x.tg = g.id) AND ak.hit IS NULL
        LOOP
            IF r.k IS NOT NULL THEN
                -- A blocked key waits for step 2, unless this receive took
                -- its messages so far (then this one may continue the run).
                CONTINUE WHEN r.k = ANY (v_bkeys) AND NOT coalesce(r.k = ANY (k_key), false);
                pv := r.pv;
                IF NOT (pv IS NULL OR pv < v_lwm OR pv = ANY (k_pos)) THEN
                    IF r.k = ANY (v_bkeys) THEN
                        CONTINUE;   -- step 2 takes it in turn
                    ELSIF NOT r.pv_done THEN
                        v_bkeys := v_bkeys || r.k;   -- busy: block the key behind its head
                        v_bheads := v_bheads || e_key_head(g.id, r.k, pv, v_lwm);
                        CONTINUE;
                    END IF;
                END IF;
            ELSIF r.pr > 0 THEN
                i := array_position(v_lvp, r.pr);
                CONTINUE WHEN i IS NOT NULL AND r.pos <= v_lvpos[i];   -- taken by step 3
            ELSIF r.pr < 0 THEN
                CONTINUE;   -- step 5
            END IF;
            k_pos := k_pos || r.pos;
            k_id := k_id || r.id;
            k_txid := k_txid || r.txid;
            k_slot := k_slot || r.slot;
            k_attempt := k_attempt || 1;
            k_key := k_key || r.k;
            need := need - 1;
            last_taken := r.pos;
            EXIT WHEN need = 0;
        END LOOP;
        v_cursor := CASE WHEN need > 0 THEN b.first_pos + v_to - 1 ELSE last_taken END;
        v_changed := true;
    END LOOP;

    -- 5. Unkeyed messages with a priority below 0, once everything else
    -- numbered is taken: level by level, each from the last one taken.
    IF need > 0 THEN
        FOR r IN SELECT * FROM e_prio_take(g.id, false, v_lwm - 1, v_cursor, need, v_lvp, v_lvpos)
                 WHERE EXISTS (SELECT 1 FROM prio p WHERE p.priority < 0) LOOP
            k_pos := k_pos || r.pos;
            k_id := k_id || r.id;
            k_txid := k_txid || r.txid;
            k_slot := k_slot || r.mslot;
            k_attempt := k_attempt || 1;
            k_key := k_key || NULL::bigint;
            need := need - 1;
            i := array_position(v_lvp, r.priority);
            IF i IS NULL THEN
                v_lvp := v_lvp || r.priority;
                v_lvpos := v_lvpos || r.pos;
            ELSE
                v_lvpos[i] := r.pos;
            END IF;
            v_changed := true;
        END LOOP;
    END IF;
    -- Forget levels the cursor (above 0) or the low-water mark (below 0) passed.
    IF cardinality(v_lvp) > 0 THEN
        SELECT coalesce(array_agg(l.p ORDER BY l.o), '{}'), coalesce(array_agg(l.pos ORDER BY l.o), '{}')
        INTO v_lvp, v_lvpos
        FROM unnest(v_lvp, v_lvpos) WITH ORDINALITY AS l(p, pos, o)
        WHERE (l.p > 0 AND l.pos > v_cursor) OR (l.p < 0 AND l.pos >= v_lwm);
    END IF;

    -- 6. Lease them (or dead-letter those out of attempts) and return them,
    -- in the order they were taken.
    IF cardinality(k_pos) > 0 THEN
        FOR r IN
            SELECT k.pos, k.slot, k.attempt, k.kh, mm.*
            FROM unnest(k_pos, k_id, k_txid, k_slot, k_attempt, k_key) WITH ORDINALITY AS k(pos, id, txid, slot, attempt, kh, o)
            CROSS JOIN LATERAL (
                SELECT m.id AS msg_id, m.txid AS msg_txid, m.attempt_base, coalesce(m.origin_id, m.id) AS public_id,
                       m.body, m.headers, m.key, m.priority, m.sent_at
                FROM messages m
                WHERE m.slot = k.slot AND m.txid = k.txid AND m.id = k.id
                LIMIT 1) mm
            ORDER BY k.o
        LOOP
            v_fetched := v_fetched + 1;
            IF r.attempt_base + r.attempt > q.max_attempts THEN
                PERFORM e_dead_letter(q.id, g.id, r.slot, r.pos, r.msg_txid, r.msg_id,
                                      r.attempt_base + r.attempt - 1,
                                      format('lease of attempt %s expired; max_attempts (%s) reached',
                                             r.attempt_base + r.attempt - 1, q.max_attempts));
                CONTINUE;
            END IF;
            v_token := 1 + (random() * 999999999999999998)::bigint;
            d_slot := d_slot || r.slot;
            d_pos := d_pos || r.pos;
            d_attempt := d_attempt || r.attempt;
            d_token := d_token || v_token;
            d_id := d_id || r.msg_id;
            d_txid := d_txid || r.msg_txid;
            d_key := d_key || r.kh;
            o.id := r.public_id;
            o.body := r.body;
            o.headers := r.headers;
            o.key := r.key;
            o.priority := r.priority;
            o.attempt := r.attempt_base + r.attempt;
            o.sent_at := r.sent_at;
            o.receipt := r.slot || '.' || r.pos || '.' || r.attempt || '.' || v_token;
            o.lease_expires_at := v_expires;
            o.pos := r.pos;
            RETURN NEXT o;
        END LOOP;
        -- Positions whose message is gone (its slot was reclaimed, or the queue
        -- purged) before this group got to them: nothing to deliver; complete
        -- them, or the group's low-water mark would stop there for good.
        IF v_fetched < cardinality(k_pos) THEN
            INSERT INTO acks (slot, group_id, pos, kind, acked_at)
            SELECT k.slot, g.id, k.pos, 'x', v_now
            FROM unnest(k_pos, k_id, k_txid, k_slot) AS k(pos, id, txid, slot)
            LEFT JOIN LATERAL (SELECT 1 AS hit FROM messages m
                               WHERE m.slot = k.slot AND m.txid = k.txid AND m.id = k.id LIMIT 1) mm ON true
            WHERE mm.hit IS NULL
            ON CONFLICT DO NOTHING;
        END IF;
        INSERT INTO deliveries (slot, group_id, pos, attempt, token, msg_id, txid, expires_at, delivered_at,
                                consumer, key_hash)
        SELECT u.slot, g.id, u.pos, u.attempt, u.token, u.id, u.txid, v_expires, v_now, p_consumer, u.kh
        FROM unnest(d_slot, d_pos, d_attempt, d_token, d_id, d_txid, d_key) AS u(slot, pos, attempt, token, id, txid, kh);
    END IF;

    -- 7. About once a second while messages are in flight: advance the
    -- low-water mark, checkpoint it durably, and let the queue rotate.
    v_slot := (SELECT e.epoch FROM sluice.epoch e WHERE e.queue_id = q.id ORDER BY e.epoch DESC LIMIT 1) % 4;
    IF v_cursor >= v_lwm AND v_now >= v_lwm_at + interval '1 second' THEN
        v_ckpt := v_lwm;
        v_lwm := e_lwm(g.id, v_lwm, v_cursor);
        v_lwm_at := v_now;
        v_changed := true;
        IF v_lwm <> v_ckpt OR NOT st.found THEN
            INSERT INTO checkpoints (slot, group_id, seq, lwm, at) VALUES (v_slot, g.id, v_seq + 1, v_lwm, v_now);
        END IF;
        IF pg_try_advisory_xact_lock(sluice._lock_ns('maint'), q.id) THEN
            PERFORM e_maintain(q.id);
            v_slot := (SELECT e.epoch FROM sluice.epoch e WHERE e.queue_id = q.id ORDER BY e.epoch DESC LIMIT 1) % 4;
        END IF;
    END IF;

    IF v_changed THEN
        INSERT INTO group_states (slot, group_id, seq, cursor, lwm, scan_from, lwm_at, bkeys, bheads, lv_prio, lv_pos)
        VALUES (v_slot, g.id, v_seq + 1, v_cursor, v_lwm, v_scan_from, v_lwm_at,
                nullif(v_bkeys, '{}'), nullif(v_bheads, '{}'), nullif(v_lvp, '{}'), nullif(v_lvpos, '{}'));
    END IF;
END
$$;
