-- Group: engine v2 - the receive's hot path (templates, schema sluice_tmpl2)
--
-- e2_take__s is the last step of a receive on a lane it holds: take the
-- lane's next positions, write its new state (the lease) and read the
-- messages, in one statement. Its statement is spliced into each slot's
-- copy of e2_receive__s (sluice._splice_call, from sluice._instantiate_v2),
-- naming only that slot's leaves: the hot path runs it in place, with no
-- call. It is copied once, with __s removed, the same statement over the
-- parents, for the slow path (e2_slow). e2_take_one__s is the same take
-- for one position, a narrower statement (about half the plan to set up
-- at each call), spliced in before it: it writes what e2_take__s writes
-- for that position, or nothing (then e2_take__s runs);
-- TestV2TakeOneWritesWhatTheTakeWrites holds the two to that.

-- e2_take__s: take up to p_need new positions of a lane the caller holds,
-- from the cursor on, write the lane's new state and return the messages.
-- Looks at the p_need + 3 positions after the cursor (a little more than
-- needed, for positions meant for other groups), in at most four batches, so
-- its new cursor is the last position taken, or, with fewer than p_need, the
-- last position looked at; the first batch read must hold the position after
-- the cursor (else the next positions are in another slot's batches:
-- nothing is written). A keyed position among those it would take or pass
-- is e2_take_keyed__s's: nothing is written either. The state passed may be stale (read before the lane's
-- lock): its successor's key (group, lane, lease_no + 1) is then taken, and
-- nothing is written.
--
-- Parameters:
--   p_group     group id
--   p_lane      the lane (locked)
--   p_no        the lane's newest lease_no (its state)
--   p_cursor    the lane's cursor
--   p_scan_t, p_scan_no  the scan point the new state is to have
--   p_old_due   the state's old_due, carried on
--   p_next_exp  when the first lease here past the scan point ends (or
--               earlier: -infinity makes the next receive look)
--   p_moved     the scan point moved (write a state even if nothing is taken)
--   p_need      how many positions at most
--   p_lease     lease duration
--   p_consumer  consumer name
--   p_now       the receive's time
--   p_slot      the slot the row goes to
-- Returns: the messages leased, in position order (as sluice.receive)
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_take__s(p_group int, p_lane smallint, p_no bigint, p_cursor bigint,
                                                  p_scan_t timestamptz, p_scan_no bigint, p_old_due timestamptz,
                                                  p_next_exp timestamptz, p_moved boolean, p_need int,
                                                  p_lease interval, p_consumer text, p_now timestamptz,
                                                  p_slot smallint)
RETURNS SETOF sluice.message
LANGUAGE plpgsql
AS $$
BEGIN
    RETURN QUERY
    WITH w AS MATERIALIZED (
        -- the positions looked at (p_need + 3 after the cursor, a little
        -- more than needed, for positions meant for other groups), k
        -- numbering those meant for the group
        SELECT b.first_pos, least(b.last_pos, p_cursor + p_need + 3) AS last_pos,
               b.first_pos + b.vfrom + u.o - 2 AS pos, u.id, u.txid, u.mslot, u.kh,
               count(u.id) OVER (ORDER BY b.last_pos, u.o ROWS UNBOUNDED PRECEDING) AS k
        FROM (SELECT bb.first_pos, bb.last_pos, bb.ids, bb.txids, bb.mslots, bb.targets, bb.khashes,
                     greatest(p_cursor - bb.first_pos + 2, 1)::int AS vfrom,
                     (least(bb.last_pos, p_cursor + p_need + 3) - bb.first_pos + 1)::int AS vto
              FROM batch__s bb WHERE bb.lane = p_lane AND bb.last_pos > p_cursor
              ORDER BY bb.last_pos LIMIT least(p_need, 4)) b
        LEFT JOIN LATERAL (SELECT u.* FROM unnest(b.ids[b.vfrom:b.vto], b.txids[b.vfrom:b.vto], b.mslots[b.vfrom:b.vto],
                                                  b.targets[b.vfrom:b.vto], b.khashes[b.vfrom:b.vto])
                                            WITH ORDINALITY AS u(id, txid, mslot, tg, kh, o)
                           WHERE u.tg IS NULL OR u.tg = p_group) u ON true
        WHERE b.vfrom <= b.vto
    ), ins AS (
        -- The lane's new state, from what w took: how many (n), the first
        -- and last taken, the last looked at. Every column in the table's
        -- order, of its type, computed by the aggregate itself: the plan
        -- then has no scan between the two to set up at each call (a
        -- column added to the table goes here too, in its place, or the
        -- scan comes back, and into e2_take_one__s's INSERT; the count
        -- repeated is one aggregate, computed once). Not
        -- written when the first batch read does not hold the position
        -- after the cursor, when nothing was taken or passed, or when a
        -- keyed position is among those it would take.
        INSERT INTO lease__s AS i (slot, group_id, lane, lease_no, kind, ref, first_pos, last_pos, n, redo_pos,
                                   redo_att, redo_ids, redo_txids, token, expires_at, delivered_at, cursor, scan_t,
                                   scan_no, old_due, consumer, next_exp, held, waiting, levels)
        SELECT p_slot, p_group, p_lane, p_no + 1,
               CASE WHEN count(w.id) FILTER (WHERE w.k <= p_need) > 0 THEN 'r'::"char" ELSE 'c'::"char" END,
               NULL::bigint, coalesce(min(w.pos) FILTER (WHERE w.k = 1), 1::bigint),
               coalesce(max(w.pos) FILTER (WHERE w.k <= p_need AND w.id IS NOT NULL), 0::bigint),
               (count(w.id) FILTER (WHERE w.k <= p_need))::int, NULL::bigint[], NULL::int[], NULL::bigint[],
               NULL::xid8[], 1 + (random() * 4503599627370495)::bigint,
               CASE WHEN count(w.id) FILTER (WHERE w.k <= p_need) > 0 THEN p_now + p_lease
                    ELSE '-infinity'::timestamptz END,
               p_now,
               CASE WHEN count(w.id) FILTER (WHERE w.k <= p_need) = p_need
                    THEN max(w.pos) FILTER (WHERE w.k <= p_need AND w.id IS NOT NULL)
                    ELSE coalesce(max(w.last_pos), p_cursor) END,
               p_scan_t, p_scan_no, p_old_due, p_consumer,
               CASE WHEN count(w.id) FILTER (WHERE w.k <= p_need) > 0 THEN least(p_next_exp, p_now + p_lease)
                    ELSE p_next_exp END,
               NULL::sluice.e2_held[], NULL::sluice.e2_wait[], NULL::sluice.e2_level[]
        FROM w
        HAVING coalesce(min(w.first_pos) <= p_cursor + 1, true)
           AND (count(w.id) FILTER (WHERE w.k <= p_need) > 0 OR p_moved OR max(w.last_pos) > p_cursor)
           AND NOT coalesce(bool_or(w.kh IS NOT NULL) FILTER (WHERE w.k <= p_need), false)
        ON CONFLICT DO NOTHING
        -- (a receipt is slot.pos.lane.lease_no.token: what is the same for
        -- every message of the lease is made once)
        RETURNING p_slot || '.' AS head, '.' || p_lane || '.' || i.lease_no || '.' || i.token AS tail, i.expires_at
    )
    SELECT coalesce(m.orig, m.id), m.body, m.headers, NULL::text, 0, m.attempt, m.sent_at,
           ins.head || w.pos || ins.tail, ins.expires_at, w.pos
    FROM ins CROSS JOIN w
    JOIN msg m ON m.slot = w.mslot AND m.txid = w.txid AND m.id = w.id   -- (one partition looked at a row)
    WHERE w.k <= p_need AND w.id IS NOT NULL
    ORDER BY w.pos;
