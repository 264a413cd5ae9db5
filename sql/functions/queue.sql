-- Group: queue administration

-- _options: validate create_queue options and fill in defaults.
--
-- Parameters:
--   p_options  jsonb object given to create_queue (NULL means {})
-- Returns: the normalized options object (every key present)
-- Errors: SL007 invalid_option
CREATE OR REPLACE FUNCTION sluice._options(p_options jsonb)
RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    defaults constant jsonb := jsonb_build_object(
        'max_attempts', 5,
        'lease', '30 seconds',
        'backoff_base', '1 second',
        'backoff_max', '1 hour',
        'retention', '1 hour',
        'rotate_interval', '1 minute',
        'max_payload', 1048576,
        'notify', true,
        'dedup_window', '1 hour',
        'max_delay', '365 days',
        'lanes', 8,
        'slots', 2,
        'engine', 2,
        'default_group', true);
    o jsonb := coalesce(p_options, '{}');
    k text;
    v jsonb;
    iv interval;
    lo bigint;
    hi bigint;
BEGIN
    IF jsonb_typeof(o) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = 'SL007',
            MESSAGE = format('options must be a JSON object, got %s', jsonb_typeof(o));
    END IF;
    FOR k, v IN SELECT * FROM jsonb_each(o) LOOP
        IF NOT defaults ? k THEN
            RAISE EXCEPTION USING ERRCODE = 'SL007',
                MESSAGE = format('unknown option %s', quote_literal(k)),
                HINT = 'Known options: ' || (SELECT string_agg(x, ', ' ORDER BY x) FROM jsonb_object_keys(defaults) x) || '.';
        END IF;
        CASE k
        WHEN 'max_attempts', 'max_payload', 'lanes', 'slots', 'engine' THEN
            lo := CASE k WHEN 'slots' THEN 2 ELSE 1 END;
            hi := CASE k WHEN 'max_attempts' THEN 1000 WHEN 'lanes' THEN 256 WHEN 'slots' THEN 4 WHEN 'engine' THEN 2
                         ELSE 104857600 END;
            IF jsonb_typeof(v) <> 'number' OR v::text !~ '^[0-9]+$' OR v::numeric < lo OR v::numeric > hi THEN
                RAISE EXCEPTION USING ERRCODE = 'SL007',
                    MESSAGE = format('option %s must be an integer from %s to %s, got %s', k, lo, hi, v);
            END IF;
        WHEN 'default_group', 'notify' THEN
            IF jsonb_typeof(v) <> 'boolean' THEN
                RAISE EXCEPTION USING ERRCODE = 'SL007',
                    MESSAGE = format('option %s must be true or false, got %s', k, v);
            END IF;
        ELSE
            -- intervals, given as strings such as '30 seconds'
            BEGIN
                IF jsonb_typeof(v) <> 'string' THEN
                    RAISE EXCEPTION 'not a string';
                END IF;
                iv := (v #>> '{}')::interval;
            EXCEPTION WHEN OTHERS THEN
                RAISE EXCEPTION USING ERRCODE = 'SL007',
                    MESSAGE = format('option %s must be an interval string such as "30 seconds", got %s', k, v);
            END;
            IF iv < interval '0' OR (iv = interval '0' AND k IN ('lease', 'rotate_interval'))
               OR iv > interval '365 days' THEN
                RAISE EXCEPTION USING ERRCODE = 'SL007',
                    MESSAGE = format('option %s out of range: %s', k, v),
                    HINT = CASE WHEN k IN ('lease', 'rotate_interval') THEN 'It must be positive and at most 365 days.'
                                ELSE 'It must be zero or positive and at most 365 days.' END;
            END IF;
            IF k = 'lease' AND iv > interval '7 days' THEN
                RAISE EXCEPTION USING ERRCODE = 'SL007',
                    MESSAGE = format('option lease must be at most 7 days, got %s', v);
            END IF;
        END CASE;
    END LOOP;
    IF (defaults || o)->>'backoff_base' IS NOT NULL
       AND ((defaults || o)->>'backoff_base')::interval > ((defaults || o)->>'backoff_max')::interval THEN
        RAISE EXCEPTION USING ERRCODE = 'SL007',
            MESSAGE = 'option backoff_base must not exceed backoff_max';
    END IF;
    RETURN defaults || o;
END
$$;

-- _queue_id_free: the next queue id whose schema names (sluice_q<id> and
-- sluice_dropped_q<id>) nobody holds. A role with CREATE on the database
-- may create a schema of either name ahead of sluice (squatting): taking
-- that id made create_queue fail ("schema already exists"), each squatted
-- id once. Such ids are skipped (the identity's values are drawn, as the
-- INSERT would).
--
-- Parameters: none
-- Returns: a queue id for sluice.queue (inserted with OVERRIDING SYSTEM VALUE)
-- Errors: none
-- Calls: nextval of sluice.queue's identity sequence
CREATE OR REPLACE FUNCTION sluice._queue_id_free()
RETURNS int
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_id int;
BEGIN
    LOOP
        v_id := nextval(pg_get_serial_sequence('sluice.queue', 'id'));
        EXIT WHEN to_regnamespace(sluice._qschema(v_id)) IS NULL
              AND to_regnamespace('sluice_dropped_q' || v_id) IS NULL;
    END LOOP;
    RETURN v_id;
END
$$;

-- create_queue: create a queue.
--
-- Parameters:
--   queue    name: 1-64 ASCII letters, digits, "_", "." or "-"
--   options  jsonb object, every key optional:
--              max_attempts     deliveries before a message is dead-lettered (5)
--              lease            default lease of receive ("30 seconds")
--              backoff_base     first nack retry delay, doubled per attempt ("1 second")
--              backoff_max      cap of the retry delay ("1 hour")
--              retention        how long completed messages stay readable ("1 hour")
--              rotate_interval  how often a new storage epoch starts ("1 minute")
--              max_payload      largest body + headers in bytes (1048576)
--              dedup_window     how long a dedup_key of send is remembered ("1 hour")
--              max_delay        longest delay of send and send_batch, and of an
--                               explicit nack delay ("365 days", at most 365 days)
--              lanes            dispatch lanes, 1 to 256 (8): consumers of a group take
--                               lanes side by side; order is kept per key and per lane,
--                               and 1 keeps strict commit order for the whole queue.
--                               Fixed at creation.
--              slots            storage slots, 2 to 4 (2): how many epochs the queue keeps
--                               apart for reclaim. Fewer cost less on every call (each
--                               table is split into slots, and a statement sets up every
--                               one); more keep less retained traffic on disk when
--                               retention is long (up to about retention x slots /
--                               (slots - 1)). Fixed at creation.
--              engine           storage engine, 1 or 2 (2). 2 is engine v2 (docs/design.md,
--                               "Engine v2"): each call a few statements over
--                               tables that are not partitioned where the hot path
--                               reads them, with engine 1's calls and semantics.
--                               1 is the first engine (queues made before 2 was the default).
--                               Fixed at creation.
--              notify           NOTIFY channel 'sluice' (payload: the queue name)
--                               when a send commits, to wake waiting consumers (true)
--              default_group    create the group 'default' (true)
-- Returns: nothing
-- Errors: SL001 invalid_name, SL004 duplicate_queue, SL007 invalid_option
-- Tables: creates schema sluice_q<id> (engine 2: 9 tables x slots partitions, see
--         sluice._create_storage_v2; engine 1: sluice._create_storage) and a sequence.
CREATE OR REPLACE FUNCTION sluice.create_queue(queue text, options jsonb DEFAULT '{}')
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    o jsonb;
    qid int;
    seq text;
BEGIN
    PERFORM sluice._check_name('queue', create_queue.queue);
    o := sluice._options(create_queue.options);
    IF EXISTS (SELECT 1 FROM sluice.queue q WHERE q.name = create_queue.queue) THEN
        RAISE EXCEPTION USING ERRCODE = 'SL004',
            MESSAGE = format('queue %s already exists', quote_literal(create_queue.queue));
    END IF;
    INSERT INTO sluice.queue AS q (id, name, max_attempts, lease, backoff_base, backoff_max, retention,
                                   rotate_interval, max_payload, notify, dedup_window, id_seq, options, lanes,
                                   max_delay, slots, engine)
    OVERRIDING SYSTEM VALUE
    VALUES (sluice._queue_id_free(), create_queue.queue, (o->>'max_attempts')::int, (o->>'lease')::interval,
            (o->>'backoff_base')::interval, (o->>'backoff_max')::interval, (o->>'retention')::interval,
            (o->>'rotate_interval')::interval, (o->>'max_payload')::int, (o->>'notify')::boolean,
            (o->>'dedup_window')::interval, 'sluice.queue'::regclass, o, (o->>'lanes')::int,
            (o->>'max_delay')::interval, (o->>'slots')::smallint, (o->>'engine')::smallint)
    ON CONFLICT (name) DO NOTHING
    RETURNING q.id INTO qid;
    IF qid IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SL004',
            MESSAGE = format('queue %s already exists', quote_literal(create_queue.queue));
    END IF;
    seq := format('sluice.%I', 'message_id_' || qid);
    EXECUTE format('CREATE SEQUENCE %s AS bigint', seq);
    UPDATE sluice.queue SET id_seq = seq::regclass WHERE id = qid;
    IF (o->>'engine')::int = 2 THEN
        PERFORM sluice._create_storage_v2(qid);
    ELSE
        PERFORM sluice._create_storage(qid);
    END IF;
    PERFORM sluice._drop_leftovers();
    INSERT INTO sluice.epoch (queue_id, epoch, slot, started_at) VALUES (qid, 0, 0, clock_timestamp());
    IF (o->>'engine')::int <> 2 THEN
        EXECUTE format('SELECT %I.e_base()', sluice._qschema(qid));
    END IF;
    IF (o->>'default_group')::boolean THEN
        PERFORM sluice.create_group(create_queue.queue, 'default', 'earliest');
    END IF;
END
$$;

-- drop_queue: drop a queue, its groups, messages and dead letters.
--
-- Waits for the transactions that are using the queue (a send, receive,
-- ack... of the queue takes its lock in shared mode until it ends, see
-- sluice._use_queue); calls on the queue that come meanwhile wait for the
-- drop, then fail with SL002. Once a transaction has held the queue for a
-- second, it waits in short tries between which those calls go on
-- (sluice._lock_queue_exclusive): a transaction left open with the queue
-- does not hold every call on it up behind the drop. It waits as long as
-- such a transaction stays open, or lock_timeout when set, then raises
-- 55P03. Having the queue to itself first, the drop cannot deadlock with
-- its clients (unless the caller's transaction holds a lock one of them
-- waits for: 40P01). Other queues are not held up: the
-- queue's messages table is detached from the shared sluice.messages only
-- if that can be done at once; otherwise it is emptied now and dropped later
-- (by maintain, create_queue or drop_queue).
--
-- It raises no NOTICE (client_min_messages is warning while it runs): the
-- DROP SCHEMA ... CASCADE of the queue's storage would list each of its ~90
-- objects, none of them the caller's.
--
-- Parameters:
--   queue  name
-- Returns: true if the queue existed, false if there was no such queue
-- Errors: SL001 invalid_name, 55P03 lock_not_available (the queue stayed in
--   use for lock_timeout; nothing changed), 40P01 deadlock_detected
-- Calls: _lock_queue_exclusive, _drop_storage, _drop_leftovers
CREATE OR REPLACE FUNCTION sluice.drop_queue(queue text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET client_min_messages = warning
AS $$
DECLARE
    q sluice.queue;
    v_seq regclass;
BEGIN
    PERFORM sluice._check_name('queue', drop_queue.queue);
    PERFORM sluice._lock_queue_exclusive(drop_queue.queue, 'drop_queue');
    SELECT * INTO q FROM sluice.queue WHERE name = drop_queue.queue FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pg_advisory_xact_lock(sluice._lock_ns('maint'), q.id);
    PERFORM pg_advisory_xact_lock(sluice._lock_ns('cut'), q.id);
    DELETE FROM sluice.queue WHERE id = q.id;
    EXECUTE format('DROP SEQUENCE %s', q.id_seq);
    PERFORM sluice._drop_storage(q.id);
    IF q.predecessor IS NOT NULL THEN   -- (an upgrade in progress: the old queue too)
        DELETE FROM sluice.queue x WHERE x.id = q.predecessor RETURNING x.id_seq INTO v_seq;
        EXECUTE format('DROP SEQUENCE %s', v_seq);
        PERFORM sluice._drop_storage(q.predecessor);
    END IF;
    PERFORM sluice._drop_leftovers();
    RETURN true;
END
$$;

-- alter_queue: change options of an existing queue; options not given keep
-- their value. Takes effect for the calls that start after the commit (a
-- lease already given keeps its expiry; max_attempts applies to the next
-- failure).
--
-- Parameters:
--   queue    queue name
--   options  jsonb object with any of the create_queue options except
--            default_group
-- Returns: the queue's options after the change, defaults filled in
-- Errors: SL001 invalid_name, SL002 undefined_queue, SL007 invalid_option
CREATE OR REPLACE FUNCTION sluice.alter_queue(queue text, options jsonb)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q sluice.queue := sluice._use_queue(alter_queue.queue);
    o jsonb;
BEGIN
    IF alter_queue.options IS NULL OR jsonb_typeof(alter_queue.options) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = 'SL007',
            MESSAGE = format('options must be a JSON object, got %s',
                             coalesce(jsonb_typeof(alter_queue.options), 'NULL'));
    END IF;
    IF alter_queue.options ? 'default_group' THEN
        RAISE EXCEPTION USING ERRCODE = 'SL007',
            MESSAGE = 'option default_group applies to create_queue only',
            HINT = 'Use sluice.create_group() or sluice.drop_group().';
    END IF;
    o := sluice._options(q.options || alter_queue.options);
    IF (o->>'lanes')::int <> q.lanes THEN
        RAISE EXCEPTION USING ERRCODE = 'SL007',
            MESSAGE = format('option lanes is fixed when the queue is created (%s), got %s', q.lanes, o->'lanes'),
            HINT = 'Create a new queue with the number of lanes you want.';
    END IF;
    IF (o->>'engine')::int <> q.engine THEN
        RAISE EXCEPTION USING ERRCODE = 'SL007',
            MESSAGE = format('option engine is fixed when the queue is created (%s), got %s', q.engine, o->'engine'),
            HINT = 'Create a new queue with the engine you want.';
    END IF;
    IF (o->>'slots')::int <> q.slots THEN
        RAISE EXCEPTION USING ERRCODE = 'SL007',
            MESSAGE = format('option slots is fixed when the queue is created (%s), got %s', q.slots, o->'slots'),
            HINT = 'Create a new queue with the number of slots you want.';
    END IF;
    UPDATE sluice.queue
    SET max_attempts = (o->>'max_attempts')::int, lease = (o->>'lease')::interval,
        backoff_base = (o->>'backoff_base')::interval, backoff_max = (o->>'backoff_max')::interval,
        retention = (o->>'retention')::interval, rotate_interval = (o->>'rotate_interval')::interval,
        max_payload = (o->>'max_payload')::int, notify = (o->>'notify')::boolean,
        dedup_window = (o->>'dedup_window')::interval, max_delay = (o->>'max_delay')::interval, options = o
    WHERE id = q.id;
    RETURN o;
END
$$;

-- list_queues: the queues, their options and groups.
--
-- Returns: one sluice.queue_info row per queue, by name:
--   queue       the queue name
--   created_at  when it was created
--   options     its options, defaults filled in
--   groups      its consumer groups, by name
-- Errors: none
CREATE OR REPLACE FUNCTION sluice.list_queues()
RETURNS SETOF sluice.queue_info
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT q.name, q.created_at, q.options,
           coalesce((SELECT array_agg(g.name ORDER BY g.name) FROM sluice.consumer_group g
                     WHERE g.queue_id = q.id), '{}')
    FROM sluice.queue q
    WHERE NOT EXISTS (SELECT 1 FROM sluice.queue s WHERE s.predecessor = q.id)   -- (an upgrade's predecessor)
    ORDER BY q.name
$$;

-- purge_queue: remove every message of a queue, pending or not, at once.
-- Groups keep existing and continue with the messages sent afterwards.
-- Dead letters are not messages of the queue: they stay (status's dead)
-- until discarded (discard_dead_letters) or redriven.
-- Like drop_queue, it takes the queue's lock exclusively first: it waits for
-- the transactions that are using the queue (in short tries between which
-- the queue's calls go on, once one has held it for a second; for
-- lock_timeout at most when set: sluice._lock_queue_exclusive), and calls
-- on the queue made while it has the lock wait for it (without it, purge and the clients locked the
-- queue's tables in different orders and deadlocked).
--
-- Parameters:
--   queue  name
-- Returns: the number of messages removed (during an upgrade, the old
--   queue's too: sluice.upgrade_queue)
-- Errors: SL001 invalid_name, SL002 undefined_queue, 55P03
--   lock_not_available (the queue stayed in use for lock_timeout; nothing
--   changed), 40P01 deadlock_detected
-- Calls: _lock_queue_exclusive, e_purge (the queue's copy, and its
--   predecessor's during an upgrade)
CREATE OR REPLACE FUNCTION sluice.purge_queue(queue text)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q sluice.queue;
    n bigint;
BEGIN
    PERFORM sluice._check_name('queue', purge_queue.queue);
    PERFORM sluice._lock_queue_exclusive(purge_queue.queue, 'purge_queue');
    q := sluice._use_queue(purge_queue.queue);
    EXECUTE format('SELECT %I.e_purge($1)', sluice._qschema(q.id)) INTO n USING q;
    IF q.predecessor IS NOT NULL THEN
        -- an upgrade in progress: what the old queue still stores too (the
        -- upkeep then drops it, every group having drained it)
        SELECT * INTO STRICT q FROM sluice.queue x WHERE x.id = q.predecessor;
        EXECUTE format('SELECT $2 + %I.e_purge($1)', sluice._qschema(q.id)) INTO n USING q, n;
    END IF;
    RETURN n;
END
$$;
