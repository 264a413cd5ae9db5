-- Group: engine v2 - numbering (templates, schema sluice_tmpl2)
--
-- A message gets its position when a cut numbers it: a receive that finds
-- no positions to take and committed messages not numbered yet
-- (e2_unnumbered__s) takes the queue's cut lock if it is free and numbers
-- them (e2_cut_now__s); if another receive holds it, it waits for that
-- one's positions and numbers what came since. (A receive whose session's
-- last receive of the group had to number numbers first, without the
-- probe: e2_before_look__s.) A cut numbers exactly the messages whose
-- transaction is visible in its snapshot and was not in the previous cut's:
-- those of transactions at or after that snapshot's xmax or in its
-- in-progress list (xip), so a transaction held open (an xid held, a slow
-- sender) costs each cut one index probe, never a rescan of what is numbered.
-- Messages not due yet go to pending and are numbered by the first cut at
-- or after their due time. Each cut row carries the first due time in
-- pending after its due_upto (next_due), written by the full cut, the only
-- one that writes pending or numbers from it (reclaim moves pending rows
-- with their due times, which leaves it as it is): the probe and the short
-- and plain cuts compare it with the time and do not read pending.
--
-- A receive commits without waiting for the disk (sluice._receive_commit),
-- and a cut lost in a crash is made again, by a new snapshot, in (txid, id)
-- order: two messages of a key from concurrent transactions may then swap.
-- A cut that numbers a keyed message therefore commits durably (its
-- positions reach a consumer only once they are on disk); unkeyed positions
-- promise no order and may be numbered anew after a crash.

