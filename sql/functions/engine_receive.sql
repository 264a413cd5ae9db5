-- Group: engine templates - receiving (see engine_cut.sql for what a template is)

-- e_receive: the body of sluice.receive for this queue (see there).
--
-- 1. Number what committed since the last cut (e_cut), unless another
--    receive of the queue is cutting: never wait for it, what it numbers is
--    there at the next call.
-- 2. Take from the group's lanes that have work (e_lane_candidates), each
--    under its try-lock: a lane another receive holds is skipped, not
--    waited for. Lanes with prioritized messages come first, then the
--    others from a random lane on, until max_messages are taken.
-- 3. About once a second per session, reclaim and rotate (e_maintain) unless
--    another session is doing it.
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
    v_now constant timestamptz := clock_timestamp();
    v_start constant int := floor(random() * q.lanes)::int;
    v_maint constant text := 'sluice.maintained_' || q.id;
    need int := max_messages;
    ln smallint;
    n int;
BEGIN
    -- Number what committed since the last cut: at most four cuts (a round
    -- larger than one cut takes several), before taking, so that the runs of
    -- a key numbered by them can be taken together.
    IF pg_try_advisory_xact_lock(sluice._lock_ns('cut'), q.id) THEN
        FOR n IN 1..4 LOOP
            EXIT WHEN e_cut(q.id, q.lanes) IS NULL;
            EXIT WHEN (SELECT b.done FROM batches b ORDER BY b.batch_no DESC LIMIT 1);
        END LOOP;
    END IF;
    FOR ln IN SELECT * FROM e_lane_candidates(g.id, q.lanes, v_start, v_now) LOOP
        CONTINUE WHEN NOT pg_try_advisory_xact_lock(sluice._lock_ns('lane'), g.id * 256 + ln);
        RETURN QUERY SELECT * FROM e_take(q, g, ln, need, p_lease, p_consumer, v_now);
        GET DIAGNOSTICS n = ROW_COUNT;
        need := need - n;
        EXIT WHEN need = 0;
    END LOOP;
    IF extract(epoch FROM v_now) >= coalesce(nullif(current_setting(v_maint, true), ''), '0')::float8 + 1 THEN
        PERFORM set_config(v_maint, extract(epoch FROM v_now)::text, false);
        IF pg_try_advisory_xact_lock(sluice._lock_ns('maint'), q.id) THEN
            PERFORM e_maintain(q.id);
        END IF;
    END IF;
END
$$;

-- e_take: what one receive takes from one lane of a group, under the lane's
-- lock: the steps of engine_take.sql, then the leases (e_lease), the lane's
-- low-water mark (e_lane_checkpoint) and its new state row.
--
-- Parameters:
--   q, g        the queue and group
--   p_lane      the lane
--   p_need      the most messages to take
--   p_lease     lease duration
--   p_consumer  the caller's name, kept with the leases
--   p_now       the receive's time
-- Returns: the messages leased, as sluice.receive returns them
CREATE OR REPLACE FUNCTION sluice_tmpl.e_take(q sluice.queue, g sluice.consumer_group, p_lane smallint, p_need int,
                                              p_lease interval, p_consumer text, p_now timestamptz)
RETURNS SETOF sluice.message
LANGUAGE plpgsql
SET search_path = sluice_tmpl, pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    st sluice.lane_state := e_lane_state(g, p_lane);
    pk sluice.picks := ROW('{}', '{}', '{}', '{}', '{}', '{}');
    r record;
    v_slot smallint;
