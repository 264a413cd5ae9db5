-- Group: engine v2 - receive and a group's start (templates, schema sluice_tmpl2)

-- e2_receive: sluice.receive of a queue of engine 2. Numbers what is
-- committed if anything is (e2_unnumbered, e2_cut), then takes from the
-- first free lane with work: the hot path of the current slot
-- (e2_take_<slot>), or the slow path for a lane it declines (e2_slow);
-- while it has fewer than max_messages, the next free lane with work,
-- three lanes at most.
--
-- Parameters: as sluice.receive (q and g looked up, lease resolved)
-- Returns: the messages leased, as sluice.receive
-- Rotation and reclaim (e_maintain) run here too, when the current epoch
-- is older than rotate_interval, at most once a second per session, if no
-- other call is at them.
--
-- Calls: e2_ack, e_maintain, e2_unnumbered, e2_cut, e2_lane_<slot>,
--   e2_take_<slot>, e2_slow
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_receive(q sluice.queue, g sluice.consumer_group, max_messages int,
                                                  p_lease interval, p_consumer text, p_ack text[])
RETURNS SETOF sluice.message
LANGUAGE plpgsql
AS $$
DECLARE
    v_now constant timestamptz := clock_timestamp();
    v_epoch bigint;
    v_slot smallint;
    v_started timestamptz;
    v_maint_note constant text := 'sluice.maint_' || q.id;
    v_start int := floor(random() * q.lanes)::int;
    t record;
    r record;
    v_lane smallint[] := '{}';
    v_no bigint[] := '{}';
    v_token bigint[] := '{}';
    v_exp timestamptz[] := '{}';
    v_pos bigint[] := '{}';
    v_ids bigint[] := '{}';
    v_txids xid8[] := '{}';
    v_atts int[] := '{}';
    v_try int;
    v_lane1 smallint;
    v_need int := max_messages;
