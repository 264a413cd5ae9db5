-- Group: engine v2 - numbering (templates, schema sluice_tmpl2)
--
-- A message gets its position when a cut numbers it: a receive that finds
-- committed messages not numbered yet (e2_unnumbered) takes the queue's cut
-- lock if it is free and numbers them (e2_cut); if another receive holds it,
-- that one numbers them. A cut numbers exactly the messages whose
-- transaction is visible in its snapshot and was not in the previous cut's:
-- those of transactions at or after that snapshot's xmax or in its
-- in-progress list (xip), so a transaction held open (an xid held, a slow
-- sender) costs each cut one index probe, never a rescan of what is numbered.
-- Messages not due yet go to pending and are numbered by the first cut at
-- or after their due time.

-- e2_unnumbered: whether a cut would number anything: a committed message
-- not numbered yet, or a pending one come due. Read only; one index probe
-- per slot and kind.
--
-- Parameters:
--   p_now  the receive's time
-- Returns: true when a cut is due
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_unnumbered(p_now timestamptz)
RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
    RETURN EXISTS (SELECT 1
                   FROM (SELECT c.snap, c.snap_xmax, c.snap_xip, c.due_upto FROM cut c ORDER BY c.cut_no DESC LIMIT 1) c
                   WHERE EXISTS (SELECT 1 FROM msg m
                                 WHERE m.txid >= c.snap_xmax
                                   AND pg_visible_in_snapshot(m.txid, pg_current_snapshot()))
                      OR (cardinality(c.snap_xip) > 0
                          AND EXISTS (SELECT 1 FROM msg m
                                      WHERE m.txid = ANY (c.snap_xip)
                                        AND pg_visible_in_snapshot(m.txid, pg_current_snapshot())))
                      OR EXISTS (SELECT 1 FROM pending p WHERE p.due > c.due_upto AND p.due <= p_now));
END
$$;

-- e2_cut: number what is committed and not numbered yet, if this receive
-- gets the queue's cut lock (held until it commits: the next cut must see
-- this one). Positions are per lane; unkeyed messages are dealt out to the
-- lanes in chunks (at most 64, fewer when there are few: every lane gets
-- some), from where the last cut stopped. One batch row per lane and 1,024
-- positions. The snapshot the cut numbers by is its statement's own, so a
-- message committed after it is left to the next cut, never skipped.
--
-- Parameters:
--   p_queue_id  queue id
--   p_lanes     the queue's lanes
--   p_slot      the slot of the current epoch as the receive read it
--   p_epoch     the current epoch (both read again under the lock)
-- Returns: how many positions it numbered (NULL: the lock was held)
-- Calls: e2_cut_store
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_cut(p_queue_id int, p_lanes int, p_slot smallint, p_epoch bigint)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz;
BEGIN
    IF NOT pg_try_advisory_xact_lock(sluice._lock_ns('cut'), p_queue_id) THEN
        RETURN NULL;
    END IF;
    v_now := clock_timestamp();   -- after the lock: cuts' times increase
    -- the slot again, after the lock: a rotation (which holds it) may have
    -- committed since the receive read it
    SELECT ns.epoch, ns.slot INTO p_epoch, p_slot FROM sluice._slot_now(p_queue_id) ns;
    RETURN e2_cut_store(p_lanes, p_slot, p_epoch, v_now);
END
$$;

-- e2_cut_store: the cut's one statement (see e2_cut): the new messages
-- visible in its snapshot and not in the last cut's; those due later to
-- pending; those due and the pending ones come due numbered into lanes; the
-- batch rows and the new cut row written.
--
-- Parameters:
--   p_lanes  lanes
--   p_slot   slot to write into
--   p_epoch  current epoch
--   p_now    the cut's time (due_upto of the new cut)
-- Returns: how many positions were numbered
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_cut_store(p_lanes int, p_slot smallint, p_epoch bigint, p_now timestamptz)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    n bigint;
BEGIN
    WITH c AS MATERIALIZED (
        SELECT * FROM cut c ORDER BY c.cut_no DESC LIMIT 1
    ), s AS MATERIALIZED (
        SELECT pg_current_snapshot() AS snap
    ), fresh AS MATERIALIZED (
        SELECT m.slot, m.txid, m.id, m.due, m.target
        FROM c CROSS JOIN s JOIN msg m ON m.txid >= c.snap_xmax OR m.txid = ANY (c.snap_xip)
        WHERE pg_visible_in_snapshot(m.txid, s.snap) AND NOT pg_visible_in_snapshot(m.txid, c.snap)
    ), later AS (
        INSERT INTO pending (slot, due, mslot, txid, id)
        SELECT p_slot, f.due, f.slot, f.txid, f.id FROM fresh f WHERE f.due > p_now
        RETURNING 1
    ), due AS (
        SELECT x.txid, x.id, x.mslot, x.target, row_number() OVER (ORDER BY x.k, x.txid, x.id) - 1 AS i
        FROM (SELECT p.txid, p.id, p.mslot, m.target, 0 AS k
              FROM c JOIN pending p ON p.due > c.due_upto AND p.due <= p_now
              JOIN msg m ON m.slot = p.mslot AND m.txid = p.txid AND m.id = p.id
              UNION ALL
              SELECT f.txid, f.id, f.slot, f.target, 1 FROM fresh f WHERE f.due IS NULL OR f.due <= p_now) x
    ), k AS (
        SELECT count(*) AS n, greatest(1, least(64, ceil(count(*)::numeric / p_lanes)))::bigint AS chunk FROM due
    ), laned AS (
        SELECT d.*, ((c.rr + d.i / k.chunk) % p_lanes)::smallint AS lane
        FROM due d CROSS JOIN c CROSS JOIN k
    ), placed AS (
        SELECT l.*, c.heads[l.lane + 1] + row_number() OVER (PARTITION BY l.lane ORDER BY l.i) AS pos
        FROM laned l CROSS JOIN c
    ), rows AS (
        INSERT INTO batch (slot, lane, first_pos, last_pos, ids, txids, mslots, targets, cut_no)
        SELECT p_slot, p.lane, min(p.pos), max(p.pos), array_agg(p.id ORDER BY p.pos), array_agg(p.txid ORDER BY p.pos),
               array_agg(p.mslot ORDER BY p.pos),
               CASE WHEN bool_or(p.target IS NOT NULL) THEN array_agg(p.target ORDER BY p.pos) END,
               (SELECT c.cut_no + 1 FROM c)
        FROM placed p
        GROUP BY p.lane, (p.pos - 1) / 64
        RETURNING lane, last_pos
    ), cutrow AS (
        INSERT INTO cut (slot, cut_no, snap, snap_xmax, snap_xip, heads, rr, due_upto, at, epoch)
        SELECT p_slot, c.cut_no + 1, s.snap, pg_snapshot_xmax(s.snap), ARRAY(SELECT pg_snapshot_xip(s.snap)),
               ARRAY(SELECT greatest(c.heads[o.o], coalesce((SELECT max(r.last_pos) FROM rows r WHERE r.lane = o.o - 1), 0))
                     FROM generate_series(1, p_lanes) o ORDER BY o.o),
               ((c.rr + ceil(k.n::numeric / k.chunk)) % p_lanes)::int, p_now, clock_timestamp(), p_epoch
        FROM c CROSS JOIN s CROSS JOIN k
        WHERE k.n > 0 OR EXISTS (SELECT FROM later)
        RETURNING 1
    )
    SELECT k.n INTO n FROM k WHERE EXISTS (SELECT FROM cutrow) OR k.n = 0;
    RETURN coalesce(n, 0);
END
$$;
