-- Group: consumer groups

-- _start_time: check a group's start position (create_group's start_from,
-- seek_group's to_position) and return its time.
--
-- Parameters:
--   p_param  the parameter's name, for the message
--   p_value  'earliest', 'latest' or a timestamp
-- Returns: the timestamp, or NULL for 'earliest' and 'latest'
-- Errors: SL006 invalid_argument (NULL, or neither keyword nor timestamp)
CREATE OR REPLACE FUNCTION sluice._start_time(p_param text, p_value text)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_value IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SL006', MESSAGE = format('%s must not be NULL', p_param),
            HINT = 'Use ''earliest'', ''latest'' or a timestamp.';
    END IF;
    IF p_value IN ('earliest', 'latest') THEN
        RETURN NULL;
    END IF;
    BEGIN
        RETURN p_value::timestamptz;
    EXCEPTION WHEN OTHERS THEN
        RAISE EXCEPTION USING ERRCODE = 'SL006',
            MESSAGE = format('invalid %s %s', p_param, quote_literal(left(p_value, 64))),
            HINT = 'Use ''earliest'', ''latest'' or a timestamp.';
    END;
END
$$;

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
    ts := sluice._start_time('start_from', start_from);
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
    IF q.engine = 2 THEN   -- each lane's first state
        EXECUTE format('SELECT %I.e2_start($1, $2, $3, $4)', sluice._qschema(q.id))
            USING q.id, v_gid, start_from = 'earliest', ts;
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

-- seek_group: move a consumer group to another position, keeping its name,
-- its ttl and its dead letters. From the seek on, the group receives every
-- message from the new position on, as a group created with that start_from
-- would: backward it receives again what it had completed (replay, as far
-- back as the queue still stores messages), forward it never gets what it
-- skips. The group gets a new internal id, and every per-group record of
-- the old position stays with the old id until reclaim removes it. So leases
-- held at the seek are stale (their ack counts 0, nack and extend return
-- false or 0, as for an expired lease) and their messages come again if they
-- are at or after the new position; pending retries of nacked messages, and
-- redriven dead letters the group had not yet received, are forgotten (their
-- messages come again only from a position at or before them). Dead letters
-- recorded before the seek stay the group's: dead_letters, redrive and status
-- show them under its name (their rows are re-pointed to the new id by one
-- UPDATE). A receive, ack, nack or extend that found the group before the
-- seek committed acts on the old position. Waits for the queue's maintenance
-- and for transactions holding the group's row (drop_group, another seek,
-- an uncommitted dead letter of the group), never for receives or for
-- another group.
--
-- Parameters:
--   queue        queue name
--   group_name   group name
--   to_position  as create_group's start_from: 'earliest': the oldest
--                retained message; 'latest': only messages that become
--                visible after this call; a timestamp: messages batched at
--                or after that time
-- Returns: nothing
-- Errors: SL001 invalid_name, SL002 undefined_queue, SL003 undefined_group,
--         SL006 invalid_argument (to_position), SL010 invalid_isolation
--         ('latest' outside READ COMMITTED)
-- Tables: sluice.consumer_group (the group's row replaced), sluice.dead_letter
--         (the group's rows re-pointed)
CREATE OR REPLACE FUNCTION sluice.seek_group(queue text, group_name text, to_position text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q sluice.queue := sluice._use_queue(seek_group.queue);
    ts timestamptz;
    g sluice.consumer_group;
    v_start bigint;
    v_gid int;
BEGIN
    IF q.predecessor IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SL011',
            MESSAGE = format('queue %s is being upgraded to engine 2: seek its groups once the upgrade is done',
                             quote_literal(q.name)),
            HINT = 'sluice.maintain() finishes the upgrade once every group has drained the queue''s older messages.';
    END IF;
    PERFORM sluice._check_name('group', seek_group.group_name);
    ts := sluice._start_time('to_position', seek_group.to_position);
    g := sluice._get_group(q.id, q.name, seek_group.group_name);   -- SL003 before any wait
    -- No reclaim may run between choosing the start and the switch (as in
    -- create_group). The maint lock comes before the group's row: a receive
    -- keeps the maint lock to its commit once its upkeep ran, and may then
    -- make a dead letter, which locks the group's row.
    PERFORM pg_advisory_xact_lock(sluice._lock_ns('maint'), q.id);
    -- The group's row, locked: another seek or a drop waits for this one.
    -- A seek that committed meanwhile replaced the row: the next statement's
    -- snapshot sees its new row (a drop: _get_group raises SL003).
    LOOP
        SELECT * INTO g FROM sluice.consumer_group cg
        WHERE cg.queue_id = q.id AND cg.name = seek_group.group_name
        FOR UPDATE;
        EXIT WHEN FOUND;
        g := sluice._get_group(q.id, q.name, seek_group.group_name);
    END LOOP;
    EXECUTE format('SELECT %I.e_start_pos($1, $2, $3)', sluice._qschema(q.id))
        INTO v_start USING q.id, seek_group.to_position = 'earliest', ts;
    -- The new incarnation takes the name; the old row is renamed out of the
    -- way first (a name no group can have), then removed once nothing
    -- refers to it.
    UPDATE sluice.consumer_group cg SET name = cg.id || ':seek' WHERE cg.id = g.id;
    INSERT INTO sluice.consumer_group (queue_id, name, created_at, start_pos, ttl, used_at)
    VALUES (q.id, g.name, g.created_at, v_start, g.ttl, CASE WHEN g.ttl IS NOT NULL THEN clock_timestamp() END)
    RETURNING id INTO v_gid;
    IF q.engine = 2 THEN   -- each lane's first state
        EXECUTE format('SELECT %I.e2_start($1, $2, $3, $4)', sluice._qschema(q.id))
            USING q.id, v_gid, seek_group.to_position = 'earliest', ts;
    END IF;
    UPDATE sluice.dead_letter d SET group_id = v_gid WHERE d.queue_id = q.id AND d.group_id = g.id;
    DELETE FROM sluice.consumer_group cg WHERE cg.id = g.id;
END
$$;
