-- Group: engine templates - completing deliveries (see engine_cut.sql for what a template is)

-- e_dead_letter: move one delivery to the dead-letter store and complete its
-- position for the group.
--
-- Returns: false if the position was already completed
CREATE OR REPLACE FUNCTION sluice_tmpl.e_dead_letter(p_queue_id int, p_group_id int, p_slot smallint, p_pos bigint,
                                                     p_msg_txid xid8, p_msg_id bigint, p_attempts int, p_error text)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    INSERT INTO acks (slot, group_id, pos, kind, acked_at)
    VALUES (p_slot, p_group_id, p_pos, 'd', v_now)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    INSERT INTO sluice.dead_letter (queue_id, group_id, message_id, attempts, error, died_at,
                                    sent_at, priority, key, headers, body)
    SELECT p_queue_id, p_group_id, coalesce(m.origin_id, m.id), p_attempts, p_error, v_now,
           m.sent_at, m.priority, m.key, m.headers, m.body
    FROM messages m
    WHERE m.slot = p_slot AND m.txid = p_msg_txid AND m.id = p_msg_id;
    RETURN true;
END
$$;

-- e_current_singles: e_current_deliveries for receipts none of which names
-- a run (sluice._names_run false): single deliveries only, a simpler
-- statement. A SQL function without SET clauses, so that e_ack's INSERT
-- reads it inlined rather than through a PL/pgSQL call and a tuplestore
-- (its table names are resolved where it is inlined: see engine_runs.sql).
--
-- Parameters:
--   p_group_id  group id
--   p_receipts  receipts (already checked to be well-formed), naming no run
-- Returns: as e_current_deliveries (run and run_last NULL)
SET check_function_bodies = off;
CREATE OR REPLACE FUNCTION sluice_tmpl.e_current_singles(p_group_id int, p_receipts text[])
RETURNS TABLE (slot smallint, pos bigint, attempt int, token bigint, msg_id bigint, txid xid8, lane smallint,
               run bigint, run_last bigint)
LANGUAGE sql STABLE
AS $$
    SELECT DISTINCT ON (r.part, r.pos) r.part::smallint, r.pos, r.attempt, r.token, d.msg_id, d.txid, d.lane,
           NULL::bigint, NULL::bigint
    FROM sluice._receipt_parts(p_receipts) r
    CROSS JOIN LATERAL (
        SELECT dd.attempt, dd.token, dd.expires_at, dd.msg_id, dd.txid, dd.lane FROM deliveries dd
        WHERE dd.slot = r.part AND dd.group_id = p_group_id AND dd.pos = r.pos
        ORDER BY dd.attempt DESC, dd.delivered_at DESC, dd.token DESC
        LIMIT 1) d
    WHERE r.part BETWEEN 0 AND 3 AND d.attempt = r.attempt AND d.token = r.token
      AND d.expires_at > clock_timestamp()
      AND NOT EXISTS (SELECT FROM e_completed(p_group_id, r.part::smallint, r.pos))
    ORDER BY r.part, r.pos
$$;
RESET check_function_bodies;

-- e_current_deliveries: the current deliveries named by receipts: one row per
-- distinct receipt whose lease is the newest delivery of its message in the
-- group (e_newest), has not expired, and whose message is not completed.
-- The receipts of a run are checked together: when nothing of the run has
-- a row of its own (an extend, a redelivery) or is completed, each one is
-- current if it is in the run; else position by position.
--
-- Parameters:
--   p_group_id  group id
--   p_receipts  receipts (already checked to be well-formed)
-- Returns: (slot, pos, attempt, token, msg_id, txid, lane, run, run_last):
--          msg_id and txid are NULL for a message leased in a run
--          (e_run_message finds them); run and run_last are the run's first
--          and last positions (NULL for a single delivery)
CREATE OR REPLACE FUNCTION sluice_tmpl.e_current_deliveries(p_group_id int, p_receipts text[])
RETURNS TABLE (slot smallint, pos bigint, attempt int, token bigint, msg_id bigint, txid xid8, lane smallint,
               run bigint, run_last bigint)
