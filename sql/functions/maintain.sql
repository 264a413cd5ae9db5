-- Group: rotation and reclaim
--
-- A queue writes into the slot of its current epoch. Rotation starts a new
-- epoch (in the next slot) once rotate_interval has passed and a slot is
-- free; reclaim TRUNCATEs the oldest retired epoch's slot once its retention
-- has passed and no group needs anything in it. Both run inside receive about
-- once a second while messages are in flight, and in sluice.maintain().

-- _min_lwm: the smallest low-water mark over the groups of a queue (every
-- position below it is completed by every group), or NULL without groups.
CREATE OR REPLACE FUNCTION sluice._min_lwm(p_queue_id int)
RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    g sluice.consumer_group;
    v bigint;
    v_min bigint;
BEGIN
    FOR g IN SELECT * FROM sluice.consumer_group WHERE queue_id = p_queue_id LOOP
        v := (sluice._group_state(p_queue_id * 4, g)).lwm;
        v_min := least(v_min, v);
    END LOOP;
    RETURN v_min;
END
$$;

-- _reclaim: truncate the slot of retired epoch p_epoch if nothing in it is
-- needed any more. The caller holds the queue's maint lock.
--
-- Returns: true if the slot was truncated
CREATE OR REPLACE FUNCTION sluice._reclaim(q sluice.queue, p_epoch bigint, p_current bigint)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p0 constant int := q.id * 4;
    v_part constant int := q.id * 4 + (p_epoch % 4)::int;
    v_cur_part constant int := q.id * 4 + (p_current % 4)::int;
    v_retired_at timestamptz;
    head sluice.batches;
    v_min bigint;
    v_busy boolean;
    v_lock_timeout text;
    t record;
BEGIN
    SELECT e.started_at INTO v_retired_at FROM sluice.epoch e WHERE e.queue_id = q.id AND e.epoch = p_epoch + 1;
    IF clock_timestamp() < v_retired_at + q.retention THEN
        RETURN false;
    END IF;
    EXECUTE 'SELECT * FROM sluice.batches WHERE part BETWEEN $1 AND $1 + 3 ORDER BY batch_no DESC LIMIT 1'
        INTO head USING p0;
    IF NOT head.done OR head.part = v_part THEN
        RETURN false;   -- a round is half cut, or the newest batch lives in this slot
    END IF;
    -- Committed messages in the slot that are not numbered yet (new, or delayed).
    EXECUTE $q$
        SELECT EXISTS (SELECT 1 FROM sluice.messages
                       WHERE part = $1 AND (txid >= pg_snapshot_xmax($2) OR txid = ANY($3)))
            OR EXISTS (SELECT 1 FROM sluice.messages WHERE part = $1 AND deliver_at > $4)
    $q$ INTO v_busy USING v_part, head.snap, ARRAY(SELECT pg_snapshot_xip(head.snap)), head.t;
    IF v_busy THEN
        RETURN false;
    END IF;
    -- Positions some group has not completed, in batches that live in the slot
    -- or that number messages of the slot.
    v_min := coalesce(sluice._min_lwm(q.id), head.last_pos + 1);
    EXECUTE $q$
        SELECT EXISTS (SELECT 1 FROM sluice.batches
                       WHERE part BETWEEN $1 AND $1 + 3 AND last_pos >= $2
                         AND (part = $3 OR ($3 - $1)::smallint = ANY (slots)))
    $q$ INTO v_busy USING p0, v_min, v_part;
    IF v_busy THEN
        RETURN false;
    END IF;

    v_lock_timeout := current_setting('lock_timeout');
    BEGIN
        -- Keep each group's newest cursor and checkpoint if they live in the slot.
        EXECUTE $q$
            INSERT INTO sluice.group_states
            SELECT $2, s.group_id, s.seq, s.cursor, s.lwm, s.next_scan_at, s.lwm_at
            FROM (SELECT DISTINCT ON (group_id) * FROM sluice.group_states
                  WHERE part BETWEEN $1 AND $1 + 3 ORDER BY group_id, seq DESC) s
            WHERE s.part = $3
        $q$ USING p0, v_cur_part, v_part;
        EXECUTE $q$
            INSERT INTO sluice.checkpoints
            SELECT $2, c.group_id, c.seq, c.lwm, c.at
            FROM (SELECT DISTINCT ON (group_id) * FROM sluice.checkpoints
                  WHERE part BETWEEN $1 AND $1 + 3 ORDER BY group_id, seq DESC) c
            WHERE c.part = $3
        $q$ USING p0, v_cur_part, v_part;
        -- Never queue behind a long transaction that touched the slot: give up
        -- and try again at the next maintenance.
        PERFORM set_config('lock_timeout', '50ms', true);
        FOR t IN SELECT * FROM sluice._slot_tables() LOOP
            EXECUTE format('LOCK TABLE sluice.%I IN ACCESS EXCLUSIVE MODE',
                           t.parent || '_' || q.id || '_' || (p_epoch % 4));
        END LOOP;
        PERFORM set_config('lock_timeout', v_lock_timeout, true);
        FOR t IN SELECT * FROM sluice._slot_tables() LOOP
            EXECUTE format('TRUNCATE sluice.%I', t.parent || '_' || q.id || '_' || (p_epoch % 4));
        END LOOP;
    EXCEPTION WHEN lock_not_available THEN
        PERFORM set_config('lock_timeout', v_lock_timeout, true);
        RETURN false;
    END;
    INSERT INTO sluice.reclaim (queue_id, epoch, reclaimed_at) VALUES (q.id, p_epoch, clock_timestamp());
    RETURN true;