BEGIN
    SELECT * INTO r FROM e_take_expired(g.id, st, pk, p_need, p_now);
    st := r.st; pk := r.pk;
    IF cardinality(st.bkeys) > 0 THEN
        SELECT * INTO r FROM e_take_blocked(g.id, st, pk, p_need, p_now);
        st := r.st; pk := r.pk;
    END IF;
    SELECT * INTO r FROM e_take_prio(g.id, st, pk, p_need, true);
    st := r.st; pk := r.pk;
    SELECT * INTO r FROM e_take_new(g.id, st, pk, p_need);
    st := r.st; pk := r.pk;
    SELECT * INTO r FROM e_take_prio(g.id, st, pk, p_need, false);
    st := r.st; pk := r.pk;
    -- Forget levels the cursor (above 0) or the low-water mark (below 0) passed.
    IF cardinality(st.lv_prio) > 0 THEN
        SELECT coalesce(array_agg(l.p ORDER BY l.o), '{}'), coalesce(array_agg(l.pos ORDER BY l.o), '{}')
        INTO st.lv_prio, st.lv_pos
        FROM unnest(st.lv_prio, st.lv_pos) WITH ORDINALITY AS l(p, pos, o)
        WHERE (l.p > 0 AND l.pos > st.cursor) OR (l.p < 0 AND l.pos >= st.lwm);
    END IF;
    IF cardinality(pk.pos) > 0 THEN
        RETURN QUERY SELECT * FROM e_lease(q, g, p_lane, pk, p_lease, p_consumer, p_now);
    END IF;
    v_slot := (SELECT e.epoch FROM sluice.epoch e WHERE e.queue_id = q.id ORDER BY e.epoch DESC LIMIT 1) % 4;
    st := e_lane_checkpoint(g.id, st, v_slot, p_now);
    IF st.changed THEN
        INSERT INTO group_states (slot, group_id, lane, seq, cursor, lwm, scan_from, lwm_at, bkeys, bheads, lv_prio, lv_pos)
        VALUES (v_slot, g.id, p_lane, st.seq + 1, st.cursor, st.lwm, st.scan_from, st.lwm_at,
                nullif(st.bkeys, '{}'), nullif(st.bheads, '{}'), nullif(st.lv_prio, '{}'), nullif(st.lv_pos, '{}'));
    END IF;
END
$$;

-- e_lease: lease the picked positions (or dead-letter those out of
-- attempts) and return their messages, in the order they were picked.
-- Positions whose message is gone (its slot was reclaimed, or the queue
-- purged, before this group got to them) are completed with nothing to
-- deliver, or the lane's low-water mark would stop there for good.
CREATE OR REPLACE FUNCTION sluice_tmpl.e_lease(q sluice.queue, g sluice.consumer_group, p_lane smallint, pk sluice.picks,
                                               p_lease interval, p_consumer text, p_now timestamptz)
RETURNS SETOF sluice.message
LANGUAGE plpgsql
SET search_path = sluice_tmpl, pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    v_expires constant timestamptz := p_now + p_lease;
    r record;
    o sluice.message;
    v_token bigint;
    v_fetched int := 0;
    d_slot smallint[] := '{}';
    d_pos bigint[] := '{}';
    d_attempt int[] := '{}';
    d_token bigint[] := '{}';
    d_id bigint[] := '{}';
    d_txid xid8[] := '{}';
    d_key bigint[] := '{}';
BEGIN
    FOR r IN
        SELECT k.pos, k.slot, k.attempt, k.kh, mm.*
        FROM unnest(pk.pos, pk.id, pk.txid, pk.slot, pk.attempt, pk.key) WITH ORDINALITY AS k(pos, id, txid, slot, attempt, kh, o)
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
        d_slot := d_slot || r.slot; d_pos := d_pos || r.pos; d_attempt := d_attempt || r.attempt;
        d_token := d_token || v_token; d_id := d_id || r.msg_id; d_txid := d_txid || r.msg_txid;
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
    IF v_fetched < cardinality(pk.pos) THEN
        INSERT INTO acks (slot, group_id, pos, kind, acked_at)
        SELECT k.slot, g.id, k.pos, 'x', p_now
        FROM unnest(pk.pos, pk.id, pk.txid, pk.slot) AS k(pos, id, txid, slot)
        LEFT JOIN LATERAL (SELECT 1 AS hit FROM messages m
                           WHERE m.slot = k.slot AND m.txid = k.txid AND m.id = k.id LIMIT 1) mm ON true
        WHERE mm.hit IS NULL
        ON CONFLICT DO NOTHING;
    END IF;
    INSERT INTO deliveries (slot, group_id, lane, pos, attempt, token, msg_id, txid, expires_at, delivered_at,
                            consumer, key_hash)
    SELECT u.slot, g.id, p_lane, u.pos, u.attempt, u.token, u.id, u.txid, v_expires, p_now, p_consumer, u.kh
    FROM unnest(d_slot, d_pos, d_attempt, d_token, d_id, d_txid, d_key) AS u(slot, pos, attempt, token, id, txid, kh);
END
$$;

-- e_lane_checkpoint: about once a second while a lane has messages in
-- flight, advance its low-water mark, and checkpoint it durably when it
-- moved (or the lane had no state), so that a crash resumes from there.
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
SET search_path = sluice_tmpl, pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
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
    END IF;
    RETURN st;
END
$$;
