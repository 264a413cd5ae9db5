-- Group: engine templates - observability (see engine_cut.sql for what a template is)

-- e_status: the rows of sluice.status for this queue (see there).
CREATE OR REPLACE FUNCTION sluice_tmpl.e_status(q sluice.queue)
RETURNS SETOF sluice.queue_status
LANGUAGE plpgsql STABLE
SET search_path = sluice_tmpl, pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    g sluice.consumer_group;
    head record;
    st record;
    w record;
    u record;
    s sluice.queue_status;
    v_now timestamptz := clock_timestamp();
    v_cur bigint := sluice._current_epoch(q.id);
    v_oldest bigint;
    v_retired_at timestamptz;
    v_min bigint := e_min_lwm(q.id);
    v_xip xid8[];
    any_group boolean := false;
BEGIN
    SELECT * INTO head FROM batches ORDER BY batch_no DESC LIMIT 1;
    v_xip := ARRAY(SELECT pg_snapshot_xip(head.snap));
    v_oldest := coalesce((SELECT max(r.epoch) FROM sluice.reclaim r WHERE r.queue_id = q.id) + 1, 0);
    SELECT e.started_at INTO v_retired_at FROM sluice.epoch e WHERE e.queue_id = q.id AND e.epoch = v_oldest + 1;
    FOR g IN SELECT * FROM sluice.consumer_group cg WHERE cg.queue_id = q.id ORDER BY cg.name LOOP
        any_group := true;
        st := e_group_state(g);
        SELECT count(*) FILTER (WHERE x.expires > v_now) AS in_flight,
               count(*) FILTER (WHERE x.expires IS NULL OR x.expires <= v_now) AS expired
        INTO w FROM e_window(g.id, st.lwm, st.cursor) x;
        -- Committed messages not numbered yet: due now, and the oldest of them.
        SELECT count(*) FILTER (WHERE m.deliver_at IS NULL OR m.deliver_at <= v_now) AS due,
               min(m.sent_at) AS oldest
        INTO u
        FROM messages m
        WHERE (m.txid >= pg_snapshot_xmax(head.snap) OR m.txid = ANY (v_xip) OR m.deliver_at > head.t)
          AND (m.target_group IS NULL OR m.target_group = g.id);
        s.queue := q.name;
        s.group_name := g.name;
        s.cursor := st.cursor;
        s.lwm := st.lwm;
        s.head := head.last_pos;
        s.in_flight := w.in_flight;
        s.ready := greatest(head.last_pos - st.cursor, 0) + w.expired + u.due;
        SELECT count(*) INTO s.delayed FROM messages m
        WHERE m.deliver_at > v_now AND (m.target_group IS NULL OR m.target_group = g.id);
        SELECT count(*) INTO s.dead FROM sluice.dead_letter d
        WHERE d.group_id = g.id AND NOT EXISTS (SELECT 1 FROM sluice.redrive r WHERE r.dead_letter_id = d.id);
        s.lag := greatest(head.last_pos - st.lwm + 1, 0) + u.due;
        s.oldest_pending_age := NULL;
        IF st.lwm <= head.last_pos THEN
            SELECT v_now - m.sent_at INTO s.oldest_pending_age
            FROM batches b
            JOIN messages m ON m.slot = b.slots[st.lwm - b.first_pos + 1]
                           AND m.txid = b.txids[st.lwm - b.first_pos + 1]
                           AND m.id = b.ids[st.lwm - b.first_pos + 1]
            WHERE b.first_pos <= st.lwm AND b.last_pos >= st.lwm
            LIMIT 1;
        END IF;
        IF s.oldest_pending_age IS NULL AND u.oldest IS NOT NULL THEN
            s.oldest_pending_age := v_now - u.oldest;
        END IF;
        s.live_epochs := v_cur - v_oldest + 1;
        s.holds_reclaim := v_oldest < v_cur AND st.lwm = v_min AND v_now >= v_retired_at + q.retention;
        RETURN NEXT s;
    END LOOP;
    IF NOT any_group THEN
        s := NULL;
        s.queue := q.name;
        s.head := head.last_pos;
        s.live_epochs := v_cur - v_oldest + 1;
        s.holds_reclaim := false;
        RETURN NEXT s;
    END IF;
END
$$;
