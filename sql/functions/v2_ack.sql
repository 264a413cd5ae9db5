-- Group: engine v2 - ack, nack, extend (templates, schema sluice_tmpl2)
--
-- A receipt of a queue of engine 2 is slot.pos.lane.lease_no.token: the
-- slot its lease was written in, the position, and the lease. It is current
-- while its lease has that token, covers the position, has not ended (its
-- end, or its latest extension's, is later than now) and the position has
-- no completion in that lease. A lease's expiry is the only way a position
-- is delivered again, so a current receipt is the newest delivery.

-- e2_ack: complete messages (sluice.ack of a queue of engine 2, and the ack
-- a receive carries). Receipts are handled by the copy of their slot
-- (e2_ack_<slot>), which names only its leaves; receipts of a slot the
-- queue does not have are stale. One receipt of slot 0 or 1 (the ack of a
-- receive of one, the most frequent) goes to its slot's copy at once; the
-- receipts of a receive's batch to e2_ack_whole_<slot> first, which
-- completes its leases whole, up to one that is not, whose receipts and
-- the rest's go to the copies of their slots.
--
-- Parameters:
--   p_group     group id
--   p_receipts  one well-formed receipt (sluice._receipt_ok), or several of
--               any form (sluice.ack and sluice.receive leave a batch's
--               check to this: its regular expression, sluice._receipts_ok,
--               cost ~0.27M instructions at 100, ~38k for one receipt)
-- Returns: how many were completed now
-- Errors: SL008 when one of several receipts is malformed (what was
--   completed before is rolled back with the call)
-- Calls: e2_ack_whole_<slot>, e2_ack_<slot>
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_ack(p_group int, p_receipts text[])
RETURNS int
LANGUAGE plpgsql
AS $$
DECLARE
    v_now constant timestamptz := clock_timestamp();
    v_slot int;
    v_part text[];
    n int := 0;
BEGIN
    IF cardinality(p_receipts) = 1 AND p_receipts[1] LIKE '0.%' THEN
        RETURN e2_ack_0(p_group, p_receipts, v_now, 0::smallint);
    ELSIF cardinality(p_receipts) = 1 AND p_receipts[1] LIKE '1.%' THEN
        RETURN e2_ack_1(p_group, p_receipts, v_now, 1::smallint);
    -- A receive's batch, lease by lease (its slot's copy tries it first)
    ELSIF p_receipts[1] LIKE '0.%' THEN
        n := e2_ack_whole_0(p_group, p_receipts, v_now, 0::smallint);
    ELSIF p_receipts[1] LIKE '1.%' THEN
        n := e2_ack_whole_1(p_group, p_receipts, v_now, 1::smallint);
    END IF;
    IF n = cardinality(p_receipts) THEN
        RETURN n;
    END IF;
    -- the rest, by the copies of their slots, once each is well-formed
    -- (what e2_ack_whole__s completed it compared with the receipts it made)
    IF cardinality(p_receipts) > 1 AND sluice._receipts_ok(p_receipts[n + 1:]) IS NOT TRUE THEN
        PERFORM sluice._parse_receipts(p_receipts[n + 1:]);   -- raises SL008, naming the receipt
    END IF;
    FOR v_slot, v_part IN
        SELECT split_part(x, '.', 1)::int, array_agg(x) FROM unnest(p_receipts[n + 1:]) x GROUP BY 1
    LOOP
        IF v_slot = 0 THEN
            n := n + e2_ack_0(p_group, v_part, v_now, 0::smallint);
        ELSIF v_slot = 1 THEN
            n := n + e2_ack_1(p_group, v_part, v_now, 1::smallint);
        ELSIF v_slot = 2 AND to_regprocedure('e2_ack_2(int, text[], timestamptz, smallint)') IS NOT NULL THEN
            n := n + e2_ack_2(p_group, v_part, v_now, 2::smallint);
        ELSIF v_slot = 3 AND to_regprocedure('e2_ack_3(int, text[], timestamptz, smallint)') IS NOT NULL THEN
            n := n + e2_ack_3(p_group, v_part, v_now, 3::smallint);
        END IF;
    END LOOP;
    RETURN n;
