-- Group: engine v2 - ordering keys (templates, schema sluice_tmpl2)
--
-- A keyed message goes to its key's lane (the cut), so a key's order is
-- its lane's business, and a lane is served by one receive at a time. A
-- lane's state (its newest lease row) carries the keys it holds back, held
-- (a key whose messages in flight are positions of one lease, or whose
-- nacked message waits for its retry's delay), and the keyed positions its
-- cursor passed while their key was held, waiting (a retry's, and those an
-- expired lease parked, one by one; the others as the key's tail: every
-- position of the key from the first one passed up to the cursor). A key is
-- held until those positions are completed (one probe of ack per held key
-- when a receive looks at the lane: no per-key bookkeeping on ack), after
-- which its waiting positions are delivered first, in order, several at
-- once when there is room (a run). A lease that expires passes its keys to
-- its redelivery (e2_expire); a nack retries in place (e2_nack_keyed).

-- e2_keys_passed: a lane's keys once an expired lease is passed on
-- (e2_expire): each key the lease held goes to the new lease when that
-- delivers positions of the key again, else it is freed; the keyed
-- positions parked join the waiting ones, in position order, their
-- attempt counted.
--
-- Parameters:
--   p_held, p_wait  the lane's held keys and waiting positions (its state)
--   p_no            the expired lease's lease_no
--   p_redo, p_park  its positions delivered again, and parked (e2_unsettled)
--   p_slot, p_new   the new lease's slot and lease_no
-- Returns: held and waiting, the lane's new lists (empty arrays for none)
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_keys_passed(p_held sluice.e2_held[], p_wait sluice.e2_wait[], p_no bigint,
                                                      p_redo sluice.e2_wait[], p_park sluice.e2_wait[],
                                                      p_slot smallint, p_new bigint,
                                                      OUT held sluice.e2_held[], OUT waiting sluice.e2_wait[])
RETURNS record
LANGUAGE sql IMMUTABLE
AS $$
    SELECT ARRAY(SELECT CASE WHEN h.lease_no = p_no
                             THEN ROW(h.khash, p_slot, p_new, NULL,
                                      ARRAY(SELECT w.pos FROM unnest(p_redo) w WHERE w.khash = h.khash
                                            ORDER BY w.pos))::sluice.e2_held
                             ELSE h END
                 FROM unnest(p_held) h
                 WHERE h.lease_no IS DISTINCT FROM p_no
                    OR EXISTS (SELECT FROM unnest(p_redo) w WHERE w.khash = h.khash)),
           ARRAY(SELECT w FROM unnest(coalesce(p_wait, '{}')
                                      || ARRAY(SELECT ROW(p.pos, p.khash, p.id, p.txid, p.mslot,
                                                          p.attempt + 1)::sluice.e2_wait
                                               FROM unnest(p_park) p WHERE p.khash IS NOT NULL)) w
                 ORDER BY (w).pos)
$$;

-- e2_key_done__s: whether a key's positions in a lease of this slot are
-- all completed (acked, nacked, dead-lettered; or the lease acked whole). A
-- lease no longer there (its slot reclaimed) is done.
--
-- Parameters:
--   p_group, p_lane, p_no  the lease (group, lane, lease_no)
--   p_pos                  the key's positions in it
-- Returns: done
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_key_done__s(p_group int, p_lane smallint, p_no bigint, p_pos bigint[])
RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
    RETURN coalesce((SELECT EXISTS (SELECT 1 FROM ack__s a WHERE a.group_id = p_group AND a.lane = p_lane
                                                         AND a.lease_no = p_no AND a.pos = 0)
                            OR (SELECT count(*) FROM ack__s a WHERE a.group_id = p_group AND a.lane = p_lane
                                                                AND a.lease_no = p_no AND a.pos = ANY (p_pos))
                               >= cardinality(p_pos)
                     -- (in the primary key's order: see e2_ack__s)
                     FROM (SELECT 1 FROM lease__s l WHERE l.group_id = p_group AND l.lane = p_lane AND l.lease_no = p_no
                           ORDER BY l.slot LIMIT 1) l),
                    true);
END
$$;

-- e2_take_keyed__s: e2_take__s for a lane with keyed positions to take or
-- pass, or keys held or waiting. The held keys whose positions are
-- completed or whose delay has passed are freed (a retry's delay holds its
-- key from the retry's position on: the key's earlier waiting positions
-- are free); the waiting positions of free keys are
-- delivered first, in order (a key's waiting ones: single positions, a
-- retry's or those its expired lease parked, then its tail: every position
-- of the key from a given one up to the cursor, read from the batches);
-- then the positions after the cursor: an unkeyed one is delivered, a keyed
-- one too unless its key is held or still has positions waiting (then the
-- key's tail starts there, if it has none). The keys delivered are held by
-- the new lease, whose positions are listed (redo_pos, ...), not a range.
-- At most 1,024 positions are passed a call. Writes nothing when the state
-- passed is stale (as e2_take__s), or when the next positions are in
-- another slot's batches.
--
-- Parameters: as e2_take__s, and
--   p_held, p_waiting  the lane state's held keys and waiting positions
-- Returns: the messages leased, in position order (as sluice.receive)
-- Calls: e2_key_done__s, e2_key_done (a held key's lease in another slot),
--   e2_key_tail
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_take_keyed__s(p_group int, p_lane smallint, p_no bigint, p_cursor bigint,
                                                        p_scan_t timestamptz, p_scan_no bigint, p_old_due timestamptz,
                                                        p_next_exp timestamptz, p_moved boolean, p_need int,
                                                        p_lease interval, p_consumer text, p_now timestamptz,
                                                        p_slot smallint, p_held sluice.e2_held[],
                                                        p_waiting sluice.e2_wait[])
RETURNS SETOF sluice.message
LANGUAGE plpgsql
AS $$
DECLARE
    v_blocked bigint[] := '{}';         -- keys not to deliver now
    v_tails bigint[] := '{}';           -- keys with a tail waiting
    v_mine bigint[] := '{}';            -- keys this lease delivers
    v_held sluice.e2_held[] := '{}';
    v_due sluice.e2_held[] := '{}';     -- retries not due yet: their keys held from their positions on
    v_due_keys bigint[] := '{}';        -- (their keys)
    v_late boolean;                     -- a waiting position at or after one of those
    v_wait sluice.e2_wait[] := '{}';
    v_out sluice.e2_wait[] := '{}';     -- to deliver, in position order
    v_got sluice.e2_wait[];
    v_cursor bigint := p_cursor;
    v_from bigint := p_cursor;
    v_rows int;
    v_room int;
    h sluice.e2_held;
    w sluice.e2_wait;
    b record;
BEGIN
    FOREACH h IN ARRAY coalesce(p_held, '{}') LOOP
        IF (CASE WHEN h.lease_no IS NULL THEN h.until > p_now
                 WHEN h.slot = p_slot THEN NOT e2_key_done__s(p_group, p_lane, h.lease_no, h.pos)
                 ELSE NOT e2_key_done(p_group, p_lane, h.lease_no, h.pos) END) THEN
            v_held := v_held || h;
            IF h.lease_no IS NULL AND h.pos IS NOT NULL THEN
                v_due := v_due || h;   -- (the key from that position on)
                v_due_keys := v_due_keys || h.khash;
            ELSE
                v_blocked := v_blocked || h.khash;
            END IF;
        END IF;
    END LOOP;
    FOR w IN SELECT * FROM unnest(p_waiting) x ORDER BY x.pos LOOP
        -- (a retry not due at or before it; each condition a plain
        -- expression, no statement a position)
        v_late := false;
        IF w.khash = ANY (v_due_keys) THEN
            FOREACH h IN ARRAY v_due LOOP
                v_late := v_late OR h.khash = w.khash AND h.pos[1] <= w.pos;
            END LOOP;
        END IF;
        IF w.khash = ANY (v_blocked) OR cardinality(v_out) >= p_need OR v_late THEN
            v_wait := v_wait || w;
            v_blocked := v_blocked || w.khash;   -- (its later positions wait behind it)
        ELSIF w.id IS NOT NULL THEN
            v_out := v_out || w;
            v_mine := v_mine || w.khash;
        ELSE
            -- the key's tail: its positions up to the cursor, as many as
            -- fit (one more read: where the rest starts, if there is one)
            v_room := p_need - cardinality(v_out);
            v_got := e2_key_tail(p_group, p_lane, w.khash, w.pos, p_cursor, v_room + 1);
            IF cardinality(v_got) > v_room THEN
                -- (room ran out: the rest of the tail waits, from its next
                -- position; a tail never starts where the key has none)
                v_wait := v_wait || ROW(v_got[v_room + 1].pos, w.khash, NULL, NULL, NULL, NULL)::sluice.e2_wait;
                v_blocked := v_blocked || w.khash;
                v_got := v_got[1:v_room];
            END IF;
            v_out := v_out || v_got;
            v_mine := v_mine || w.khash;
        END IF;
        IF w.id IS NULL AND w.khash = ANY (v_blocked) THEN
            v_tails := v_tails || w.khash;
        END IF;
    END LOOP;
    -- (a key with a retry not due is held at the positions after the cursor)
    v_blocked := v_blocked || v_due_keys;
    -- the positions after the cursor, four batches a statement
    <<walk>>
    LOOP
        v_rows := 0;
        FOR b IN
            SELECT bb.first_pos + u.o - 1 AS pos, u.id, u.txid, u.mslot, u.tg, u.kh
            FROM (SELECT x.* FROM batch__s x WHERE x.lane = p_lane AND x.last_pos > v_from
                  ORDER BY x.last_pos LIMIT 4) bb
            CROSS JOIN LATERAL unnest(bb.ids, bb.txids, bb.mslots, bb.targets, bb.khashes)
                               WITH ORDINALITY AS u(id, txid, mslot, tg, kh, o)
            WHERE bb.first_pos + u.o - 1 > v_from
            ORDER BY 1
        LOOP
            IF v_cursor = p_cursor AND b.pos <> p_cursor + 1 THEN
                RETURN;   -- the next positions are in another slot's batches
            END IF;
            v_rows := v_rows + 1;
            EXIT walk WHEN cardinality(v_out) >= p_need OR v_cursor - p_cursor >= 1024;
            IF b.tg IS NULL OR b.tg = p_group THEN
                IF b.kh = ANY (v_blocked) THEN
                    IF NOT b.kh = ANY (v_tails) THEN   -- the key's tail starts here
                        v_wait := v_wait || ROW(b.pos, b.kh, NULL, NULL, NULL, NULL)::sluice.e2_wait;
                        v_tails := v_tails || b.kh;
                    END IF;
                ELSE
                    v_out := v_out || ROW(b.pos, b.kh, b.id, b.txid, b.mslot, NULL)::sluice.e2_wait;
                    IF b.kh IS NOT NULL THEN
                        v_mine := v_mine || b.kh;
                    END IF;
                END IF;
            END IF;
            v_cursor := b.pos;
        END LOOP;
        EXIT WHEN v_rows = 0;
        v_from := v_cursor;
    END LOOP;
    IF cardinality(v_out) = 0 AND v_cursor = p_cursor AND NOT p_moved
       AND v_held IS NOT DISTINCT FROM coalesce(p_held, '{}') AND v_wait IS NOT DISTINCT FROM coalesce(p_waiting, '{}') THEN
        RETURN;   -- nothing changed
    END IF;
    RETURN QUERY
    WITH o AS MATERIALIZED (
        SELECT o.pos, o.id, o.txid, coalesce(o.attempt, m.attempt) AS att, m.orig, m.body, m.headers, m.key,
               m.priority, m.sent_at
        FROM unnest(v_out) o JOIN msg m ON m.slot = o.mslot AND m.txid = o.txid AND m.id = o.id   -- (one partition a row)
    ), ins AS (
        INSERT INTO lease__s AS i (slot, group_id, lane, lease_no, kind, first_pos, last_pos, n, redo_pos, redo_att,
                                   redo_ids, redo_txids, token, expires_at, delivered_at, cursor, scan_t, scan_no,
                                   old_due, consumer, next_exp, held, waiting)
        SELECT p_slot, p_group, p_lane, p_no + 1, CASE WHEN x.n > 0 THEN 'r' ELSE 'c' END, 1, 0, x.n, x.pos, x.att,
               x.ids, x.txids, CASE WHEN x.n > 0 THEN 1 + (random() * 4503599627370495)::bigint ELSE 0 END,
               CASE WHEN x.n > 0 THEN p_now + p_lease ELSE '-infinity' END, p_now, v_cursor, p_scan_t, p_scan_no,
               p_old_due, p_consumer, CASE WHEN x.n > 0 THEN least(p_next_exp, p_now + p_lease) ELSE p_next_exp END,
               nullif(v_held || ARRAY(SELECT ROW(k, p_slot, p_no + 1, NULL,
                                                 ARRAY(SELECT o.pos FROM unnest(v_out) o WHERE o.khash = k
                                                       ORDER BY o.pos))::sluice.e2_held
                                      FROM unnest(v_mine) k GROUP BY k ORDER BY k), '{}'),
               nullif(v_wait, '{}')
        FROM (SELECT count(*)::int AS n, array_agg(o.pos ORDER BY o.pos) AS pos, array_agg(o.att ORDER BY o.pos) AS att,
                     array_agg(o.id ORDER BY o.pos) AS ids, array_agg(o.txid ORDER BY o.pos) AS txids
              FROM o) x
        ON CONFLICT DO NOTHING
        RETURNING p_slot || '.' AS head, '.' || p_lane || '.' || i.lease_no || '.' || i.token AS tail, i.expires_at
    )
    SELECT coalesce(o.orig, o.id), o.body, o.headers, o.key, o.priority, o.att, o.sent_at,
           ins.head || o.pos || ins.tail, ins.expires_at, o.pos
    FROM ins CROSS JOIN o
    ORDER BY o.pos;
END
$$;

-- e2_key_tail: a key's positions in a lane from p_from up to p_upto meant
-- for the group, at most p_max, in order, read from the batches (of any
-- slot).
--
-- Parameters:
--   p_group           group id
--   p_lane, p_khash   lane and key hash
--   p_from, p_upto    the positions' range
--   p_max             how many at most
-- Returns: the positions (attempt NULL: the message's own)
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_key_tail(p_group int, p_lane smallint, p_khash bigint, p_from bigint,
                                                   p_upto bigint, p_max int)
RETURNS sluice.e2_wait[]
LANGUAGE plpgsql
AS $$
BEGIN
    RETURN ARRAY(
        SELECT ROW(bb.first_pos + u.o - 1, u.kh, u.id, u.txid, u.mslot, NULL)::sluice.e2_wait
        FROM (SELECT x.* FROM batch x WHERE x.lane = p_lane AND x.last_pos >= p_from AND x.first_pos <= p_upto
              AND p_khash = ANY (x.khashes)) bb
        CROSS JOIN LATERAL unnest(bb.ids, bb.txids, bb.mslots, bb.khashes, bb.targets)
                           WITH ORDINALITY AS u(id, txid, mslot, kh, tg, o)
        WHERE u.kh = p_khash AND bb.first_pos + u.o - 1 BETWEEN p_from AND p_upto AND (u.tg IS NULL OR u.tg = p_group)
        ORDER BY 1
        LIMIT p_max);
END
$$;

-- e2_nack_keyed: nack of a keyed message (e2_nack): its retry comes before
-- the key's later messages, so it is not a copy sent anew but a waiting
-- position of its lane (attempt + 1), at the head of its key's, and the key
-- is held from the retry's position on until the retry is due (a hold with
-- an until and that position), and while the key's earlier positions in
-- the lease (a run nacked out of order) are not completed. So the key's
-- retries come in order, none before its time: an earlier message's retry
-- due first comes first, while a later one's waits for its own. The key's later
-- positions in the same lease (the rest of a run) are released: completed
-- in the lease (kind n) and waiting again with the attempt they had. A nack
-- that makes the message a dead letter (p_due NULL) completes it (kind d)
-- and releases the rest the same way. Takes the lane's lock (a receive holds it for a
-- moment) to write the lane's new state.
--
-- Parameters:
--   g         the group
--   c         the current delivery (e2_current)
--   m         its message
--   p_due     when the retry is due; NULL: no retry (a dead letter)
--   p_now     now
-- Returns: true when the position was completed now
-- Tables: ack (kind n or d), lease (the lane's new state, kind c)
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_nack_keyed(g sluice.consumer_group, c record, m record,
                                                     p_due timestamptz, p_now timestamptz)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    st record;
    v_rel sluice.e2_wait[];
    v_done boolean;
BEGIN
    PERFORM pg_advisory_xact_lock(sluice._lane_lock(g.id, c.lane));
    SELECT * INTO STRICT st FROM lease s WHERE s.group_id = g.id AND s.lane = c.lane ORDER BY s.lease_no DESC LIMIT 1;
    -- the key's later positions in the lease, not completed: released
    SELECT array_agg(ROW(x.pos, x.khash, x.id, x.txid, x.slot, x.att)::sluice.e2_wait ORDER BY x.pos) INTO v_rel
    FROM (SELECT u.pos, mm.khash, u.id, u.txid, mm.slot, u.att
          -- (the lease by its key, in the primary key's order: see e2_ack__s)
          FROM (SELECT ll.* FROM lease ll
                WHERE ll.group_id = g.id AND ll.lane = c.lane AND ll.lease_no = c.lease_no AND ll.slot >= c.slot
                ORDER BY ll.slot LIMIT 1) l
          CROSS JOIN LATERAL unnest(l.redo_pos, l.redo_ids, l.redo_txids, l.redo_att) u(pos, id, txid, att)
          JOIN msg mm ON mm.txid = u.txid AND mm.id = u.id
          WHERE l.slot = c.slot
            AND u.pos > c.pos AND mm.khash = m.khash
            AND NOT EXISTS (SELECT 1 FROM ack a WHERE a.group_id = g.id AND a.lane = c.lane
                                                  AND a.lease_no = c.lease_no AND a.pos IN (0, u.pos))) x;
    WITH ins AS (
        INSERT INTO ack (slot, group_id, lane, lease_no, pos, kind, at)
        SELECT c.slot, g.id, c.lane, c.lease_no, r.pos, r.kind, p_now
        FROM (SELECT CASE WHEN c.n = 1 THEN 0 ELSE c.pos END AS pos,
                     CASE WHEN p_due IS NULL THEN 'd' ELSE 'n' END::"char" AS kind
              UNION ALL SELECT w.pos, 'n' FROM unnest(v_rel) w) r
        ON CONFLICT DO NOTHING
        RETURNING ack.pos
    )
    SELECT EXISTS (SELECT FROM ins WHERE ins.pos IN (0, c.pos)) INTO v_done;
    IF NOT v_done THEN
        RETURN false;   -- completed meanwhile
    END IF;
    INSERT INTO lease (slot, group_id, lane, lease_no, kind, first_pos, last_pos, n, token, expires_at, delivered_at,
                       cursor, scan_t, scan_no, old_due, next_exp, held, waiting)
    VALUES (st.slot, g.id, c.lane, st.lease_no + 1, 'c', 1, 0, 0, 0, '-infinity', p_now, st.cursor, st.scan_t,
            st.scan_no, st.old_due, st.next_exp,
            nullif(ARRAY(SELECT h FROM unnest(st.held) h WHERE h.khash <> m.khash)
                   -- (the key's earlier positions in the lease, if any, still hold it)
                   || ARRAY(SELECT CASE WHEN h.lease_no = c.lease_no
                                        THEN ROW(h.khash, h.slot, h.lease_no, NULL,
                                                 ARRAY(SELECT p FROM unnest(h.pos) p WHERE p < c.pos ORDER BY p)
                                                )::sluice.e2_held
                                        ELSE h END
                            FROM unnest(st.held) h
                            WHERE h.khash = m.khash AND h.lease_no IS NOT NULL
                              AND (h.lease_no <> c.lease_no OR EXISTS (SELECT FROM unnest(h.pos) p WHERE p < c.pos)))
                   -- (the key's retries waiting for their delays, this one's
                   -- too: each holds it from its position on)
                   || ARRAY(SELECT h FROM unnest(st.held) h WHERE h.khash = m.khash AND h.lease_no IS NULL)
                   || ARRAY(SELECT ROW(m.khash, NULL, NULL, p_due, ARRAY[c.pos])::sluice.e2_held
                            WHERE p_due IS NOT NULL), '{}'),
            nullif(ARRAY(SELECT w FROM unnest(CASE WHEN p_due IS NOT NULL
                                                   THEN ARRAY[ROW(c.pos, m.khash, c.id, c.txid, m.slot,
                                                                  c.attempt + 1)::sluice.e2_wait] ELSE '{}' END
                                              || coalesce(v_rel, '{}') || coalesce(st.waiting, '{}')) w
                         ORDER BY (w).pos), '{}'));
    RETURN true;
END
$$;
