-- Group: pgmq compatibility, queue administration.

-- _create: create a pgmq queue (shared by the create* functions): a sluice
-- queue of engine 2 of the lowercased name with the single consumer group
-- 'pgmq', the view q_<name> (_make_view), the archive table a_<name>, the two
-- side tables and the queue's copies of the template functions
-- (_instantiate). Does nothing when
-- the queue exists (PGMQ's create is idempotent). The sluice queue has
-- sluice's default number of lanes, or the setting sluice.pgmq_lanes when it
-- is set (SET sluice.pgmq_lanes = 1, or ALTER DATABASE ... SET: one lane
-- delivers a queue in msg_id order).
--
-- Parameters:
--   p_name         the pgmq queue name
--   p_partitioned  recorded in pgmq.meta (sluice rotates its storage itself)
--   p_unlogged     recorded in pgmq.meta (sluice's messages are always durable)
-- Returns: nothing
-- Errors: P0001 name too long or invalid characters; SL001 a name sluice
--         cannot take; SL004 a sluice queue of that name exists already;
--         SL007 sluice.pgmq_lanes is not an integer from 1 to 256
CREATE OR REPLACE FUNCTION pgmq._create(p_name text, p_partitioned boolean, p_unlogged boolean)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q constant text := lower(p_name);
    lanes constant text := nullif(current_setting('sluice.pgmq_lanes', true), '');
BEGIN
    PERFORM pgmq.validate_queue_name(p_name);
    PERFORM pgmq.format_table_name(p_name, 'q');
    IF lanes !~ '^[0-9]{1,9}$' THEN
        RAISE EXCEPTION USING ERRCODE = 'SL007',
            MESSAGE = format('setting sluice.pgmq_lanes must be an integer from 1 to 256, got %s', quote_literal(lanes));
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('pgmq.queue_' || q));
    IF EXISTS (SELECT 1 FROM pgmq.meta m WHERE m.sluice_queue = q) THEN
        RETURN;
    END IF;
    -- PGMQ has no attempt limit: take sluice's highest. Lanes: sluice's
    -- default, so that readers take messages side by side (PGMQ's read
    -- skips locked rows, so concurrent readers do not read in msg_id order
    -- either), unless sluice.pgmq_lanes says otherwise (1: msg_id order).
    -- Retention 0: a deleted message is gone in PGMQ (an archived one is
    -- copied into the archive), so nothing reads a completed message again
    -- and its storage is reclaimed at the next rotations, not kept for
    -- sluice's default hour of replay. Engine 2, sluice's default (named,
    -- since the view and the side tables' rotation read its storage: see
    -- _make_view and _rotate; queues made before are of engine 1 and keep it).
    PERFORM sluice.create_queue(q, '{"default_group": false, "max_attempts": 1000, "retention": "0 seconds",
                                     "engine": 2}'::jsonb
                                   || CASE WHEN lanes IS NOT NULL THEN jsonb_build_object('lanes', lanes::int) ELSE '{}' END);
    PERFORM sluice.create_group(q, 'pgmq');

    EXECUTE format($ddl$
        CREATE TABLE pgmq.%1$I (
            slot         smallint NOT NULL,
            msg_id       bigint NOT NULL,
            at           timestamptz NOT NULL,
            read_at      timestamptz,
            vt           timestamptz NOT NULL,
            read_ct      integer NOT NULL,
            receipt      text,
            enqueued_at  timestamptz NOT NULL,
            message      jsonb,
            headers      jsonb
        ) PARTITION BY LIST (slot);
        CREATE UNLOGGED TABLE pgmq.%4$I PARTITION OF pgmq.%1$I FOR VALUES IN (0);
        CREATE UNLOGGED TABLE pgmq.%5$I PARTITION OF pgmq.%1$I FOR VALUES IN (1);
        CREATE INDEX ON pgmq.%1$I (msg_id, at);
        CREATE TABLE pgmq.%2$I (
            slot    smallint NOT NULL,
            msg_id  bigint NOT NULL,
            kind    "char" NOT NULL,
            done_at timestamptz NOT NULL
        ) PARTITION BY LIST (slot);
        CREATE TABLE pgmq.%6$I PARTITION OF pgmq.%2$I FOR VALUES IN (0);
        CREATE TABLE pgmq.%7$I PARTITION OF pgmq.%2$I FOR VALUES IN (1);
        CREATE INDEX ON pgmq.%2$I (msg_id);
        CREATE TABLE pgmq.%3$I (
            msg_id       bigint PRIMARY KEY,
            read_ct      integer NOT NULL DEFAULT 0,
            enqueued_at  timestamptz NOT NULL DEFAULT now(),
            last_read_at timestamptz,
            archived_at  timestamptz NOT NULL DEFAULT now(),
            vt           timestamptz NOT NULL,
            message      jsonb,
            headers      jsonb
        );
        CREATE INDEX ON pgmq.%3$I (archived_at);
        $ddl$,
        pgmq._tbl(q, 'r'), pgmq._tbl(q, 'd'), pgmq._tbl(q, 'a'),
        pgmq._tbl(q, 'r') || '_0', pgmq._tbl(q, 'r') || '_1', pgmq._tbl(q, 'd') || '_0', pgmq._tbl(q, 'd') || '_1');
    PERFORM pgmq._make_view(q);

    PERFORM pgmq._instantiate(q);
    -- (as grants.sql gives them for the queues that exist at install)
    EXECUTE format('GRANT SELECT ON pgmq.%I, pgmq.%I TO sluice_consumer, sluice_admin',
                   pgmq._tbl(q, 'q'), pgmq._tbl(q, 'a'));
    INSERT INTO pgmq.meta (queue_name, is_partitioned, is_unlogged, sluice_queue)
    VALUES (p_name, p_partitioned, p_unlogged, q);
    INSERT INTO pgmq.side_generation (sluice_queue, gen, started_at) VALUES (q, 0, clock_timestamp());
    PERFORM pgmq._mark_notify(q);   -- none (drops one left behind)