END
$$;

-- e2_take_one__s: e2_take__s for a receive that wants one message, or a
-- lane whose one position left (as of the receive's look) is the one
-- after the cursor: when that position is in the first batch read, meant
-- for every group or for this one, not keyed, and its message stored in
-- this slot, the lease of that one position (the row e2_take__s writes
-- then, with p_need 1) and the message. Otherwise nothing is written or
-- returned, and the receive runs e2_take__s. Spliced into each slot's copy
-- of e2_receive__s as e2_take__s is; no copy of its own. (A lane whose
-- later positions were numbered after the look gives one message where
-- e2_take__s would give more: the receive looks at it again.)
--
-- Parameters: as e2_take__s, but p_moved (a take writes its state) and
--   p_need (1)
-- Returns: the message leased (as sluice.receive), or nothing
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_take_one__s(p_group int, p_lane smallint, p_no bigint, p_cursor bigint,
                                                      p_scan_t timestamptz, p_scan_no bigint, p_old_due timestamptz,
                                                      p_next_exp timestamptz, p_lease interval, p_consumer text,
                                                      p_now timestamptz, p_slot smallint)
RETURNS SETOF sluice.message
LANGUAGE plpgsql
AS $$
BEGIN
    RETURN QUERY
    WITH b AS MATERIALIZED (
        -- the position after the cursor, if the first batch holds it
        SELECT bb.ids[x.i] AS id, bb.txids[x.i] AS txid,
               bb.first_pos <= p_cursor + 1 AND bb.mslots[x.i] = p_slot AND bb.khashes[x.i] IS NULL
               AND coalesce(bb.targets[x.i] = p_group, true) AS ok
        FROM batch__s bb CROSS JOIN LATERAL (SELECT (p_cursor + 2 - bb.first_pos)::int AS i) x
        WHERE bb.lane = p_lane AND bb.last_pos > p_cursor
        ORDER BY bb.last_pos LIMIT 1
    ), ins AS (
        -- (the columns as in e2_take__s's INSERT, for one position taken)
        INSERT INTO lease__s AS i (slot, group_id, lane, lease_no, kind, ref, first_pos, last_pos, n, redo_pos,
                                   redo_att, redo_ids, redo_txids, token, expires_at, delivered_at, cursor, scan_t,
                                   scan_no, old_due, consumer, next_exp, held, waiting, levels)
        SELECT p_slot, p_group, p_lane, p_no + 1, 'r'::"char", NULL::bigint, p_cursor + 1, p_cursor + 1, 1,
               NULL::bigint[], NULL::int[], NULL::bigint[], NULL::xid8[], 1 + (random() * 4503599627370495)::bigint,
               p_now + p_lease, p_now, p_cursor + 1, p_scan_t, p_scan_no, p_old_due, p_consumer,
               least(p_next_exp, p_now + p_lease), NULL::sluice.e2_held[], NULL::sluice.e2_wait[],
               NULL::sluice.e2_level[]
        FROM b WHERE b.ok
        ON CONFLICT DO NOTHING
        RETURNING p_slot || '.' || i.cursor || '.' || p_lane || '.' || i.lease_no || '.' || i.token AS receipt,
                  i.expires_at
    )
    SELECT coalesce(m.orig, m.id), m.body, m.headers, NULL::text, 0, m.attempt, m.sent_at, ins.receipt,
           ins.expires_at, p_cursor + 1
    FROM ins CROSS JOIN b
    JOIN msg__s m ON m.txid = b.txid AND m.id = b.id;
END
$$;
