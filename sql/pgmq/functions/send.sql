-- Group: pgmq compatibility, sending.
--
-- A message's x-pgmq-group header becomes its sluice ordering key, so the
-- messages of one group are delivered in order, one at a time (PGMQ's FIFO).
-- The delay becomes sluice's delay; a NULL msg is sent as JSON null.

-- (gone: _target, and _send, whose work each send does itself now)
DROP FUNCTION IF EXISTS pgmq._target(text);
DROP FUNCTION IF EXISTS pgmq._send(text, jsonb, jsonb, interval);

-- send: send one message.
--
-- Hot path. Each form does the whole send itself, with no helper call that
-- is not inlined (a PL/pgSQL call costs ~12k instructions, a tenth of what
-- the layer adds to sluice.send), and looks nothing up in a table: whether
-- the queue exists is whether its view q_<name> does (pgmq._is_queue), and
-- whether it notifies whether its marker does (pgmq._notifies), each a
-- catalog lookup, ~10k instructions where a query of pgmq.meta and
-- pgmq.notify_insert_throttle cost ~55k. No SET clause (a PL/pgSQL call
-- with one costs ~30 us; sluice.send pins its own search_path): so that
-- the caller's search_path cannot change what they mean, every function
-- and operator they name is schema-qualified.
--
-- Parameters:
--   queue_name  the queue
--   msg         the message (NULL: JSON null)
--   headers     a JSON object or NULL; x-pgmq-group orders
--   delay       visible from this time on (NULL or past: at once)
-- Returns: the msg_id (one row)
-- Errors: 42P01 no such queue (P0001 for invalid characters in its name);
--         SL006 headers not an object; SL009 too large
-- Notifies: 'pgmq.q_<queue_name>.INSERT' when enable_notify_insert is on
CREATE OR REPLACE FUNCTION pgmq.send(queue_name text, msg jsonb, headers jsonb, delay timestamptz)
RETURNS SETOF bigint LANGUAGE plpgsql
AS $$
DECLARE
    q constant text := pg_catalog.lower(queue_name);
    d constant interval := delay OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp();
BEGIN
    IF NOT pgmq._is_queue(q) THEN
        PERFORM pgmq._queue(queue_name);   -- raises
    END IF;
    RETURN NEXT sluice.send(q, coalesce(msg, 'null'), headers, headers OPERATOR(pg_catalog.->>) 'x-pgmq-group',
                            CASE WHEN d OPERATOR(pg_catalog.>) interval '0' THEN d END);
    IF pgmq._notifies(q) THEN
        PERFORM pgmq._notify_insert(q);
    END IF;
END
$$;

-- send: two arguments. Parameters: queue_name, msg. Returns: the msg_id.
-- Errors, notifies: as send (its body, without headers and delay)
CREATE OR REPLACE FUNCTION pgmq.send(queue_name text, msg jsonb)
RETURNS SETOF bigint LANGUAGE plpgsql
AS $$
DECLARE
    q constant text := pg_catalog.lower(queue_name);
BEGIN
    IF NOT pgmq._is_queue(q) THEN
        PERFORM pgmq._queue(queue_name);   -- raises
    END IF;
    RETURN NEXT sluice.send(q, coalesce(msg, 'null'));
    IF pgmq._notifies(q) THEN
        PERFORM pgmq._notify_insert(q);
    END IF;
END
$$;

-- send: with headers. Parameters: queue_name, msg, headers. Returns: the msg_id.
-- Errors, notifies: as send (its body, without delay)
CREATE OR REPLACE FUNCTION pgmq.send(queue_name text, msg jsonb, headers jsonb)
RETURNS SETOF bigint LANGUAGE plpgsql
AS $$
DECLARE
    q constant text := pg_catalog.lower(queue_name);
BEGIN
    IF NOT pgmq._is_queue(q) THEN
        PERFORM pgmq._queue(queue_name);   -- raises
    END IF;
    RETURN NEXT sluice.send(q, coalesce(msg, 'null'), headers, headers OPERATOR(pg_catalog.->>) 'x-pgmq-group');
    IF pgmq._notifies(q) THEN
        PERFORM pgmq._notify_insert(q);
    END IF;
END
$$;

-- send: with a delay in seconds. Parameters: queue_name, msg, delay.
-- Returns: the msg_id. Errors, notifies: as send (its body, without headers)
CREATE OR REPLACE FUNCTION pgmq.send(queue_name text, msg jsonb, delay integer)
RETURNS SETOF bigint LANGUAGE plpgsql
AS $$
DECLARE
    q constant text := pg_catalog.lower(queue_name);
BEGIN
    IF NOT pgmq._is_queue(q) THEN
        PERFORM pgmq._queue(queue_name);   -- raises
    END IF;
    RETURN NEXT sluice.send(q, coalesce(msg, 'null'), NULL, NULL,
                            CASE WHEN delay OPERATOR(pg_catalog.>) 0 THEN pg_catalog.make_interval(secs => delay) END);
    IF pgmq._notifies(q) THEN
        PERFORM pgmq._notify_insert(q);
    END IF;
END
$$;

-- send: with a visibility time. Parameters: queue_name, msg, delay.
-- Returns: the msg_id. Errors, notifies: as send (its body, without headers)
CREATE OR REPLACE FUNCTION pgmq.send(queue_name text, msg jsonb, delay timestamptz)
RETURNS SETOF bigint LANGUAGE plpgsql
AS $$
DECLARE
    q constant text := pg_catalog.lower(queue_name);
    d constant interval := delay OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp();
BEGIN
    IF NOT pgmq._is_queue(q) THEN
        PERFORM pgmq._queue(queue_name);   -- raises
    END IF;
    RETURN NEXT sluice.send(q, coalesce(msg, 'null'), NULL, NULL, CASE WHEN d OPERATOR(pg_catalog.>) interval '0' THEN d END);
    IF pgmq._notifies(q) THEN
        PERFORM pgmq._notify_insert(q);
    END IF;
END
$$;

-- send: with headers and a delay in seconds. Parameters: queue_name, msg,
-- headers, delay. Returns: the msg_id. Errors, notifies: as send (its body)
CREATE OR REPLACE FUNCTION pgmq.send(queue_name text, msg jsonb, headers jsonb, delay integer)
RETURNS SETOF bigint LANGUAGE plpgsql
AS $$
DECLARE
    q constant text := pg_catalog.lower(queue_name);
BEGIN
    IF NOT pgmq._is_queue(q) THEN
        PERFORM pgmq._queue(queue_name);   -- raises
    END IF;
    RETURN NEXT sluice.send(q, coalesce(msg, 'null'), headers, headers OPERATOR(pg_catalog.->>) 'x-pgmq-group',
                            CASE WHEN delay OPERATOR(pg_catalog.>) 0 THEN pg_catalog.make_interval(secs => delay) END);
    IF pgmq._notifies(q) THEN
        PERFORM pgmq._notify_insert(q);
    END IF;
END
$$;

-- _validate_batch_params: PGMQ's checks of a batch. Called by
-- send_batch_topic, and by send_batch when its own quick check fails (so
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

-- (gone: _send_batch, whose work each send_batch does itself now)
DROP FUNCTION IF EXISTS pgmq._send_batch(text, jsonb[], jsonb[], interval);

-- _json_nulls: a batch's messages with each NULL replaced by JSON null.
-- Called by send_batch only for a batch that has a NULL; no SET clause.
--
-- Parameters:
--   p_msgs  the messages
-- Returns: the messages, in order, NULL elements as 'null'::jsonb
CREATE OR REPLACE FUNCTION pgmq._json_nulls(p_msgs jsonb[])
RETURNS jsonb[]
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    RETURN ARRAY(SELECT coalesce(u.b, 'null') FROM pg_catalog.unnest(p_msgs) WITH ORDINALITY u(b, i) ORDER BY u.i);
END
$$;

-- _group_keys: the sluice ordering keys of a batch: each message's
-- x-pgmq-group header. Called by send_batch only when headers are given;
-- no SET clause.
--
-- Parameters:
--   p_headers  one object (or NULL) per message
-- Returns: one key (or NULL) per message, in order
CREATE OR REPLACE FUNCTION pgmq._group_keys(p_headers jsonb[])
RETURNS text[]
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    RETURN ARRAY(SELECT u.h OPERATOR(pg_catalog.->>) 'x-pgmq-group'
                   FROM pg_catalog.unnest(p_headers) WITH ORDINALITY u(h, i) ORDER BY u.i);
END
$$;

-- send_batch: send many messages in one statement.
--
-- Hot path, written as send is (see there): each form does the whole send
-- itself, with no table lookup and no SET clause. The msg_ids are returned
-- straight from sluice.send_batch's rows (RETURN QUERY over one Function
-- Scan, which yields them in the order sluice.send_batch returned them, the
-- order of msgs): no array, no sort, no second copy of the rows.
--
-- Parameters:
--   queue_name  the queue
--   msgs        the messages (not empty; a NULL is sent as JSON null)
--   headers     NULL or one object (or NULL) per message; x-pgmq-group orders
--   delay       visible from this time on
-- Returns: one msg_id per message, in order
-- Errors: as send; P0001 empty msgs or headers of another length (PGMQ's texts)
-- Notifies: as send
CREATE OR REPLACE FUNCTION pgmq.send_batch(queue_name text, msgs jsonb[], headers jsonb[], delay timestamptz)
RETURNS SETOF bigint LANGUAGE plpgsql
AS $$
DECLARE
    q constant text := pg_catalog.lower(queue_name);
    d constant interval := delay OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp();
BEGIN
    IF pg_catalog.array_length(msgs, 1) IS NULL
       OR (headers IS NOT NULL AND pg_catalog.array_length(headers, 1) IS DISTINCT FROM pg_catalog.array_length(msgs, 1)) THEN
        PERFORM pgmq._validate_batch_params(msgs, headers);   -- raises
    END IF;
    IF NOT pgmq._is_queue(q) THEN
        PERFORM pgmq._queue(queue_name);   -- raises
    END IF;
    RETURN QUERY SELECT s.id FROM sluice.send_batch(
        q,
        CASE WHEN pg_catalog.array_position(msgs, NULL) IS NULL THEN msgs ELSE pgmq._json_nulls(msgs) END,
        headers,
        CASE WHEN headers IS NOT NULL THEN pgmq._group_keys(headers) END,
        CASE WHEN d OPERATOR(pg_catalog.>) interval '0' THEN d END) s(id);
    IF pgmq._notifies(q) THEN
        PERFORM pgmq._notify_insert(q);
    END IF;
END
$$;

-- send_batch: two arguments. Parameters: queue_name, msgs.
-- Returns: the msg_ids. Errors, notifies: as send_batch (its body, without
-- headers and delay)
CREATE OR REPLACE FUNCTION pgmq.send_batch(queue_name text, msgs jsonb[])
RETURNS SETOF bigint LANGUAGE plpgsql
AS $$
DECLARE
    q constant text := pg_catalog.lower(queue_name);
BEGIN
    IF pg_catalog.array_length(msgs, 1) IS NULL THEN
        PERFORM pgmq._validate_batch_params(msgs, NULL);   -- raises
    END IF;
    IF NOT pgmq._is_queue(q) THEN
        PERFORM pgmq._queue(queue_name);   -- raises
    END IF;
    RETURN QUERY SELECT s.id FROM sluice.send_batch(
        q, CASE WHEN pg_catalog.array_position(msgs, NULL) IS NULL THEN msgs ELSE pgmq._json_nulls(msgs) END) s(id);
    IF pgmq._notifies(q) THEN
        PERFORM pgmq._notify_insert(q);
    END IF;
END
$$;

-- send_batch: with headers. Parameters: queue_name, msgs, headers.
-- Returns: the msg_ids. Errors, notifies: as send_batch (its body, without
-- delay)
CREATE OR REPLACE FUNCTION pgmq.send_batch(queue_name text, msgs jsonb[], headers jsonb[])
RETURNS SETOF bigint LANGUAGE plpgsql
AS $$
DECLARE
    q constant text := pg_catalog.lower(queue_name);
BEGIN
    IF pg_catalog.array_length(msgs, 1) IS NULL
       OR (headers IS NOT NULL AND pg_catalog.array_length(headers, 1) IS DISTINCT FROM pg_catalog.array_length(msgs, 1)) THEN
        PERFORM pgmq._validate_batch_params(msgs, headers);   -- raises
    END IF;
    IF NOT pgmq._is_queue(q) THEN
        PERFORM pgmq._queue(queue_name);   -- raises
    END IF;
    RETURN QUERY SELECT s.id FROM sluice.send_batch(
        q,
        CASE WHEN pg_catalog.array_position(msgs, NULL) IS NULL THEN msgs ELSE pgmq._json_nulls(msgs) END,
        headers,
        CASE WHEN headers IS NOT NULL THEN pgmq._group_keys(headers) END) s(id);
    IF pgmq._notifies(q) THEN
        PERFORM pgmq._notify_insert(q);
    END IF;
END
$$;

-- send_batch: with a delay in seconds. Parameters: queue_name, msgs, delay.
-- Returns: the msg_ids. Errors, notifies: as send_batch (its body, without
-- headers)
CREATE OR REPLACE FUNCTION pgmq.send_batch(queue_name text, msgs jsonb[], delay integer)
RETURNS SETOF bigint LANGUAGE plpgsql
AS $$
DECLARE
    q constant text := pg_catalog.lower(queue_name);
BEGIN
    IF pg_catalog.array_length(msgs, 1) IS NULL THEN
        PERFORM pgmq._validate_batch_params(msgs, NULL);   -- raises
    END IF;
    IF NOT pgmq._is_queue(q) THEN
        PERFORM pgmq._queue(queue_name);   -- raises
    END IF;
    RETURN QUERY SELECT s.id FROM sluice.send_batch(
        q,
        CASE WHEN pg_catalog.array_position(msgs, NULL) IS NULL THEN msgs ELSE pgmq._json_nulls(msgs) END,
        NULL, NULL,
        CASE WHEN delay OPERATOR(pg_catalog.>) 0 THEN pg_catalog.make_interval(secs => delay) END) s(id);
    IF pgmq._notifies(q) THEN
        PERFORM pgmq._notify_insert(q);
    END IF;
END
$$;

-- send_batch: with a visibility time. Parameters: queue_name, msgs, delay.
-- Returns: the msg_ids. Errors, notifies: as send_batch (its body, without
-- headers)
CREATE OR REPLACE FUNCTION pgmq.send_batch(queue_name text, msgs jsonb[], delay timestamptz)
RETURNS SETOF bigint LANGUAGE plpgsql
AS $$
DECLARE
    q constant text := pg_catalog.lower(queue_name);
    d constant interval := delay OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp();
BEGIN
    IF pg_catalog.array_length(msgs, 1) IS NULL THEN
        PERFORM pgmq._validate_batch_params(msgs, NULL);   -- raises
    END IF;
    IF NOT pgmq._is_queue(q) THEN
        PERFORM pgmq._queue(queue_name);   -- raises
    END IF;
    RETURN QUERY SELECT s.id FROM sluice.send_batch(
        q,
        CASE WHEN pg_catalog.array_position(msgs, NULL) IS NULL THEN msgs ELSE pgmq._json_nulls(msgs) END,
        NULL, NULL,
        CASE WHEN d OPERATOR(pg_catalog.>) interval '0' THEN d END) s(id);
    IF pgmq._notifies(q) THEN
        PERFORM pgmq._notify_insert(q);
    END IF;
END
$$;

-- send_batch: with headers and a delay in seconds. Parameters: queue_name,
-- msgs, headers, delay. Returns: the msg_ids. Errors, notifies: as
-- send_batch (its body)
CREATE OR REPLACE FUNCTION pgmq.send_batch(queue_name text, msgs jsonb[], headers jsonb[], delay integer)
RETURNS SETOF bigint LANGUAGE plpgsql
AS $$
DECLARE
    q constant text := pg_catalog.lower(queue_name);
BEGIN
    IF pg_catalog.array_length(msgs, 1) IS NULL
       OR (headers IS NOT NULL AND pg_catalog.array_length(headers, 1) IS DISTINCT FROM pg_catalog.array_length(msgs, 1)) THEN
        PERFORM pgmq._validate_batch_params(msgs, headers);   -- raises
    END IF;
    IF NOT pgmq._is_queue(q) THEN
        PERFORM pgmq._queue(queue_name);   -- raises
    END IF;
    RETURN QUERY SELECT s.id FROM sluice.send_batch(
        q,
        CASE WHEN pg_catalog.array_position(msgs, NULL) IS NULL THEN msgs ELSE pgmq._json_nulls(msgs) END,
        headers,
        CASE WHEN headers IS NOT NULL THEN pgmq._group_keys(headers) END,
        CASE WHEN delay OPERATOR(pg_catalog.>) 0 THEN pg_catalog.make_interval(secs => delay) END) s(id);
    IF pgmq._notifies(q) THEN
        PERFORM pgmq._notify_insert(q);
    END IF;
END
$$;