END
$$;

-- create: create a queue (PGMQ: a non-partitioned queue).
--
-- Parameters:
--   queue_name  at most 47 characters; sluice keeps it lowercased, which must
--               be a sluice name (ASCII letters, digits, "_", ".", "-")
-- Returns: nothing
-- Errors: as pgmq._create
CREATE OR REPLACE FUNCTION pgmq.create(queue_name text)
RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$ SELECT pgmq._create(queue_name, false, false) $$;

-- create_non_partitioned: the same as create.
--
-- Parameters:
--   queue_name  as create
-- Returns: nothing
-- Errors: as create
CREATE OR REPLACE FUNCTION pgmq.create_non_partitioned(queue_name text)
RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$ SELECT pgmq._create(queue_name, false, false) $$;

-- create_unlogged: accepted for compatibility; the queue is durable (sluice
-- keeps messages in logged tables), list_queues shows is_unlogged true.
--
-- Parameters:
--   queue_name  as create
-- Returns: nothing
-- Errors: as create
CREATE OR REPLACE FUNCTION pgmq.create_unlogged(queue_name text)
RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$ SELECT pgmq._create(queue_name, false, true) $$;

-- create_partitioned: accepted for compatibility, without pg_partman: sluice
-- rotates and truncates its own storage. The intervals are ignored.
--
-- Parameters:
--   queue_name          as create
--   partition_interval  ignored
--   retention_interval  ignored
--   premake             at least 1, otherwise ignored
-- Returns: nothing
-- Errors: as create; P0001 'premake must be at least 1, got %'
CREATE OR REPLACE FUNCTION pgmq.create_partitioned(queue_name text, partition_interval text DEFAULT '10000',
                                                   retention_interval text DEFAULT '100000', premake integer DEFAULT 4)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF premake < 1 THEN
        RAISE EXCEPTION 'premake must be at least 1, got %', premake;
    END IF;
    PERFORM pgmq._create(queue_name, true, false);
END
$$;