END
$$;

-- e2_ack__s: complete the current receipts of one slot's leases: one row
-- per lease acked whole (pos 0), else one per position. A lease of one
-- position is completed only by a row pos 0 (whichever completion comes
-- first inserts it, the other conflicts); positions of a longer lease only
-- under its lease lock (sluice._lease_lock), so that a completion of the
-- whole lease and one of a position never both count. A lease is read by
-- its key in the primary key's order (ORDER BY slot, its last column, LIMIT
-- 1: of the two indexes that hold the key, only the primary key gives that
-- order without a sort, whatever the statistics say): planned
-- while the slot's leaf had no statistics (a new queue's, until autovacuum
-- analyzes it), a plain lookup by the key took the index on expiry and read
-- every lease of the lane, so each ack cost more with every lease the slot
-- held (0.06 ms at 3,000 leases in a lane, PostgreSQL 15).
--
-- Parameters:
--   p_group     group id
--   p_receipts  receipts of slot p_slot
--   p_now       now
--   p_slot      this copy's slot
-- Returns: how many were completed now
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_ack__s(p_group int, p_receipts text[], p_now timestamptz, p_slot smallint)
RETURNS int
LANGUAGE plpgsql
AS $$
DECLARE
    n int;
    v_pos bigint;
    v_lane int;
    v_no bigint;
    v_token bigint;
    v_done boolean;   -- (calls made in expressions, as in sluice.receive)
