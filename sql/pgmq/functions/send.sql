-- Group: pgmq compatibility, sending.
--
-- A message's x-pgmq-group header becomes its sluice ordering key, so the
-- messages of one group are delivered in order, one at a time (PGMQ's FIFO).
-- The delay becomes sluice's delay; a NULL msg is sent as JSON null.

-- _target: the sluice queue of a pgmq queue and whether insert
-- notifications are on for it.
--
-- Parameters:
--   p_name  the pgmq queue name
-- Returns: (sluice queue, notify channel or NULL)
-- Errors: 42P01 no such queue
CREATE OR REPLACE FUNCTION pgmq._target(p_name text, OUT q text, OUT channel text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    SELECT m.sluice_queue, CASE WHEN t.queue_name IS NOT NULL THEN 'pgmq.q_' || m.queue_name || '.INSERT' END
      INTO q, channel
      FROM pgmq.meta m LEFT JOIN pgmq.notify_insert_throttle t ON t.queue_name = m.queue_name
     WHERE m.sluice_queue = lower(p_name);
    IF q IS NULL THEN
        q := pgmq._queue(p_name);  -- raises
    END IF;
END
$$;

-- send: send one message (the form every other send calls).
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
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t record;
BEGIN
    t := pgmq._target(queue_name);
    RETURN NEXT sluice.send(t.q, coalesce(msg, 'null'), headers, headers ->> 'x-pgmq-group',
                            greatest(coalesce(delay, clock_timestamp()) - clock_timestamp(), interval '0'));
    IF t.channel IS NOT NULL THEN
        PERFORM pg_notify(t.channel, '');
    END IF;
END
$$;

-- send: two arguments. Parameters: queue_name, msg. Returns: the msg_id.
-- Errors: as send
CREATE OR REPLACE FUNCTION pgmq.send(queue_name text, msg jsonb)
RETURNS SETOF bigint LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM pgmq.send(queue_name, msg, NULL::jsonb, clock_timestamp()) $$;

-- send: with headers. Parameters: queue_name, msg, headers. Returns: the msg_id.
-- Errors: as send
CREATE OR REPLACE FUNCTION pgmq.send(queue_name text, msg jsonb, headers jsonb)
RETURNS SETOF bigint LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM pgmq.send(queue_name, msg, headers, clock_timestamp()) $$;

-- send: with a delay in seconds. Parameters: queue_name, msg, delay.
-- Returns: the msg_id. Errors: as send
CREATE OR REPLACE FUNCTION pgmq.send(queue_name text, msg jsonb, delay integer)
RETURNS SETOF bigint LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM pgmq.send(queue_name, msg, NULL::jsonb, clock_timestamp() + make_interval(secs => delay)) $$;

-- send: with a visibility time. Parameters: queue_name, msg, delay.
-- Returns: the msg_id. Errors: as send
CREATE OR REPLACE FUNCTION pgmq.send(queue_name text, msg jsonb, delay timestamptz)
RETURNS SETOF bigint LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM pgmq.send(queue_name, msg, NULL::jsonb, delay) $$;

-- send: with headers and a delay in seconds. Parameters: queue_name, msg,
-- headers, delay. Returns: the msg_id. Errors: as send
CREATE OR REPLACE FUNCTION pgmq.send(queue_name text, msg jsonb, headers jsonb, delay integer)
RETURNS SETOF bigint LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM pgmq.send(queue_name, msg, headers, clock_timestamp() + make_interval(secs => delay)) $$;

-- _validate_batch_params: PGMQ's checks of a batch.
--
-- Parameters:
--   msgs     the messages
--   headers  NULL or one per message
-- Returns: nothing
-- Errors: P0001 with PGMQ's texts
CREATE OR REPLACE FUNCTION pgmq._validate_batch_params(msgs jsonb[], headers jsonb[])
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF msgs IS NULL OR array_length(msgs, 1) IS NULL THEN
        RAISE EXCEPTION 'msgs cannot be NULL or empty';
    END IF;
    IF headers IS NOT NULL AND coalesce(array_length(headers, 1), 0) <> coalesce(array_length(msgs, 1), 0) THEN
        RAISE EXCEPTION 'headers array length (%) must match msgs array length (%)',
            coalesce(array_length(headers, 1), 0), coalesce(array_length(msgs, 1), 0);
    END IF;
END
$$;

-- send_batch: send many messages in one statement (the form every other
-- send_batch calls).
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
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t record;
BEGIN
    PERFORM pgmq._validate_batch_params(msgs, headers);
    t := pgmq._target(queue_name);
    RETURN QUERY SELECT * FROM sluice.send_batch(
        t.q,
        ARRAY(SELECT coalesce(b, 'null') FROM unnest(msgs) WITH ORDINALITY u(b, i) ORDER BY i),
        headers,
        CASE WHEN headers IS NOT NULL
             THEN ARRAY(SELECT h ->> 'x-pgmq-group' FROM unnest(headers) WITH ORDINALITY u(h, i) ORDER BY i) END,
        greatest(coalesce(delay, clock_timestamp()) - clock_timestamp(), interval '0'));
    IF t.channel IS NOT NULL THEN
        PERFORM pg_notify(t.channel, '');
    END IF;
END
$$;

-- send_batch: two arguments. Parameters: queue_name, msgs.
-- Returns: the msg_ids. Errors: as send_batch
CREATE OR REPLACE FUNCTION pgmq.send_batch(queue_name text, msgs jsonb[])
RETURNS SETOF bigint LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM pgmq.send_batch(queue_name, msgs, NULL::jsonb[], clock_timestamp()) $$;

-- send_batch: with headers. Parameters: queue_name, msgs, headers.
-- Returns: the msg_ids. Errors: as send_batch
CREATE OR REPLACE FUNCTION pgmq.send_batch(queue_name text, msgs jsonb[], headers jsonb[])
RETURNS SETOF bigint LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM pgmq.send_batch(queue_name, msgs, headers, clock_timestamp()) $$;

-- send_batch: with a delay in seconds. Parameters: queue_name, msgs, delay.
-- Returns: the msg_ids. Errors: as send_batch
CREATE OR REPLACE FUNCTION pgmq.send_batch(queue_name text, msgs jsonb[], delay integer)
RETURNS SETOF bigint LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM pgmq.send_batch(queue_name, msgs, NULL::jsonb[], clock_timestamp() + make_interval(secs => delay)) $$;

-- send_batch: with a visibility time. Parameters: queue_name, msgs, delay.
-- Returns: the msg_ids. Errors: as send_batch
CREATE OR REPLACE FUNCTION pgmq.send_batch(queue_name text, msgs jsonb[], delay timestamptz)
RETURNS SETOF bigint LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM pgmq.send_batch(queue_name, msgs, NULL::jsonb[], delay) $$;

-- send_batch: with headers and a delay in seconds. Parameters: queue_name,
-- msgs, headers, delay. Returns: the msg_ids. Errors: as send_batch
CREATE OR REPLACE FUNCTION pgmq.send_batch(queue_name text, msgs jsonb[], headers jsonb[], delay integer)
RETURNS SETOF bigint LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM pgmq.send_batch(queue_name, msgs, headers, clock_timestamp() + make_interval(secs => delay)) $$;