-- acquire_queue_lock: the transaction-level advisory lock create and
-- drop_queue take on a queue name (as PGMQ's).
--
-- Parameters:
--   queue_name  the queue
-- Returns: nothing
-- Errors: none
CREATE OR REPLACE FUNCTION pgmq.acquire_queue_lock(queue_name text)
RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$ SELECT pg_advisory_xact_lock(hashtext('pgmq.queue_' || lower(queue_name))) $$;

-- drop_queue: drop a queue, its messages, its archive, side tables and
-- insert notification marker.
--
-- Parameters:
--   queue_name  the queue
-- Returns: true if it existed; false (and a NOTICE) if not
-- Errors: P0001 invalid characters
CREATE OR REPLACE FUNCTION pgmq.drop_queue(queue_name text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q constant text := lower(queue_name);
BEGIN
    PERFORM pgmq.format_table_name(queue_name, 'q');
    PERFORM pg_advisory_xact_lock(hashtext('pgmq.queue_' || q));
    IF NOT EXISTS (SELECT 1 FROM pgmq.meta m WHERE m.sluice_queue = q) THEN
        RAISE NOTICE 'pgmq queue `%` does not exist', queue_name;
        RETURN false;
    END IF;
    -- the sluice queue first: it waits for the transactions using the queue
    -- (sluice.drop_queue) holding none of the layer's objects, which a
    -- transaction holding the queue may go on to read (its view among them,
    -- dropped with the storage it reads)
    PERFORM sluice.drop_queue(q);
    EXECUTE format('DROP FUNCTION IF EXISTS pgmq.%I, pgmq.%I, pgmq.%I', pgmq._fn(q, 'deliver'), pgmq._fn(q, 'complete'),
                   pgmq._fn(q, 'set_vt'));
    IF to_regclass(format('pgmq.%I', pgmq._tbl(q, 'q'))) IS NOT NULL THEN
        -- (dropped with the storage as a rule: no NOTICE that it is not there)
        EXECUTE format('DROP VIEW pgmq.%I', pgmq._tbl(q, 'q'));
    END IF;
    EXECUTE format('DROP TABLE IF EXISTS pgmq.%I, pgmq.%I, pgmq.%I',
                   pgmq._tbl(q, 'a'), pgmq._tbl(q, 'r'), pgmq._tbl(q, 'd'));
    DELETE FROM pgmq.meta m WHERE m.sluice_queue = q;   -- and its notify_insert_throttle row
    PERFORM pgmq._mark_notify(q);   -- drops the marker
    RETURN true;
END
$$;

-- drop_queue: PGMQ's deprecated form; partitioned is ignored.
--
-- Parameters:
--   queue_name   the queue
--   partitioned  ignored
-- Returns: as drop_queue(queue_name)
-- Errors: as drop_queue(queue_name)
CREATE OR REPLACE FUNCTION pgmq.drop_queue(queue_name text, partitioned boolean)
RETURNS boolean
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$ SELECT pgmq.drop_queue(queue_name) $$;

-- purge_queue: remove every message of a queue (sluice.purge_queue) and
-- truncate its side tables. The archive is kept.
--
-- Parameters:
--   queue_name  the queue
-- Returns: the number of messages that were in the queue (q_<name>)
-- Errors: 42P01 no such queue
CREATE OR REPLACE FUNCTION pgmq.purge_queue(queue_name text)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q constant text := pgmq._queue(queue_name);
    n bigint;
BEGIN
    EXECUTE format('SELECT count(*) FROM pgmq.%I', pgmq._tbl(q, 'q')) INTO n;
    PERFORM sluice.purge_queue(q);
    EXECUTE format('TRUNCATE pgmq.%I, pgmq.%I', pgmq._tbl(q, 'r'), pgmq._tbl(q, 'd'));
    RETURN n;
END
$$;

-- list_queues: the queues.
--
-- Returns: one pgmq.queue_record per queue
-- Errors: none
CREATE OR REPLACE FUNCTION pgmq.list_queues()
RETURNS SETOF pgmq.queue_record
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT m.queue_name, m.is_partitioned, m.is_unlogged, m.created_at FROM pgmq.meta m ORDER BY m.created_at
$$;

-- create_fifo_index: accepted; sluice orders messages of one x-pgmq-group
-- (its ordering key) without an index.
--
-- Parameters:
--   queue_name  the queue
-- Returns: nothing
-- Errors: 42P01 no such queue
CREATE OR REPLACE FUNCTION pgmq.create_fifo_index(queue_name text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pgmq._queue(queue_name);
END
$$;

-- create_fifo_indexes_all: accepted; does nothing (see create_fifo_index).
--
-- Returns: nothing
-- Errors: none
CREATE OR REPLACE FUNCTION pgmq.create_fifo_indexes_all()
RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$ SELECT $$;

-- convert_archive_partitioned: accepted; does nothing but a NOTICE (archive
-- tables are plain tables; there is no pg_partman).
--
-- Parameters:
--   table_name          the queue
--   partition_interval  ignored
--   retention_interval  ignored
--   leading_partition   ignored
-- Returns: nothing
-- Errors: 42P01 no such queue
CREATE OR REPLACE FUNCTION pgmq.convert_archive_partitioned(table_name text, partition_interval text DEFAULT '10000',
                                                            retention_interval text DEFAULT '100000',
                                                            leading_partition integer DEFAULT 10)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pgmq._queue(table_name);
    RAISE NOTICE 'sluice: archive of % is not partitioned (no pg_partman); nothing to convert', table_name;
END
$$;

-- detach_archive: accepted; does nothing (no extension owns the archive).
--
-- Parameters:
--   queue_name  the queue
-- Returns: nothing
-- Errors: 42P01 no such queue
CREATE OR REPLACE FUNCTION pgmq.detach_archive(queue_name text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pgmq._queue(queue_name);
END
$$;