LANGUAGE plpgsql STABLE
AS $$
#variable_conflict use_column
BEGIN
    IF NOT sluice._names_run(p_receipts) THEN
        RETURN QUERY SELECT * FROM e_current_singles(p_group_id, p_receipts);
        RETURN;
    END IF;
    RETURN QUERY
    WITH r AS MATERIALIZED (
        SELECT r.part::smallint AS part, r.pos, r.attempt, r.token, r.run
        FROM sluice._receipt_parts(p_receipts) r
        WHERE r.part BETWEEN 0 AND 3
    ), named AS (
        -- each run named; clean: its lease is current, and nothing in it
        -- has a row of its own or is completed
        SELECT x.part, x.run, x.token, d.last_pos, d.lane,
               d.expires_at > clock_timestamp()
               AND NOT EXISTS (SELECT 1 FROM deliveries o
                               WHERE o.slot = x.part AND o.group_id = p_group_id AND o.pos BETWEEN x.run AND d.last_pos)
               AND NOT EXISTS (SELECT FROM e_any_completed(p_group_id, x.run, d.last_pos)) AS clean
        FROM (SELECT DISTINCT r.part, r.run, r.token FROM r WHERE r.run IS NOT NULL AND r.attempt = 1) x
        CROSS JOIN LATERAL (
            SELECT d.last_pos, d.lane, d.expires_at FROM runs d
            WHERE d.slot = x.part AND d.group_id = p_group_id AND d.pos = x.run AND d.token = x.token
            LIMIT 1) d
    )
    SELECT DISTINCT ON (x.part, x.pos) x.*
    FROM (
    SELECT r.part, r.pos, r.attempt, r.token, d.msg_id, d.txid, d.lane, NULL::bigint AS run, NULL::bigint AS run_last
    FROM r
    CROSS JOIN LATERAL (
        SELECT dd.attempt, dd.token, dd.expires_at, dd.msg_id, dd.txid, dd.lane FROM deliveries dd
        WHERE dd.slot = r.part AND dd.group_id = p_group_id AND dd.pos = r.pos
        ORDER BY dd.attempt DESC, dd.delivered_at DESC, dd.token DESC
        LIMIT 1) d
    WHERE r.run IS NULL AND d.attempt = r.attempt AND d.token = r.token
      AND d.expires_at > clock_timestamp() AND NOT EXISTS (SELECT FROM e_completed(p_group_id, r.part, r.pos))
    UNION ALL
    SELECT r.part, r.pos, r.attempt, r.token, NULL, NULL, u.lane, u.run, u.last_pos
    FROM r
    JOIN named u ON u.part = r.part AND u.run = r.run AND u.token = r.token
    WHERE r.pos BETWEEN u.run AND u.last_pos AND r.attempt = 1
      AND (u.clean OR e_run_pos_current(p_group_id, r.part, r.pos, r.token))
    ) x
    ORDER BY x.part, x.pos;
END
$$;

-- e_run_pos_current: whether the receipt of a position of a run that is
-- not clean (e_current_deliveries) is current: the position is not
-- completed, and its newest delivery is the run's lease, not expired.
-- PL/pgSQL, so that its index scans (acks, run_acks, deliveries and runs,
-- a partition per slot each) are set up only for such runs, not on every
-- ack of a run (see e_is_completed).
--
-- Parameters:
--   p_group_id  group id
--   p_slot      the position's slot
--   p_pos       the position
--   p_token     the run's token (from the receipt)
CREATE OR REPLACE FUNCTION sluice_tmpl.e_run_pos_current(p_group_id int, p_slot smallint, p_pos bigint, p_token bigint)
RETURNS boolean
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN NOT EXISTS (SELECT FROM e_completed(p_group_id, p_slot, p_pos))
           AND EXISTS (SELECT 1 FROM e_newest(p_group_id, p_slot, p_pos) n
                       WHERE n.attempt = 1 AND n.token = p_token AND n.expires_at > clock_timestamp());
END
$$;

-- e_ack: the body of sluice.ack for this queue (see there): one completion
-- per current receipt, duplicates counted once, a whole run in one row
-- (engine_runs.sql). Acks that name a run take its lock first, until they
-- commit: one that completes the run whole and one that completes part of
-- it write different tables, so without it a message acked by both at
-- once would be counted by both. (ON CONFLICT rather than a
-- plain INSERT in an exception block, which would be ~35% cheaper per row:
-- a block that writes gets a subtransaction id, and a transaction that acks
-- more than 64 times would overflow its subtransaction cache, making every
-- snapshot on the server look ids up in pg_subtrans, a known collapse
-- under a held xmin.)
CREATE OR REPLACE FUNCTION sluice_tmpl.e_ack(p_group_id int, p_receipts text[])
RETURNS int
LANGUAGE plpgsql
AS $$
DECLARE
    n int;
