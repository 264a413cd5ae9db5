-- Group: sending

-- _json_too_deep_error: raise SL012 for a message's JSON nested deeper than
-- the limit (see _json_too_deep).
--
-- Parameters:
--   what  the argument, as the message names it ('body', 'bodies[3]', ...)
-- Returns: never
-- Errors: SL012 json_too_deep, always
-- Calls: nothing
CREATE OR REPLACE FUNCTION sluice._json_too_deep_error(what text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'SL012',
        MESSAGE = format('%s is nested deeper than 512 levels', _json_too_deep_error.what),
        HINT = 'JSON nested deeper than 512 levels (arrays and objects) cannot be read back by every client.';
END
$$;

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
--         READ COMMITTED), SL012 json_too_deep (body or headers nested deeper than 512 levels)
-- Tables: inserts one row into sluice.messages (engine 2: into the queue's msg,
--         and its dedup table for a dedup_key)
CREATE OR REPLACE FUNCTION sluice.send(queue text, body jsonb, headers jsonb DEFAULT NULL, key text DEFAULT NULL,
                                       delay interval DEFAULT NULL, priority int DEFAULT 0,
                                       dedup_key text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_qid int;
    v_seq regclass;
    v_max int;
    v_notify boolean;
    v_window interval;
    v_max_delay interval;
    v_size int;
    v_id bigint;
    v_now timestamptz;
    v_engine smallint;
    v_prioritized boolean;
    -- (calls on the hot path are made in expressions, v_done := f(...),
    -- whose value is not read: PL/pgSQL evaluates an expression in place,
    -- where a PERFORM is a statement with an executor started for it)
    v_done boolean;
BEGIN
    IF current_setting('sluice.caller_synchronous_commit', true) <> '' THEN
        PERFORM sluice._durable_commit();   -- after a receive in this transaction
    END IF;
    -- Shared with every call on the queue, exclusive for drop_queue (see
    -- sluice._use_queue): taken before the lookup, which then sees a drop.
    v_done := pg_advisory_xact_lock_shared(sluice._lock_ns('queue'), hashtext(send.queue)) IS NULL;
    -- The hot path: one lookup for everything send needs, then one INSERT.
    -- (The slot: engine 2's INSERT reads it, e2_send; engine 1's below.)
    SELECT q.id, q.id_seq, q.max_payload, q.notify, q.dedup_window, q.max_delay, q.engine, q.prioritized
    INTO v_qid, v_seq, v_max, v_notify, v_window, v_max_delay, v_engine, v_prioritized
    FROM sluice.queue q WHERE q.name = send.queue;
    -- (no schema: dropped after the snapshot of a REPEATABLE READ transaction)
    IF v_qid IS NULL OR to_regnamespace(sluice._qschema(v_qid)) IS NULL THEN
        PERFORM sluice._use_queue(send.queue);   -- raises SL001 or SL002
    END IF;
    v_size := sluice._payload_size(send.body, send.headers, send.key);
    -- The argument checks (_send_check, in its order) only when one of
    -- these says one may fail: one expression, where the checks one after
    -- the other cost a send ~10k instructions more. (A message of more
    -- than 4,096 bytes is checked for depth there.)
    IF send.body IS NULL OR send.priority IS NULL OR v_size > least(v_max, 4096)
       OR jsonb_typeof(send.headers) <> 'object' OR send.delay < interval '0' OR send.delay > v_max_delay
       OR octet_length(send.key) > 512 OR octet_length(send.dedup_key) > 512 THEN
        PERFORM sluice._send_check(send.queue, send.body, send.headers, send.key, send.delay, send.priority,
                                   send.dedup_key, v_max, v_max_delay);
    END IF;
    IF v_engine = 2 THEN
        v_done := set_config('search_path', sluice._queue_path(v_qid), true) IS NULL;
        IF send.dedup_key IS NOT NULL THEN
            -- (v2_dedup.sql: the key's lock, then the lookup; recorded below)
            SELECT x.msg_id INTO v_id FROM e2_dedup_lookup(v_qid, ARRAY[send.dedup_key], v_window) x;
            IF v_id IS NOT NULL THEN
                RETURN v_id;   -- a duplicate: nothing is enqueued
            END IF;
        END IF;
        IF sluice._prioritized(send.priority, send.key) AND NOT v_prioritized THEN
            PERFORM sluice._mark_prioritized(v_qid);   -- (receives look at the priority lane)
        END IF;
        v_now := clock_timestamp();
        v_id := e2_send(v_qid, nextval(v_seq), CASE WHEN send.delay > interval '0' THEN v_now + send.delay END,
                        v_now, send.headers, send.body, send.key, send.priority);
        IF send.dedup_key IS NOT NULL THEN
            PERFORM e2_dedup_record(v_qid, ARRAY[send.dedup_key], ARRAY[v_id]);
        END IF;
        IF v_notify AND pg_try_advisory_xact_lock(sluice._lock_ns('notify'), v_qid) THEN
            v_done := pg_notify('sluice', send.queue) IS NULL;
        END IF;
        RETURN v_id;
    END IF;
    RETURN sluice._send_e1(v_qid, v_seq, v_window, v_notify, send.queue, send.body, send.headers, send.key,
                           send.delay, send.priority, send.dedup_key);
END
$$;

-- _send_e1: the rest of send for a queue of engine 1 (its lookup and the
-- argument checks done): the dedup key's lock and lookup, the row in
-- sluice.messages in the current slot, the key recorded, the notification.
--
-- Parameters:
--   p_qid, p_seq, p_window, p_notify  the queue's id, id sequence,
--                                     dedup_window and notify option
--   p_queue, p_body, p_headers, p_key, p_delay, p_priority, p_dedup_key
--                                     as send's arguments
-- Returns: the message id (a duplicate's: the first message's)
-- Calls: _slot_now, _dedup_lock_all, the queue's e_dedup_lookup_all and e_dedup_record_all
CREATE OR REPLACE FUNCTION sluice._send_e1(p_qid int, p_seq regclass, p_window interval, p_notify boolean,
                                           p_queue text, p_body jsonb, p_headers jsonb, p_key text,
                                           p_delay interval, p_priority int, p_dedup_key text)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_slot constant smallint := (SELECT ns.slot FROM sluice._slot_now(p_qid) ns);
    v_id bigint;
    v_now timestamptz;
BEGIN
    IF p_dedup_key IS NOT NULL THEN
        PERFORM sluice._dedup_lock_all(p_qid, ARRAY[p_dedup_key]);
        EXECUTE format('SELECT x.msg_id FROM %I.e_dedup_lookup_all($1, $2) x', sluice._qschema(p_qid))
            INTO v_id USING ARRAY[p_dedup_key], p_window;
        IF v_id IS NOT NULL THEN
            RETURN v_id;   -- a duplicate: nothing is enqueued
        END IF;
    END IF;
    v_now := clock_timestamp();
    INSERT INTO sluice.messages (queue_id, slot, id, txid, sent_at, deliver_at, priority, key, dedup_key, headers, body)
    VALUES (p_qid, v_slot, nextval(p_seq), pg_current_xact_id(), v_now,
            CASE WHEN p_delay > interval '0' THEN v_now + p_delay END,
            p_priority, p_key, p_dedup_key, p_headers, p_body)
    RETURNING id INTO v_id;
    IF p_dedup_key IS NOT NULL THEN
        EXECUTE format('SELECT %I.e_dedup_record_all($1, $2, $3)', sluice._qschema(p_qid))
            USING v_slot, ARRAY[p_dedup_key], ARRAY[v_id];
    END IF;
    -- One notifier per queue at a time: a send whose concurrent peer already
    -- holds the gate leaves the wake-up to the peer's commit (see docs/design.md).
    IF p_notify AND pg_try_advisory_xact_lock(sluice._lock_ns('notify'), p_qid) THEN
        PERFORM pg_notify('sluice', p_queue);
    END IF;
    RETURN v_id;
END
$$;

-- _send_check: send's argument checks, one after the other in this order,
-- raising the first that fails. send tells a valid message with one
-- expression and calls this only when it says a check may fail, so that
-- every error is the one (code, text) it was when send ran these checks
-- itself; it is also called for a valid message of more than 4,096 bytes
-- (the depth check), and then returns.
--
-- Parameters:
--   queue ... dedup_key  send's arguments
--   p_max_payload, p_max_delay  the queue's max_payload and max_delay
-- Returns: nothing, when every check passes
-- Errors: as send (SL006, SL009, SL012)
CREATE OR REPLACE FUNCTION sluice._send_check(queue text, body jsonb, headers jsonb, key text, delay interval,
                                              priority int, dedup_key text, p_max_payload int,
                                              p_max_delay interval)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_size constant int := sluice._payload_size(_send_check.body, _send_check.headers, _send_check.key);
BEGIN
    IF _send_check.body IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SL006', MESSAGE = 'body must not be NULL',
            HINT = 'Send a JSON value; use ''null''::jsonb for a JSON null.';
    END IF;
    IF _send_check.headers IS NOT NULL AND jsonb_typeof(_send_check.headers) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = 'SL006',
            MESSAGE = format('headers must be a JSON object, got %s', jsonb_typeof(_send_check.headers));
    END IF;
    IF _send_check.delay < interval '0' OR _send_check.delay > p_max_delay THEN
        PERFORM sluice._delay_error(_send_check.delay, p_max_delay, _send_check.queue);
    END IF;
    IF _send_check.priority IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SL006', MESSAGE = 'priority must not be NULL';
    END IF;
    IF octet_length(_send_check.key) > 512 OR octet_length(_send_check.dedup_key) > 512 THEN
        RAISE EXCEPTION USING ERRCODE = 'SL006',
            MESSAGE = format('%s must be at most 512 bytes, got %s',
                             CASE WHEN octet_length(_send_check.key) > 512 THEN 'key' ELSE 'dedup_key' END,
                             greatest(octet_length(_send_check.key), octet_length(_send_check.dedup_key)));
    END IF;
    IF v_size > p_max_payload THEN
        RAISE EXCEPTION USING ERRCODE = 'SL009',
            MESSAGE = format('message of %s bytes exceeds the max_payload of queue %s (%s bytes)',
                             v_size, quote_literal(_send_check.queue), p_max_payload);
    END IF;
    -- (no JSON of 4,096 bytes or less is that deep: see _json_too_deep)
    IF v_size > 4096 AND (sluice._json_too_deep(_send_check.body) OR sluice._json_too_deep(_send_check.headers)) THEN
        PERFORM sluice._json_too_deep_error(CASE WHEN sluice._json_too_deep(_send_check.body) THEN 'body' ELSE 'headers' END);
    END IF;
END
$$;

-- _send_batch_check: send_batch's argument checks, one after the other in
-- this order, raising the first that fails. send_batch tells a valid batch
-- with a few cheap expressions and calls this only when one of them says a
-- check may fail, so that every error is the one (code, text) it was when
-- send_batch ran these checks itself on every call; it may also be called
-- for a valid batch (the size bound, see send_batch), and then returns.
--
-- Parameters:
--   q           the queue's row
--   bodies      ... delay, priorities, dedup_keys: send_batch's arguments
-- Returns: nothing, when every check passes
-- Errors: as send_batch
CREATE OR REPLACE FUNCTION sluice._send_batch_check(q sluice.queue, bodies jsonb[], headers jsonb[], keys text[],
                                                    delay interval, priorities int[], dedup_keys text[])
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n int := cardinality(_send_batch_check.bodies);
    v_size int;
    r record;
BEGIN
    IF _send_batch_check.bodies IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SL006', MESSAGE = 'bodies must not be NULL';
    END IF;
    FOR r IN SELECT * FROM (VALUES ('bodies', array_ndims(_send_batch_check.bodies)),
                                   ('headers', array_ndims(_send_batch_check.headers)),
                                   ('keys', array_ndims(_send_batch_check.keys)),
                                   ('priorities', array_ndims(_send_batch_check.priorities)),
                                   ('dedup_keys', array_ndims(_send_batch_check.dedup_keys))) AS a(name, dims)
             WHERE a.dims > 1 LOOP
        RAISE EXCEPTION USING ERRCODE = 'SL006',
            MESSAGE = format('%s must be a one-dimensional array, got %s dimensions', r.name, r.dims);
    END LOOP;
    IF array_position(_send_batch_check.bodies, NULL) IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SL006',
            MESSAGE = format('bodies[%s] is NULL', array_position(_send_batch_check.bodies, NULL)),
            HINT = 'Send a JSON value; use ''null''::jsonb for a JSON null.';
    END IF;
    FOR r IN SELECT * FROM (VALUES ('headers', cardinality(_send_batch_check.headers)),
                                   ('keys', cardinality(_send_batch_check.keys)),
                                   ('priorities', cardinality(_send_batch_check.priorities)),
                                   ('dedup_keys', cardinality(_send_batch_check.dedup_keys))) AS a(name, len)
             WHERE a.len IS NOT NULL AND a.len <> n LOOP
        RAISE EXCEPTION USING ERRCODE = 'SL006',
            MESSAGE = format('%s has %s elements but bodies has %s', r.name, r.len, n);
    END LOOP;
    IF array_position(_send_batch_check.priorities, NULL) IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SL006',
            MESSAGE = format('priorities[%s] is NULL', array_position(_send_batch_check.priorities, NULL));
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(_send_batch_check.headers) h WHERE h IS NOT NULL AND jsonb_typeof(h) <> 'object') THEN
        RAISE EXCEPTION USING ERRCODE = 'SL006', MESSAGE = 'every headers element must be a JSON object or NULL';
    END IF;
    IF _send_batch_check.delay < interval '0' OR _send_batch_check.delay > q.max_delay THEN
        PERFORM sluice._delay_error(_send_batch_check.delay, q.max_delay, q.name);
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(_send_batch_check.keys) AS x WHERE octet_length(x) > 512)
       OR EXISTS (SELECT 1 FROM unnest(_send_batch_check.dedup_keys) AS x WHERE octet_length(x) > 512) THEN
        RAISE EXCEPTION USING ERRCODE = 'SL006', MESSAGE = 'every key and dedup_key must be at most 512 bytes';
    END IF;
    SELECT max(sluice._payload_size(u.b, u.h, u.k)) INTO v_size
    FROM unnest(_send_batch_check.bodies, _send_batch_check.headers, _send_batch_check.keys) AS u(b, h, k);
    IF v_size > q.max_payload THEN
        RAISE EXCEPTION USING ERRCODE = 'SL009',
            MESSAGE = format('a message of %s bytes exceeds the max_payload of queue %s (%s bytes)',
                             v_size, quote_literal(q.name), q.max_payload);
    END IF;
    FOR r IN SELECT u.ord, sluice._json_too_deep(u.b) AS deep_body
             FROM unnest(_send_batch_check.bodies, _send_batch_check.headers) WITH ORDINALITY AS u(b, h, ord)
             WHERE (coalesce(pg_column_size(u.b), 0) > 4096 AND sluice._json_too_deep(u.b))
                OR (coalesce(pg_column_size(u.h), 0) > 4096 AND sluice._json_too_deep(u.h))
             ORDER BY u.ord LIMIT 1 LOOP
        PERFORM sluice._json_too_deep_error(format('%s[%s]', CASE WHEN r.deep_body THEN 'bodies' ELSE 'headers' END, r.ord));
    END LOOP;
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
-- Errors: as send (SL012 json_too_deep naming bodies[i] or headers[i]), and SL006 when an array
--         differs in length from bodies
-- Tables: inserts into sluice.messages (engine 2: the queue's msg and dedup)
CREATE OR REPLACE FUNCTION sluice.send_batch(queue text, bodies jsonb[], headers jsonb[] DEFAULT NULL,
                                             keys text[] DEFAULT NULL, delay interval DEFAULT NULL,
                                             priorities int[] DEFAULT NULL, dedup_keys text[] DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q sluice.queue;
    n int := cardinality(send_batch.bodies);
    v_now timestamptz;
    v_done boolean;   -- (calls made in expressions, as in send)
BEGIN
    -- sluice._use_queue, inlined as in send: the queue's shared lock, then
    -- the lookup (_use_queue itself raises SL001 or SL002).
    v_done := pg_advisory_xact_lock_shared(sluice._lock_ns('queue'), hashtext(send_batch.queue)) IS NULL;
    SELECT * INTO q FROM sluice.queue WHERE name = send_batch.queue;
    IF q.id IS NULL OR to_regnamespace(sluice._qschema(q.id)) IS NULL THEN
        q := sluice._use_queue(send_batch.queue);
    END IF;
    v_now := clock_timestamp();
    IF current_setting('sluice.caller_synchronous_commit', true) <> '' THEN
        PERFORM sluice._durable_commit();   -- after a receive in this transaction
    END IF;
    -- The checks of _send_batch_check, told apart cheaply: that function runs
    -- them one by one, and raises the first that fails, only when one of
    -- these says a check may fail (so that errors and their order stay
    -- its). Here: expressions without a FROM, which PL/pgSQL evaluates
    -- without running a statement, and one statement when headers, keys or
    -- dedup_keys are given. Before, the checks ran five statements and sized
    -- every message, ~370k instructions of a batch of 100 (docs/pgmq.md).
    IF send_batch.bodies IS NULL
       OR array_ndims(send_batch.bodies) > 1 OR array_ndims(send_batch.headers) > 1
       OR array_ndims(send_batch.keys) > 1 OR array_ndims(send_batch.priorities) > 1
       OR array_ndims(send_batch.dedup_keys) > 1 THEN
        PERFORM sluice._send_batch_check(q, send_batch.bodies, send_batch.headers, send_batch.keys,
                                         send_batch.delay, send_batch.priorities, send_batch.dedup_keys);
    END IF;
    -- (one-dimensional arrays from here on, as array_position needs)
    -- The size: an element of an array is never compressed nor out of line
    -- (PostgreSQL detoasts every element it puts in an array), so a message
    -- counts at most the size of the arrays it comes from, when they are not
    -- compressed themselves: while they add up to no more than max_payload,
    -- no message is over it, and sizing each message (_payload_size, ~2.3k
    -- instructions a message) is left to _send_batch_check for larger batches.
    IF array_position(send_batch.bodies, NULL) IS NOT NULL
       OR cardinality(send_batch.headers) <> n OR cardinality(send_batch.keys) <> n
       OR cardinality(send_batch.priorities) <> n OR cardinality(send_batch.dedup_keys) <> n
       OR array_position(send_batch.priorities, NULL) IS NOT NULL
       OR send_batch.delay < interval '0' OR send_batch.delay > q.max_delay
       OR pg_column_compression(send_batch.bodies) IS NOT NULL
       OR pg_column_compression(send_batch.headers) IS NOT NULL
       OR pg_column_compression(send_batch.keys) IS NOT NULL
       OR pg_column_size(send_batch.bodies)::bigint + coalesce(pg_column_size(send_batch.headers), 0)
          + coalesce(pg_column_size(send_batch.keys), 0) > q.max_payload THEN
        PERFORM sluice._send_batch_check(q, send_batch.bodies, send_batch.headers, send_batch.keys,
                                         send_batch.delay, send_batch.priorities, send_batch.dedup_keys);
    END IF;
    -- Nesting depth: no JSON of 4,096 bytes or less can be too deep (see
    -- _json_too_deep), so arrays of that size in all are not looked at, and
    -- of larger ones only the elements over it are walked (an element of
    -- an array is never compressed: its pg_column_size is its size). (Two
    -- IFs: the look at the elements is a statement, which a condition
    -- joined to it by AND would run each time.) A size of NULL (no
    -- headers) is 0: NULL > 4096 is NULL, and NULL AND x evaluates x, so
    -- that _json_too_deep (a call with a SET clause, a statement of its
    -- own) ran for every message of a batch sent without headers.
    IF pg_column_compression(send_batch.bodies) IS NOT NULL
       OR pg_column_compression(send_batch.headers) IS NOT NULL
       OR pg_column_size(send_batch.bodies)::bigint + coalesce(pg_column_size(send_batch.headers), 0) > 4096 THEN
        IF EXISTS (SELECT FROM unnest(send_batch.bodies, send_batch.headers) AS u(b, h)
                   WHERE (coalesce(pg_column_size(u.b), 0) > 4096 AND sluice._json_too_deep(u.b))
                      OR (coalesce(pg_column_size(u.h), 0) > 4096 AND sluice._json_too_deep(u.h))) THEN
            PERFORM sluice._send_batch_check(q, send_batch.bodies, send_batch.headers, send_batch.keys,
                                             send_batch.delay, send_batch.priorities, send_batch.dedup_keys);
        END IF;
    END IF;
    -- Headers objects and key lengths: one pass over the arrays given.
    IF send_batch.headers IS NOT NULL OR send_batch.keys IS NOT NULL OR send_batch.dedup_keys IS NOT NULL THEN
        IF EXISTS (SELECT FROM (SELECT unnest(send_batch.headers) AS h, unnest(send_batch.keys) AS k,
                                       unnest(send_batch.dedup_keys) AS dk) u
                   WHERE jsonb_typeof(u.h) <> 'object' OR octet_length(u.k) > 512 OR octet_length(u.dk) > 512) THEN
            PERFORM sluice._send_batch_check(q, send_batch.bodies, send_batch.headers, send_batch.keys,
                                             send_batch.delay, send_batch.priorities, send_batch.dedup_keys);
        END IF;
    END IF;
    IF q.engine = 2 THEN
        v_done := set_config('search_path', sluice._queue_path(q.id), true) IS NULL;
        IF NOT q.prioritized AND send_batch.priorities IS NOT NULL THEN
            -- (a statement: only when priorities are given)
            IF EXISTS (SELECT FROM unnest(send_batch.priorities, send_batch.keys) AS u(p, k) WHERE sluice._prioritized(u.p, u.k)) THEN
                PERFORM sluice._mark_prioritized(q.id);   -- (receives look at the priority lane)
            END IF;
        END IF;
        IF send_batch.dedup_keys IS NOT NULL THEN
            RETURN QUERY SELECT * FROM e2_send_batch_dedup(q, CASE WHEN send_batch.delay > interval '0'
                                                                   THEN v_now + send_batch.delay END,
                                                           v_now, send_batch.headers, send_batch.bodies,
                                                           send_batch.keys, send_batch.priorities,
                                                           send_batch.dedup_keys);
            RETURN;
        END IF;
        RETURN QUERY SELECT * FROM e2_send_batch(q, CASE WHEN send_batch.delay > interval '0' THEN v_now + send_batch.delay END,
                                                 v_now, send_batch.headers, send_batch.bodies, send_batch.keys,
                                                 send_batch.priorities);
        IF q.notify AND n > 0 AND pg_try_advisory_xact_lock(sluice._lock_ns('notify'), q.id) THEN
            v_done := pg_notify('sluice', q.name) IS NULL;
        END IF;
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM sluice._send_batch_e1(q, send_batch.bodies, send_batch.headers, send_batch.keys,
                                                    send_batch.delay, send_batch.priorities, send_batch.dedup_keys,
                                                    v_now);
END
$$;

-- _send_batch_e1: the rest of send_batch for a queue of engine 1 (its
-- lookup and the argument checks done): the rows in sluice.messages, in the
-- current slot, and the notification; with dedup_keys, _send_batch_dedup.
--
-- Parameters:
--   q                   the queue
--   p_bodies .. p_dedup_keys  as send_batch's arguments
--   p_now               the send's time
-- Returns: the message ids, in body order (a duplicate's: the first
--   message's)
-- Calls: _slot_now, _send_batch_dedup
CREATE OR REPLACE FUNCTION sluice._send_batch_e1(q sluice.queue, p_bodies jsonb[], p_headers jsonb[], p_keys text[],
                                                 p_delay interval, p_priorities int[], p_dedup_keys text[],
                                                 p_now timestamptz)
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_dedup_keys IS NOT NULL THEN
        RETURN QUERY SELECT * FROM sluice._send_batch_dedup(q, p_bodies, p_headers, p_keys, p_delay, p_priorities,
                                                           p_dedup_keys, p_now);
        RETURN;
    END IF;
    -- Every body is inserted: the ids come straight from the INSERT, in
    -- body order (drawn after the sort, in its order).
    RETURN QUERY
    WITH ins AS (
        INSERT INTO sluice.messages (queue_id, slot, id, txid, sent_at, deliver_at, priority, key, dedup_key, headers, body)
        SELECT q.id, (SELECT ns.slot FROM sluice._slot_now(q.id) ns), nextval(q.id_seq), pg_current_xact_id(),
               p_now, CASE WHEN p_delay > interval '0' THEN p_now + p_delay END,
               coalesce(u.p, 0), u.k, NULL, u.h, u.b
        FROM unnest(p_bodies, p_headers, p_keys, p_priorities) WITH ORDINALITY AS u(b, h, k, p, ord)
        ORDER BY u.ord
        RETURNING id
    )
    SELECT ins.id FROM ins ORDER BY ins.id;
    IF q.notify AND cardinality(p_bodies) > 0 AND pg_try_advisory_xact_lock(sluice._lock_ns('notify'), q.id) THEN
        PERFORM pg_notify('sluice', q.name);
    END IF;
END
$$;

-- _send_batch_dedup: the rest of send_batch when dedup_keys are given (the
-- batch checked): lock every key (_dedup_lock_all), find those sent within
-- the window, insert the bodies without a key and the first body of each
-- key not sent before, and remember their keys. A statement for each step,
-- whatever the number of keys: a statement (and a lookup) per key, and
-- the keys' ids gathered in a jsonb object one key at a time, made a batch
-- of 10,000 keys take ~10 s (PostgreSQL 15).
--
-- Parameters:
--   q       the queue's row
--   bodies  ... dedup_keys: send_batch's arguments
--   p_now   the batch's sent_at
-- Returns: one id per body, in the order of bodies (for a duplicate, the id
--          of the message first sent with its key)
-- Calls: sluice._dedup_lock_all, e_dedup_lookup_all, e_dedup_record_all (the
--   queue's), sluice._dedup_batch_ids
CREATE OR REPLACE FUNCTION sluice._send_batch_dedup(q sluice.queue, bodies jsonb[], headers jsonb[], keys text[],
                                                    delay interval, priorities int[], dedup_keys text[],
                                                    p_now timestamptz)
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    sch constant text := sluice._qschema(q.id);
    v_slot smallint;
    -- key -> id, of the keys sent before (a jsonb object: a lookup is a
    -- binary search; a join with an unnest of arrays was planned as a
    -- nested loop, estimated at 10 rows, quadratic in the keys)
    old jsonb;
    ids bigint[];
    dks text[];
BEGIN
    PERFORM sluice._dedup_lock_all(q.id, dedup_keys);
    EXECUTE format('SELECT coalesce(jsonb_object_agg(x.dedup_key, x.msg_id), ''{}'') FROM %I.e_dedup_lookup_all($1, $2) x',
                   sch)
        INTO old USING dedup_keys, q.dedup_window;
    v_slot := (SELECT ns.slot FROM sluice._slot_now(q.id) ns);
    -- Insert the new messages: no dedup key, or the first body of a key not
    -- sent before. Their ids are drawn in body order (after the sort).
    WITH u AS (
        SELECT u.*, row_number() OVER (PARTITION BY u.dk ORDER BY u.ord) AS nth, (old ->> u.dk)::bigint AS old_id
        FROM unnest(bodies, headers, keys, priorities, dedup_keys) WITH ORDINALITY AS u(b, h, k, p, dk, ord)
    ), ins AS (
        INSERT INTO sluice.messages (queue_id, slot, id, txid, sent_at, deliver_at, priority, key, dedup_key, headers, body)
        SELECT q.id, v_slot, nextval(q.id_seq), pg_current_xact_id(), p_now,
               CASE WHEN delay > interval '0' THEN p_now + delay END,
               coalesce(u.p, 0), u.k, u.dk, u.h, u.b
        FROM u
        WHERE u.dk IS NULL OR (u.nth = 1 AND u.old_id IS NULL)
        ORDER BY u.ord
        RETURNING id, dedup_key
    )
    SELECT array_agg(ins.id ORDER BY ins.id), array_agg(ins.dedup_key ORDER BY ins.id) INTO ids, dks FROM ins;
    IF ids IS NOT NULL THEN
        EXECUTE format('SELECT %I.e_dedup_record_all($1, $2, $3)', sch) USING v_slot, dks, ids;
        IF q.notify AND pg_try_advisory_xact_lock(sluice._lock_ns('notify'), q.id) THEN
            PERFORM pg_notify('sluice', q.name);
        END IF;
    END IF;
    -- One id per body (sluice._dedup_batch_ids).
    RETURN QUERY SELECT x FROM sluice._dedup_batch_ids(dedup_keys, old, ids) x;
END
$$;