BEGIN
    IF cardinality(p_receipts) = 1 THEN
        -- One receipt: a lease of one position is completed whole (pos 0),
        -- in one statement (a competing completion conflicts on pos 0).
        v_pos := split_part(p_receipts[1], '.', 2)::bigint;
        v_lane := split_part(p_receipts[1], '.', 3)::int;
        v_no := split_part(p_receipts[1], '.', 4)::bigint;
        v_token := nullif(split_part(p_receipts[1], '.', 5), '')::bigint;
        INSERT INTO ack__s (slot, group_id, lane, lease_no, pos, kind, at)
        SELECT p_slot, p_group, v_lane, v_no, 0, 'a', p_now
        FROM lease__s l
        WHERE l.group_id = p_group AND l.lane = v_lane AND l.lease_no = v_no AND l.kind = 'r' AND l.token = v_token
          AND l.n = 1 AND (v_pos BETWEEN l.first_pos AND l.last_pos OR v_pos = ANY (l.redo_pos))
          AND (l.expires_at > p_now
               OR EXISTS (SELECT 1 FROM ext__s e WHERE e.group_id = p_group AND e.lane = v_lane
                                                   AND e.lease_no = v_no AND e.pos IN (0, v_pos)
                                                   AND e.expires_at > p_now))
          AND NOT EXISTS (SELECT 1 FROM ack__s a WHERE a.group_id = p_group AND a.lane = v_lane
                                                   AND a.lease_no = v_no)
        ORDER BY l.slot LIMIT 1   -- (the primary key's order: see above)
        ON CONFLICT DO NOTHING;
        GET DIAGNOSTICS n = ROW_COUNT;
        IF n = 1 THEN
            RETURN 1;
        END IF;
        -- Else the position alone of a longer lease, under its lock (or a
        -- stale receipt).
        v_done := pg_advisory_xact_lock(sluice._lock_ns('lease'), sluice._lease_lock(p_group, v_lane, v_no)) IS NULL;
        INSERT INTO ack__s (slot, group_id, lane, lease_no, pos, kind, at)
        SELECT p_slot, p_group, v_lane, v_no, v_pos, 'a', p_now
        FROM lease__s l
        WHERE l.group_id = p_group AND l.lane = v_lane AND l.lease_no = v_no AND l.kind = 'r' AND l.token = v_token
          AND l.n > 1 AND (v_pos BETWEEN l.first_pos AND l.last_pos OR v_pos = ANY (l.redo_pos))
          AND (l.expires_at > p_now
               OR EXISTS (SELECT 1 FROM ext__s e WHERE e.group_id = p_group AND e.lane = v_lane
                                                   AND e.lease_no = v_no AND e.pos IN (0, v_pos)
                                                   AND e.expires_at > p_now))
          AND NOT EXISTS (SELECT 1 FROM ack__s a WHERE a.group_id = p_group AND a.lane = v_lane
                                                   AND a.lease_no = v_no AND a.pos IN (0, v_pos))
        ORDER BY l.slot LIMIT 1
        ON CONFLICT DO NOTHING;
        GET DIAGNOSTICS n = ROW_COUNT;
        RETURN n;
    END IF;
    -- Several receipts: the leases they name are locked (in key order, so
    -- that two such calls cannot wait for each other), then checked.
    PERFORM pg_advisory_xact_lock(sluice._lock_ns('lease'), k.key)
    FROM (SELECT DISTINCT sluice._lease_lock(p_group, split_part(x, '.', 3)::int, split_part(x, '.', 4)::bigint) AS key
          FROM unnest(p_receipts) x ORDER BY 1) k;
    WITH r AS (
        SELECT DISTINCT split_part(x, '.', 2)::bigint AS pos, split_part(x, '.', 3)::int AS lane,
                        split_part(x, '.', 4)::bigint AS lease_no, nullif(split_part(x, '.', 5), '')::bigint AS token
        FROM unnest(p_receipts) x
    ), l AS MATERIALIZED (
        -- the leases named, each read once, by its key (LIMIT 1 keeps it a
        -- lookup, the primary key's order its index: planned once while
        -- the slot was nearly empty, a join merged or hashed the receipts
        -- with every lease of the group, and a lookup without the order
        -- took the index on expiry and read every lease of the lane; each
        -- cost more with every lease the slot held), and its completions
        SELECT x.*, n.token, coalesce(a.done, '{}') AS done
        FROM (SELECT DISTINCT r.lane, r.lease_no, r.token FROM r) n
        CROSS JOIN LATERAL (SELECT ll.lane, ll.lease_no, ll.n, ll.first_pos, ll.last_pos, ll.redo_pos, ll.expires_at
                            FROM lease__s ll
                            WHERE ll.group_id = p_group AND ll.lane = n.lane AND ll.lease_no = n.lease_no
                              AND ll.kind = 'r' AND ll.token = n.token
                            ORDER BY ll.group_id, ll.lane, ll.lease_no, ll.slot LIMIT 1) x
        CROSS JOIN LATERAL (SELECT array_agg(a.pos) AS done FROM ack__s a
                            WHERE a.group_id = p_group AND a.lane = n.lane AND a.lease_no = n.lease_no) a
    ), v AS MATERIALIZED (
        SELECT r.pos, r.lane, r.lease_no, l.n
        FROM r JOIN l ON l.lane = r.lane AND l.lease_no = r.lease_no AND l.token = r.token
        WHERE (r.pos BETWEEN l.first_pos AND l.last_pos OR r.pos = ANY (l.redo_pos))
          AND (l.expires_at > p_now
               OR EXISTS (SELECT 1 FROM ext__s e WHERE e.group_id = p_group AND e.lane = r.lane
                                                   AND e.lease_no = r.lease_no AND e.pos IN (0, r.pos)
                                                   AND e.expires_at > p_now))
          AND NOT (0 = ANY (l.done) OR r.pos = ANY (l.done))
    ), w AS (
        SELECT v.lane, v.lease_no, count(*)::int AS k, count(*) = max(v.n) AS whole FROM v GROUP BY v.lane, v.lease_no
    ), ins AS (
        INSERT INTO ack__s (slot, group_id, lane, lease_no, pos, kind, at)
        SELECT DISTINCT p_slot, p_group, v.lane, v.lease_no, CASE WHEN w.whole THEN 0 ELSE v.pos END, 'a', p_now
        FROM v JOIN w ON w.lane = v.lane AND w.lease_no = v.lease_no
        ON CONFLICT DO NOTHING
        RETURNING lane, lease_no, pos
    )
    SELECT coalesce(sum(CASE WHEN i.pos = 0 THEN w.k ELSE 1 END), 0) INTO n
    FROM ins i JOIN w ON w.lane = i.lane AND w.lease_no = i.lease_no;
    RETURN n;
END
$$;

-- e2_current_lease: the current delivery a receipt names (any slot): its
-- lease by its key, delivered (kind r), its token, the position in it (in
-- its range, or one it delivers again), not ended unless extended, not
-- completed. SQL, inlined into its callers' statements: e2_extend reads a
-- batch's receipts with it in one statement, e2_current adds the message.
--
-- Parameters:
--   p_group    group id
--   p_receipt  a well-formed receipt
--   p_now      now
-- Returns: slot, lane, lease_no, pos of the lease; i, the position's index
--   among those it delivers again (redo_pos, NULL: in its range), with
--   that message's txid, id and attempt; how many positions the lease has;
--   no row when the receipt is stale
SET check_function_bodies = off;   -- (a SQL template names the queue's tables: see engine_runs.sql)
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_current_lease(p_group int, p_receipt text, p_now timestamptz)
RETURNS TABLE (slot smallint, lane smallint, lease_no bigint, pos bigint, i int, redo_txid xid8, redo_id bigint,
               redo_att int, n int)
LANGUAGE sql STABLE
AS $$
    SELECT l.slot, l.lane, l.lease_no, r.pos, x.i, l.redo_txids[x.i], l.redo_ids[x.i], l.redo_att[x.i], l.n
    FROM (SELECT split_part(p_receipt, '.', 1)::int AS slot, split_part(p_receipt, '.', 2)::bigint AS pos,
                 split_part(p_receipt, '.', 3)::int AS lane, split_part(p_receipt, '.', 4)::bigint AS lease_no,
                 nullif(split_part(p_receipt, '.', 5), '')::bigint AS token) r
    -- (the lease by its key, in the primary key's order: see e2_ack__s)
    CROSS JOIN LATERAL (SELECT ll.* FROM lease ll
                        WHERE ll.group_id = p_group AND ll.lane = r.lane AND ll.lease_no = r.lease_no
                          AND ll.slot >= r.slot
                        ORDER BY ll.slot LIMIT 1) l
    CROSS JOIN LATERAL (SELECT array_position(l.redo_pos, r.pos) AS i) x
    WHERE l.slot = r.slot AND l.kind = 'r' AND l.token = r.token
      AND (x.i IS NOT NULL OR r.pos BETWEEN l.first_pos AND l.last_pos)
      AND (l.expires_at > p_now
           OR EXISTS (SELECT 1 FROM ext e WHERE e.group_id = p_group AND e.lane = r.lane
                                            AND e.lease_no = r.lease_no AND e.pos IN (0, r.pos)
                                            AND e.expires_at > p_now))
      AND NOT EXISTS (SELECT 1 FROM ack a WHERE a.group_id = p_group AND a.lane = r.lane
                                            AND a.lease_no = r.lease_no AND a.pos IN (0, r.pos))
$$;
RESET check_function_bodies;

-- e2_current: the current delivery a receipt names (any slot), with its
-- message: for nack.
--
-- Parameters:
--   p_group    group id
--   p_receipt  a well-formed receipt
--   p_now      now
-- Returns: slot, lane, lease_no, pos of the lease; the message's txid and
--   id, the attempt of this delivery, and how many positions the lease
--   has; no row when the receipt is stale
-- Calls: e2_current_lease (inlined)
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_current(p_group int, p_receipt text, p_now timestamptz)
RETURNS TABLE (slot smallint, lane smallint, lease_no bigint, pos bigint, txid xid8, id bigint, attempt int, n int)
LANGUAGE plpgsql
AS $$
BEGIN
    RETURN QUERY
    SELECT c.slot, c.lane, c.lease_no, c.pos, coalesce(c.redo_txid, b.txid), coalesce(c.redo_id, b.id),
           coalesce(c.redo_att, m.attempt), c.n
    FROM e2_current_lease(p_group, p_receipt, p_now) c
    LEFT JOIN LATERAL (SELECT bb.ids[c.pos - bb.first_pos + 1] AS id, bb.txids[c.pos - bb.first_pos + 1] AS txid
                       FROM batch bb WHERE c.i IS NULL AND bb.lane = c.lane AND bb.last_pos >= c.pos
                       ORDER BY bb.last_pos LIMIT 1) b ON true
    LEFT JOIN msg m ON c.i IS NULL AND m.txid = b.txid AND m.id = b.id;
END
$$;

-- e2_nack: give a message back (sluice.nack of a queue of engine 2): its
-- position is completed in its lease (kind n) and a retry copy is sent for
-- the group (with an id of its own; receive shows the message's; its
-- priority), due after the delay, with attempt + 1; once the message has had
-- max_attempts deliveries it becomes a dead letter instead. A keyed
-- message is retried in place instead (e2_nack_keyed).
--
-- Parameters: as sluice.nack (q and g looked up)
-- Returns: true if the receipt was current
-- Calls: e2_current, e2_nack_keyed
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_nack(q sluice.queue, g sluice.consumer_group, p_receipt text,
                                               p_delay interval, p_error text)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_now constant timestamptz := clock_timestamp();
    c record;
    m record;
    v_dead boolean;
    v_delay interval;
BEGIN
    -- (the lease's lock first: see e2_ack__s)
    PERFORM pg_advisory_xact_lock(sluice._lock_ns('lease'),
                                  sluice._lease_lock(g.id, split_part(p_receipt, '.', 3)::int,
                                                     split_part(p_receipt, '.', 4)::bigint));
    SELECT * INTO c FROM e2_current(g.id, p_receipt, v_now);
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    v_dead := c.attempt >= q.max_attempts;
    v_delay := coalesce(p_delay, least(q.backoff_base * power(2, c.attempt - 1), q.backoff_max));
    SELECT * INTO STRICT m FROM msg x WHERE x.txid = c.txid AND x.id = c.id;
    IF m.khash IS NOT NULL THEN
        -- (a retry in place, or a dead letter that releases the key)
        IF NOT e2_nack_keyed(g, c, m, CASE WHEN NOT v_dead THEN v_now + v_delay END, v_now) THEN
            RETURN false;   -- completed meanwhile
        END IF;
    ELSE
        INSERT INTO ack (slot, group_id, lane, lease_no, pos, kind, at)
        VALUES (c.slot, g.id, c.lane, c.lease_no, CASE WHEN c.n = 1 THEN 0 ELSE c.pos END,
                CASE WHEN v_dead THEN 'd' ELSE 'n' END, v_now)
        ON CONFLICT DO NOTHING;
        IF NOT FOUND THEN
            RETURN false;   -- completed meanwhile
        END IF;
    END IF;
    IF v_dead THEN
        INSERT INTO sluice.dead_letter (queue_id, group_id, message_id, attempts, error, died_at, sent_at, priority,
                                        key, headers, body)
        VALUES (q.id, g.id, coalesce(m.orig, m.id), c.attempt, p_error, v_now, m.sent_at, m.priority, m.key,
                m.headers, m.body);
        RETURN true;
    END IF;
    IF m.khash IS NOT NULL THEN
        RETURN true;
    END IF;
    -- (a new id: two retries of one message in one transaction, for two
    -- groups, must not share (txid, id))
    INSERT INTO msg (slot, id, txid, orig, attempt, target, due, sent_at, headers, body, priority)
    SELECT ns.slot, nextval(q.id_seq), pg_current_xact_id(), coalesce(m.orig, m.id), c.attempt + 1, g.id,
           CASE WHEN v_delay > interval '0' THEN v_now + v_delay END, m.sent_at, m.headers, m.body, m.priority
    FROM sluice._slot_now(q.id) ns;
    RETURN true;
END
$$;

-- e2_extend: renew deliveries (sluice.extend of a queue of engine 2): each
-- current receipt then lasts at least until now + p_lease (a delivery is
-- never shortened). The receipts that are every position of a lease extend
-- it whole (one row, pos 0); the others one row per position, and only
-- those positions: the lease's other positions still end with it. One
-- statement for a batch: e2_current_lease is inlined into it (e2_current,
-- called per receipt, also read each message, which an extension does not
-- need: a batch of 100 ran 101 statements).
--
-- Parameters:
--   p_group     group id
--   p_receipts  well-formed receipts
--   p_lease     from now
-- Returns: how many receipts were current
-- Calls: e2_current_lease (inlined)
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_extend(p_group int, p_receipts text[], p_lease interval)
RETURNS int
LANGUAGE plpgsql
AS $$
DECLARE
    v_now constant timestamptz := clock_timestamp();
    n int;
BEGIN
    WITH c AS MATERIALIZED (
        SELECT c.* FROM (SELECT DISTINCT x FROM unnest(p_receipts) x) r
        CROSS JOIN LATERAL e2_current_lease(p_group, r.x, v_now) c
    ), w AS (
        SELECT c.slot, c.lane, c.lease_no, count(DISTINCT c.pos) = max(c.n) AS whole FROM c GROUP BY 1, 2, 3
    ), ins AS (
        INSERT INTO ext (slot, group_id, lane, lease_no, pos, expires_at)
        SELECT DISTINCT c.slot, p_group, c.lane, c.lease_no, CASE WHEN w.whole THEN 0 ELSE c.pos END, v_now + p_lease
        FROM c JOIN w ON w.slot = c.slot AND w.lane = c.lane AND w.lease_no = c.lease_no
        RETURNING 1
    )
    SELECT count(*) INTO n FROM c WHERE EXISTS (SELECT FROM ins) OR true;
    RETURN n;
END
$$;

-- e2_ack_whole__s: complete a receive's batch lease by lease, as a consumer
-- acks it: when the receipts are runs, one after another, each run every
-- position of one current lease of this slot (each position once, none
-- completed before), one row (pos 0) a lease. At most eight runs, each
-- lease in one run only. Cheap checks, no join per receipt: a run is found
-- by its lease's suffix counted in the receipts joined (string searches),
-- then each receipt is compared with the one made from its position (one
-- cast, one concatenation).
--
-- Parameters:
--   p_group     group id
--   p_receipts  at least two receipts, of any form: each it completes is
--               equal to one it made (the first of each run is checked
--               before it is cast)
--   p_now       now
--   p_slot      this copy's slot
-- Returns: how many receipts it completed: those of the leading runs up to
--   the first that is not a whole lease (the caller checks and completes the
--   rest with e2_ack__s); 0 when the receipts are not such runs (then
--   nothing was written, nor locked unless every lease named was)
-- Locks: the leases' (sluice._lease_lock), all of them in key order as
--   e2_ack__s locks them, then checks
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_ack_whole__s(p_group int, p_receipts text[], p_now timestamptz,
                                                       p_slot smallint)
RETURNS int
LANGUAGE plpgsql
AS $$
DECLARE
    v_prefix constant text := p_slot || '.';
    v_rest text[] := p_receipts;
    v_all text;
    v_key bigint[];    -- a run's lease: lane, lease_no, token
    v_tail text;       -- the lease as its receipts end, with a comma
    v_keys bigint[] := '{}';   -- the runs' leases, three numbers each
    v_runs int[] := '{}';      -- how many receipts each run has
    c int;
    k int := 0;        -- receipts completed
    v_suffix text;
    v_done boolean;   -- (calls made in expressions, as in sluice.receive)
BEGIN
    -- The runs. Receipts of leases not in runs are not such a batch: their
    -- leases are locked in key order by e2_ack__s. (Locked here one by one,
    -- two acks naming the same leases, as a retried ack does, could wait
    -- for each other: deadlock.) A run is the receipts at the front that end
    -- with the first one's lease, when no later receipt does: its tail with
    -- a comma occurs as often at the front as in them all (an occurrence
    -- ends at a comma, so within one receipt, at its end; octet lengths, as
    -- a well-formed receipt is digits and dots). (Few expressions: each is
    -- made ready once a transaction.)
    WHILE cardinality(v_rest) > 0 LOOP
        -- (a receipt's form checked before it is cast: a regular
        -- expression with bounded repeats, as sluice._receipts_ok's, cost
        -- ~38k instructions for one receipt, this ~1/3 of it)
        IF sluice._receipt_ok(v_rest[1]) IS NOT TRUE THEN
            RETURN 0;   -- (the caller checks them all)
        END IF;
        v_key := (string_to_array(v_rest[1], '.')::bigint[])[3:5];
        v_tail := '.' || array_to_string(v_key, '.') || ',';
        v_all := array_to_string(v_rest, ',') || ',';
        c := (octet_length(v_all) - octet_length(replace(v_all, v_tail, ''))) / octet_length(v_tail);
        IF cardinality(v_key) < 3 OR cardinality(v_runs) = 8 OR c < 1
           OR (c < cardinality(v_rest)
               AND octet_length(array_to_string(v_rest[1:c], ',') || ',')
                   - octet_length(replace(array_to_string(v_rest[1:c], ',') || ',', v_tail, ''))
                   <> c * octet_length(v_tail)) THEN
            RETURN 0;
        END IF;
        v_keys := v_keys || v_key;
        v_runs := v_runs || c;
        v_rest := v_rest[c + 1:];
    END LOOP;
    IF cardinality(v_runs) = 1 THEN
        v_done := pg_advisory_xact_lock(sluice._lock_ns('lease'), sluice._lease_lock(p_group, v_key[1]::int, v_key[2]))
                  IS NULL;
    ELSE
        PERFORM pg_advisory_xact_lock(sluice._lock_ns('lease'), x.key)
        FROM (SELECT DISTINCT sluice._lease_lock(p_group, v_keys[3 * i - 2]::int, v_keys[3 * i - 1]) AS key
              FROM generate_subscripts(v_runs, 1) i ORDER BY 1) x;
    END IF;
    -- Each run, as one row if it is its whole lease; the first that is not
    -- ends it.
    FOR i IN 1 .. cardinality(v_runs) LOOP
        v_suffix := '.' || array_to_string(v_keys[3 * i - 2:3 * i], '.');
        INSERT INTO ack__s (slot, group_id, lane, lease_no, pos, kind, at)
        SELECT p_slot, p_group, l.lane, l.lease_no, 0, 'a', p_now
        FROM lease__s l
        WHERE l.group_id = p_group AND l.lane = v_keys[3 * i - 2] AND l.lease_no = v_keys[3 * i - 1]
          AND l.kind = 'r' AND l.token = v_keys[3 * i] AND l.n = v_runs[i]
          AND (l.expires_at > p_now
               OR EXISTS (SELECT 1 FROM ext__s e WHERE e.group_id = p_group AND e.lane = l.lane
                                                   AND e.lease_no = l.lease_no AND e.pos = 0 AND e.expires_at > p_now))
          AND NOT EXISTS (SELECT 1 FROM ack__s a WHERE a.group_id = p_group AND a.lane = l.lane
                                                   AND a.lease_no = l.lease_no)
          -- (each receipt the one of its position in this slot and lease:
          -- a lease of a range, in order, as a receive returns it, compared
          -- with the receipts made from the range; else, once they are
          -- well-formed, each by the position it names)
          AND CASE WHEN l.redo_pos IS NULL AND l.last_pos - l.first_pos + 1 = l.n
                        AND p_receipts[k + 1:k + v_runs[i]]
                            = ARRAY(SELECT v_prefix || p || v_suffix FROM generate_series(l.first_pos, l.last_pos) p)
                   THEN true
                   WHEN sluice._receipts_ok(p_receipts[k + 1:k + v_runs[i]])
                   THEN (SELECT count(DISTINCT x.pos) = l.n
                                AND bool_and(x.r = v_prefix || x.pos || v_suffix
                                             AND (x.pos BETWEEN l.first_pos AND l.last_pos OR x.pos = ANY (l.redo_pos)))
                         FROM (SELECT r, split_part(r, '.', 2)::bigint AS pos
                               FROM unnest(p_receipts[k + 1:k + v_runs[i]]) r) x)
                   ELSE false END
        ORDER BY l.slot LIMIT 1   -- (the primary key's order: see e2_ack__s)
        ON CONFLICT DO NOTHING;
        GET DIAGNOSTICS c = ROW_COUNT;
        EXIT WHEN c = 0;
        k := k + v_runs[i];
    END LOOP;
    RETURN k;
END
$$;