BEGIN
    IF current_setting('search_path') <> 'sluice_tmpl, pg_catalog, pg_temp' THEN
        -- release 0.1.0's ack, caught by an upgrade, calls this copy with
        -- its own path (compat.sql); the current ack sets the queue's
        PERFORM set_config('search_path', 'sluice_tmpl, pg_catalog, pg_temp', true);
    END IF;
    IF NOT sluice._names_run(p_receipts) THEN
        -- no run named: an acks row each, in a statement that costs less
        INSERT INTO acks (slot, group_id, pos, kind, acked_at)
        SELECT c.slot, p_group_id, c.pos, 'a', clock_timestamp()
        FROM e_current_singles(p_group_id, p_receipts) c
        ON CONFLICT DO NOTHING;
        GET DIAGNOSTICS n = ROW_COUNT;
        RETURN n;
    END IF;
    -- The lock of each run named, in a statement of its own: the next one,
    -- which reads what is current, then sees what a concurrent ack of the
    -- same run committed.
    PERFORM pg_advisory_xact_lock(sluice._lock_ns('run'), hashtext(p_group_id || '.' || x.run))
    FROM (SELECT DISTINCT split_part(u.x, '.', 1) || '.' || split_part(u.x, '.', 5) AS run
          FROM unnest(p_receipts) AS u(x)
          WHERE split_part(u.x, '.', 5) <> ''
          ORDER BY 1) x;
    -- The common case, in one statement that looks at runs, not at
    -- positions: every receipt names a run, every run named is named whole
    -- (each of its positions, attempt 1, its token), its lease is current,
    -- nothing in it has a row of its own (an extend, a redelivery) or is
    -- completed. Then each run gets its run_acks row. Otherwise nothing is
    -- written here, and the statement after it sorts position by position.
    WITH r AS MATERIALIZED (
        SELECT DISTINCT r.part::smallint AS part, r.pos, r.attempt, r.token, r.run
        FROM sluice._receipt_parts(p_receipts) r
        WHERE r.part BETWEEN 0 AND 3
    ), named AS MATERIALIZED (
        SELECT r.part, r.run, r.token, count(*) AS n, max(r.pos) AS hi,
               bool_and(r.attempt = 1 AND r.pos >= r.run) AS ok
        FROM r
        GROUP BY r.part, r.run, r.token
    ), whole AS MATERIALIZED (
        SELECT x.part, x.run, d.last_pos
        FROM named x
        CROSS JOIN LATERAL (SELECT d.last_pos, d.expires_at FROM runs d
                            WHERE d.slot = x.part AND d.group_id = p_group_id AND d.pos = x.run
                              AND d.token = x.token
                            LIMIT 1) d
        WHERE x.run IS NOT NULL AND x.ok AND x.hi <= d.last_pos AND x.n = d.last_pos - x.run + 1
          AND d.expires_at > clock_timestamp()
          AND NOT EXISTS (SELECT 1 FROM deliveries o
                          WHERE o.slot = x.part AND o.group_id = p_group_id AND o.pos BETWEEN x.run AND d.last_pos)
          AND NOT EXISTS (SELECT FROM e_any_completed(p_group_id, x.run, d.last_pos))
    ), ins AS (
        INSERT INTO run_acks (slot, group_id, pos, last_pos, acked_at)
        SELECT w.part, p_group_id, w.run, w.last_pos, clock_timestamp() FROM whole w
        WHERE (SELECT count(*) FROM whole) = (SELECT count(*) FROM named)
          AND (SELECT count(*) FROM r) = cardinality(p_receipts)
        ON CONFLICT DO NOTHING
        RETURNING last_pos - pos + 1 AS n
    )
    SELECT sum(ins.n) INTO n FROM ins;
    IF n > 0 THEN
        RETURN n;
    END IF;
    -- A run whose every position is current here is completed with one
    -- run_acks row; the other positions with an acks row each.
    WITH c AS MATERIALIZED (
        SELECT c.*, c.run IS NOT NULL AND count(*) OVER (PARTITION BY c.slot, c.run) = c.run_last - c.run + 1 AS whole
        FROM e_current_deliveries(p_group_id, p_receipts) c
    ), ins AS (
        INSERT INTO acks (slot, group_id, pos, kind, acked_at)
        SELECT c.slot, p_group_id, c.pos, 'a', clock_timestamp() FROM c WHERE NOT c.whole
        ON CONFLICT DO NOTHING
        RETURNING 1
    ), ins_runs AS (
        INSERT INTO run_acks (slot, group_id, pos, last_pos, acked_at)
        SELECT c.slot, p_group_id, c.run, c.run_last, clock_timestamp() FROM c WHERE c.whole AND c.pos = c.run
        ON CONFLICT DO NOTHING   -- (the same run acked whole at the same time)
        RETURNING last_pos - pos + 1 AS n
    )
    SELECT (SELECT count(*) FROM ins) + (SELECT coalesce(sum(ins_runs.n), 0) FROM ins_runs) INTO n;
    RETURN n;
