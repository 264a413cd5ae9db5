-- Group: pgmq compatibility, insert notifications.
--
-- With enable_notify_insert on, send and send_batch NOTIFY the channel
-- 'pgmq.q_<queue_name>.INSERT' (PGMQ's channel, empty payload) at commit.
-- PostgreSQL folds identical notifications of one transaction into one.
-- The throttle interval is stored and listed, not applied: applying it
-- would mean updating last_notified_at, a row update per notification,
-- which sluice does not do; last_notified_at stays at its initial value.
-- pgmq.notify_insert_throttle says which queues notify; each of them also
-- has a marker view, pgmq._sl_n_<name> (pgmq._mark_notify), which is what
-- a send looks at: a catalog lookup, cheaper than a query of the table.

-- enable_notify_insert: turn insert notifications on for a queue.
--
-- Parameters:
--   queue_name            the queue
--   throttle_interval_ms  stored (not applied), not negative (250)
-- Returns: nothing
-- Errors: P0001 negative interval, 'Queue "x" does not exist. ...'
CREATE OR REPLACE FUNCTION pgmq.enable_notify_insert(queue_name text, throttle_interval_ms integer DEFAULT 250)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_name text;
BEGIN
    IF throttle_interval_ms < 0 THEN
        RAISE EXCEPTION 'throttle_interval_ms must be non-negative';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('pgmq.queue_' || lower(enable_notify_insert.queue_name)));
    SELECT m.queue_name INTO v_name FROM pgmq.meta m WHERE m.sluice_queue = lower(enable_notify_insert.queue_name);
    IF v_name IS NULL THEN
        RAISE EXCEPTION 'Queue "%" does not exist. Create it first using pgmq.create()', queue_name;
    END IF;
    INSERT INTO pgmq.notify_insert_throttle (queue_name, throttle_interval_ms)
    VALUES (v_name, coalesce(throttle_interval_ms, 250))
    ON CONFLICT ON CONSTRAINT notify_insert_throttle_queue_name_key DO UPDATE
       SET throttle_interval_ms = EXCLUDED.throttle_interval_ms, last_notified_at = to_timestamp(0);
    PERFORM pgmq._mark_notify(lower(enable_notify_insert.queue_name));
END
$$;

-- disable_notify_insert: turn insert notifications off.
--
-- Parameters:
--   queue_name  the queue
-- Returns: nothing
-- Errors: none
CREATE OR REPLACE FUNCTION pgmq.disable_notify_insert(queue_name text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('pgmq.queue_' || lower(disable_notify_insert.queue_name)));
    DELETE FROM pgmq.notify_insert_throttle t
     WHERE t.queue_name IN (SELECT m.queue_name FROM pgmq.meta m WHERE m.sluice_queue = lower(disable_notify_insert.queue_name));
    PERFORM pgmq._mark_notify(lower(disable_notify_insert.queue_name));
END
$$;

-- update_notify_insert: change the stored throttle interval.
--
-- Parameters:
--   queue_name            the queue (notifications must be on)
--   throttle_interval_ms  not negative
-- Returns: nothing
-- Errors: P0001 negative interval, missing queue, notifications not on (PGMQ's texts)
CREATE OR REPLACE FUNCTION pgmq.update_notify_insert(queue_name text, throttle_interval_ms integer)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF throttle_interval_ms < 0 THEN
        RAISE EXCEPTION 'throttle_interval_ms must be non-negative, got: %', throttle_interval_ms;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pgmq.meta m WHERE m.sluice_queue = lower(update_notify_insert.queue_name)) THEN
        RAISE EXCEPTION 'Queue "%" does not exist. Create the queue first using pgmq.create()', queue_name;
    END IF;
    UPDATE pgmq.notify_insert_throttle t SET throttle_interval_ms = update_notify_insert.throttle_interval_ms
     WHERE t.queue_name IN (SELECT m.queue_name FROM pgmq.meta m WHERE m.sluice_queue = lower(update_notify_insert.queue_name));
    IF NOT FOUND THEN
        RAISE EXCEPTION 'Queue "%" does not have notify_insert enabled. Enable it first using pgmq.enable_notify_insert()', queue_name;
    END IF;
END
$$;

-- list_notify_insert_throttles: the queues with notifications on.
--
-- Returns: (queue_name, throttle_interval_ms, last_notified_at)
-- Errors: none
CREATE OR REPLACE FUNCTION pgmq.list_notify_insert_throttles()
RETURNS TABLE (queue_name text, throttle_interval_ms integer, last_notified_at timestamptz)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT t.queue_name::text, t.throttle_interval_ms, t.last_notified_at FROM pgmq.notify_insert_throttle t
     ORDER BY t.queue_name
$$;
