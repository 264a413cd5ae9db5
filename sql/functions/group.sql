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
-- Returns: nothing
-- Errors: SL001 invalid_name, SL002 undefined_queue, SL005 duplicate_group,
--         SL006 invalid_argument (start_from)
CREATE OR REPLACE FUNCTION sluice.create_group(queue text, group_name text, start_from text DEFAULT 'earliest')
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q sluice.queue := sluice._get_queue(create_group.queue);
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
    IF EXISTS (SELECT 1 FROM sluice.consumer_group g WHERE g.queue_id = q.id AND g.name = create_group.group_name) THEN
        RAISE EXCEPTION USING ERRCODE = 'SL005',
            MESSAGE = format('group %s of queue %s already exists',
                             quote_literal(create_group.group_name), quote_literal(q.name));
    END IF;
    -- No reclaim may run between choosing the start and the group's existence.
    PERFORM pg_advisory_xact_lock(sluice._lock_ns('maint'), q.id);
    EXECUTE format('SELECT %I.e_start_pos($1, $2, $3)', sluice._qschema(q.id))
        INTO v_start USING q.id, start_from = 'earliest', ts;
    INSERT INTO sluice.consumer_group (queue_id, name, start_pos)
    VALUES (q.id, create_group.group_name, v_start)
    ON CONFLICT (queue_id, name) DO NOTHING
    RETURNING id INTO v_gid;
    IF v_gid IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SL005',
            MESSAGE = format('group %s of queue %s already exists',
                             quote_literal(create_group.group_name), quote_literal(q.name));
    END IF;
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
    q sluice.queue := sluice._get_queue(drop_group.queue);
BEGIN
    PERFORM sluice._check_name('group', drop_group.group_name);
    DELETE FROM sluice.consumer_group g WHERE g.queue_id = q.id AND g.name = drop_group.group_name;
    RETURN FOUND;
END
$$;
