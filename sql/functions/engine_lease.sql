-- Group: engine templates - leasing what a receive picked (see engine_cut.sql
-- for what a template is)

-- e_lease: step 4 of e_receive: lease what a receive picked and return the
-- messages in the order they were picked: the unkeyed first deliveries that
-- follow each other in a lane and slot as runs (a runs row each,
-- engine_runs.sql), the others with a deliveries row each. Those left over
-- (gone, or out of attempts) are e_lease_leftovers' business.
--
-- The leases start now, with every lane of the picks held by the caller,
-- not at the receive's time: a receive may wait after that (for a cut, a
-- lane, or an uncommitted ack of a receipt it carries), and a lease dated
-- from before the wait could expire before this receive commits; another
-- receive of the lane may meanwhile have scanned past that expiry
-- (e_take_expired), and the lease would then never be read: its messages
-- never redelivered. Dated now, each lease expires after every scan that
-- ended before the lanes were taken, and later scans see it.
--
-- Parameters:
--   q, g        the queue and the group
--   pk          the picks (at least one)
--   p_lease     the lease
--   p_consumer  the consumer's name, kept with the leases
-- Returns: SETOF sluice.message, in the order of the picks
CREATE OR REPLACE FUNCTION sluice_tmpl.e_lease(q sluice.queue, g sluice.consumer_group, pk sluice.picks,
                                               p_lease interval, p_consumer text)
RETURNS SETOF sluice.message
LANGUAGE plpgsql
AS $$
DECLARE
    v_at constant timestamptz := clock_timestamp();
    n int;
