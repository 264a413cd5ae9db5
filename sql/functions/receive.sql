-- Group: receiving

-- _group_state: the newest cursor of a group, or where to resume when there
-- is none (first receive, after a crash, after a purge).
--
-- Parameters:
--   p0     the queue's first partition (queue_id * 4)
--   g      the group
-- Returns: (seq, cursor, lwm, next_scan_at, lwm_at, found)
CREATE OR REPLACE FUNCTION sluice._group_state(p0 int, g sluice.consumer_group,
    OUT seq bigint, OUT cursor bigint, OUT lwm bigint, OUT next_scan_at timestamptz,
    OUT lwm_at timestamptz, OUT found boolean)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r record;
BEGIN
    EXECUTE 'SELECT seq, cursor, lwm, next_scan_at, lwm_at FROM sluice.group_states
             WHERE part BETWEEN $1 AND $1 + 3 AND group_id = $2 ORDER BY seq DESC LIMIT 1'
        INTO r USING p0, g.id;
    IF r.seq IS NOT NULL THEN
        seq := r.seq; cursor := r.cursor; lwm := r.lwm;
        next_scan_at := r.next_scan_at; lwm_at := r.lwm_at; found := true;
        RETURN;
    END IF;
    EXECUTE 'SELECT seq, lwm FROM sluice.checkpoints
             WHERE part BETWEEN $1 AND $1 + 3 AND group_id = $2 ORDER BY seq DESC LIMIT 1'
        INTO r USING p0, g.id;
    seq := coalesce(r.seq, 0);
    lwm := greatest(coalesce(r.lwm, g.start_pos), g.start_pos);
    cursor := lwm - 1;
    next_scan_at := '-infinity';
    lwm_at := '-infinity';
    found := false;
END
$$;

-- _window: the positions a group has dispatched and not completed, with their
-- newest lease: positions in [p_lwm, p_cursor] that are meant for the group
-- (not a retry copy of another group) and have no completion.
CREATE OR REPLACE FUNCTION sluice._window(p0 int, p_group_id int, p_lwm bigint, p_cursor bigint)
RETURNS TABLE (pos bigint, id bigint, txid xid8, slot smallint, attempt int, expires timestamptz)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN QUERY EXECUTE $q$
        SELECT w.pos, w.id, w.txid, w.slot, d.attempt, d.expires
        FROM (SELECT b.first_pos + u.o - 1 AS pos, u.id, u.txid, u.slot, u.tg
              FROM sluice.batches b
              CROSS JOIN LATERAL unnest(b.ids, b.txids, b.slots, b.targets) WITH ORDINALITY AS u(id, txid, slot, tg, o)
              WHERE b.part BETWEEN $1 AND $1 + 3 AND b.last_pos >= $3 AND b.first_pos <= $4) w
        LEFT JOIN LATERAL (
            SELECT dd.attempt, max(dd.expires_at) AS expires
            FROM sluice.deliveries dd
            WHERE dd.part BETWEEN $1 AND $1 + 3 AND dd.part = $1 + w.slot
              AND dd.group_id = $2 AND dd.pos = w.pos
            GROUP BY dd.attempt ORDER BY dd.attempt DESC LIMIT 1) d ON true
        WHERE w.pos BETWEEN $3 AND $4 AND (w.tg IS NULL OR w.tg = $2)
          AND NOT EXISTS (SELECT 1 FROM sluice.acks a
                          WHERE a.part BETWEEN $1 AND $1 + 3 AND a.part = $1 + w.slot
                            AND a.group_id = $2 AND a.pos = w.pos)
        ORDER BY w.pos
    $q$ USING p0, p_group_id, p_lwm, p_cursor;
END
$$;

