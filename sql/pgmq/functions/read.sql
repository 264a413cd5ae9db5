-- Group: pgmq compatibility, reading.
--
-- read is sluice.receive for the group 'pgmq' with lease = vt - now; read_ct
-- is sluice's attempt, msg_id its message id (the same on every delivery).
-- Each delivery is logged in _sl_r_<queue> (unlogged, append-only, rotated
-- by pgmq._rotate, which read tries at most once a minute) so that
-- delete, archive and set_vt, which take msg_ids, find its receipt.
-- Messages sent with an x-pgmq-group header carry it as their ordering key:
-- every read form delivers them in order, none while an earlier one of the
-- group is read and not deleted, archived or visible again.

-- _deliver: receive up to qty messages and log their deliveries.
--
-- Parameters:
--   p_name  the queue
--   p_vt    the visibility timeout, as a time (clamped to now + 1 µs .. now + 7 days)
--   p_qty   how many (0 or less: none; more than 10000: 10000)
--   p_cond  '{}' or a JSON object the message must contain (@>); a message
--           that does not is made visible again at once (it counts as a read)
--   p_mode  'r' read, 'p' pop (delete what is returned), 'h' one per group
-- Returns: the messages, as pgmq.message_record
-- Errors: 42P01 no such queue; SL010 outside READ COMMITTED
CREATE OR REPLACE FUNCTION pgmq._deliver(p_name text, p_vt timestamptz, p_qty integer, p_cond jsonb, p_mode "char")
RETURNS SETOF pgmq.message_record
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q constant text := pgmq._queue(p_name);
    rt constant text := pgmq._tbl(q, 'r');
    dt constant text := pgmq._tbl(q, 'd');
    v_lease constant interval := CASE p_mode WHEN 'p' THEN interval '30 seconds' ELSE pgmq._lease(p_vt) END;
    v_cond constant jsonb := nullif(coalesce(p_cond, '{}'), '{}');
    got sluice.message[];
    keep sluice.message[];
    gone bigint[];
    r text;
    now_ts timestamptz;
    tries int := 0;
    side record;
BEGIN
    IF p_qty IS NULL OR p_qty < 1 THEN
        RETURN;
    END IF;
    side := pgmq._side(q);
    LOOP
        tries := tries + 1;
        IF p_mode = 'h' THEN
            -- one receive per message: a receive never returns two messages of one key then
            got := '{}';
            FOR i IN 1 .. least(p_qty, 10000) LOOP
                keep := ARRAY(SELECT m FROM sluice.receive(q, 'pgmq', 1, v_lease) m);
                EXIT WHEN cardinality(keep) = 0;
                got := got || keep;
            END LOOP;
        ELSE
            got := ARRAY(SELECT m FROM sluice.receive(q, 'pgmq', least(p_qty, 10000), v_lease) m);
        END IF;
        EXIT WHEN cardinality(got) = 0;
        -- messages deleted or archived while not leased: complete them now
        EXECUTE format('SELECT coalesce(array_agg(DISTINCT d.msg_id), ''{}'') FROM pgmq.%I d WHERE d.msg_id = ANY ($1)', dt)
           INTO gone USING ARRAY(SELECT m.id FROM unnest(got) m);
        IF cardinality(gone) > 0 THEN
            PERFORM sluice.ack(q, 'pgmq', ARRAY(SELECT m.receipt FROM unnest(got) m WHERE m.id = ANY (gone)));
        END IF;
        keep := ARRAY(SELECT m FROM unnest(got) m WHERE NOT m.id = ANY (gone) AND (v_cond IS NULL OR m.body @> v_cond));
        IF v_cond IS NOT NULL THEN
            FOR r IN SELECT m.receipt FROM unnest(got) m WHERE NOT m.id = ANY (gone) AND NOT m.body @> v_cond LOOP
                PERFORM sluice.nack(q, 'pgmq', r, interval '0');
            END LOOP;
        END IF;

        now_ts := clock_timestamp();
        IF cardinality(keep) > 0 THEN
            IF p_mode = 'p' THEN
                PERFORM sluice.ack(q, 'pgmq', ARRAY(SELECT m.receipt FROM unnest(keep) m));
                EXECUTE format('INSERT INTO pgmq.%I (slot, msg_id, kind, done_at) SELECT $3, m.id, ''p'', $2 FROM unnest($1) m', dt)
                  USING keep, now_ts, side.slot;
            ELSE
                EXECUTE format($sql$
                    INSERT INTO pgmq.%I (slot, msg_id, at, read_at, vt, read_ct, receipt, enqueued_at, message, headers)
                    SELECT $3, m.id, $2, $2, m.lease_expires_at, m.attempt, m.receipt, m.sent_at, m.body, m.headers
                      FROM unnest($1) m
                    $sql$, rt) USING keep, now_ts, side.slot;
            END IF;
            RETURN QUERY SELECT u.id, u.attempt, u.sent_at, now_ts, u.lease_expires_at, u.body, u.headers
                           FROM unnest(keep) WITH ORDINALITY u ORDER BY u.ordinality;
            EXIT;
        END IF;
        -- everything received was already deleted (or did not match): try again, a few times
        EXIT WHEN tries >= 5 OR v_cond IS NOT NULL;
    END LOOP;
    -- Rotate last: the receives above took the queue's one dispatch lane
    -- (pgmq queues have lanes = 1), so no other reader waits for it while
    -- this one holds the old slot's lock.
    IF side.due THEN
        PERFORM pgmq._rotate(q);
    END IF;