END
$$;

-- e_release_run: release the later messages of a key still leased after
-- position p_pos (the rest of a run a consumer received with the message at
-- p_pos, which failed): their receipts go stale, and they are delivered
-- again, with the same attempt number, once the message at p_pos is
-- completed (at once if it already is). Stops at the first later position
-- that is completed, not leased, parked or expired.
--
-- Parameters:
--   p_group_id  group id
--   p_lane      the key's lane
--   p_key       the key's hash
--   p_pos       the failed message's position
--   p_now       the time of the release (due time of the parked rows)
-- Returns: how many messages were released
CREATE OR REPLACE FUNCTION sluice_tmpl.e_release_run(p_group_id int, p_lane smallint, p_key bigint, p_pos bigint,
                                                     p_now timestamptz)
RETURNS int
LANGUAGE plpgsql
AS $$
DECLARE
    v_pos bigint := p_pos;
    n int := 0;
    nx record;
    ps record;
BEGIN
    LOOP
        SELECT * INTO nx FROM e_key_next(p_group_id, p_key, v_pos);
        EXIT WHEN nx.pos IS NULL;
        SELECT * INTO ps FROM e_pos(p_group_id, nx.pos);
        EXIT WHEN ps.done OR ps.attempt IS NULL OR ps.parked OR ps.expires <= p_now;
        INSERT INTO deliveries (slot, group_id, lane, pos, attempt, token, msg_id, txid, expires_at, delivered_at,
                                consumer, key_hash)
        VALUES (nx.mslot, p_group_id, p_lane, nx.pos, ps.attempt, 0, nx.id, nx.txid, p_now, p_now, NULL, p_key);
        v_pos := nx.pos;
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;

-- e_nack: the body of sluice.nack for this queue (see there).
CREATE OR REPLACE FUNCTION sluice_tmpl.e_nack(q sluice.queue, g sluice.consumer_group, p_receipt text,
                                              p_delay interval, p_error text)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    c record;
    m record;
    v_attempts int;
    v_delay interval;
    v_now timestamptz;
    v_key bigint;