-- _lwm: the first position in [p_lwm, p_cursor] the group has not completed
-- (p_cursor + 1 when all are). Stops at the first one, so it is cheap when the
-- front of the window is still in flight.
CREATE OR REPLACE FUNCTION sluice._lwm(p0 int, p_group_id int, p_lwm bigint, p_cursor bigint)
RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v bigint;
BEGIN
    IF p_cursor < p_lwm THEN
        RETURN p_lwm;
    END IF;
    EXECUTE $q$
        SELECT w.pos
        FROM (SELECT b.first_pos + u.o - 1 AS pos, u.slot, u.tg
              FROM (SELECT * FROM sluice.batches
                    WHERE part BETWEEN $1 AND $1 + 3 AND last_pos >= $3 AND first_pos <= $4
                    ORDER BY last_pos) b
              CROSS JOIN LATERAL unnest(b.slots, b.targets) WITH ORDINALITY AS u(slot, tg, o)) w
        WHERE w.pos BETWEEN $3 AND $4 AND (w.tg IS NULL OR w.tg = $2)
          AND NOT EXISTS (SELECT 1 FROM sluice.acks a
                          WHERE a.part BETWEEN $1 AND $1 + 3 AND a.part = $1 + w.slot
                            AND a.group_id = $2 AND a.pos = w.pos)
        LIMIT 1
    $q$ INTO v USING p0, p_group_id, p_lwm, p_cursor;
    RETURN coalesce(v, p_cursor + 1);
END
$$;

