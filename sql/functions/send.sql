-- Group: sending

-- send: append one message to a queue, in the caller's transaction. The
-- message becomes visible to consumers when that transaction commits; a
-- rolled-back send is never delivered.
--
-- Parameters:
--   queue      queue name
--   body       the message, any JSON value (not NULL)
--   headers    optional JSON object of metadata
--   key        optional ordering key, returned by receive (stored only: delivery
--              does not yet keep per-key order)
--   delay      deliver no earlier than now + delay (NULL or 0: at once)
--   priority   optional priority, returned by receive (stored only: delivery
--              is in commit order whatever the priority)
--   dedup_key  optional deduplication key (stored only: no deduplication yet)
-- Returns: the message id (unique within the queue, increasing in send order)
-- Notifies: channel 'sluice', payload the queue name, at commit (option notify),
--          unless a concurrent send to the queue is already due to notify
-- Errors: SL001 invalid_name, SL002 undefined_queue, SL006 invalid_argument
--         (NULL body, headers not an object, negative delay, NULL priority),
--         SL009 payload_too_large
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
    v_size int;
    v_id bigint;
    v_now timestamptz;
BEGIN
    -- The hot path: one lookup for everything send needs, then one INSERT.
    SELECT q.id, (SELECT e.epoch FROM sluice.epoch e WHERE e.queue_id = q.id ORDER BY e.epoch DESC LIMIT 1) % 4,
           q.id_seq, q.max_payload, q.notify
    INTO v_qid, v_slot, v_seq, v_max, v_notify
    FROM sluice.queue q WHERE q.name = send.queue;
    IF v_qid IS NULL THEN
        PERFORM sluice._get_queue(send.queue);   -- raises SL001 or SL002
    END IF;
    IF send.body IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SL006', MESSAGE = 'body must not be NULL',
            HINT = 'Send a JSON value; use ''null''::jsonb for a JSON null.';
    END IF;
    IF send.headers IS NOT NULL AND jsonb_typeof(send.headers) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = 'SL006',
            MESSAGE = format('headers must be a JSON object, got %s', jsonb_typeof(send.headers));
    END IF;
    IF send.delay < interval '0' THEN
        RAISE EXCEPTION USING ERRCODE = 'SL006',
            MESSAGE = format('delay must not be negative, got %s', send.delay);
    END IF;
    IF send.priority IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SL006', MESSAGE = 'priority must not be NULL';
    END IF;
    v_size := pg_column_size(send.body) + coalesce(pg_column_size(send.headers), 0);
    IF v_size > v_max THEN
        RAISE EXCEPTION USING ERRCODE = 'SL009',
            MESSAGE = format('message of %s bytes exceeds the max_payload of queue %s (%s bytes)',
                             v_size, quote_literal(send.queue), v_max);
    END IF;
    v_now := clock_timestamp();
    INSERT INTO sluice.messages (queue_id, slot, id, txid, sent_at, deliver_at, priority, key, dedup_key, headers, body)
    VALUES (v_qid, v_slot, nextval(v_seq), pg_current_xact_id(), v_now,
            CASE WHEN send.delay > interval '0' THEN v_now + send.delay END,
            send.priority, send.key, send.dedup_key, send.headers, send.body)
    RETURNING id INTO v_id;
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
--   queue    queue name
--   bodies   the messages (no NULL element)
--   headers  NULL, or one headers object (or NULL) per body
--   keys     NULL, or one key (or NULL) per body
--   delay    applies to every message
-- Returns: the ids, in the order of bodies
-- Errors: as send, and SL006 when headers or keys differ in length from bodies
-- Tables: inserts into sluice.messages
CREATE OR REPLACE FUNCTION sluice.send_batch(queue text, bodies jsonb[], headers jsonb[] DEFAULT NULL,
                                             keys text[] DEFAULT NULL, delay interval DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q sluice.queue := sluice._get_queue(send_batch.queue);
    n int := cardinality(send_batch.bodies);
    v_now timestamptz := clock_timestamp();
    v_slot smallint;
    v_size int;
BEGIN
    IF send_batch.bodies IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SL006', MESSAGE = 'bodies must not be NULL';
    END IF;
    IF array_position(send_batch.bodies, NULL) IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SL006',
            MESSAGE = format('bodies[%s] is NULL', array_position(send_batch.bodies, NULL)),
            HINT = 'Send a JSON value; use ''null''::jsonb for a JSON null.';
    END IF;
    IF send_batch.headers IS NOT NULL AND cardinality(send_batch.headers) <> n THEN
        RAISE EXCEPTION USING ERRCODE = 'SL006',
            MESSAGE = format('headers has %s elements but bodies has %s', cardinality(send_batch.headers), n);
    END IF;
    IF send_batch.keys IS NOT NULL AND cardinality(send_batch.keys) <> n THEN
        RAISE EXCEPTION USING ERRCODE = 'SL006',
            MESSAGE = format('keys has %s elements but bodies has %s', cardinality(send_batch.keys), n);
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(send_batch.headers) h WHERE h IS NOT NULL AND jsonb_typeof(h) <> 'object') THEN
        RAISE EXCEPTION USING ERRCODE = 'SL006', MESSAGE = 'every headers element must be a JSON object or NULL';
    END IF;
    IF send_batch.delay < interval '0' THEN
        RAISE EXCEPTION USING ERRCODE = 'SL006',
            MESSAGE = format('delay must not be negative, got %s', send_batch.delay);
    END IF;
    SELECT max(pg_column_size(b) + coalesce(pg_column_size(h), 0)) INTO v_size
    FROM unnest(send_batch.bodies, send_batch.headers) AS u(b, h);
    IF v_size > q.max_payload THEN
        RAISE EXCEPTION USING ERRCODE = 'SL009',
            MESSAGE = format('a message of %s bytes exceeds the max_payload of queue %s (%s bytes)',
                             v_size, quote_literal(q.name), q.max_payload);
    END IF;
    v_slot := sluice._current_epoch(q.id) % 4;
    IF q.notify AND n > 0 AND pg_try_advisory_xact_lock(sluice._lock_ns('notify'), q.id) THEN
        PERFORM pg_notify('sluice', q.name);
    END IF;
    RETURN QUERY
        INSERT INTO sluice.messages (queue_id, slot, id, txid, sent_at, deliver_at, key, headers, body)
        SELECT q.id, v_slot, nextval(q.id_seq), pg_current_xact_id(), v_now,
               CASE WHEN send_batch.delay > interval '0' THEN v_now + send_batch.delay END,
               u.k, u.h, u.b
        FROM unnest(send_batch.bodies, send_batch.headers, send_batch.keys) WITH ORDINALITY AS u(b, h, k, ord)
        ORDER BY u.ord
        RETURNING id;
END
$$;
