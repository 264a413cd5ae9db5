-- Group: sending

-- send: append one message to a queue, in the caller's transaction. The
-- message becomes visible to consumers when that transaction commits; a
-- rolled-back send is never delivered.
--
-- Parameters:
--   queue      queue name
--   body       the message, any JSON value (not NULL)
--   headers    optional JSON object of metadata
--   key        optional ordering key (at most 512 bytes): within a group, messages of one key are
--              delivered in commit order, none while an earlier one of the
--              key is unfinished (leased, or nacked and waiting to be retried);
--              a receive may return a run of one key, in order
--   delay      deliver no earlier than now + delay (NULL or 0: at once); at
--              most the queue's max_delay (365 days unless set)
--   priority   orders unkeyed messages: a receive returns ready messages of
--              higher priority first, equal ones in commit order; below 0,
--              after every other ready message (keyed messages ignore it)
--   dedup_key  optional deduplication key (at most 512 bytes): if a message was sent to the queue
--              with the same key within its dedup_window, nothing is enqueued
--              and that message's id is returned (also under concurrent sends
--              of one key: one is enqueued). Needs READ COMMITTED.
-- Returns: the message id (unique within the queue, increasing in send order)
-- Notifies: channel 'sluice', payload the queue name, at commit (option notify),
--          unless a concurrent send to the queue is already due to notify
-- Errors: SL001 invalid_name, SL002 undefined_queue, SL006 invalid_argument
--         (NULL body, headers not an object, negative delay or one over the
--         queue's max_delay, NULL priority,
--         key or dedup_key over 512 bytes), SL009 payload_too_large (body,
--         headers and key over max_payload, uncompressed), SL010 invalid_isolation (dedup_key outside
--         READ COMMITTED)
-- Tables: inserts one row into sluice.messages
CREATE OR REPLACE FUNCTION sluice.send(queue text, body jsonb, headers jsonb DEFAULT NULL, key text DEFAULT NULL,
                                       delay interval DEFAULT NULL, priority int DEFAULT 0,
                                       dedup_key text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_qid int;
    v_slot smallint;
    v_seq regclass;
    v_max int;
    v_notify boolean;
    v_window interval;
    v_max_delay interval;
    v_size int;
    v_id bigint;
    v_now timestamptz;
BEGIN
    IF current_setting('sluice.caller_synchronous_commit', true) <> '' THEN
        PERFORM sluice._durable_commit();   -- after a receive in this transaction
    END IF;
    -- Shared with every call on the queue, exclusive for drop_queue (see
    -- sluice._use_queue): taken before the lookup, which then sees a drop.
    PERFORM pg_advisory_xact_lock_shared(sluice._lock_ns('queue'), hashtext(send.queue));
    -- The hot path: one lookup for everything send needs, then one INSERT.
    SELECT q.id, (SELECT ne.epoch FROM sluice._epoch_now(q.id) ne) % 4,
           q.id_seq, q.max_payload, q.notify, q.dedup_window, q.max_delay
    INTO v_qid, v_slot, v_seq, v_max, v_notify, v_window, v_max_delay
    FROM sluice.queue q WHERE q.name = send.queue;
    -- (no schema: dropped after the snapshot of a REPEATABLE READ transaction)
    IF v_qid IS NULL OR to_regnamespace(sluice._qschema(v_qid)) IS NULL THEN
        PERFORM sluice._use_queue(send.queue);   -- raises SL001 or SL002
    END IF;
    IF send.body IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SL006', MESSAGE = 'body must not be NULL',
            HINT = 'Send a JSON value; use ''null''::jsonb for a JSON null.';
    END IF;
    IF send.headers IS NOT NULL AND jsonb_typeof(send.headers) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = 'SL006',
            MESSAGE = format('headers must be a JSON object, got %s', jsonb_typeof(send.headers));
    END IF;
    IF send.delay < interval '0' OR send.delay > v_max_delay THEN
        PERFORM sluice._delay_error(send.delay, v_max_delay, send.queue);
    END IF;
    IF send.priority IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SL006', MESSAGE = 'priority must not be NULL';
    END IF;
    IF octet_length(send.key) > 512 OR octet_length(send.dedup_key) > 512 THEN
        RAISE EXCEPTION USING ERRCODE = 'SL006',
            MESSAGE = format('%s must be at most 512 bytes, got %s',
                             CASE WHEN octet_length(send.key) > 512 THEN 'key' ELSE 'dedup_key' END,
                             greatest(octet_length(send.key), octet_length(send.dedup_key)));
    END IF;
    v_size := sluice._payload_size(send.body, send.headers, send.key);
    IF v_size > v_max THEN
        RAISE EXCEPTION USING ERRCODE = 'SL009',
            MESSAGE = format('message of %s bytes exceeds the max_payload of queue %s (%s bytes)',
                             v_size, quote_literal(send.queue), v_max);
    END IF;
    IF send.dedup_key IS NOT NULL THEN
        PERFORM sluice._dedup_lock(v_qid, send.dedup_key);
        EXECUTE format('SELECT %I.e_dedup_lookup($1, $2)', sluice._qschema(v_qid))
            INTO v_id USING send.dedup_key, v_window;
        IF v_id IS NOT NULL THEN
            RETURN v_id;   -- a duplicate: nothing is enqueued
        END IF;
    END IF;
    v_now := clock_timestamp();
    INSERT INTO sluice.messages (queue_id, slot, id, txid, sent_at, deliver_at, priority, key, dedup_key, headers, body)
    VALUES (v_qid, v_slot, nextval(v_seq), pg_current_xact_id(), v_now,
            CASE WHEN send.delay > interval '0' THEN v_now + send.delay END,
            send.priority, send.key, send.dedup_key, send.headers, send.body)
    RETURNING id INTO v_id;
    IF send.dedup_key IS NOT NULL THEN
        EXECUTE format('SELECT %I.e_dedup_record($1, $2, $3)', sluice._qschema(v_qid))
            USING v_slot, send.dedup_key, v_id;
    END IF;
    -- One notifier per queue at a time: a send whose concurrent peer already
    -- holds the gate leaves the wake-up to the peer's commit (see docs/design.md).
    IF v_notify AND pg_try_advisory_xact_lock(sluice._lock_ns('notify'), v_qid) THEN
        PERFORM pg_notify('sluice', send.queue);
    END IF;
    RETURN v_id;
END
$$;

-- send_batch: append many messages in one statement (same rules as send).
--
-- Parameters:
--   queue       queue name
--   bodies      the messages (no NULL element)
--   headers     NULL, or one headers object (or NULL) per body
--   keys        NULL, or one ordering key (or NULL) per body
--   delay       applies to every message
--   priorities  NULL, or one priority per body (no NULL element)
--   dedup_keys  NULL, or one deduplication key (or NULL) per body: as in send,
--               a key already sent within the window enqueues nothing; a key
--               given twice in the batch enqueues its first message
-- Returns: one id per body, in the order of bodies (for a duplicate, the id
--          of the message first sent with its key)
-- Errors: as send, and SL006 when an array differs in length from bodies
-- Tables: inserts into sluice.messages
CREATE OR REPLACE FUNCTION sluice.send_batch(queue text, bodies jsonb[], headers jsonb[] DEFAULT NULL,
                                             keys text[] DEFAULT NULL, delay interval DEFAULT NULL,
                                             priorities int[] DEFAULT NULL, dedup_keys text[] DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q sluice.queue := sluice._use_queue(send_batch.queue);
    n int := cardinality(send_batch.bodies);
    v_now timestamptz := clock_timestamp();
    v_slot smallint;
    v_size int;
    known jsonb := '{}';   -- dedup key -> id of the message sent with it
    before jsonb;          -- known, as it was before this batch
    k text;
    v_id bigint;
    ids bigint[];
    dks text[];
    i int;
    j int := 0;
    r record;
BEGIN
    IF current_setting('sluice.caller_synchronous_commit', true) <> '' THEN
        PERFORM sluice._durable_commit();   -- after a receive in this transaction
    END IF;
    IF send_batch.bodies IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SL006', MESSAGE = 'bodies must not be NULL';
    END IF;
    FOR r IN SELECT * FROM (VALUES ('bodies', array_ndims(send_batch.bodies)), ('headers', array_ndims(send_batch.headers)),
                                   ('keys', array_ndims(send_batch.keys)), ('priorities', array_ndims(send_batch.priorities)),
                                   ('dedup_keys', array_ndims(send_batch.dedup_keys))) AS a(name, dims)
             WHERE a.dims > 1 LOOP
        RAISE EXCEPTION USING ERRCODE = 'SL006',
            MESSAGE = format('%s must be a one-dimensional array, got %s dimensions', r.name, r.dims);
    END LOOP;
    IF array_position(send_batch.bodies, NULL) IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SL006',
            MESSAGE = format('bodies[%s] is NULL', array_position(send_batch.bodies, NULL)),
            HINT = 'Send a JSON value; use ''null''::jsonb for a JSON null.';
    END IF;
    FOR r IN SELECT * FROM (VALUES ('headers', cardinality(send_batch.headers)), ('keys', cardinality(send_batch.keys)),
                                   ('priorities', cardinality(send_batch.priorities)),
                                   ('dedup_keys', cardinality(send_batch.dedup_keys))) AS a(name, len)
             WHERE a.len IS NOT NULL AND a.len <> n LOOP
        RAISE EXCEPTION USING ERRCODE = 'SL006',
            MESSAGE = format('%s has %s elements but bodies has %s', r.name, r.len, n);
    END LOOP;
    IF array_position(send_batch.priorities, NULL) IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SL006',
            MESSAGE = format('priorities[%s] is NULL', array_position(send_batch.priorities, NULL));
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(send_batch.headers) h WHERE h IS NOT NULL AND jsonb_typeof(h) <> 'object') THEN
        RAISE EXCEPTION USING ERRCODE = 'SL006', MESSAGE = 'every headers element must be a JSON object or NULL';
    END IF;
    IF send_batch.delay < interval '0' OR send_batch.delay > q.max_delay THEN
        PERFORM sluice._delay_error(send_batch.delay, q.max_delay, q.name);
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(send_batch.keys) AS x WHERE octet_length(x) > 512)
       OR EXISTS (SELECT 1 FROM unnest(send_batch.dedup_keys) AS x WHERE octet_length(x) > 512) THEN
        RAISE EXCEPTION USING ERRCODE = 'SL006', MESSAGE = 'every key and dedup_key must be at most 512 bytes';
    END IF;
    SELECT max(sluice._payload_size(u.b, u.h, u.k)) INTO v_size
    FROM unnest(send_batch.bodies, send_batch.headers, send_batch.keys) AS u(b, h, k);
    IF v_size > q.max_payload THEN
        RAISE EXCEPTION USING ERRCODE = 'SL009',
            MESSAGE = format('a message of %s bytes exceeds the max_payload of queue %s (%s bytes)',
                             v_size, quote_literal(q.name), q.max_payload);
    END IF;
    -- Deduplication: lock every key (in key order, so that concurrent batches
    -- cannot deadlock), then find those already sent.
    IF send_batch.dedup_keys IS NOT NULL THEN
        FOR k IN SELECT DISTINCT x FROM unnest(send_batch.dedup_keys) x WHERE x IS NOT NULL ORDER BY x LOOP
            PERFORM sluice._dedup_lock(q.id, k);
            EXECUTE format('SELECT %I.e_dedup_lookup($1, $2)', sluice._qschema(q.id)) INTO v_id USING k, q.dedup_window;
            IF v_id IS NOT NULL THEN
                known := known || jsonb_build_object(k, v_id);
            END IF;
        END LOOP;
    END IF;
    before := known;
    v_slot := (SELECT ne.epoch FROM sluice._epoch_now(q.id) ne) % 4;
    -- Insert the new messages: no dedup key, or the first occurrence of a key not sent before.
    WITH ins AS (
        INSERT INTO sluice.messages (queue_id, slot, id, txid, sent_at, deliver_at, priority, key, dedup_key, headers, body)
        SELECT q.id, v_slot, nextval(q.id_seq), pg_current_xact_id(), v_now,
               CASE WHEN send_batch.delay > interval '0' THEN v_now + send_batch.delay END,
               coalesce(u.p, 0), u.k, u.dk, u.h, u.b
        FROM unnest(send_batch.bodies, send_batch.headers, send_batch.keys, send_batch.priorities,
                    send_batch.dedup_keys) WITH ORDINALITY AS u(b, h, k, p, dk, ord)
        WHERE u.dk IS NULL
           OR (NOT known ? u.dk
               AND u.ord = (SELECT min(o) FROM unnest(send_batch.dedup_keys) WITH ORDINALITY AS x(d, o) WHERE x.d = u.dk))
        ORDER BY u.ord
        RETURNING id, dedup_key
    )
    SELECT array_agg(ins.id ORDER BY ins.id), array_agg(ins.dedup_key ORDER BY ins.id) INTO ids, dks FROM ins;
    IF send_batch.dedup_keys IS NOT NULL AND ids IS NOT NULL THEN
        FOR i IN 1..cardinality(ids) LOOP
            IF dks[i] IS NOT NULL THEN
                EXECUTE format('SELECT %I.e_dedup_record($1, $2, $3)', sluice._qschema(q.id)) USING v_slot, dks[i], ids[i];
                known := known || jsonb_build_object(dks[i], ids[i]);
            END IF;
        END LOOP;
    END IF;
    IF q.notify AND ids IS NOT NULL AND pg_try_advisory_xact_lock(sluice._lock_ns('notify'), q.id) THEN
        PERFORM pg_notify('sluice', q.name);
    END IF;
    -- One id per body, in order. Body i was inserted when it has no dedup key,
    -- or its key was not sent before and i is the key's first place; ids are
    -- drawn in insertion order, which is body order.
    FOR i IN 1..n LOOP
        k := send_batch.dedup_keys[i];
        IF k IS NULL OR (NOT before ? k AND array_position(send_batch.dedup_keys, k) = i) THEN
            j := j + 1;
            RETURN NEXT ids[j];
        ELSE
            RETURN NEXT (known->>k)::bigint;   -- a duplicate
        END IF;
    END LOOP;
END
$$;