-- e2_unnumbered__s: the newest cut's number (of this slot's cuts: the
-- current slot's copy is called) and whether a cut would number anything: a
-- committed message not numbered yet, or a pending one come due (the cut
-- row's next_due: pending is not read). Read only; one index probe per slot
-- and kind; an idle receive's only look. SQL, and
-- a set of one row, so that the planner inlines it into its callers'
-- statements (as a PL/pgSQL function of one statement it cost an empty
-- receive ~35k instructions more: docs/design.md, "Measured").
--
-- Parameters:
--   p_now  the receive's time
-- Returns: cut_no, due, and rr (the lane the next cut deals to first)
SET check_function_bodies = off;   -- (a SQL template names the queue's tables: see engine_runs.sql)
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_unnumbered__s(p_now timestamptz)
RETURNS TABLE (cut_no bigint, due boolean, rr int)
LANGUAGE sql STABLE
AS $$
    SELECT c.cut_no,
           EXISTS (SELECT 1 FROM msg m WHERE m.txid >= c.snap_xmax AND pg_visible_in_snapshot(m.txid, pg_current_snapshot()))
           OR (cardinality(c.snap_xip) > 0
               AND EXISTS (SELECT 1 FROM msg m
                           WHERE m.txid = ANY (c.snap_xip) AND pg_visible_in_snapshot(m.txid, pg_current_snapshot())))
           OR c.next_due <= p_now
           OR c.work_snap IS NOT NULL,
           c.rr
    FROM cut__s c ORDER BY c.cut_no DESC LIMIT 1
$$;
RESET check_function_bodies;

-- e2_idle_probe__s: e2_unnumbered__s for sluice.receive's poll of a group
-- whose session's idle note holds (most polls of an idle queue), reading
-- only this slot's messages (its leaf of msg), not every slot's: one index
-- scan less to set up per subquery, ~0.04M instructions a poll. A message
-- stored in an older slot and committed after the newest cut (sent by a
-- transaction that began before the rotation) is not seen by it; the note
-- holds a second at most (e2_idle_until__s), and the first receive after
-- it, or the session's upkeep (about once a second: e2_before_look__s),
-- probes through the parent (e2_unnumbered__s) and numbers it. So such a
-- message waits at most about a second more.
-- (SQL, inlined, as e2_unnumbered__s.)
--
-- Parameters:
--   p_now  the receive's time
-- Returns: cut_no, due (as e2_unnumbered__s, for this slot's messages)
SET check_function_bodies = off;   -- (a SQL template names the queue's tables: see engine_runs.sql)
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_idle_probe__s(p_now timestamptz)
RETURNS TABLE (cut_no bigint, due boolean)
LANGUAGE sql STABLE
AS $$
    SELECT c.cut_no,
           EXISTS (SELECT 1 FROM msg__s m WHERE m.txid >= c.snap_xmax AND pg_visible_in_snapshot(m.txid, pg_current_snapshot()))
           OR (cardinality(c.snap_xip) > 0
               AND EXISTS (SELECT 1 FROM msg__s m
                           WHERE m.txid = ANY (c.snap_xip) AND pg_visible_in_snapshot(m.txid, pg_current_snapshot())))
           OR c.next_due <= p_now
           OR c.work_snap IS NOT NULL
    FROM cut__s c ORDER BY c.cut_no DESC LIMIT 1
$$;
RESET check_function_bodies;

-- e2_cut_candidates: the first messages a cut numbers: those visible in
-- its snapshot and not in the last full cut's, after what a partial cut
-- numbered of that snapshot, in (txid, id) order, numbered (rn) in that
-- order. Two index scans in that order, each stopped at p_limit (the last
-- snapshot's transactions in progress, and those at or after its xmax),
-- so that a backlog is not read whole by every cut. (SQL, inlined into its
-- callers' statements.)
--
-- Parameters:
--   p_xip, p_xmax          the last full cut's snapshot (in progress, xmax)
--   p_from_txid, p_from_id where a partial cut stopped ('0', 0: none)
--   p_snap                 the snapshot the cut numbers by
--   p_limit                how many at most
-- Returns: slot, txid, id, due, target, khash, priority, rn
SET check_function_bodies = off;   -- (a SQL template names the queue's tables: see engine_runs.sql)
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_cut_candidates(p_xip xid8[], p_xmax xid8, p_from_txid xid8,
                                                         p_from_id bigint, p_snap pg_snapshot, p_limit int)
RETURNS TABLE (slot smallint, txid xid8, id bigint, due timestamptz, target int, khash bigint, priority int, rn bigint)
LANGUAGE sql STABLE
AS $$
    SELECT x.*, row_number() OVER (ORDER BY x.txid, x.id) FROM (
        (SELECT m.slot, m.txid, m.id, m.due, m.target, m.khash, m.priority
         FROM msg m
         WHERE m.txid = ANY (p_xip) AND (m.txid, m.id) > (p_from_txid, p_from_id)
           AND pg_visible_in_snapshot(m.txid, p_snap)
         ORDER BY m.txid, m.id LIMIT p_limit)
        UNION ALL
        (SELECT m.slot, m.txid, m.id, m.due, m.target, m.khash, m.priority
         FROM msg m
         -- (one row bound, the tighter of the two: a btree scan starts at
         -- its row comparison, so (p_from_txid, p_from_id) as given, '0'
         -- unless a partial cut stopped, would read the slot's index from
         -- its start at every cut; ids are positive)
         WHERE m.txid >= p_xmax
           AND (m.txid, m.id) > (greatest(p_from_txid, p_xmax),
                                 CASE WHEN p_from_txid >= p_xmax THEN p_from_id ELSE 0 END)
           AND pg_visible_in_snapshot(m.txid, p_snap)
         ORDER BY m.txid, m.id LIMIT p_limit)) x
    ORDER BY x.txid, x.id
    LIMIT p_limit
$$;
RESET check_function_bodies;

-- e2_cut_most: how many messages a cut numbers at most (the rest of its
-- snapshot is left to the next cuts: a backlog is numbered in steps). SQL,
-- folded into the statements that name it.
--
-- Returns: 4,096
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_cut_most()
RETURNS int
LANGUAGE sql IMMUTABLE
AS $$
    SELECT 4096
$$;

-- e2_deal_chunk: how many of a cut's unkeyed messages past the receive's
-- share go to each lane in turn (e2_dealt_lane): the rest / lanes rounded
-- up, at least 1, at most 64.
--
-- Parameters:
--   p_rest   how many are dealt past the share
--   p_lanes  lanes
-- Returns: the chunk
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_deal_chunk(p_rest bigint, p_lanes int)
RETURNS bigint
LANGUAGE sql IMMUTABLE
AS $$
    SELECT greatest(1, least(64, (p_rest + p_lanes - 1) / p_lanes))
$$;

-- e2_dealt_lane: the lane a cut deals an unkeyed message (of priority 0)
-- to; keyed ones go to their key's lane. The first p_share of them (the
-- need of the receive that cuts, at most all of them: it takes them in one
-- take, one lease) go to lane p_rr, where the last cut left off; the rest
-- in chunks of p_chunk (e2_deal_chunk of the rest), lane after lane from
-- the next one, so that every lane gets some for the group's other
-- consumers. One place for the cut's two statements (e2_cut_now__s,
-- e2_cut_store), which compute the share and the chunk once (a small
-- expression: it is set up anew in each transaction); SQL, inlined into
-- them.
--
-- Parameters:
--   p_j      the message's place among those the cut deals, from 0; p_nu:
--            one past the last
--   p_nu     how many the cut deals
--   p_share  least(the receive's need, p_nu) (0: none, as a group's start)
--   p_chunk  e2_deal_chunk(p_nu - p_share, lanes)
--   p_rr     the lane to deal to first (the last cut's rr)
--   p_lanes  lanes
-- Returns: the lane; for p_j = p_nu, the lane the next cut deals to first
--   (the new cut's rr)
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_dealt_lane(p_j bigint, p_nu bigint, p_share bigint, p_chunk bigint,
                                                     p_rr int, p_lanes int)
RETURNS int
LANGUAGE sql IMMUTABLE
AS $$
    SELECT ((p_rr + CASE WHEN p_j < p_share THEN 0
                         WHEN p_j < p_nu THEN (p_share > 0)::int + (p_j - p_share) / p_chunk
                         ELSE (p_share > 0)::int + (p_nu - p_share + p_chunk - 1) / p_chunk END) % p_lanes)::int
$$;

-- e2_dealt_pos: where in its lane an unkeyed message dealt by
-- e2_dealt_lane goes (1: right after the lane's head), for a cut that deals
-- every message it numbers (none keyed or prioritized: e2_cut_plain). The
-- share fills lane p_rr first; chunk c (from 0) goes to the lane
-- (share > 0) + c after p_rr, after the c / p_lanes chunks dealt there
-- before it (and after the share, on lane p_rr): the positions the full
-- cut's window numbers (e2_cut_store's placed) without its sort. SQL,
-- inlined into e2_cut_plain's statement.
--
-- Parameters: as e2_dealt_lane (p_j below the number dealt)
-- Returns: the message's place in its lane among those the cut deals there
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_dealt_pos(p_j bigint, p_share bigint, p_chunk bigint, p_lanes int)
RETURNS bigint
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE WHEN p_j < p_share THEN p_j + 1
                ELSE CASE WHEN p_share > 0 AND (1 + (p_j - p_share) / p_chunk) % p_lanes = 0 THEN p_share ELSE 0 END
                     + (p_j - p_share) / p_chunk / p_lanes * p_chunk + (p_j - p_share) % p_chunk + 1 END
$$;

-- e2_cut_now__s: number what is committed and not numbered yet, for a
-- receive that holds the queue's cut lock (e2_number__s, e2_before_look__s;
-- held until it commits: the next cut must see this one), at most 4,096 messages (a
-- backlog is numbered in steps: the rest of a snapshot by the next cuts,
-- before any newer message). Positions are per lane: a keyed message goes
-- to its key's lane (key hash mod lanes), an unkeyed one with a priority
-- other than 0 to the priority lane (number lanes: its positions are rows
-- of prio, by level), the others are dealt out to the lanes from where the
-- last cut stopped: the receive's need to that lane, the rest in chunks (at
-- most 64, fewer when there are few: every lane gets some; e2_dealt_lane).
-- One batch row per lane and 64 positions. The snapshot the cut numbers by
-- is taken after the lock, so a message committed after it is left to the
-- next cut, never skipped.
-- The usual cut of a receive, at most 16 new messages, none due later and
-- none prioritized, in the slot the receive read, with nothing partly
-- numbered or come due, is made here: one statement reads the last cut
-- and the candidates (nothing to number writes nothing), one writes the
-- batch rows and the cut row, with the same positions and rows as the
-- full statement (e2_cut_store), whose executor start-up costs more than
-- numbering a few messages. Any other goes to e2_cut_store.
--
-- Parameters:
--   p_queue_id, p_lanes  queue id and lanes
--   p_slot, p_epoch      the current slot and epoch, as the receive read them
--                        (read again here: a rotation, which holds the lock,
--                        may have committed since)
--   p_short              for a receive that numbers before it looks: more
--                        than a few only when it takes every one of them
--                        (at most p_need, and 256), else nothing is written
--                        and n is NULL (a backlog is numbered as it is
--                        taken, not ahead of the positions the lanes hold)
--   p_need               how many the receive still wants: that many go to
--                        the first lane dealt to (e2_dealt_lane)
-- Returns: n, how many positions it numbered; rr, the lane it dealt to
--   first
-- Calls: e2_cut_candidates, e2_deal_chunk, e2_dealt_lane (inlined), e2_cut_store, sluice._snapshot_with, sluice._snapshot_xips,
--   sluice._durable_commit (keyed messages numbered)
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_cut_now__s(p_queue_id int, p_lanes int, p_slot smallint, p_epoch bigint,
                                                     p_short boolean, p_need int, OUT n bigint, OUT rr int)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now constant timestamptz := clock_timestamp();   -- (after the lock: cuts' times increase)
    v_own constant xid8 := pg_current_xact_id_if_assigned();
    v_snap pg_snapshot;   -- the snapshot to number by
    v_slot smallint;
    v_epoch bigint;
    v_short boolean;  -- the short path applies
    v_nu int;         -- unkeyed ones (dealt out)
    v_cut_no bigint;  -- the last cut's number, heads and next due time (carried)
    v_heads bigint[];
    v_next_due timestamptz;
    v_ids bigint[];
    v_txids xid8[];
    v_mslots smallint[];
    v_targets int[];
    v_kh bigint[];
    v_lanes smallint[] := '{}';
    v_pos bigint[] := '{}';
    v_share int;      -- dealt to the first lane (e2_dealt_lane)
    v_chunk int;
    v_next int;       -- the new cut's rr
    v_j int := 0;
    v_l int;
BEGIN
    -- The snapshot to number by, taken after the lock. This transaction's
    -- own messages (a receive after a send in one transaction) are not
    -- committed: in progress for the cut, numbered by a cut after the commit.
    v_snap := pg_current_snapshot();
    IF v_own IS NOT NULL AND pg_visible_in_snapshot(v_own, v_snap) THEN
        v_snap := sluice._snapshot_with(v_snap, v_own);
    END IF;
    -- The last cut of this slot, the current slot, and the first messages
    -- to number (17, or one past what the receive takes, p_short: see
    -- there), as they come (what commits after the snapshot is left to the
    -- next cut).
    SELECT x.cut_no, x.heads, x.rr, x.next_due, ns.slot, ns.epoch, f.n, f.nu,
           f.n <= 16 AND NOT f.odd AND x.work_snap IS NULL AND x.next_due > v_now,
           f.ids, f.txids, f.mslots, f.targets, f.kh
    INTO v_cut_no, v_heads, rr, v_next_due, v_slot, v_epoch, n, v_nu, v_short, v_ids, v_txids, v_mslots, v_targets,
         v_kh
    FROM (SELECT y.cut_no, y.heads, y.rr, y.snap_xip, y.snap_xmax, y.next_due, y.work_snap FROM cut__s y
          ORDER BY y.cut_no DESC LIMIT 1) x
    CROSS JOIN sluice._slot_now(p_queue_id) ns
    CROSS JOIN LATERAL (
        SELECT count(*)::int AS n, count(*) FILTER (WHERE m.khash IS NULL)::int AS nu,
               coalesce(bool_or(m.due > v_now OR (m.khash IS NULL AND m.priority <> 0)), false) AS odd,
               -- (all of them: the short path, the one that reads these,
               -- takes 16 at most; no rn, so that no window is computed)
               array_agg(m.id) AS ids, array_agg(m.txid) AS txids, array_agg(m.slot) AS mslots,
               array_agg(m.target) AS targets, array_agg(m.khash) AS kh
        FROM e2_cut_candidates(x.snap_xip, x.snap_xmax, '0'::xid8, 0, v_snap,
                               greatest(17, least(p_need, 256) + 1)) m) f;   -- (in (txid, id) order: no sort)
    IF NOT (v_short AND v_slot = p_slot AND v_epoch = p_epoch) THEN
        -- (before it looks, a receive numbers more than a few when it takes
        -- them all: a send of 100 and its receive of 100 read the
        -- candidates twice, looked at the lanes and probed for nothing)
        n := CASE WHEN NOT p_short OR n <= least(p_need, 256) THEN e2_cut_store(p_lanes, v_slot, v_epoch, v_now, p_need) END;
        RETURN;
    ELSIF n = 0 THEN
        RETURN;   -- nothing to number: no cut row
    END IF;
    -- (The deal's expressions, e2_deal_chunk and e2_dealt_lane, are set up
    -- anew in each transaction that evaluates them, ~60k instructions: the
    -- usual cut, whose receive wants every unkeyed message it numbers, takes
    -- their first case here, the receive's share to lane rr, without them.)
    v_share := least(p_need, v_nu);
    IF v_share < v_nu THEN
        v_chunk := e2_deal_chunk(v_nu - v_share, p_lanes);
    END IF;
    FOR i IN 1 .. n LOOP
        IF v_kh[i] IS NOT NULL THEN
            v_l := ((v_kh[i] % p_lanes + p_lanes) % p_lanes)::int;
        ELSIF v_j < v_share THEN
            v_l := rr;
            v_j := v_j + 1;
        ELSE
            v_l := e2_dealt_lane(v_j, v_nu, v_share, v_chunk, rr, p_lanes);
            v_j := v_j + 1;
        END IF;
        v_heads[v_l + 1] := coalesce(v_heads[v_l + 1], 0) + 1;
        v_lanes := v_lanes || v_l::smallint;
        v_pos := v_pos || v_heads[v_l + 1];
    END LOOP;
    -- the lane the next cut deals to first (e2_dealt_lane of v_nu: the one
    -- after rr when the share was all of them, rr when none was dealt)
    IF v_share = v_nu THEN
        v_next := (rr + (v_nu > 0)::int) % p_lanes;
    ELSE
        v_next := e2_dealt_lane(v_nu, v_nu, v_share, v_chunk, rr, p_lanes);
    END IF;
    -- one batch row per lane and 64 positions, as e2_cut_store's (its
    -- arrays in position order, as the sorted subquery gives them), and the
    -- cut row; the usual cut, whose positions are one lane's and within
    -- one 64 (the receive's share: a steady receive numbers a message or
    -- a few), writes its one batch row as it is, in a statement of fewer
    -- plan nodes (each set up at every run)
    IF v_lanes[1] = ALL (v_lanes) AND (v_pos[1] - 1) / 64 = (v_pos[n] - 1) / 64 THEN
        WITH b AS (
            INSERT INTO batch__s (slot, lane, first_pos, last_pos, ids, txids, mslots, targets, cut_no, khashes)
            VALUES (p_slot, v_lanes[1], v_pos[1], v_pos[n], v_ids, v_txids, v_mslots,
                    CASE WHEN cardinality(array_remove(v_targets, NULL)) > 0 THEN v_targets END, v_cut_no + 1,
                    CASE WHEN cardinality(array_remove(v_kh, NULL)) > 0 THEN v_kh END)
        )
        INSERT INTO cut__s (slot, cut_no, snap, snap_xmax, snap_xip, heads, rr, due_upto, at, epoch, next_due)
        VALUES (p_slot, v_cut_no + 1, v_snap, pg_snapshot_xmax(v_snap), sluice._snapshot_xips(v_snap), v_heads,
                v_next, v_now, clock_timestamp(), p_epoch, v_next_due);
    ELSE
        WITH rows AS (
            INSERT INTO batch__s (slot, lane, first_pos, last_pos, ids, txids, mslots, targets, cut_no, khashes)
            SELECT p_slot, u.lane, min(u.pos), max(u.pos), array_agg(u.id), array_agg(u.txid), array_agg(u.mslot),
                   CASE WHEN bool_or(u.tg IS NOT NULL) THEN array_agg(u.tg) END, v_cut_no + 1,
                   CASE WHEN bool_or(u.kh IS NOT NULL) THEN array_agg(u.kh) END
            FROM (SELECT x.*, (x.pos - 1) / 64 AS grp
                  FROM unnest(v_lanes, v_pos, v_ids, v_txids, v_mslots, v_targets, v_kh) AS x(lane, pos, id, txid, mslot, tg, kh)
                  ORDER BY x.lane, grp, x.pos) u
            GROUP BY u.lane, u.grp
        )
        INSERT INTO cut__s (slot, cut_no, snap, snap_xmax, snap_xip, heads, rr, due_upto, at, epoch, next_due)
        VALUES (p_slot, v_cut_no + 1, v_snap, pg_snapshot_xmax(v_snap), sluice._snapshot_xips(v_snap), v_heads,
                v_next, v_now, clock_timestamp(), p_epoch, v_next_due);
    END IF;
    IF v_nu < n AND current_setting('sluice.caller_synchronous_commit', true) <> '' THEN
        -- keyed positions are handed out only once on disk (file header)
        PERFORM sluice._durable_commit();
    END IF;
END
$$;

-- e2_cut_plain: the cut of a backlog for e2_cut_store (its caller holds
-- the cut lock, bitmap scans off): when every message it would number is
-- due, unkeyed and of priority 0 and no pending one has come due, it deals
-- them with one statement that places each by arithmetic (e2_dealt_lane,
-- e2_dealt_pos) and writes the batch rows and the cut row, as the full
-- statement would; at most 4,096 (the rest of the snapshot is left to the
-- next cuts, as there). The full statement's windows, sorts and CTE
-- passes over every message cost ~40k instructions a message, this ~19k
-- (docs/design.md, "Measured"). A cut that is not plain costs a look at
-- its first 16 candidates more, or, when its first 16 are plain, reading
-- them all here for nothing (~4k a message: the full statement reads them
-- again).
--
-- Parameters:
--   p_lanes, p_slot, p_epoch, p_now, p_need  as e2_cut_store
--   p_xip, p_xmax, p_from_txid, p_from_id, p_snap  what e2_cut_store read:
--            the last cut's snapshot, where a partial cut stopped, the
--            snapshot to number by
-- Returns: how many positions were numbered; NULL when the cut is not
--   plain (nothing written: the full statement numbers it)
-- Calls: e2_cut_candidates, e2_cut_most, e2_deal_chunk, e2_dealt_lane, e2_dealt_pos (inlined)
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_cut_plain(p_lanes int, p_slot smallint, p_epoch bigint, p_now timestamptz,
                                                    p_need int, p_xip xid8[], p_xmax xid8, p_from_txid xid8,
                                                    p_from_id bigint, p_snap pg_snapshot)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    c record;      -- the last cut
    f record;      -- the candidates, as arrays
    n bigint;      -- how many this cut numbers
    v_share bigint;
    v_chunk bigint;
BEGIN
    -- (one among the first 16 that is not plain: the full statement at
    -- once, without reading the rest here)
    IF EXISTS (SELECT 1 FROM e2_cut_candidates(p_xip, p_xmax, p_from_txid, p_from_id, p_snap, 16) m
               WHERE m.khash IS NOT NULL OR m.priority <> 0 OR m.due > p_now) THEN
        RETURN NULL;
    END IF;
    SELECT x.* INTO c FROM cut x ORDER BY x.cut_no DESC LIMIT 1;
    SELECT count(*) AS k, coalesce(bool_or(m.khash IS NOT NULL OR m.priority <> 0 OR m.due > p_now), false) AS odd,
           array_agg(m.id) AS ids, array_agg(m.txid) AS txids, array_agg(m.slot) AS mslots,
           array_agg(m.target) AS targets
    INTO f
    FROM e2_cut_candidates(p_xip, p_xmax, p_from_txid, p_from_id, p_snap, e2_cut_most() + 1) m;   -- (in rn order)
    IF f.k = 0 OR f.odd OR c.next_due <= p_now THEN
        RETURN NULL;
    END IF;
    n := least(f.k, e2_cut_most());
    v_share := least(p_need, n);
    v_chunk := e2_deal_chunk(n - v_share, p_lanes);
    WITH d AS (
        SELECT u.id, u.txid, u.mslot, u.tg, e2_dealt_lane(u.j, n, v_share, v_chunk, c.rr, p_lanes) AS lane,
               e2_dealt_pos(u.j, v_share, v_chunk, p_lanes) AS off
        FROM (SELECT x.id, x.txid, x.mslot, x.tg, x.o - 1 AS j
              FROM unnest(f.ids, f.txids, f.mslots, f.targets) WITH ORDINALITY AS x(id, txid, mslot, tg, o)
              WHERE x.o <= n) u
    ), rows AS (
        -- one batch row per lane and 64 positions, its arrays in position
        -- order (as the sorted subquery gives them)
        INSERT INTO batch (slot, lane, first_pos, last_pos, ids, txids, mslots, targets, cut_no)
        SELECT p_slot, b.lane, min(b.pos), max(b.pos), array_agg(b.id), array_agg(b.txid), array_agg(b.mslot),
               CASE WHEN bool_or(b.tg IS NOT NULL) THEN array_agg(b.tg) END, c.cut_no + 1
        FROM (SELECT d.lane, coalesce(c.heads[d.lane + 1], 0) + d.off AS pos, d.id, d.txid, d.mslot, d.tg
              FROM d ORDER BY 1, 2) b
        GROUP BY b.lane, (b.pos - 1) / 64
        RETURNING lane, last_pos
    )
    -- the cut row: more of the snapshot left (a partial cut, as
    -- e2_cut_store's): the last full snapshot kept, the one numbered by in
    -- work_snap and where this one stopped
    INSERT INTO cut (slot, cut_no, snap, snap_xmax, snap_xip, heads, rr, due_upto, at, epoch, work_snap, work_txid,
                     work_id, next_due)
    SELECT p_slot, c.cut_no + 1,
           CASE WHEN f.k > n THEN c.snap ELSE p_snap END,
           CASE WHEN f.k > n THEN c.snap_xmax ELSE pg_snapshot_xmax(p_snap) END,
           CASE WHEN f.k > n THEN c.snap_xip ELSE ARRAY(SELECT pg_snapshot_xip(p_snap)) END,
           ARRAY(SELECT greatest(coalesce(c.heads[o.o], 0),
                                 coalesce((SELECT max(r.last_pos) FROM rows r WHERE r.lane = o.o - 1), 0))
                 FROM generate_series(1, p_lanes + 1) o ORDER BY o.o),
           e2_dealt_lane(n, n, v_share, v_chunk, c.rr, p_lanes), p_now, clock_timestamp(), p_epoch,
           CASE WHEN f.k > n THEN p_snap END, CASE WHEN f.k > n THEN f.txids[n] END,
           CASE WHEN f.k > n THEN f.ids[n] END, c.next_due;
    RETURN n;
END
$$;

-- e2_cut_store: the full cut, one statement (see e2_cut_now__s), through
-- the parents, the caller holding the cut lock: the new messages visible in
-- its snapshot and not in the last cut's (or the rest of a snapshot a cut
-- left partly numbered); those due later to pending; those due and the
-- pending ones come due numbered into lanes; the batch rows and the new cut
-- row written.
--
-- Parameters:
--   p_lanes  lanes
--   p_slot   slot to write into
--   p_epoch  current epoch
--   p_now    the cut's time (due_upto of the new cut)
--   p_need   how many the receive that cuts still wants (e2_dealt_lane; 0:
--            no receive)
-- Returns: how many positions were numbered
-- Errors: SL010 invalid_isolation (outside READ COMMITTED)
-- Calls: e2_cut_plain, e2_cut_candidates, e2_cut_most, e2_deal_chunk, e2_dealt_lane (inlined),
--   sluice._durable_commit (keyed messages numbered)
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_cut_store(p_lanes int, p_slot smallint, p_epoch bigint, p_now timestamptz,
                                                    p_need int)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    n bigint;
    v_xip xid8[];
    v_xmax xid8;
    v_from_txid xid8;
    v_from_id bigint;
    v_snap pg_snapshot;
    v_own xid8;
    v_keyed bigint;
BEGIN
    -- A snapshot held for the whole transaction would number from an old
    -- view of the cuts and of the messages (create_group or seek_group
    -- 'latest' in REPEATABLE READ; a receive checks before).
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        PERFORM sluice._isolation_error('numbering messages');
    END IF;
    -- The last cut, and the snapshot to number by: the one a cut left partly
    -- numbered, else this one (taken before the messages are read: what
    -- commits in between is left to the next cut). Read here, apart, so
    -- that the candidates' statement has plain values to scan the index
    -- from, in order.
    SELECT c.snap_xip, c.snap_xmax, coalesce(c.work_txid, '0'::xid8), coalesce(c.work_id, 0),
           coalesce(c.work_snap, pg_current_snapshot())
    INTO v_xip, v_xmax, v_from_txid, v_from_id, v_snap
    FROM cut c ORDER BY c.cut_no DESC LIMIT 1;
    -- This transaction's own messages (a receive after a send in one
    -- transaction) are not committed: in progress for the cut, numbered by
    -- a cut after the commit.
    v_own := pg_current_xact_id_if_assigned();
    IF v_own IS NOT NULL AND pg_visible_in_snapshot(v_own, v_snap) THEN
        v_snap := sluice._snapshot_with(v_snap, v_own);
    END IF;
    -- A backlog of messages due, unkeyed and of priority 0 (most): the
    -- plain cut; any other, the full statement.
    n := e2_cut_plain(p_lanes, p_slot, p_epoch, p_now, p_need, v_xip, v_xmax, v_from_txid, v_from_id, v_snap);
    IF n IS NOT NULL THEN
        RETURN n;
    END IF;
    WITH c AS MATERIALIZED (
        SELECT * FROM cut c ORDER BY c.cut_no DESC LIMIT 1
    ), s AS MATERIALIZED (
        SELECT v_snap AS snap
    ), cand AS MATERIALIZED (
        -- the first 4,097 messages to number (e2_cut_candidates), with, in
        -- their order (as the index scans give it: no sort), how many of
        -- them up to each are due (ri) and dealt out (rj: unkeyed,
        -- priority 0)
        SELECT f.*, count(*) FILTER (WHERE f.due IS NULL OR f.due <= p_now) OVER o AS ri,
               count(*) FILTER (WHERE (f.due IS NULL OR f.due <= p_now) AND f.khash IS NULL AND f.priority = 0)
                   OVER o AS rj
        FROM e2_cut_candidates(v_xip, v_xmax, v_from_txid, v_from_id, v_snap, e2_cut_most() + 1) f
        WINDOW o AS (ORDER BY f.txid, f.id ROWS UNBOUNDED PRECEDING)
    ), w AS MATERIALIZED (
        -- more to number in this snapshot: where this cut stopped (its
        -- 4,096th). (Materialized: the cut row reads more six times.)
        SELECT EXISTS (SELECT FROM cand f WHERE f.rn > e2_cut_most()) AS more, l.txid, l.id
        FROM (SELECT 1) one
        LEFT JOIN (SELECT f.txid, f.id FROM cand f WHERE f.rn = e2_cut_most()) l ON true
    ), later AS (
        INSERT INTO pending (slot, due, mslot, txid, id)
        SELECT p_slot, f.due, f.slot, f.txid, f.id FROM cand f WHERE f.rn <= e2_cut_most() AND f.due > p_now
        RETURNING 1
    ), pend AS MATERIALIZED (
        -- the pending ones come due, numbered first, in (txid, id) order
        -- (i: the order of numbering; j: of the ones dealt out (unkeyed,
        -- priority 0), counted in the same pass)
        SELECT x.*, row_number() OVER o - 1 AS i, count(*) FILTER (WHERE x.khash IS NULL AND x.prio = 0) OVER o - 1 AS j
        FROM (SELECT p.txid, p.id, p.mslot, m.target, m.khash, CASE WHEN m.khash IS NULL THEN m.priority ELSE 0 END AS prio
              FROM c JOIN pending p ON p.due > c.due_upto AND p.due <= p_now
              JOIN msg m ON m.slot = p.mslot AND m.txid = p.txid AND m.id = p.id) x
        WINDOW o AS (ORDER BY x.txid, x.id ROWS UNBOUNDED PRECEDING)
    ), due AS (
        -- then the new ones that are due, counted on from there (ri, rj)
        SELECT p.* FROM pend p
        UNION ALL
        SELECT f.txid, f.id, f.slot, f.target, f.khash, CASE WHEN f.khash IS NULL THEN f.priority ELSE 0 END,
               np.n + f.ri - 1, np.nu + f.rj - 1
        FROM cand f
        CROSS JOIN (SELECT count(*) AS n, count(*) FILTER (WHERE p.khash IS NULL AND p.prio = 0) AS nu FROM pend p) np
        WHERE f.rn <= e2_cut_most() AND (f.due IS NULL OR f.due <= p_now)
    ), k AS (
        SELECT count(*) AS n, count(*) FILTER (WHERE d.khash IS NULL AND d.prio = 0) AS nu,
               count(*) FILTER (WHERE d.khash IS NOT NULL) AS nk
        FROM due d
    ), deal AS (
        -- (the share and the chunk of e2_dealt_lane)
        SELECT least(p_need, k.nu) AS share, e2_deal_chunk(k.nu - least(p_need, k.nu), p_lanes) AS chunk FROM k
    ), laned AS (
        -- a keyed message to its key's lane, a prioritized one to the
        -- priority lane (p_lanes), the others dealt out in chunks
        SELECT d.*, (CASE WHEN d.khash IS NOT NULL THEN (d.khash % p_lanes + p_lanes) % p_lanes
                          WHEN d.prio <> 0 THEN p_lanes
                          ELSE e2_dealt_lane(d.j, k.nu, deal.share, deal.chunk, c.rr, p_lanes) END)::smallint AS lane
        FROM due d CROSS JOIN c CROSS JOIN k CROSS JOIN deal
    ), placed AS (
        SELECT l.*, coalesce(c.heads[l.lane + 1], 0) + row_number() OVER (PARTITION BY l.lane ORDER BY l.i) AS pos
        FROM laned l CROSS JOIN c
    ), rows AS (
        -- (the aggregates read their rows in position order, as the
        -- sorted subquery gives them, grouped by its leading sort keys so
        -- that no sort comes between: one sort, not one per aggregate and
        -- batch row)
        INSERT INTO batch (slot, lane, first_pos, last_pos, ids, txids, mslots, targets, cut_no, khashes)
        SELECT p_slot, p.lane, min(p.pos), max(p.pos), array_agg(p.id), array_agg(p.txid), array_agg(p.mslot),
               CASE WHEN bool_or(p.target IS NOT NULL) THEN array_agg(p.target) END,
               (SELECT c.cut_no + 1 FROM c),
               CASE WHEN bool_or(p.khash IS NOT NULL) THEN array_agg(p.khash) END
        FROM (SELECT pp.lane, (pp.pos - 1) / 64 AS grp, pp.pos, pp.id, pp.txid, pp.mslot, pp.target, pp.khash
              FROM placed pp WHERE pp.lane < p_lanes ORDER BY pp.lane, grp, pp.pos) p
        GROUP BY p.lane, p.grp
        RETURNING lane, last_pos
    ), prows AS (
        INSERT INTO prio (slot, level, pos, id, txid, mslot, cut_no, target)
        SELECT p_slot, p.prio, p.pos, p.id, p.txid, p.mslot, (SELECT c.cut_no + 1 FROM c), p.target
        FROM placed p WHERE p.lane = p_lanes
        RETURNING p_lanes AS lane, pos AS last_pos
    ), nd AS (
        -- the cut's next_due: the first due time after p_now in pending,
        -- of the rows there and of those this cut writes (not visible to
        -- the statement that writes them)
        SELECT coalesce(least((SELECT min(p.due) FROM pending p WHERE p.due > p_now),
                              (SELECT min(f.due) FROM cand f WHERE f.rn <= e2_cut_most() AND f.due > p_now)),
                        'infinity') AS next_due
    ), cutrow AS (
        INSERT INTO cut (slot, cut_no, snap, snap_xmax, snap_xip, heads, rr, due_upto, at, epoch,
                         work_snap, work_txid, work_id, next_due)
        SELECT p_slot, c.cut_no + 1,
               CASE WHEN w.more THEN c.snap ELSE s.snap END,
               CASE WHEN w.more THEN c.snap_xmax ELSE pg_snapshot_xmax(s.snap) END,
               CASE WHEN w.more THEN c.snap_xip ELSE ARRAY(SELECT pg_snapshot_xip(s.snap)) END,
               ARRAY(SELECT greatest(coalesce(c.heads[o.o], 0),
                                     coalesce((SELECT max(r.last_pos) FROM rows r WHERE r.lane = o.o - 1), 0),
                                     coalesce((SELECT max(r.last_pos) FROM prows r WHERE r.lane = o.o - 1), 0))
                     FROM generate_series(1, p_lanes + 1) o ORDER BY o.o),
               e2_dealt_lane(k.nu, k.nu, deal.share, deal.chunk, c.rr, p_lanes), p_now, clock_timestamp(), p_epoch,
               CASE WHEN w.more THEN s.snap END, CASE WHEN w.more THEN w.txid END, CASE WHEN w.more THEN w.id END,
               nd.next_due
        FROM c CROSS JOIN s CROSS JOIN k CROSS JOIN deal CROSS JOIN w CROSS JOIN nd
        -- (a cut that numbers nothing and puts nothing aside still writes
        -- its row when next_due changes: else the probe would find the same
        -- pending message due, a stale one or none, at every receive)
        WHERE k.n > 0 OR EXISTS (SELECT FROM later) OR c.work_snap IS NOT NULL OR nd.next_due <> c.next_due
        RETURNING 1
    )
    SELECT k.n, k.nk INTO n, v_keyed FROM k WHERE EXISTS (SELECT FROM cutrow) OR k.n = 0;
    IF v_keyed > 0 AND current_setting('sluice.caller_synchronous_commit', true) <> '' THEN
        -- keyed positions are handed out only once on disk (_durable_commit)
        PERFORM sluice._durable_commit();
    END IF;
    RETURN coalesce(n, 0);
END
$$;

-- e2_wait_cut: wait for the queue's cut lock, held by another receive that
-- is numbering (it holds it until it commits, a moment later), at most
-- 100 ms, and keep it: a receive that found nothing numbered waits for that
-- receive's positions instead of returning empty (sluice._xact_lock_within).
-- Not after the transaction truncated a slot (the setting
-- sluice.holds_lock: the cut lock's holder may be waiting to read that
-- slot's leaves; a receive that holds the cut lock does not get here).
-- Taken, the lock is noted in sluice.holds_lock (see e2_wait_lane__s).
--
-- Parameters:
--   p_queue_id  queue id
-- Returns: true when the lock was taken (the other receive committed)
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_wait_cut(p_queue_id int)
RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
    RETURN current_setting('sluice.holds_lock', true) IS DISTINCT FROM 'y'
           AND sluice._xact_lock_within(sluice._lock_ns('cut'), p_queue_id, '100ms')
           AND set_config('sluice.holds_lock', 'y', true) IS NOT NULL;
END
$$;
