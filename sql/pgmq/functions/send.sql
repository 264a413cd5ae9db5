-- Group: pgmq compatibility, sending.
--
-- A message's x-pgmq-group header becomes its sluice ordering key, so the
-- messages of one group are delivered in order, one at a time (PGMQ's FIFO).
-- The delay becomes sluice's delay; a NULL msg is sent as JSON null.

-- (gone: _target, whose lookup is _send's and _send_batch's now)
DROP FUNCTION IF EXISTS pgmq._target(text);

-- _send: send one message (the body of every send): one lookup of the
-- queue and of its insert notifications, one sluice.send.
--
-- Hot path: neither this nor the send functions that call it has a SET
-- clause (a PL/pgSQL call with one costs ~30 us; sluice.send pins its own
-- search_path). So that the caller's search_path cannot change what they
-- mean, every function and operator they name is schema-qualified.
--
-- Parameters:
--   p_name     the queue
--   p_msg      the message (NULL: JSON null)
--   p_headers  a JSON object or NULL; x-pgmq-group orders
--   p_delay    visible after this long (NULL, zero or negative: at once)
-- Returns: the msg_id
-- Errors: 42P01 no such queue; SL006 headers not an object; SL009 too large
-- Notifies: 'pgmq.q_<queue_name>.INSERT' when enable_notify_insert is on
CREATE OR REPLACE FUNCTION pgmq._send(p_name text, p_msg jsonb, p_headers jsonb, p_delay interval)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    q text;
    channel text;
    id bigint;
BEGIN
    SELECT m.sluice_queue,
           CASE WHEN t.queue_name IS NOT NULL
                THEN 'pgmq.q_' OPERATOR(pg_catalog.||) m.queue_name OPERATOR(pg_catalog.||) '.INSERT' END
      INTO q, channel
      FROM pgmq.meta m LEFT JOIN pgmq.notify_insert_throttle t ON t.queue_name OPERATOR(pg_catalog.=) m.queue_name
     WHERE m.sluice_queue OPERATOR(pg_catalog.=) pg_catalog.lower(p_name);
    IF q IS NULL THEN
        PERFORM pgmq._queue(p_name);   -- raises
    END IF;
    id := sluice.send(q, coalesce(p_msg, 'null'), p_headers, p_headers OPERATOR(pg_catalog.->>) 'x-pgmq-group',
                      CASE WHEN p_delay OPERATOR(pg_catalog.>) interval '0' THEN p_delay END);
    IF channel IS NOT NULL THEN
        PERFORM pg_catalog.pg_notify(channel, '');
    END IF;
    RETURN id;
END
$$;

-- send: send one message.
--
-- Parameters:
--   queue_name  the queue
--   msg         the message
--   headers     a JSON object or NULL; x-pgmq-group orders
--   delay       visible from this time on (NULL or past: at once)
-- Returns: the msg_id (one row)
-- Errors: 42P01 no such queue; SL006 headers not an object; SL009 too large
-- Notifies: 'pgmq.q_<queue_name>.INSERT' when enable_notify_insert is on
CREATE OR REPLACE FUNCTION pgmq.send(queue_name text, msg jsonb, headers jsonb, delay timestamptz)
RETURNS SETOF bigint LANGUAGE plpgsql
AS $$
BEGIN
    RETURN NEXT pgmq._send(queue_name, msg, headers, delay OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp());
END
$$;

-- send: two arguments. Parameters: queue_name, msg. Returns: the msg_id.
-- Errors: as send
CREATE OR REPLACE FUNCTION pgmq.send(queue_name text, msg jsonb)
RETURNS SETOF bigint LANGUAGE plpgsql
AS $$
BEGIN
    RETURN NEXT pgmq._send(queue_name, msg, NULL, NULL);
END
$$;

-- send: with headers. Parameters: queue_name, msg, headers. Returns: the msg_id.
-- Errors: as send
CREATE OR REPLACE FUNCTION pgmq.send(queue_name text, msg jsonb, headers jsonb)
RETURNS SETOF bigint LANGUAGE plpgsql
AS $$
BEGIN
    RETURN NEXT pgmq._send(queue_name, msg, headers, NULL);
END
$$;

-- send: with a delay in seconds. Parameters: queue_name, msg, delay.
-- Returns: the msg_id. Errors: as send
CREATE OR REPLACE FUNCTION pgmq.send(queue_name text, msg jsonb, delay integer)
RETURNS SETOF bigint LANGUAGE plpgsql
AS $$
BEGIN
    RETURN NEXT pgmq._send(queue_name, msg, NULL, pg_catalog.make_interval(secs => delay));
END
$$;

-- send: with a visibility time. Parameters: queue_name, msg, delay.
-- Returns: the msg_id. Errors: as send
CREATE OR REPLACE FUNCTION pgmq.send(queue_name text, msg jsonb, delay timestamptz)
RETURNS SETOF bigint LANGUAGE plpgsql
AS $$
BEGIN
    RETURN NEXT pgmq._send(queue_name, msg, NULL, delay OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp());
END
$$;

-- send: with headers and a delay in seconds. Parameters: queue_name, msg,
-- headers, delay. Returns: the msg_id. Errors: as send
CREATE OR REPLACE FUNCTION pgmq.send(queue_name text, msg jsonb, headers jsonb, delay integer)
RETURNS SETOF bigint LANGUAGE plpgsql
AS $$
BEGIN
    RETURN NEXT pgmq._send(queue_name, msg, headers, pg_catalog.make_interval(secs => delay));
END
$$;

-- _validate_batch_params: PGMQ's checks of a batch. Called by
-- send_batch_topic, and by _send_batch when its own quick check fails (so
-- that a valid batch does not pay for a call); no SET clause of its own.
--
-- Parameters:
--   msgs     the messages
--   headers  NULL or one per message
-- Returns: nothing
-- Errors: P0001 with PGMQ's texts
CREATE OR REPLACE FUNCTION pgmq._validate_batch_params(msgs jsonb[], headers jsonb[])
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF msgs IS NULL OR pg_catalog.array_length(msgs, 1) IS NULL THEN
        RAISE EXCEPTION 'msgs cannot be NULL or empty';
    END IF;
    IF headers IS NOT NULL
       AND coalesce(pg_catalog.array_length(headers, 1), 0) OPERATOR(pg_catalog.<>) coalesce(pg_catalog.array_length(msgs, 1), 0) THEN
        RAISE EXCEPTION 'headers array length (%) must match msgs array length (%)',
            coalesce(pg_catalog.array_length(headers, 1), 0), coalesce(pg_catalog.array_length(msgs, 1), 0);
    END IF;
END
$$;

-- _send_batch: send many messages in one statement (the body of every
-- send_batch). Hot path, without a SET clause, as _send. It returns an
-- array (SETOF bigint before, replaced on upgrade), which its caller
-- unnests: one tuplestore fewer.
--
-- Parameters:
--   p_name     the queue
--   p_msgs     the messages (not empty)
--   p_headers  NULL or one object (or NULL) per message
--   p_delay    visible after this long (NULL, zero or negative: at once)
-- Returns: one msg_id per message, in order
-- Errors: as _send; P0001 empty msgs or headers of another length
-- Notifies: as _send
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_proc p WHERE p.oid = to_regprocedure('pgmq._send_batch(text, jsonb[], jsonb[], interval)')
                                                  AND p.proretset) THEN
        DROP FUNCTION pgmq._send_batch(text, jsonb[], jsonb[], interval);
    END IF;