BEGIN
    IF p_ack IS NOT NULL THEN
        PERFORM e2_ack(g.id, p_ack);
    END IF;
    SELECT e.epoch, e.slot, e.started_at INTO v_epoch, v_slot, v_started
    FROM sluice.epoch e WHERE e.queue_id = q.id ORDER BY e.epoch DESC LIMIT 1;
    IF v_now >= v_started + q.rotate_interval
       AND coalesce(current_setting(v_maint_note, true), '') < to_char(v_now - interval '1 second', 'YYYYMMDDHH24MISSUS')
       AND pg_try_advisory_xact_lock(sluice._lock_ns('maint'), q.id) THEN
        -- rotation or reclaim due: this session tries at most once a second
        PERFORM set_config(v_maint_note, to_char(v_now, 'YYYYMMDDHH24MISSUS'), false);
        PERFORM e_maintain(q.id);
        SELECT e.epoch, e.slot INTO v_epoch, v_slot
        FROM sluice.epoch e WHERE e.queue_id = q.id ORDER BY e.epoch DESC LIMIT 1;
    END IF;
    IF e2_unnumbered(v_now) THEN
        PERFORM e2_cut(q.id, q.lanes, v_slot, v_epoch);
    END IF;
    FOR v_try IN 1..3 LOOP
        -- (a copy per slot: each statement names only the slot's leaves)
        IF v_slot = 0 THEN
            v_lane1 := e2_lane_0(g.id, q.lanes, v_start, v_now);
            EXIT WHEN v_lane1 IS NULL;
            SELECT * INTO t FROM e2_take_0(q.id, g.id, v_lane1, v_need, p_lease, p_consumer, v_now, v_slot);
        ELSIF v_slot = 1 THEN
            v_lane1 := e2_lane_1(g.id, q.lanes, v_start, v_now);
            EXIT WHEN v_lane1 IS NULL;
            SELECT * INTO t FROM e2_take_1(q.id, g.id, v_lane1, v_need, p_lease, p_consumer, v_now, v_slot);
        ELSIF v_slot = 2 THEN
            v_lane1 := e2_lane_2(g.id, q.lanes, v_start, v_now);
            EXIT WHEN v_lane1 IS NULL;
            SELECT * INTO t FROM e2_take_2(q.id, g.id, v_lane1, v_need, p_lease, p_consumer, v_now, v_slot);
        ELSE
            v_lane1 := e2_lane_3(g.id, q.lanes, v_start, v_now);
            EXIT WHEN v_lane1 IS NULL;
            SELECT * INTO t FROM e2_take_3(q.id, g.id, v_lane1, v_need, p_lease, p_consumer, v_now, v_slot);
        END IF;
        IF NOT t.declined THEN
            IF cardinality(t.pos) > 0 THEN
                v_lane := v_lane || array_fill(v_lane1, ARRAY[cardinality(t.pos)]);
                v_no := v_no || array_fill(t.lease_no, ARRAY[cardinality(t.pos)]);
                v_token := v_token || array_fill(t.token, ARRAY[cardinality(t.pos)]);
                v_exp := v_exp || array_fill(t.expires_at, ARRAY[cardinality(t.pos)]);
                v_pos := v_pos || t.pos; v_ids := v_ids || t.ids; v_txids := v_txids || t.txids;
                v_atts := v_atts || array_fill(NULL::int, ARRAY[cardinality(t.pos)]);
            END IF;
        ELSE
            FOR r IN SELECT * FROM e2_slow(q, g, v_lane1, v_need, p_lease, p_consumer, v_now, v_slot) LOOP
                v_lane := v_lane || array_fill(r.lane, ARRAY[cardinality(r.pos)]);
                v_no := v_no || array_fill(r.lease_no, ARRAY[cardinality(r.pos)]);
                v_token := v_token || array_fill(r.token, ARRAY[cardinality(r.pos)]);
                v_exp := v_exp || array_fill(r.expires_at, ARRAY[cardinality(r.pos)]);
                v_pos := v_pos || r.pos; v_ids := v_ids || r.ids; v_txids := v_txids || r.txids;
                v_atts := v_atts || coalesce(r.atts, array_fill(NULL::int, ARRAY[cardinality(r.pos)]));
            END LOOP;
        END IF;
        v_need := max_messages - cardinality(v_pos);
        EXIT WHEN v_need = 0;
        v_start := v_lane1 + 1;
    END LOOP;
    RETURN QUERY
    SELECT m.id, m.body, m.headers, NULL::text, 0, coalesce(x.att, m.attempt), m.sent_at,
           v_slot || '.' || x.pos || '.' || x.lane || '.' || x.lease_no || '.' || x.token, x.exp, x.pos
    FROM unnest(v_lane, v_no, v_token, v_exp, v_pos, v_ids, v_txids, v_atts)
         WITH ORDINALITY AS x(lane, lease_no, token, exp, pos, id, txid, att, o)
    JOIN msg m ON m.txid = x.txid AND m.id = x.id
    ORDER BY x.o;
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
-- Tables: lease, one row (kind c) per lane
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
        PERFORM e2_cut_store(q.lanes, v_slot, v_epoch, clock_timestamp());
    END IF;
    INSERT INTO lease (slot, group_id, lane, lease_no, kind, first_pos, last_pos, n, token, expires_at,
                       delivered_at, cursor, scan_t, scan_no, old_due)
    SELECT v_slot, p_group, l.lane, 1, 'c', 1, 0, 0, 0, '-infinity', clock_timestamp(),
           CASE WHEN p_earliest THEN coalesce((SELECT min(b.first_pos) - 1 FROM batch b WHERE b.lane = l.lane), h.heads[l.lane + 1])
                WHEN p_ts IS NULL THEN h.heads[l.lane + 1]
                ELSE coalesce((SELECT max(b.last_pos) FROM batch b JOIN cut c ON c.cut_no = b.cut_no
                               WHERE b.lane = l.lane AND c.at < p_ts),
                              (SELECT min(b.first_pos) - 1 FROM batch b WHERE b.lane = l.lane), h.heads[l.lane + 1]) END,
           '-infinity', 0, 'infinity'
    FROM (SELECT c.heads FROM cut c ORDER BY c.cut_no DESC LIMIT 1) h
    CROSS JOIN LATERAL generate_series(0, q.lanes - 1) AS l(lane);
END
$$;
