-- Group: pgmq compatibility, topics (routing keys bound to queues by
-- patterns: * one segment, # zero or more segments).

-- validate_routing_key: check a routing key.
--
-- Parameters:
--   routing_key  dot-separated segments of letters, digits, "_" and "-"
-- Returns: true
-- Errors: P0001 with PGMQ's texts
CREATE OR REPLACE FUNCTION pgmq.validate_routing_key(routing_key text)
RETURNS boolean
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF routing_key IS NULL OR routing_key = '' THEN
        RAISE EXCEPTION 'routing_key cannot be NULL or empty';
    END IF;
    IF length(routing_key) > 255 THEN
        RAISE EXCEPTION 'routing_key length cannot exceed 255 characters, got % characters', length(routing_key);
    END IF;
    IF routing_key !~ '^[a-zA-Z0-9._-]+$' THEN
        RAISE EXCEPTION 'routing_key contains invalid characters. Only alphanumeric, dots, hyphens, and underscores are allowed. Got: %', routing_key;
    END IF;
    IF routing_key LIKE '.%' THEN
        RAISE EXCEPTION 'routing_key cannot start with a dot. Got: %', routing_key;
    END IF;
    IF routing_key LIKE '%.' THEN
        RAISE EXCEPTION 'routing_key cannot end with a dot. Got: %', routing_key;
    END IF;
    IF position('..' IN routing_key) > 0 THEN
        RAISE EXCEPTION 'routing_key cannot contain consecutive dots. Got: %', routing_key;
    END IF;
    RETURN true;
END
$$;

-- validate_topic_pattern: check a binding pattern.
--
-- Parameters:
--   pattern  like a routing key, with * and # segments
-- Returns: true
-- Errors: P0001 with PGMQ's texts
CREATE OR REPLACE FUNCTION pgmq.validate_topic_pattern(pattern text)
RETURNS boolean
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF pattern IS NULL OR pattern = '' THEN
        RAISE EXCEPTION 'pattern cannot be NULL or empty';
    END IF;
    IF length(pattern) > 255 THEN
        RAISE EXCEPTION 'pattern length cannot exceed 255 characters, got % characters', length(pattern);
    END IF;
    IF pattern !~ '^[a-zA-Z0-9._\-*#]+$' THEN
        RAISE EXCEPTION 'pattern contains invalid characters. Only alphanumeric, dots, hyphens, underscores, *, and # are allowed. Got: %', pattern;
    END IF;
    IF pattern LIKE '.%' THEN
        RAISE EXCEPTION 'pattern cannot start with a dot. Got: %', pattern;
    END IF;
    IF pattern LIKE '%.' THEN
        RAISE EXCEPTION 'pattern cannot end with a dot. Got: %', pattern;
    END IF;
    IF position('..' IN pattern) > 0 THEN
        RAISE EXCEPTION 'pattern cannot contain consecutive dots. Got: %', pattern;
    END IF;
    IF position('**' IN pattern) > 0 THEN
        RAISE EXCEPTION 'pattern cannot contain consecutive stars (**). Use # for multi-segment matching. Got: %', pattern;
    END IF;
    IF position('##' IN pattern) > 0 THEN
        RAISE EXCEPTION 'pattern cannot contain consecutive hashes (##). A single # already matches zero or more segments. Got: %', pattern;
    END IF;
    IF position('*#' IN pattern) > 0 OR position('#*' IN pattern) > 0 THEN
        RAISE EXCEPTION 'pattern cannot contain adjacent wildcards (*# or #*). Separate wildcards with dots. Got: %', pattern;
    END IF;
    RETURN true;
END
$$;

-- _topic_regex: the regular expression of a pattern (anchored; * one
-- segment, # anything).
--
-- Parameters:
--   p_pattern  a valid pattern
-- Returns: the regular expression
CREATE OR REPLACE FUNCTION pgmq._topic_regex(p_pattern text)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT '^' || replace(replace(replace(p_pattern, '.', '\.'), '*', '[^.]+'), '#', '.*') || '$'
$$;

-- bind_topic: route messages whose routing key matches pattern to a queue.
--
-- Parameters:
--   pattern     the pattern
--   queue_name  the queue (must exist)
-- Returns: nothing (binding twice is harmless)
-- Errors: P0001 bad pattern, empty queue_name, 'Queue "x" does not exist. ...'
CREATE OR REPLACE FUNCTION pgmq.bind_topic(pattern text, queue_name text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pgmq.validate_topic_pattern(pattern);
    IF queue_name IS NULL OR queue_name = '' THEN
        RAISE EXCEPTION 'queue_name cannot be NULL or empty';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pgmq.meta m WHERE m.queue_name = bind_topic.queue_name) THEN
        RAISE EXCEPTION 'Queue "%" does not exist. Create the queue first using pgmq.create()', queue_name;
    END IF;
    INSERT INTO pgmq.topic_bindings (pattern, queue_name, compiled_regex)
    VALUES (pattern, queue_name, pgmq._topic_regex(pattern))
    ON CONFLICT ON CONSTRAINT topic_bindings_unique_pattern_queue DO NOTHING;
END
$$;

-- unbind_topic: remove a binding.
--
-- Parameters:
--   pattern     the pattern
--   queue_name  the queue
-- Returns: true if it existed
-- Errors: P0001 empty pattern or queue_name
CREATE OR REPLACE FUNCTION pgmq.unbind_topic(pattern text, queue_name text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF pattern IS NULL OR pattern = '' THEN
        RAISE EXCEPTION 'pattern cannot be NULL or empty';
    END IF;
    IF queue_name IS NULL OR queue_name = '' THEN
        RAISE EXCEPTION 'queue_name cannot be NULL or empty';
    END IF;
    DELETE FROM pgmq.topic_bindings b WHERE b.pattern = unbind_topic.pattern AND b.queue_name = unbind_topic.queue_name;
    RETURN FOUND;
END
$$;

-- list_topic_bindings: every binding.
--
-- Returns: (pattern, queue_name, bound_at, compiled_regex) by pattern
-- Errors: none
CREATE OR REPLACE FUNCTION pgmq.list_topic_bindings()
RETURNS TABLE (pattern text, queue_name text, bound_at timestamptz, compiled_regex text)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT b.pattern, b.queue_name, b.bound_at, b.compiled_regex FROM pgmq.topic_bindings b
     ORDER BY b.bound_at, b.pattern, b.queue_name
$$;

-- list_topic_bindings: the bindings of one queue.
--
-- Parameters:
--   queue_name  the queue
-- Returns: as list_topic_bindings()
-- Errors: none
CREATE OR REPLACE FUNCTION pgmq.list_topic_bindings(queue_name text)
RETURNS TABLE (pattern text, queue_name text, bound_at timestamptz, compiled_regex text)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT b.pattern, b.queue_name, b.bound_at, b.compiled_regex FROM pgmq.topic_bindings b
     WHERE b.queue_name = list_topic_bindings.queue_name
     ORDER BY b.bound_at, b.pattern
$$;

-- test_routing: the bindings a routing key matches.
--
-- Parameters:
--   routing_key  the key
-- Returns: (pattern, queue_name, compiled_regex) by pattern
-- Errors: P0001 invalid routing key
CREATE OR REPLACE FUNCTION pgmq.test_routing(routing_key text)
RETURNS TABLE (pattern text, queue_name text, compiled_regex text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pgmq.validate_routing_key(routing_key);
    RETURN QUERY SELECT b.pattern, b.queue_name, b.compiled_regex FROM pgmq.topic_bindings b
                  WHERE test_routing.routing_key ~ b.compiled_regex ORDER BY b.pattern;
END
$$;

-- send_topic: send a message to every queue a binding routes the key to.
--
-- Parameters:
--   routing_key  the key
--   msg          the message (not NULL)
--   headers      as send
--   delay        seconds (not negative)
-- Returns: how many queues it was sent to
-- Errors: P0001 invalid key, NULL msg, negative delay; as send
CREATE OR REPLACE FUNCTION pgmq.send_topic(routing_key text, msg jsonb, headers jsonb, delay integer)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    b record;
    n integer := 0;
BEGIN
    PERFORM pgmq.validate_routing_key(routing_key);
    IF msg IS NULL THEN
        RAISE EXCEPTION 'msg cannot be NULL';
    END IF;
    IF delay < 0 THEN
        RAISE EXCEPTION 'delay cannot be negative, got: %', delay;
    END IF;
    FOR b IN SELECT DISTINCT t.queue_name FROM pgmq.topic_bindings t
              WHERE send_topic.routing_key ~ t.compiled_regex ORDER BY t.queue_name LOOP
        PERFORM pgmq.send(b.queue_name, msg, headers, coalesce(delay, 0));
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;

-- send_topic: two arguments. Parameters: routing_key, msg.
-- Returns: how many queues. Errors: as send_topic
CREATE OR REPLACE FUNCTION pgmq.send_topic(routing_key text, msg jsonb)
RETURNS integer LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $$ SELECT pgmq.send_topic(routing_key, msg, NULL::jsonb, 0) $$;

-- send_topic: with a delay. Parameters: routing_key, msg, delay.
-- Returns: how many queues. Errors: as send_topic
CREATE OR REPLACE FUNCTION pgmq.send_topic(routing_key text, msg jsonb, delay integer)
RETURNS integer LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $$ SELECT pgmq.send_topic(routing_key, msg, NULL::jsonb, delay) $$;

-- send_topic: with headers. Parameters: routing_key, msg, headers.
-- Returns: how many queues. Errors: as send_topic
CREATE OR REPLACE FUNCTION pgmq.send_topic(routing_key text, msg jsonb, headers jsonb)
RETURNS integer LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $$ SELECT pgmq.send_topic(routing_key, msg, headers, 0) $$;

-- send_batch_topic: send a batch to every queue the key is routed to.
--
-- Parameters:
--   routing_key  the key
--   msgs         the messages
--   headers      NULL or one per message
--   delay        visible from this time on
-- Returns: (queue_name, msg_id) per message sent
-- Errors: as validate_routing_key and send_batch
CREATE OR REPLACE FUNCTION pgmq.send_batch_topic(routing_key text, msgs jsonb[], headers jsonb[], delay timestamptz)
RETURNS TABLE (queue_name text, msg_id bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    b record;
BEGIN
    PERFORM pgmq.validate_routing_key(routing_key);
    PERFORM pgmq._validate_batch_params(msgs, headers);
    FOR b IN SELECT DISTINCT t.queue_name FROM pgmq.topic_bindings t
              WHERE send_batch_topic.routing_key ~ t.compiled_regex ORDER BY t.queue_name LOOP
        RETURN QUERY SELECT b.queue_name, s.id FROM pgmq.send_batch(b.queue_name, msgs, headers, delay) s(id);
    END LOOP;
END
$$;

-- send_batch_topic: two arguments. Parameters: routing_key, msgs.
-- Returns: (queue_name, msg_id) rows. Errors: as send_batch_topic
CREATE OR REPLACE FUNCTION pgmq.send_batch_topic(routing_key text, msgs jsonb[])
RETURNS TABLE (queue_name text, msg_id bigint) LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM pgmq.send_batch_topic(routing_key, msgs, NULL::jsonb[], clock_timestamp()) $$;

-- send_batch_topic: with headers. Parameters: routing_key, msgs, headers.
-- Returns: (queue_name, msg_id) rows. Errors: as send_batch_topic
CREATE OR REPLACE FUNCTION pgmq.send_batch_topic(routing_key text, msgs jsonb[], headers jsonb[])
RETURNS TABLE (queue_name text, msg_id bigint) LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM pgmq.send_batch_topic(routing_key, msgs, headers, clock_timestamp()) $$;

-- send_batch_topic: with a delay in seconds. Parameters: routing_key, msgs,
-- delay. Returns: (queue_name, msg_id) rows. Errors: as send_batch_topic
CREATE OR REPLACE FUNCTION pgmq.send_batch_topic(routing_key text, msgs jsonb[], delay integer)
RETURNS TABLE (queue_name text, msg_id bigint) LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM pgmq.send_batch_topic(routing_key, msgs, NULL::jsonb[], clock_timestamp() + make_interval(secs => delay)) $$;

-- send_batch_topic: with a visibility time. Parameters: routing_key, msgs,
-- delay. Returns: (queue_name, msg_id) rows. Errors: as send_batch_topic
CREATE OR REPLACE FUNCTION pgmq.send_batch_topic(routing_key text, msgs jsonb[], delay timestamptz)
RETURNS TABLE (queue_name text, msg_id bigint) LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM pgmq.send_batch_topic(routing_key, msgs, NULL::jsonb[], delay) $$;

-- send_batch_topic: with headers and a delay in seconds. Parameters:
-- routing_key, msgs, headers, delay. Returns: (queue_name, msg_id) rows.
-- Errors: as send_batch_topic
CREATE OR REPLACE FUNCTION pgmq.send_batch_topic(routing_key text, msgs jsonb[], headers jsonb[], delay integer)
RETURNS TABLE (queue_name text, msg_id bigint) LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM pgmq.send_batch_topic(routing_key, msgs, headers, clock_timestamp() + make_interval(secs => delay)) $$;