BEGIN
    IF current_setting('search_path') <> 'sluice_tmpl, pg_catalog, pg_temp' THEN
        -- release 0.1.0's nack, caught by an upgrade, calls this copy with
        -- its own path (compat.sql); the current nack sets the queue's
        PERFORM set_config('search_path', 'sluice_tmpl, pg_catalog, pg_temp', true);
    END IF;
    SELECT * INTO c FROM e_current_deliveries(g.id, ARRAY[p_receipt]);
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    -- Wait for a receive of the message's lane in progress (and make the
    -- next one wait): the parked rows written below then become visible
    -- before the next receive of the lane starts, so its expiry scan (which
    -- starts where the last one ended) cannot have passed their due time
    -- already. Then look at the receipt again: that receive may have
    -- redelivered the message.
    PERFORM pg_advisory_xact_lock_shared(sluice._lane_lock(g.id, c.lane));
    SELECT * INTO c FROM e_current_deliveries(g.id, ARRAY[p_receipt]);
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF c.run IS NOT NULL THEN
        SELECT rm.id, rm.txid INTO c.msg_id, c.txid FROM e_run_message(c.lane, c.pos) rm;
    END IF;
    SELECT * INTO m FROM messages mm WHERE mm.slot = c.slot AND mm.txid = c.txid AND mm.id = c.msg_id;
    v_attempts := m.attempt_base + c.attempt;
    IF v_attempts >= q.max_attempts THEN
        IF NOT e_dead_letter(q.id, g.id, c.slot, c.pos, c.txid, c.msg_id, v_attempts, p_error) THEN
            RETURN false;
        END IF;
        IF m.key IS NOT NULL THEN
            -- the rest of its run comes back at once, now that it is completed
            PERFORM e_release_run(g.id, c.lane, hashtextextended(m.key, 0), c.pos, clock_timestamp());
        END IF;
        RETURN true;
    END IF;
    v_now := clock_timestamp();
    v_delay := coalesce(p_delay, least(q.backoff_max, q.backoff_base * power(2, least(v_attempts - 1, 40))));
    IF m.key IS NOT NULL THEN
        -- A keyed message is retried in place, so that the later messages of
        -- its key keep waiting for it: a parked delivery (token 0) of the
        -- next attempt, due after the backoff. It also makes the receipt stale.
        v_key := hashtextextended(m.key, 0);
        INSERT INTO deliveries (slot, group_id, lane, pos, attempt, token, msg_id, txid, expires_at, delivered_at,
                                consumer, key_hash)
        VALUES (c.slot, g.id, c.lane, c.pos, c.attempt + 1, 0, c.msg_id, c.txid, v_now + v_delay, v_now, NULL, v_key);
        PERFORM e_release_run(g.id, c.lane, v_key, c.pos, v_now);
        RETURN true;
    END IF;
    INSERT INTO acks (slot, group_id, pos, kind, acked_at)
    VALUES (c.slot, g.id, c.pos, 'n', v_now)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    INSERT INTO sluice.messages (queue_id, slot, id, txid, sent_at, deliver_at, priority, attempt_base,
                                 target_group, origin_id, key, dedup_key, headers, body)
    VALUES (q.id, (SELECT ns.slot FROM sluice._slot_now(q.id) ns), nextval(q.id_seq), pg_current_xact_id(), m.sent_at,
            CASE WHEN v_delay > interval '0' THEN v_now + v_delay END,
            m.priority, v_attempts, g.id, coalesce(m.origin_id, m.id), m.key, m.dedup_key, m.headers, m.body);
    RETURN true;
END
$$;

-- e_extend: the body of sluice.extend for this queue (see there).
--
-- A lease is never shortened: the new row expires at now + p_lease or when
-- the current lease does, whichever is later. Extend takes no lane lock, so
-- its row may become visible only after another receive's expiry scan has
-- gone past its expiry (a transaction left open), and a row expiring before
-- the current lease would then never be read while hiding the current one
-- (the newest row is the lease): its message never redelivered. Expiring
-- no earlier, it is read after the current lease is: when the scan reads
-- the current lease with the new row not yet visible, that lease is
-- redelivered (the new row, of an older attempt, is then not current);
-- else the scan reads the new row when it gets to it.
CREATE OR REPLACE FUNCTION sluice_tmpl.e_extend(p_group_id int, p_receipts text[], p_lease interval)
RETURNS int
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    n int;
BEGIN
    IF current_setting('search_path') <> 'sluice_tmpl, pg_catalog, pg_temp' THEN
        -- release 0.1.0's extend, caught by an upgrade, calls this copy with
        -- its own path (compat.sql); the current extend sets the queue's
        PERFORM set_config('search_path', 'sluice_tmpl, pg_catalog, pg_temp', true);
    END IF;
    -- (a row of its own for each message, also for those leased in a run)
    INSERT INTO deliveries (slot, group_id, lane, pos, attempt, token, msg_id, txid, expires_at, delivered_at)
    SELECT c.slot, p_group_id, c.lane, c.pos, c.attempt, c.token, coalesce(c.msg_id, rm.id), coalesce(c.txid, rm.txid),
           greatest(v_now + p_lease,
                    (SELECT max(dd.expires_at) FROM deliveries dd
                     WHERE dd.slot = c.slot AND dd.group_id = p_group_id AND dd.pos = c.pos
                       AND dd.attempt = c.attempt AND dd.token = c.token),
                    (SELECT ru.expires_at FROM runs ru
                     WHERE c.run IS NOT NULL AND ru.slot = c.slot AND ru.group_id = p_group_id AND ru.pos = c.run
                       AND ru.token = c.token
                     LIMIT 1)),
           v_now
    FROM e_current_deliveries(p_group_id, p_receipts) c
    LEFT JOIN LATERAL e_run_message(c.lane, c.pos) rm ON c.run IS NOT NULL;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;