BEGIN
    IF cardinality(pk.pos) = 1 THEN
        -- (one message: a deliveries row, in a statement that costs less)
        RETURN QUERY
        WITH k AS (
            SELECT k.*, mm.*, 1 + (random() * 999999999999999998)::bigint AS token
            FROM unnest(pk.pos, pk.id, pk.txid, pk.slot, pk.attempt, pk.key, pk.lane)
                 AS k(pos, id, txid, slot, attempt, kh, lane)
            CROSS JOIN LATERAL e_message(k.slot, k.txid, k.id) mm
            WHERE mm.attempt_base + k.attempt <= q.max_attempts
        ), ins AS (
            INSERT INTO deliveries (slot, group_id, lane, pos, attempt, token, msg_id, txid, expires_at, delivered_at,
                                    consumer, key_hash)
            SELECT k.slot, g.id, k.lane, k.pos, k.attempt, k.token, k.id, k.txid, v_at + p_lease, v_at, p_consumer, k.kh
            FROM k
        )
        SELECT k.public_id, k.body, k.headers, k.mkey, k.priority, k.attempt_base + k.attempt, k.sent_at,
               k.slot || '.' || k.pos || '.' || k.attempt || '.' || k.token, v_at + p_lease, k.pos
        FROM k;
    ELSIF cardinality(pk.pos) > 1 THEN
        RETURN QUERY
        WITH k AS (
            SELECT k.*, mm.*,
                   -- a run: the same value for consecutive run positions
                   CASE WHEN k.attempt = 1 AND k.kh IS NULL
                        THEN k.pos - row_number() OVER (PARTITION BY k.lane, k.slot, k.attempt = 1 AND k.kh IS NULL
                                                        ORDER BY k.pos)
                        ELSE -k.o END AS grp
            FROM unnest(pk.pos, pk.id, pk.txid, pk.slot, pk.attempt, pk.key, pk.lane)
                 WITH ORDINALITY AS k(pos, id, txid, slot, attempt, kh, lane, o)
            CROSS JOIN LATERAL e_message(k.slot, k.txid, k.id) mm
            WHERE mm.attempt_base + k.attempt <= q.max_attempts
        ), rn AS MATERIALIZED (
            SELECT k.lane, k.slot, k.grp, min(k.pos) AS first_pos, max(k.pos) AS last_pos,
                   1 + (random() * 999999999999999998)::bigint AS token,   -- (and a single's delivery: no join below,
                   min(k.id) AS id, min(k.attempt) AS attempt, min(k.kh) AS kh,   -- whose CTE scans nested 100 x 100;
                   (array_agg(k.txid))[1] AS txid   -- min(xid8) is PostgreSQL 15's)
            FROM k
            GROUP BY k.lane, k.slot, k.grp
        ), ins AS (
            INSERT INTO deliveries (slot, group_id, lane, pos, attempt, token, msg_id, txid, expires_at, delivered_at,
                                    consumer, key_hash)
            SELECT ru.slot, g.id, ru.lane, ru.first_pos, ru.attempt, ru.token, ru.id, ru.txid, v_at + p_lease, v_at,
                   p_consumer, ru.kh
            FROM rn ru WHERE ru.last_pos = ru.first_pos
        ), ins_runs AS (
            INSERT INTO runs (slot, group_id, lane, pos, last_pos, token, expires_at, delivered_at, consumer)
            SELECT ru.slot, g.id, ru.lane, ru.first_pos, ru.last_pos, ru.token, v_at + p_lease, v_at, p_consumer
            FROM rn ru
            WHERE ru.last_pos > ru.first_pos
        )
        SELECT k.public_id, k.body, k.headers, k.mkey, k.priority, k.attempt_base + k.attempt, k.sent_at,
               k.slot || '.' || k.pos || '.' || k.attempt || '.' || ru.token
               || CASE WHEN ru.last_pos > ru.first_pos THEN '.' || ru.first_pos ELSE '' END,
               v_at + p_lease, k.pos
        FROM k JOIN rn ru ON ru.lane = k.lane AND ru.slot = k.slot AND ru.grp = k.grp
        ORDER BY k.o;
    END IF;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n < cardinality(pk.pos) THEN
        PERFORM e_lease_leftovers(q, g, pk, v_at);
    END IF;
END
$$;

-- e_message: the message a pick names (its slot, txid and id), as the
-- lease statements and e_lease_leftovers read it: no row when it is gone
-- (its slot reclaimed, the queue purged). A set-returning SQL function
-- without SET clauses, so that the planner inlines it into the calling
-- statement; its body names the queue's messages table, resolved where it
-- is inlined, so it is not checked when it is created (see engine_runs.sql).
--
-- Parameters:
--   p_slot, p_txid, p_id  the pick
-- Returns: (attempt_base, public_id: the id the message was first sent
--          with, body, headers, mkey: its key, priority, sent_at)
SET check_function_bodies = off;
CREATE OR REPLACE FUNCTION sluice_tmpl.e_message(p_slot smallint, p_txid xid8, p_id bigint)
RETURNS TABLE (attempt_base int, public_id bigint, body jsonb, headers jsonb, mkey text, priority int,
               sent_at timestamptz)
LANGUAGE sql STABLE
AS $$
    SELECT m.attempt_base, coalesce(m.origin_id, m.id), m.body, m.headers, m.key, m.priority, m.sent_at
    FROM messages m
    WHERE m.slot = p_slot AND m.txid = p_txid AND m.id = p_id
    LIMIT 1
$$;
RESET check_function_bodies;

-- e_lease_leftovers: the picked positions e_receive could not lease: a
-- message out of attempts goes to the dead letters; a position whose message
-- is gone (its slot was reclaimed, or the queue purged, before this group got
-- to it) is completed with nothing to deliver, or its lane's low-water mark
-- would stop there for good.
CREATE OR REPLACE FUNCTION sluice_tmpl.e_lease_leftovers(q sluice.queue, g sluice.consumer_group, pk sluice.picks,
                                                         p_now timestamptz)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT k.pos, k.id, k.txid, k.slot, k.attempt, mm.attempt_base
        FROM unnest(pk.pos, pk.id, pk.txid, pk.slot, pk.attempt) AS k(pos, id, txid, slot, attempt)
        LEFT JOIN e_message(k.slot, k.txid, k.id) mm ON true
        WHERE mm.attempt_base IS NULL OR mm.attempt_base + k.attempt > q.max_attempts
    LOOP
        IF r.attempt_base IS NULL THEN
            INSERT INTO acks (slot, group_id, pos, kind, acked_at) VALUES (r.slot, g.id, r.pos, 'x', p_now)
            ON CONFLICT DO NOTHING;
        ELSE
            PERFORM e_dead_letter(q.id, g.id, r.slot, r.pos, r.txid, r.id, r.attempt_base + r.attempt - 1,
                                  format('lease of attempt %s expired; max_attempts (%s) reached',
                                         r.attempt_base + r.attempt - 1, q.max_attempts));
        END IF;
    END LOOP;
END
$$;