-- _dead_letter: move one delivery of a group to the dead-letter store and
-- complete its position. Returns false if the position was already completed.
CREATE OR REPLACE FUNCTION sluice._dead_letter(p_queue_id int, p_group_id int, p_part int, p_pos bigint,
                                               p_msg_txid xid8, p_msg_id bigint, p_attempts int, p_error text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    INSERT INTO sluice.acks (part, group_id, pos, kind, acked_at)
    VALUES (p_part, p_group_id, p_pos, 'd', v_now)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    EXECUTE $q$
        INSERT INTO sluice.dead_letter (queue_id, group_id, message_id, attempts, error, died_at,
                                        sent_at, priority, key, headers, body)
        SELECT $1, $2, coalesce(m.origin_id, m.id), $5, $6, $7, m.sent_at, m.priority, m.key, m.headers, m.body
        FROM sluice.messages m
        WHERE m.part = $3 AND m.txid = $4 AND m.id = $8
    $q$ USING p_queue_id, p_group_id, p_part, p_msg_txid, p_attempts, p_error, v_now, p_msg_id;
    RETURN true;
END
$$;

-- receive: lease up to max_messages ready messages of a queue to the caller,
-- for one consumer group. Messages whose lease expired come first (with
-- attempt + 1), then new ones in commit order. A message that has used up the
-- queue's max_attempts through expired leases goes to the dead letters instead.
--
-- Call it in its own transaction (autocommit) or at the start of a short one:
-- it holds the group's dispatch lock until the transaction ends, so other
-- consumers of the group wait that long. It writes only unlogged tables
-- (except about once a second), so its commit does not wait for the disk.
--
-- Parameters:
--   queue         queue name
--   group_name    consumer group ('default')
--   max_messages  1 to 10000 (1)
--   lease         how long the caller holds the messages (queue's lease option)
--   consumer      optional free text naming the caller, stored with the lease
-- Returns: SETOF sluice.message (id, body, headers, key, priority, attempt,
--          sent_at, receipt, lease_expires_at, pos), in position order
-- Errors: SL001, SL002, SL003, SL006 invalid_argument (max_messages, lease,
--         consumer longer than 200 characters), SL010 invalid_isolation
CREATE OR REPLACE FUNCTION sluice.receive(queue text, group_name text DEFAULT 'default', max_messages int DEFAULT 1,
                                          lease interval DEFAULT NULL, consumer text DEFAULT NULL)
RETURNS SETOF sluice.message
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q sluice.queue;
    g sluice.consumer_group;
    p0 int;
    v_lease interval;
    v_now timestamptz;
    v_expires timestamptz;
    st record;
    v_seq bigint;
    v_cursor bigint;
    v_lwm bigint;
    v_next_scan timestamptz;
    v_lwm_at timestamptz;
    v_changed boolean := false;
    v_slot int;
    v_ckpt bigint;
    need int;
    cut_tried boolean := false;
    last_taken bigint;
    b sluice.batches;
    r record;
    m sluice.message;
    -- picked positions
    k_pos bigint[] := '{}';
    k_id bigint[] := '{}';
    k_txid xid8[] := '{}';
    k_slot smallint[] := '{}';
    k_attempt int[] := '{}';
    -- leases to write
    d_part int[] := '{}';
    d_pos bigint[] := '{}';
    d_attempt int[] := '{}';
    d_token bigint[] := '{}';
    d_id bigint[] := '{}';
    d_txid xid8[] := '{}';
    v_token bigint;
BEGIN
    IF max_messages IS NULL OR max_messages < 1 OR max_messages > 10000 THEN
        RAISE EXCEPTION USING ERRCODE = 'SL006',
            MESSAGE = format('max_messages must be from 1 to 10000, got %s', coalesce(max_messages::text, 'NULL'));
    END IF;
    IF length(receive.consumer) > 200 THEN
        RAISE EXCEPTION USING ERRCODE = 'SL006', MESSAGE = 'consumer must be at most 200 characters';
    END IF;
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION USING ERRCODE = 'SL010',
            MESSAGE = format('receive needs READ COMMITTED isolation, the transaction is %s',
                             upper(current_setting('transaction_isolation'))),
            HINT = 'Receive in its own transaction; acks may run at any isolation level.';
    END IF;
    q := sluice._queue(receive.queue);
    g := sluice._group(q.id, q.name, receive.group_name);
    v_lease := coalesce(receive.lease, q.lease);
    PERFORM sluice._check_lease('lease', v_lease);
    p0 := q.id * 4;

    PERFORM pg_advisory_xact_lock(sluice._lock_ns('group'), g.id);
    v_now := clock_timestamp();
    v_expires := v_now + v_lease;
    st := sluice._group_state(p0, g);
    v_seq := st.seq;
    v_cursor := st.cursor;
    v_lwm := st.lwm;
    v_next_scan := st.next_scan_at;
    v_lwm_at := st.lwm_at;
    v_changed := NOT st.found;
    need := max_messages;

    -- 1. Leases that expired (rarely: only once the earliest known expiry passed).
    IF v_now >= v_next_scan THEN
        v_next_scan := 'infinity';
        FOR r IN SELECT * FROM sluice._window(p0, g.id, v_lwm, v_cursor) LOOP
            IF r.expires > v_now THEN
                v_next_scan := least(v_next_scan, r.expires);
            ELSIF need > 0 THEN
                k_pos := k_pos || r.pos;
                k_id := k_id || r.id;
                k_txid := k_txid || r.txid;
                k_slot := k_slot || r.slot;
                k_attempt := k_attempt || (coalesce(r.attempt, 0) + 1);
                need := need - 1;
            ELSE
                v_next_scan := v_now;   -- more expired than we take now
            END IF;
        END LOOP;
        v_changed := true;
    END IF;

    -- 2. New messages, cutting a new batch when the numbered ones run out.
    WHILE need > 0 LOOP
        b := NULL;
        EXECUTE 'SELECT * FROM sluice.batches WHERE part BETWEEN $1 AND $1 + 3
                 AND last_pos > $2 AND last_pos >= first_pos ORDER BY last_pos LIMIT 1'
            INTO b USING p0, v_cursor;
        IF b.batch_no IS NULL THEN
            EXIT WHEN cut_tried;
            cut_tried := true;
            -- Never wait for another cutter: what it cuts is there at the next call.
            EXIT WHEN NOT pg_try_advisory_xact_lock(sluice._lock_ns('cut'), q.id);
            PERFORM sluice._cut(q.id);
            CONTINUE;
        END IF;
        last_taken := NULL;
        FOR r IN EXECUTE $q$
            SELECT u.pos, u.id, u.txid, u.slot
            FROM (SELECT $3 + x.o - 1 AS pos, x.id, x.txid, x.slot, x.tg
                  FROM unnest($4::bigint[], $5::xid8[], $6::smallint[], $7::int[]) WITH ORDINALITY
                       AS x(id, txid, slot, tg, o)) u
            WHERE u.pos > $2 AND (u.tg IS NULL OR u.tg = $8)
              AND NOT EXISTS (SELECT 1 FROM sluice.acks a
                              WHERE a.part BETWEEN $1 AND $1 + 3 AND a.part = $1 + u.slot
                                AND a.group_id = $8 AND a.pos = u.pos)
            ORDER BY u.pos
            LIMIT $9
        $q$ USING p0, v_cursor, b.first_pos, b.ids, b.txids, b.slots, b.targets, g.id, need
        LOOP
            k_pos := k_pos || r.pos;
            k_id := k_id || r.id;
            k_txid := k_txid || r.txid;
            k_slot := k_slot || r.slot;
            k_attempt := k_attempt || 1;
            need := need - 1;
            last_taken := r.pos;
        END LOOP;
        v_cursor := CASE WHEN need > 0 THEN b.last_pos ELSE last_taken END;
        v_changed := true;
    END LOOP;

    -- 3. Lease them (or dead-letter those out of attempts) and return them.
    IF cardinality(k_pos) > 0 THEN
        FOR r IN EXECUTE $q$
            SELECT k.pos, k.slot, k.attempt, mm.*
            FROM unnest($2::bigint[], $3::bigint[], $4::xid8[], $5::smallint[], $6::int[])
                 AS k(pos, id, txid, slot, attempt)
            CROSS JOIN LATERAL (
                SELECT m.id AS msg_id, m.txid AS msg_txid, m.attempt_base, coalesce(m.origin_id, m.id) AS public_id,
                       m.body, m.headers, m.key, m.priority, m.sent_at
                FROM sluice.messages m
                WHERE m.part BETWEEN $1 AND $1 + 3 AND m.part = $1 + k.slot
                  AND m.txid = k.txid AND m.id = k.id
                LIMIT 1) mm
            ORDER BY k.pos
        $q$ USING p0, k_pos, k_id, k_txid, k_slot, k_attempt
        LOOP
            IF r.attempt_base + r.attempt > q.max_attempts THEN
                PERFORM sluice._dead_letter(q.id, g.id, p0 + r.slot, r.pos, r.msg_txid, r.msg_id,
                                            r.attempt_base + r.attempt - 1,
                                            format('lease of attempt %s expired; max_attempts (%s) reached',
                                                   r.attempt_base + r.attempt - 1, q.max_attempts));
                CONTINUE;
            END IF;
            v_token := (random() * 999999999999999999)::bigint;
            d_part := d_part || (p0 + r.slot);
            d_pos := d_pos || r.pos;
            d_attempt := d_attempt || r.attempt;
            d_token := d_token || v_token;
            d_id := d_id || r.msg_id;
            d_txid := d_txid || r.msg_txid;
            m.id := r.public_id;
            m.body := r.body;
            m.headers := r.headers;
            m.key := r.key;
            m.priority := r.priority;
            m.attempt := r.attempt_base + r.attempt;
            m.sent_at := r.sent_at;
            m.receipt := sluice._receipt(p0 + r.slot, r.pos, r.attempt, v_token);
            m.lease_expires_at := v_expires;
            m.pos := r.pos;
            RETURN NEXT m;
        END LOOP;
        INSERT INTO sluice.deliveries (part, group_id, pos, attempt, token, msg_id, txid, expires_at,
                                       delivered_at, consumer)
        SELECT u.part, g.id, u.pos, u.attempt, u.token, u.id, u.txid, v_expires, v_now, receive.consumer
        FROM unnest(d_part, d_pos, d_attempt, d_token, d_id, d_txid) AS u(part, pos, attempt, token, id, txid);
        v_next_scan := least(v_next_scan, v_expires);
    END IF;

    -- 4. About once a second while messages are in flight: advance the
    -- low-water mark, checkpoint it durably, and let the queue rotate.
    v_slot := sluice._current_epoch(q.id) % 4;
    IF v_cursor >= v_lwm AND v_now >= v_lwm_at + interval '1 second' THEN
        v_ckpt := v_lwm;
        v_lwm := sluice._lwm(p0, g.id, v_lwm, v_cursor);
        v_lwm_at := v_now;
        v_changed := true;
        IF v_lwm <> v_ckpt OR NOT st.found THEN
            INSERT INTO sluice.checkpoints (part, group_id, seq, lwm, at)
            VALUES (p0 + v_slot, g.id, v_seq + 1, v_lwm, v_now);
        END IF;
        IF pg_try_advisory_xact_lock(sluice._lock_ns('maint'), q.id) THEN
            PERFORM sluice._maintain_queue(q.id);
            v_slot := sluice._current_epoch(q.id) % 4;
        END IF;
    END IF;

    IF v_changed THEN
        INSERT INTO sluice.group_states (part, group_id, seq, cursor, lwm, next_scan_at, lwm_at)
        VALUES (p0 + v_slot, g.id, v_seq + 1, v_cursor, v_lwm, v_next_scan, v_lwm_at);
    END IF;
END
$$;
