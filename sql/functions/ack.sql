-- Group: completing deliveries
--
-- A receipt is current while its lease has not expired, no later delivery of
-- the same message exists in the group, and the message is not completed.
-- ack, nack and extend act only on current receipts; a stale receipt (expired,
-- superseded, already acked, or forged) changes nothing and is not counted.
-- A receipt that is not of sluice's form at all raises SL008.

-- _current_deliveries: the current deliveries named by receipts (one row per
-- distinct receipt that is current now).
CREATE OR REPLACE FUNCTION sluice._current_deliveries(p0 int, p_group_id int, p_receipts text[])
RETURNS TABLE (part int, pos bigint, attempt int, token bigint, msg_id bigint, txid xid8)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN QUERY EXECUTE $q$
        SELECT DISTINCT ON (r.part, r.pos) r.part, r.pos, r.attempt, r.token, d.msg_id, d.txid
        FROM sluice._parse_receipts($3) r
        CROSS JOIN LATERAL (
            SELECT dd.msg_id, dd.txid FROM sluice.deliveries dd
            WHERE dd.part BETWEEN $1 AND $1 + 3 AND dd.part = r.part AND dd.group_id = $2
              AND dd.pos = r.pos AND dd.attempt = r.attempt AND dd.token = r.token
              AND dd.expires_at > clock_timestamp()
            LIMIT 1) d
        WHERE r.part BETWEEN $1 AND $1 + 3
          AND NOT EXISTS (SELECT 1 FROM sluice.deliveries dd
                          WHERE dd.part BETWEEN $1 AND $1 + 3 AND dd.part = r.part AND dd.group_id = $2
                            AND dd.pos = r.pos AND dd.attempt > r.attempt)
          AND NOT EXISTS (SELECT 1 FROM sluice.acks a
                          WHERE a.part BETWEEN $1 AND $1 + 3 AND a.part = r.part
                            AND a.group_id = $2 AND a.pos = r.pos)
        ORDER BY r.part, r.pos
    $q$ USING p0, p_group_id, p_receipts;
END
$$;

-- ack: complete messages. Joins the caller's transaction, so the ack, the
-- application's writes and any follow-up sends commit or roll back together.
--
-- Parameters:
--   queue       queue name
--   group_name  consumer group
--   receipts    receipts from receive (NULL elements are malformed)
-- Returns: how many messages were completed now; stale receipts are not counted
-- Errors: SL001, SL002, SL003, SL006 (NULL receipts), SL008 invalid_receipt
-- Tables: inserts into sluice.acks
CREATE OR REPLACE FUNCTION sluice.ack(queue text, group_name text, receipts text[])
RETURNS int
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q sluice.queue := sluice._queue(ack.queue);
    g sluice.consumer_group := sluice._group(q.id, q.name, ack.group_name);
    n int;
BEGIN
    PERFORM sluice._parse_receipts(ack.receipts);   -- raise on malformed input before anything else
    INSERT INTO sluice.acks (part, group_id, pos, kind, acked_at)
    SELECT c.part, g.id, c.pos, 'a', clock_timestamp()
    FROM sluice._current_deliveries(q.id * 4, g.id, ack.receipts) c
    ON CONFLICT DO NOTHING;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

