-- Group: pgmq compatibility, name checks and internal helpers.
--
-- Errors are raised with PGMQ's texts (SQLSTATE P0001, as PGMQ's RAISE
-- EXCEPTION gives), so that clients matching on them keep working. A call
-- naming a queue that does not exist raises what PGMQ's query on the missing
-- table raises: 'relation "pgmq.q_<name>" does not exist' (42P01).

-- format_table_name: PGMQ's table name of a queue: prefix || '_' || the
-- lowercased queue name.
--
-- Parameters:
--   queue_name  the queue name
--   prefix      'q' or 'a'
-- Returns: the table (or view) name, without schema
-- Errors: P0001 'queue name contains invalid characters: $, ;, --, or \''
CREATE OR REPLACE FUNCTION pgmq.format_table_name(queue_name text, prefix text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF queue_name ~ '\$|;|--|''' THEN
        RAISE EXCEPTION 'queue name contains invalid characters: $, ;, --, or \''';
    END IF;
    RETURN lower(prefix || '_' || queue_name);
END
$$;

-- validate_queue_name: PGMQ's length check (its table names must fit in 63
-- bytes: "q_" and the longest suffix leave 47 characters).
--
-- Parameters:
--   queue_name  the queue name
-- Returns: nothing
-- Errors: P0001 'queue name is too long, maximum length is 47 characters'
CREATE OR REPLACE FUNCTION pgmq.validate_queue_name(queue_name text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF length(queue_name) > 47 THEN
        RAISE EXCEPTION 'queue name is too long, maximum length is 47 characters';
    END IF;
END
$$;

-- _queue: the sluice queue behind a pgmq queue.
--
-- Parameters:
--   p_name  the pgmq queue name (any case)
-- Returns: the sluice queue name (the lowercased pgmq name)
-- Errors: P0001 invalid characters; 42P01 'relation "pgmq.q_<name>" does not exist'
CREATE OR REPLACE FUNCTION pgmq._queue(p_name text)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q text;
BEGIN
    SELECT m.sluice_queue INTO q FROM pgmq.meta m WHERE m.sluice_queue = lower(p_name);
    IF q IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '42P01',
            MESSAGE = format('relation "pgmq.%s" does not exist', pgmq.format_table_name(p_name, 'q'));
    END IF;
    RETURN q;
END
$$;

-- _tbl: the name of a per-queue object of the layer.
--
-- Parameters:
--   p_queue  the sluice queue name (lowercase)
--   p_kind   'q' (view), 'a' (archive), 'r' (read log), 'd' (done log)
-- Returns: the object name, without schema
CREATE OR REPLACE FUNCTION pgmq._tbl(p_queue text, p_kind text)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN p_kind IN ('q', 'a') THEN p_kind || '_' || p_queue
                ELSE '_sl_' || p_kind || '_' || p_queue END
$$;

-- _lease: the sluice lease that makes a message visible again at vt.
--
-- Parameters:
--   p_vt  the visibility timeout, as a time
-- Returns: vt - now, at least 1 microsecond and at most 7 days (sluice's bounds)
CREATE OR REPLACE FUNCTION pgmq._lease(p_vt timestamptz)
RETURNS interval
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT least(greatest(coalesce(p_vt, clock_timestamp()) - clock_timestamp(), interval '1 microsecond'),
                 interval '7 days')
$$;