END
$$;

-- _poll: _deliver until it returns messages or max_poll_seconds have passed.
-- Between tries it only reads sluice.status (a receive holds the queue's one
-- dispatch lane until the end of the transaction, so an empty receive in a
-- polling loop would make the other readers of the queue skip it).
--
-- Parameters:
--   p_name, p_vt, p_qty, p_cond, p_mode  as _deliver
--   p_max_poll_seconds                   how long to wait
--   p_poll_interval_ms                   pause between tries
-- Returns: the messages
-- Errors: as _deliver
CREATE OR REPLACE FUNCTION pgmq._poll(p_name text, p_vt timestamptz, p_qty integer, p_max_poll_seconds integer,
                                      p_poll_interval_ms integer, p_cond jsonb, p_mode "char")
RETURNS SETOF pgmq.message_record
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q constant text := pgmq._queue(p_name);
    stop_at constant timestamptz := clock_timestamp() + make_interval(secs => coalesce(p_max_poll_seconds, 5));
    vt_left constant interval := coalesce(p_vt, clock_timestamp()) - clock_timestamp();
BEGIN
    LOOP
        IF EXISTS (SELECT 1 FROM sluice.status(q) s WHERE s.group_name = 'pgmq' AND s.ready > 0) THEN
            -- vt is relative to when the messages are read, as in PGMQ's loop
            RETURN QUERY SELECT * FROM pgmq._deliver(p_name, clock_timestamp() + vt_left, p_qty, p_cond, p_mode);
            IF FOUND THEN
                RETURN;
            END IF;
        END IF;
        EXIT WHEN clock_timestamp() >= stop_at;
        PERFORM pg_sleep(greatest(coalesce(p_poll_interval_ms, 100), 1)::numeric / 1000);
    END LOOP;
END
$$;

-- read: vt in seconds from now. Parameters: queue_name, vt, qty, conditional.
-- Returns: pgmq.message_record rows. Errors: as read
CREATE OR REPLACE FUNCTION pgmq.read(queue_name text, vt integer, qty integer, conditional jsonb DEFAULT '{}')
RETURNS SETOF pgmq.message_record LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM pgmq._deliver(queue_name, clock_timestamp() + make_interval(secs => vt), qty, conditional, 'r') $$;

-- read_with_poll: vt in seconds. Parameters: as read_with_poll.
-- Returns: pgmq.message_record rows. Errors: as read
CREATE OR REPLACE FUNCTION pgmq.read_with_poll(queue_name text, vt integer, qty integer,
                                               max_poll_seconds integer DEFAULT 5, poll_interval_ms integer DEFAULT 100,
                                               conditional jsonb DEFAULT '{}')