END
$$;
CREATE OR REPLACE FUNCTION pgmq._send_batch(p_name text, p_msgs jsonb[], p_headers jsonb[], p_delay interval)
RETURNS bigint[]
LANGUAGE plpgsql
AS $$
DECLARE
    q text;
    channel text;
    ids bigint[];
BEGIN
    IF pg_catalog.array_length(p_msgs, 1) IS NULL
       OR (p_headers IS NOT NULL AND pg_catalog.array_length(p_headers, 1) IS DISTINCT FROM pg_catalog.array_length(p_msgs, 1)) THEN
        PERFORM pgmq._validate_batch_params(p_msgs, p_headers);   -- raises
    END IF;
    SELECT m.sluice_queue,
           CASE WHEN t.queue_name IS NOT NULL
                THEN 'pgmq.q_' OPERATOR(pg_catalog.||) m.queue_name OPERATOR(pg_catalog.||) '.INSERT' END
      INTO q, channel
      FROM pgmq.meta m LEFT JOIN pgmq.notify_insert_throttle t ON t.queue_name OPERATOR(pg_catalog.=) m.queue_name
     WHERE m.sluice_queue OPERATOR(pg_catalog.=) pg_catalog.lower(p_name);
    IF q IS NULL THEN
        PERFORM pgmq._queue(p_name);   -- raises
    END IF;
    ids := ARRAY(SELECT s.id FROM sluice.send_batch(
        q,
        CASE WHEN pg_catalog.array_position(p_msgs, NULL) IS NULL THEN p_msgs
             ELSE ARRAY(SELECT coalesce(b, 'null') FROM pg_catalog.unnest(p_msgs) WITH ORDINALITY u(b, i) ORDER BY i) END,
        p_headers,
        CASE WHEN p_headers IS NOT NULL
             THEN ARRAY(SELECT h OPERATOR(pg_catalog.->>) 'x-pgmq-group'
                          FROM pg_catalog.unnest(p_headers) WITH ORDINALITY u(h, i) ORDER BY i) END,
        CASE WHEN p_delay OPERATOR(pg_catalog.>) interval '0' THEN p_delay END) WITH ORDINALITY s(id, i) ORDER BY s.i);
    IF channel IS NOT NULL THEN
        PERFORM pg_catalog.pg_notify(channel, '');
    END IF;
    RETURN ids;