END
$$;

-- _maintain_queue: reclaim what can be reclaimed, then rotate if due.
-- The caller holds the queue's maint lock.
--
-- Returns: (rotated, reclaimed) - whether a new epoch started, how many slots were truncated
CREATE OR REPLACE FUNCTION sluice._maintain_queue(p_queue_id int, OUT rotated boolean, OUT reclaimed int)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q sluice.queue;
    cur record;
    oldest bigint;
    v_has_rows boolean;
BEGIN
    rotated := false;
    reclaimed := 0;
    SELECT * INTO q FROM sluice.queue WHERE id = p_queue_id;
    SELECT e.epoch, e.started_at INTO cur FROM sluice.epoch e
    WHERE e.queue_id = p_queue_id ORDER BY e.epoch DESC LIMIT 1;
    oldest := coalesce((SELECT max(r.epoch) FROM sluice.reclaim r WHERE r.queue_id = p_queue_id) + 1, 0);
    WHILE oldest < cur.epoch AND sluice._reclaim(q, oldest, cur.epoch) LOOP
        oldest := oldest + 1;
        reclaimed := reclaimed + 1;
    END LOOP;
    IF clock_timestamp() >= cur.started_at + q.rotate_interval AND cur.epoch - oldest < 3 THEN
        EXECUTE 'SELECT EXISTS (SELECT 1 FROM sluice.messages WHERE part = $1)'
            INTO v_has_rows USING p_queue_id * 4 + (cur.epoch % 4)::int;
        IF v_has_rows THEN
            INSERT INTO sluice.epoch (queue_id, epoch, started_at) VALUES (p_queue_id, cur.epoch + 1, clock_timestamp());
            rotated := true;
        END IF;
    END IF;
END
$$;

-- maintain: scheduled upkeep for every queue (never needed for correctness;
-- receive does the same while messages flow). Run it every few seconds, e.g.
-- from pg_cron or `sluice serve`, so that idle queues rotate and reclaim too.
-- Skips a queue whose maintenance is already running.
--
-- Returns: one row per queue (queue, rotated, reclaimed)
CREATE OR REPLACE FUNCTION sluice.maintain()
RETURNS TABLE (queue text, rotated boolean, reclaimed int)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q sluice.queue;
    r record;
BEGIN
    FOR q IN SELECT * FROM sluice.queue ORDER BY id LOOP
        IF pg_try_advisory_xact_lock(sluice._lock_ns('maint'), q.id) THEN
            r := sluice._maintain_queue(q.id);
            queue := q.name;
            rotated := r.rotated;
            reclaimed := r.reclaimed;
            RETURN NEXT;
        END IF;
    END LOOP;
END
$$;