RETURNS SETOF pgmq.message_record LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM pgmq._poll(queue_name, clock_timestamp() + make_interval(secs => vt), qty, max_poll_seconds,
                               poll_interval_ms, conditional, 'r') $$;

-- read_grouped: vt in seconds. Parameters: queue_name, vt, qty.
-- Returns: pgmq.message_record rows. Errors: as read
CREATE OR REPLACE FUNCTION pgmq.read_grouped(queue_name text, vt integer, qty integer)
RETURNS SETOF pgmq.message_record LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM pgmq._deliver(queue_name, clock_timestamp() + make_interval(secs => vt), qty, '{}', 'r') $$;

-- read_grouped_with_poll: vt in seconds. Parameters: as above.
-- Returns: rows. Errors: as read
CREATE OR REPLACE FUNCTION pgmq.read_grouped_with_poll(queue_name text, vt integer, qty integer,
                                                       max_poll_seconds integer DEFAULT 5, poll_interval_ms integer DEFAULT 100)
RETURNS SETOF pgmq.message_record LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM pgmq._poll(queue_name, clock_timestamp() + make_interval(secs => vt), qty, max_poll_seconds,
                               poll_interval_ms, '{}', 'r') $$;

-- read_grouped_rr: vt in seconds. Parameters: queue_name, vt, qty.
-- Returns: rows. Errors: as read
CREATE OR REPLACE FUNCTION pgmq.read_grouped_rr(queue_name text, vt integer, qty integer)
RETURNS SETOF pgmq.message_record LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM pgmq._deliver(queue_name, clock_timestamp() + make_interval(secs => vt), qty, '{}', 'r') $$;

-- read_grouped_rr_with_poll: vt in seconds. Parameters: as above.
-- Returns: rows. Errors: as read
CREATE OR REPLACE FUNCTION pgmq.read_grouped_rr_with_poll(queue_name text, vt integer, qty integer,
                                                          max_poll_seconds integer DEFAULT 5, poll_interval_ms integer DEFAULT 100)
RETURNS SETOF pgmq.message_record LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM pgmq._poll(queue_name, clock_timestamp() + make_interval(secs => vt), qty, max_poll_seconds,
                               poll_interval_ms, '{}', 'r') $$;

-- read_grouped_head: the head message of up to qty different groups.
-- Parameters: queue_name, vt (seconds), qty. Returns: rows. Errors: as read
CREATE OR REPLACE FUNCTION pgmq.read_grouped_head(queue_name text, vt integer, qty integer)
RETURNS SETOF pgmq.message_record LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM pgmq._deliver(queue_name, clock_timestamp() + make_interval(secs => vt), qty, '{}', 'h') $$;

-- read_grouped_head_with_poll: read_grouped_head, waiting. Parameters:
-- queue_name, vt, qty, max_poll_seconds, poll_interval_ms. Returns: rows.
-- Errors: as read
CREATE OR REPLACE FUNCTION pgmq.read_grouped_head_with_poll(queue_name text, vt integer, qty integer,
                                                            max_poll_seconds integer DEFAULT 5, poll_interval_ms integer DEFAULT 100)
RETURNS SETOF pgmq.message_record LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM pgmq._poll(queue_name, clock_timestamp() + make_interval(secs => vt), qty, max_poll_seconds,
                               poll_interval_ms, '{}', 'h') $$;

-- pop: read and delete up to qty messages in one call (at-most-once: the
-- caller's transaction completes them as it returns them).
--
-- Parameters:
--   queue_name  the queue
--   qty         how many (1)
-- Returns: pgmq.message_record rows
-- Errors: as read
CREATE OR REPLACE FUNCTION pgmq.pop(queue_name text, qty integer DEFAULT 1)
RETURNS SETOF pgmq.message_record LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM pgmq._deliver(queue_name, NULL, qty, '{}', 'p') $$;