-- nack: give a message back after a failure. It is delivered again to this
-- group after the delay (by default backoff_base * 2^(attempt-1), capped at
-- backoff_max); once the message has had max_attempts deliveries it becomes a
-- dead letter of the group, with the error.
--
-- Parameters:
--   queue       queue name
--   group_name  consumer group
--   receipt     receipt from receive
--   delay       retry delay (NULL: exponential backoff; 0: at once)
--   error       optional error text, kept with a dead letter (at most 10000 characters)
-- Returns: true if the receipt was current (retry scheduled or dead-lettered),
--          false for a stale receipt
-- Errors: SL001, SL002, SL003, SL006 (negative delay), SL008 invalid_receipt
-- Tables: inserts into sluice.acks and either sluice.messages (the retry, a
--         copy for this group) or sluice.dead_letter
CREATE OR REPLACE FUNCTION sluice.nack(queue text, group_name text, receipt text, delay interval DEFAULT NULL,
                                       error text DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q sluice.queue := sluice._queue(nack.queue);
    g sluice.consumer_group := sluice._group(q.id, q.name, nack.group_name);
    c record;
    m record;
    v_attempts int;
    v_delay interval;
    v_now timestamptz;
BEGIN
    IF nack.receipt IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SL008', MESSAGE = 'invalid receipt NULL';
    END IF;
    IF nack.delay < interval '0' THEN
        RAISE EXCEPTION USING ERRCODE = 'SL006', MESSAGE = format('delay must not be negative, got %s', nack.delay);
    END IF;
    IF length(nack.error) > 10000 THEN
        RAISE EXCEPTION USING ERRCODE = 'SL006', MESSAGE = 'error must be at most 10000 characters';
    END IF;
    SELECT * INTO c FROM sluice._current_deliveries(q.id * 4, g.id, ARRAY[nack.receipt]);
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    EXECUTE 'SELECT * FROM sluice.messages WHERE part = $1 AND txid = $2 AND id = $3'
        INTO m USING c.part, c.txid, c.msg_id;
    v_attempts := m.attempt_base + c.attempt;
    IF v_attempts >= q.max_attempts THEN
        RETURN sluice._dead_letter(q.id, g.id, c.part, c.pos, c.txid, c.msg_id, v_attempts, nack.error);
    END IF;
    v_now := clock_timestamp();
    INSERT INTO sluice.acks (part, group_id, pos, kind, acked_at)
    VALUES (c.part, g.id, c.pos, 'n', v_now)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    v_delay := coalesce(nack.delay,
                        least(q.backoff_max, q.backoff_base * power(2, least(v_attempts - 1, 40))));
    INSERT INTO sluice.messages (part, id, txid, sent_at, deliver_at, priority, attempt_base, target_group,
                                 origin_id, key, dedup_key, headers, body)
    VALUES (q.id * 4 + sluice._current_epoch(q.id) % 4, nextval(q.id_seq), pg_current_xact_id(), m.sent_at,
            CASE WHEN v_delay > interval '0' THEN v_now + v_delay END,
            m.priority, v_attempts, g.id, coalesce(m.origin_id, m.id), m.key, m.dedup_key, m.headers, m.body);
    RETURN true;
END
$$;

-- extend: renew leases (heartbeat). The new expiry is now + lease.
--
-- Parameters:
--   queue       queue name
--   group_name  consumer group
--   receipts    receipts from receive
--   lease       the new lease, from now (1 microsecond to 7 days)
-- Returns: how many leases were renewed; stale receipts are not counted
-- Errors: SL001, SL002, SL003, SL006 (lease), SL008 invalid_receipt
-- Tables: inserts into sluice.deliveries (unlogged)
CREATE OR REPLACE FUNCTION sluice.extend(queue text, group_name text, receipts text[], lease interval)
RETURNS int
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q sluice.queue := sluice._queue(extend.queue);
    g sluice.consumer_group := sluice._group(q.id, q.name, extend.group_name);
    v_now timestamptz;
    n int;
BEGIN
    PERFORM sluice._check_lease('lease', extend.lease);
    PERFORM sluice._parse_receipts(extend.receipts);
    v_now := clock_timestamp();
    INSERT INTO sluice.deliveries (part, group_id, pos, attempt, token, msg_id, txid, expires_at, delivered_at)
    SELECT c.part, g.id, c.pos, c.attempt, c.token, c.msg_id, c.txid, v_now + extend.lease, v_now
    FROM sluice._current_deliveries(q.id * 4, g.id, extend.receipts) c;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;