END
$$;

-- send_batch: send many messages in one statement.
--
-- Parameters:
--   queue_name  the queue
--   msgs        the messages (not empty)
--   headers     NULL or one object (or NULL) per message
--   delay       visible from this time on
-- Returns: one msg_id per message, in order
-- Errors: as send; P0001 empty msgs or headers of another length
-- Notifies: as send
CREATE OR REPLACE FUNCTION pgmq.send_batch(queue_name text, msgs jsonb[], headers jsonb[], delay timestamptz)
RETURNS SETOF bigint LANGUAGE plpgsql
AS $$
BEGIN
    RETURN QUERY SELECT pg_catalog.unnest(pgmq._send_batch(queue_name, msgs, headers, delay OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp()));
END
$$;

-- send_batch: two arguments. Parameters: queue_name, msgs.
-- Returns: the msg_ids. Errors: as send_batch
CREATE OR REPLACE FUNCTION pgmq.send_batch(queue_name text, msgs jsonb[])
RETURNS SETOF bigint LANGUAGE plpgsql
AS $$
BEGIN
    RETURN QUERY SELECT pg_catalog.unnest(pgmq._send_batch(queue_name, msgs, NULL, NULL));
END
$$;

-- send_batch: with headers. Parameters: queue_name, msgs, headers.
-- Returns: the msg_ids. Errors: as send_batch
CREATE OR REPLACE FUNCTION pgmq.send_batch(queue_name text, msgs jsonb[], headers jsonb[])
RETURNS SETOF bigint LANGUAGE plpgsql
AS $$
BEGIN
    RETURN QUERY SELECT pg_catalog.unnest(pgmq._send_batch(queue_name, msgs, headers, NULL));
END
$$;

-- send_batch: with a delay in seconds. Parameters: queue_name, msgs, delay.
-- Returns: the msg_ids. Errors: as send_batch
CREATE OR REPLACE FUNCTION pgmq.send_batch(queue_name text, msgs jsonb[], delay integer)
RETURNS SETOF bigint LANGUAGE plpgsql
AS $$
BEGIN
    RETURN QUERY SELECT pg_catalog.unnest(pgmq._send_batch(queue_name, msgs, NULL, pg_catalog.make_interval(secs => delay)));
END
$$;

-- send_batch: with a visibility time. Parameters: queue_name, msgs, delay.
-- Returns: the msg_ids. Errors: as send_batch
CREATE OR REPLACE FUNCTION pgmq.send_batch(queue_name text, msgs jsonb[], delay timestamptz)
RETURNS SETOF bigint LANGUAGE plpgsql
AS $$
BEGIN
    RETURN QUERY SELECT pg_catalog.unnest(pgmq._send_batch(queue_name, msgs, NULL, delay OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp()));
END
$$;

-- send_batch: with headers and a delay in seconds. Parameters: queue_name,
-- msgs, headers, delay. Returns: the msg_ids. Errors: as send_batch
CREATE OR REPLACE FUNCTION pgmq.send_batch(queue_name text, msgs jsonb[], headers jsonb[], delay integer)
RETURNS SETOF bigint LANGUAGE plpgsql
AS $$
BEGIN
    RETURN QUERY SELECT pg_catalog.unnest(pgmq._send_batch(queue_name, msgs, headers, pg_catalog.make_interval(secs => delay)));
END
$$;
