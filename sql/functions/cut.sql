-- Group: batch cutting (internal)
--
-- A queue's messages get consecutive positions in commit order by "cutting":
-- the cutter takes a snapshot S and numbers the messages visible in S that
-- were not visible in the previous cut's snapshot S', plus the delayed
-- messages whose time came between the two cuts. Comparing transaction ids
-- with snapshots (as PgQ does with its ticks) means a message is numbered
-- when its transaction commits, whatever order ids were drawn in, and a long
-- transaction that does not send to the queue costs one index probe (its id
-- is in S's in-progress list), not a scan. Cuts are made by consumers when
-- they run out of numbered messages: there is no ticker.

-- _cut: number the next messages of a queue (at most 1000 per call).
-- The caller holds the queue's cut lock.
--
-- Parameters:
--   p_queue_id  queue id
-- Returns: the last numbered position of the queue after the cut
-- Tables: reads sluice.messages, sluice.epoch; inserts one row into sluice.batches
CREATE OR REPLACE FUNCTION sluice._cut(p_queue_id int)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    cap constant int := 1000;
    p0 constant int := p_queue_id * 4;
    last sluice.batches;
    new_round boolean;
    v_prev_snap pg_snapshot;
    v_prev_t timestamptz;
    v_snap pg_snapshot;
    v_t timestamptz;
    v_phase smallint;
    v_res_due timestamptz;
    v_res_txid xid8;
    v_res_id bigint;
    -- phase 1 (delayed messages that came due) and phase 2 (newly committed)
    b_ids bigint[];
    b_txids xid8[];
    b_slots smallint[];
    b_targets int[];
    b_last_due timestamptz;
    a_ids bigint[];
    a_txids xid8[];
    a_slots smallint[];
    a_targets int[];
    n int;
    v_done boolean;
BEGIN
    EXECUTE 'SELECT * FROM sluice.batches WHERE part BETWEEN $1 AND $1 + 3 ORDER BY batch_no DESC LIMIT 1'
        INTO last USING p0;
    new_round := last.done;
    IF new_round THEN
        v_prev_snap := last.snap;
        v_prev_t := last.t;
        v_snap := pg_current_snapshot();
        v_t := greatest(clock_timestamp(), last.t);
        v_phase := 1;
    ELSE
        v_prev_snap := last.prev_snap;
        v_prev_t := last.prev_t;
        v_snap := last.snap;
        v_t := last.t;
        v_phase := last.res_phase;
        v_res_due := last.res_due;
        v_res_txid := last.res_txid;
        v_res_id := last.res_id;
    END IF;

    -- Phase 1: committed before the previous cut, due in (prev_t, t].
    IF v_phase = 1 THEN
        EXECUTE $q$
            SELECT array_agg(id ORDER BY deliver_at, id), array_agg(txid ORDER BY deliver_at, id),
                   array_agg((part - $1)::smallint ORDER BY deliver_at, id),
                   array_agg(target_group ORDER BY deliver_at, id), max(deliver_at)
            FROM (SELECT id, txid, part, target_group, deliver_at
                  FROM sluice.messages
                  WHERE part BETWEEN $1 AND $1 + 3
                    AND deliver_at > $2 AND deliver_at <= $3
                    AND pg_visible_in_snapshot(txid, $4)
                    AND ($5::timestamptz IS NULL OR (deliver_at, id) > ($5, $6))
                  ORDER BY deliver_at, id
                  LIMIT $7) s
        $q$ INTO b_ids, b_txids, b_slots, b_targets, b_last_due
            USING p0, v_prev_t, v_t, v_prev_snap, v_res_due, v_res_id, cap;
        n := coalesce(cardinality(b_ids), 0);
        IF n = cap THEN
            v_done := false;
            v_res_due := b_last_due;
            v_res_id := b_ids[n];
        ELSE
            v_phase := 2;
            v_res_txid := NULL;
            v_res_id := NULL;
        END IF;
    END IF;

    -- Phase 2: committed between the two snapshots and due by t.
    IF v_phase = 2 THEN
        EXECUTE $q$
            SELECT array_agg(id ORDER BY txid, id), array_agg(txid ORDER BY txid, id),
                   array_agg((part - $1)::smallint ORDER BY txid, id),
                   array_agg(target_group ORDER BY txid, id)
            FROM (SELECT id, txid, part, target_group
                  FROM sluice.messages
                  WHERE part BETWEEN $1 AND $1 + 3
                    AND (txid >= pg_snapshot_xmax($2) OR txid = ANY($3))
                    AND pg_visible_in_snapshot(txid, $4)
                    AND (deliver_at IS NULL OR deliver_at <= $5)
                    AND ($6::xid8 IS NULL OR (txid, id) > ($6, $7))
                  ORDER BY txid, id
                  LIMIT $8) s
        $q$ INTO a_ids, a_txids, a_slots, a_targets
            USING p0, v_prev_snap, ARRAY(SELECT pg_snapshot_xip(v_prev_snap)), v_snap, v_t,
                  v_res_txid, v_res_id, cap - coalesce(cardinality(b_ids), 0);
        n := coalesce(cardinality(b_ids), 0) + coalesce(cardinality(a_ids), 0);
        v_done := n < cap;
        IF NOT v_done THEN
            v_res_txid := a_txids[cardinality(a_txids)];
            v_res_id := a_ids[cardinality(a_ids)];
        END IF;
    END IF;

    n := coalesce(cardinality(b_ids), 0) + coalesce(cardinality(a_ids), 0);
    IF n = 0 AND new_round THEN
        RETURN last.last_pos;   -- nothing new: write nothing
    END IF;
    INSERT INTO sluice.batches (part, batch_no, first_pos, last_pos, done, res_phase, res_due, res_txid, res_id,
                                cut_at, prev_t, t, prev_snap, snap, ids, txids, slots, targets)
    VALUES (p0 + sluice._current_epoch(p_queue_id) % 4, last.batch_no + 1, last.last_pos + 1, last.last_pos + n,
            v_done, CASE WHEN NOT v_done THEN v_phase END,
            CASE WHEN NOT v_done AND v_phase = 1 THEN v_res_due END,
            CASE WHEN NOT v_done AND v_phase = 2 THEN v_res_txid END,
            CASE WHEN NOT v_done THEN v_res_id END,
            clock_timestamp(), v_prev_t, v_t, v_prev_snap, v_snap,
            coalesce(b_ids, '{}') || coalesce(a_ids, '{}'),
            coalesce(b_txids, '{}') || coalesce(a_txids, '{}'),
            coalesce(b_slots, '{}') || coalesce(a_slots, '{}'),
            CASE WHEN EXISTS (SELECT 1 FROM unnest(b_targets || a_targets) x WHERE x IS NOT NULL)
                 THEN coalesce(b_targets, array_fill(NULL::int, ARRAY[coalesce(cardinality(b_ids), 0)]))
                      || coalesce(a_targets, '{}') END);
    RETURN last.last_pos + n;
END
$$;

-- _cut_all: cut until every message visible now is numbered.
-- The caller holds the queue's cut lock.
--
-- Parameters:
--   p_queue_id  queue id
-- Returns: the last numbered position
CREATE OR REPLACE FUNCTION sluice._cut_all(p_queue_id int)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    head bigint;
    done boolean;
BEGIN
    LOOP
        head := sluice._cut(p_queue_id);
        EXECUTE 'SELECT done FROM sluice.batches WHERE part BETWEEN $1 AND $1 + 3 ORDER BY batch_no DESC LIMIT 1'
            INTO done USING p_queue_id * 4;
        EXIT WHEN done;
    END LOOP;
    RETURN head;
END
$$;
