-- Group: consumer groups

-- create_group: add a consumer group to a queue. Every group receives every
-- message of the queue from its start on; consumers of one group compete.
--
-- Parameters:
--   queue       queue name
--   group_name  group name (same rules as queue names)
--   start_from  'earliest': the oldest retained message;
--               'latest': only messages that become visible after this call;
--               a timestamp such as '2026-11-21 10:00+00': messages batched
--               at or after that time (replay within the retention period)
--   ttl         NULL (the default): the group lasts until drop_group;
--               an interval from 1 second to 365 days: a temporary group,
--               dropped by maintenance (sluice.maintain, or a receive's
--               upkeep) once no receive has used it for that long, so that
--               a watcher that dies without dropping it does not hold back
--               the queue's reclaim for ever
-- Returns: nothing
-- Errors: SL001 invalid_name, SL002 undefined_queue, SL005 duplicate_group,
--         SL006 invalid_argument (start_from, ttl)
CREATE OR REPLACE FUNCTION sluice.create_group(queue text, group_name text, start_from text DEFAULT 'earliest',
                                               ttl interval DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q sluice.queue := sluice._use_queue(create_group.queue);
    ts timestamptz;
    v_start bigint;
    v_gid int;
BEGIN
    PERFORM sluice._check_name('group', create_group.group_name);
    IF start_from IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SL006', MESSAGE = 'start_from must not be NULL',
            HINT = 'Use ''earliest'', ''latest'' or a timestamp.';
    END IF;
    IF start_from NOT IN ('earliest', 'latest') THEN
        BEGIN
            ts := start_from::timestamptz;
        EXCEPTION WHEN OTHERS THEN
            RAISE EXCEPTION USING ERRCODE = 'SL006',
                MESSAGE = format('invalid start_from %s', quote_literal(left(start_from, 64))),
                HINT = 'Use ''earliest'', ''latest'' or a timestamp.';
        END;
    END IF;
    IF create_group.ttl < interval '1 second' OR create_group.ttl > interval '365 days' THEN
        RAISE EXCEPTION USING ERRCODE = 'SL006',
            MESSAGE = format('ttl must be from 1 second to 365 days, got %s', create_group.ttl),
            HINT = 'Leave it NULL for a group that lasts until drop_group.';
    END IF;
    IF EXISTS (SELECT 1 FROM sluice.consumer_group g WHERE g.queue_id = q.id AND g.name = create_group.group_name) THEN
        RAISE EXCEPTION USING ERRCODE = 'SL005',
            MESSAGE = format('group %s of queue %s already exists',
                             quote_literal(create_group.group_name), quote_literal(q.name));
    END IF;
    -- No reclaim may run between choosing the start and the group's existence.
    PERFORM pg_advisory_xact_lock(sluice._lock_ns('maint'), q.id);
    EXECUTE format('SELECT %I.e_start_pos($1, $2, $3)', sluice._qschema(q.id))
        INTO v_start USING q.id, start_from = 'earliest', ts;
    INSERT INTO sluice.consumer_group (queue_id, name, start_pos, ttl, used_at)
    VALUES (q.id, create_group.group_name, v_start, create_group.ttl,
            CASE WHEN create_group.ttl IS NOT NULL THEN clock_timestamp() END)
    ON CONFLICT (queue_id, name) DO NOTHING
    RETURNING id INTO v_gid;
    IF v_gid IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SL005',
            MESSAGE = format('group %s of queue %s already exists',
                             quote_literal(create_group.group_name), quote_literal(q.name));
    END IF;
END
$$;

-- _touch_group: record that a group with a ttl was used now (receive calls
-- it when the last record is older than a tenth of the ttl). It never waits:
-- if another transaction holds the group's row (a concurrent receive
-- touching it, a drop), it leaves the record to that one.
--
-- Parameters:
--   p_group_id  group id
CREATE OR REPLACE FUNCTION sluice._touch_group(p_group_id int)
RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    UPDATE sluice.consumer_group cg SET used_at = clock_timestamp()
    WHERE cg.id = (SELECT c.id FROM sluice.consumer_group c WHERE c.id = p_group_id
                   FOR NO KEY UPDATE SKIP LOCKED)
$$;

-- _expire_groups: drop the groups of a queue that have a ttl and were not
-- used for that long (see create_group), as drop_group does. Groups whose
-- row another transaction holds are left for the next time.
--
-- Parameters:
--   p_queue_id  queue id
-- Returns: the number of groups dropped
CREATE OR REPLACE FUNCTION sluice._expire_groups(p_queue_id int)
RETURNS int
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n int;
BEGIN
    DELETE FROM sluice.consumer_group cg
    WHERE cg.id IN (SELECT c.id FROM sluice.consumer_group c
                    WHERE c.queue_id = p_queue_id AND c.ttl IS NOT NULL AND c.used_at + c.ttl < clock_timestamp()
                    FOR UPDATE SKIP LOCKED);
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

-- drop_group: remove a consumer group and its dead letters. The space the
-- group held back (messages it had not completed) is reclaimed by the next
-- rotations.
--
-- Parameters:
--   queue       queue name
--   group_name  group name
-- Returns: true if the group existed, false if there was no such group
-- Errors: SL001 invalid_name, SL002 undefined_queue
CREATE OR REPLACE FUNCTION sluice.drop_group(queue text, group_name text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q sluice.queue := sluice._use_queue(drop_group.queue);
BEGIN
    PERFORM sluice._check_name('group', drop_group.group_name);
    DELETE FROM sluice.consumer_group g WHERE g.queue_id = q.id AND g.name = drop_group.group_name;
    RETURN FOUND;
END
$$;
