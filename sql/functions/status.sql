-- Group: observability

-- status: depth and progress of each group of a queue (or of every queue).
-- Reads only; costs O(groups x (in-flight window + messages not yet batched)).
--
-- Parameters:
--   queue  queue name (NULL: every queue)
-- Returns: SETOF sluice.queue_status, one row per group (a queue without
--   groups gives one row with group_name NULL):
--   ready               deliverable now (new, expired leases, retries due)
--   delayed             not deliverable before a later time (delay, retry backoff)
--   in_flight           leased and not completed
--   dead                dead letters not redriven
--   oldest_pending_age  age of the oldest message the group has not completed
--   lag                 messages from the group's low-water mark to the newest
--   cursor, lwm, head   positions: last dispatched, first not completed, last numbered
--   live_epochs         storage epochs the queue keeps (1 to 4)
--   holds_reclaim       true when this group is what keeps an old epoch from being reclaimed
-- Errors: SL001, SL002
CREATE OR REPLACE FUNCTION sluice.status(queue text DEFAULT NULL)
RETURNS SETOF sluice.queue_status
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q sluice.queue;
    g sluice.consumer_group;
    p0 int;
    head sluice.batches;
    st record;
    w record;
    u record;
    s sluice.queue_status;
    v_now timestamptz;
    v_cur bigint;
    v_oldest bigint;
    v_retired_at timestamptz;
    v_min bigint;
    any_group boolean;
BEGIN
    IF status.queue IS NOT NULL THEN
        PERFORM sluice._queue(status.queue);
    END IF;
    FOR q IN SELECT * FROM sluice.queue WHERE status.queue IS NULL OR name = status.queue ORDER BY name LOOP
        p0 := q.id * 4;
        v_now := clock_timestamp();
        EXECUTE 'SELECT * FROM sluice.batches WHERE part BETWEEN $1 AND $1 + 3 ORDER BY batch_no DESC LIMIT 1'
            INTO head USING p0;
        v_cur := sluice._current_epoch(q.id);
        v_oldest := coalesce((SELECT max(r.epoch) FROM sluice.reclaim r WHERE r.queue_id = q.id) + 1, 0);
        SELECT e.started_at INTO v_retired_at FROM sluice.epoch e WHERE e.queue_id = q.id AND e.epoch = v_oldest + 1;
        v_min := sluice._min_lwm(q.id);
        any_group := false;
        FOR g IN SELECT * FROM sluice.consumer_group WHERE queue_id = q.id ORDER BY name LOOP
            any_group := true;
            st := sluice._group_state(p0, g);
            SELECT count(*) FILTER (WHERE x.expires > v_now) AS in_flight,
                   count(*) FILTER (WHERE x.expires IS NULL OR x.expires <= v_now) AS expired
            INTO w FROM sluice._window(p0, g.id, st.lwm, st.cursor) x;
            -- Committed messages not numbered yet (due now / later) and the oldest of them.
            EXECUTE $q$
                SELECT count(*) FILTER (WHERE deliver_at IS NULL OR deliver_at <= $6) AS due,
                       min(sent_at) AS oldest
                FROM sluice.messages
                WHERE part BETWEEN $1 AND $1 + 3
                  AND ((txid >= pg_snapshot_xmax($2) OR txid = ANY($3)) OR deliver_at > $4)
                  AND (target_group IS NULL OR target_group = $5)
            $q$ INTO u USING p0, head.snap, ARRAY(SELECT pg_snapshot_xip(head.snap)), head.t, g.id, v_now;
            s.queue := q.name;
            s.group_name := g.name;
            s.cursor := st.cursor;
            s.lwm := st.lwm;
            s.head := head.last_pos;
            s.in_flight := w.in_flight;
            s.ready := greatest(head.last_pos - st.cursor, 0) + w.expired + u.due;
            EXECUTE 'SELECT count(*) FROM sluice.messages WHERE part BETWEEN $1 AND $1 + 3
                     AND deliver_at > $2 AND (target_group IS NULL OR target_group = $3)'
                INTO s.delayed USING p0, v_now, g.id;
            SELECT count(*) INTO s.dead FROM sluice.dead_letter d
            WHERE d.group_id = g.id AND NOT EXISTS (SELECT 1 FROM sluice.redrive r WHERE r.dead_letter_id = d.id);
            s.lag := greatest(head.last_pos - st.lwm + 1, 0) + u.due;
            s.oldest_pending_age := NULL;
            IF st.lwm <= head.last_pos THEN
                EXECUTE $q$
                    SELECT $4 - m.sent_at
                    FROM sluice.batches b
                    JOIN sluice.messages m ON m.part = $1 + b.slots[$2 - b.first_pos + 1]
                                          AND m.txid = b.txids[$2 - b.first_pos + 1]
                                          AND m.id = b.ids[$2 - b.first_pos + 1]
                    WHERE b.part BETWEEN $1 AND $1 + 3 AND m.part BETWEEN $1 AND $1 + 3
                      AND b.first_pos <= $2 AND b.last_pos >= $2
                    LIMIT 1
                $q$ INTO s.oldest_pending_age USING p0, st.lwm, g.id, v_now;
            END IF;
            IF s.oldest_pending_age IS NULL AND u.oldest IS NOT NULL THEN
                s.oldest_pending_age := v_now - u.oldest;
            END IF;
            s.live_epochs := v_cur - v_oldest + 1;
            s.holds_reclaim := v_oldest < v_cur AND st.lwm = v_min
                               AND v_now >= v_retired_at + q.retention;
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
    END LOOP;
END
$$;
