-- Group: engine templates - observability (see engine_cut.sql for what a template is)

-- e_window: the positions of a lane a group has dispatched and not
-- completed (from the low-water mark to the cursor, and those after the
-- cursor taken out of order for their priority), with their key hash (NULL
-- if unkeyed) and their newest delivery (e_newest, as receipts see it):
-- its attempt, its expiry (NULL if none survives) and whether it is a
-- parked retry or a released run of a key (token 0: due at expires) rather
-- than a lease.
--
-- Parameters:
--   p_group_id       group id
--   p_lane           the lane
--   p_lwm, p_cursor  the range to look at
-- Returns: (pos, id, txid, slot, attempt, expires, parked, key) by position
CREATE OR REPLACE FUNCTION sluice_tmpl.e_window(p_group_id int, p_lane smallint, p_lwm bigint, p_cursor bigint)
RETURNS TABLE (pos bigint, id bigint, txid xid8, slot smallint, attempt int, expires timestamptz, parked boolean,
               key bigint)
LANGUAGE plpgsql STABLE
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT w.pos, w.id, w.txid, w.slot, d.attempt, d.expires_at, d.token = 0, w.k
    FROM (SELECT v.* FROM (SELECT b.first_pos + u.o - 1 AS pos, u.id, u.txid, u.slot, u.tg, u.k
                           FROM batches b
                           CROSS JOIN LATERAL unnest(b.ids, b.txids, b.slots, b.targets, b.keys)
                                WITH ORDINALITY AS u(id, txid, slot, tg, k, o)
                           WHERE b.lane = p_lane AND b.last_pos >= p_lwm AND b.first_pos <= p_cursor) v
          WHERE v.pos BETWEEN p_lwm AND p_cursor
          UNION ALL
          -- prioritized positions after the cursor, taken out of order
          SELECT p.pos, p.id, p.txid, p.mslot, p.target, NULL::bigint
          FROM prio p
          WHERE p.lane = p_lane AND p.priority > 0 AND p.pos > p_cursor
            AND EXISTS (SELECT 1 FROM e_newest(p_group_id, p.mslot, p.pos))) w
    LEFT JOIN LATERAL e_newest(p_group_id, w.slot, w.pos) d ON true
    WHERE (w.tg IS NULL OR w.tg = p_group_id) AND NOT EXISTS (SELECT FROM e_completed(p_group_id, w.slot, w.pos))
    ORDER BY w.pos;
END
$$;

-- e_key_waiting: how many of a group's messages that would be ready wait
-- for an earlier message of their key: every incomplete keyed message that
-- is not leased or parked, except the first incomplete one of its key when
-- that one is not leased or parked either (it is the one ready). The keyed
-- messages looked at are the lanes' windows (low-water mark to cursor),
-- their positions numbered after the cursor (never dispatched: nothing
-- takes a keyed position ahead of the cursor), and the committed messages
-- not numbered yet that e_unnumbered read (due now; after every numbered
-- one, in any order). Costs O(window + keyed messages after the cursors +
-- keyed messages read by e_unnumbered), in array operations; a queue without
-- keyed messages in its live epochs pays one probe.
--
-- Parameters:
--   p_group_id          group id
--   p_cursors           each lane's cursor, by lane
--   p_wkeys, p_wpos,    the keyed positions of the lanes' windows (e_window):
--   p_wready            key hash, position, and whether it is neither leased
--                       nor parked
--   p_ukeys             the key hashes of the group's keyed messages not
--                       numbered yet and due now, as e_unnumbered read them
-- Returns: the number of waiting messages
CREATE OR REPLACE FUNCTION sluice_tmpl.e_key_waiting(p_group_id int, p_cursors bigint[],
                                                     p_wkeys bigint[], p_wpos bigint[], p_wready boolean[],
                                                     p_ukeys bigint[])
RETURNS bigint
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    -- A queue without keyed messages (numbered or not) skips the walk.
    IF p_wkeys IS NULL AND coalesce(cardinality(p_ukeys), 0) = 0 AND NOT EXISTS (SELECT 1 FROM keyed) THEN
        RETURN 0;
    END IF;
    RETURN (
        SELECT coalesce(sum(k.n_ready - CASE WHEN k.head_ready THEN 1 ELSE 0 END), 0)
        FROM (SELECT x.key, count(*) FILTER (WHERE x.ready) AS n_ready, (array_agg(x.ready ORDER BY x.pos))[1] AS head_ready
              FROM (-- dispatched and not completed
                    SELECT w.key, w.pos, w.ready
                    FROM unnest(p_wkeys, p_wpos, p_wready) AS w(key, pos, ready)
                    UNION ALL
                    -- numbered after the cursor
                    SELECT u.k, b.first_pos + u.o - 1, true
                    FROM generate_series(1, cardinality(p_cursors)) AS l(i)
                    JOIN batches b ON b.lane = l.i - 1 AND b.last_pos > p_cursors[l.i] AND b.keys IS NOT NULL
                    CROSS JOIN LATERAL unnest(b.keys, b.targets) WITH ORDINALITY AS u(k, tg, o)
                    WHERE u.k IS NOT NULL AND b.first_pos + u.o - 1 > p_cursors[l.i]
                      AND (u.tg IS NULL OR u.tg = p_group_id)
                    UNION ALL
                    -- committed, due, not numbered yet
                    SELECT u.k, 9223372036854775807, true
                    FROM unnest(p_ukeys) AS u(k)) x
              GROUP BY x.key) k);
END
$$;

-- e_unnumbered_from: where the numbering stands, as e_unnumbered reads what
-- is not numbered (see there for the three kinds): from the newest batch
-- row, which may be part of a round still in progress.
--
-- Returns: full_txids: the transactions none of whose messages is
--          numbered (1); p_txid, p_id: the round's resume transaction, not
--          numbered from the id after p_id on (1; NULL when none); r_txid,
--          r_id: messages after (r_txid, r_id) are not numbered (3); d_due,
--          d_id: delayed messages due after (d_due, d_id) are not
--          numbered (2)
CREATE OR REPLACE FUNCTION sluice_tmpl.e_unnumbered_from(OUT full_txids xid8[], OUT p_txid xid8, OUT p_id bigint,
                                                         OUT r_txid xid8, OUT r_id bigint,
                                                         OUT d_due timestamptz, OUT d_id bigint)
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    head record;
    v_phase2 boolean;       -- phase 2 of a round in progress
    v_s0 pg_snapshot;
    v_xmax0 xid8;
BEGIN
    SELECT * INTO head FROM batches ORDER BY batch_no DESC LIMIT 1;
    v_phase2 := NOT head.done AND head.res_phase = 2;
    v_s0 := CASE WHEN head.done THEN head.snap ELSE head.prev_snap END;
    v_xmax0 := pg_snapshot_xmax(v_s0);
    IF v_phase2 AND head.res_txid >= v_xmax0 THEN
        r_txid := head.res_txid;
        r_id := head.res_id;
    ELSE
        r_txid := v_xmax0;
        r_id := -1;
    END IF;
    IF v_phase2 AND head.res_txid < v_xmax0 THEN
        p_txid := head.res_txid;
        p_id := head.res_id;
    END IF;
    -- In phase 2 a transaction in progress at s0 and committed by the
    -- round's snapshot is numbered up to the resume point; one in progress
    -- at the round's snapshot is numbered by no cut yet.
    full_txids := ARRAY(SELECT x.x FROM pg_snapshot_xip(v_s0) AS x(x)
                        WHERE NOT v_phase2 OR NOT pg_visible_in_snapshot(x.x, head.snap) OR x.x > head.res_txid
                        UNION
                        SELECT x.x FROM pg_snapshot_xip(head.snap) AS x(x)
                        WHERE v_phase2 AND x.x >= v_xmax0 AND x.x < r_txid);
    -- Phase 1 of a round numbers delayed messages by (deliver_at, id) up to
    -- its resume point; otherwise up to the round's time (t0 when no round
    -- is in progress).
    IF NOT head.done AND head.res_phase = 1 THEN
        d_due := head.res_due;
        d_id := head.res_id;
    ELSE
        d_due := head.t;
        d_id := 9223372036854775807;
    END IF;
END
$$;

-- e_unnumbered: the committed messages not numbered yet (by any cut) that
-- status counts, read at most p_limit + 1 of each of three kinds, so that
-- status costs the same whatever the size of the backlog not numbered yet;
-- beyond that, an estimate (docs/sql.md, sluice.status, gives the rule).
--
-- Where the numbering stands (engine_cut.sql): every message visible in
-- the snapshot s0 of the last finished round and due by its time t0 is
-- numbered; the newest batch row may be part of a round still in progress
-- (to its own snapshot and time), stopped at its resume point. What is not
-- numbered is read in index order, as the next cuts would take it:
--
--   1. messages of the transactions in progress at s0 (and, in phase 2 of
--      a round, of those in progress at its snapshot that the round has
--      not reached): point lookups on (txid, id). More than p_limit of
--      them: an estimate from each transaction's first and last id.
--   2. delayed messages that came due since the numbering point (due index,
--      from the resume point or t0 to now), not counted in 1 or 3. More
--      than p_limit: the rest is not counted (a lower bound).
--   3. messages of the transactions that began after s0 (from the round's
--      resume point, if past s0's xmax), in (txid, id) order. More than
--      p_limit: the rest is estimated as the ids the queue's sequence gave
--      out after the last one counted, less the delayed messages among them.
--
-- And every delayed message (deliver_at after now: never numbered), by
-- target group: O(delayed messages), as before.
--
-- Parameters:
--   q        the queue
--   p_now    the time status is computed for
--   p_limit  how many messages of each kind to count at most (one more is
--            read, to tell whether there are more)
-- Returns: per target group (NULL: any group) of the messages read: tgs,
--          due (due now), delayed (deliver_at after now, all of them),
--          retries (of those, retry copies: a nack's, counted in lag) and
--          oldest (earliest sent_at of both); ukeys, utgs: key hash and
--          target of the keyed due messages read; rest: estimated due
--          messages beyond those read (meant for any group); estimated:
--          whether a kind had more than p_limit messages
DROP FUNCTION IF EXISTS sluice_tmpl.e_unnumbered(sluice.queue, timestamptz, bigint);   -- (before retries)
CREATE OR REPLACE FUNCTION sluice_tmpl.e_unnumbered(q sluice.queue, p_now timestamptz, p_limit bigint,
                                                    OUT tgs int[], OUT due bigint[], OUT delayed bigint[],
                                                    OUT retries bigint[], OUT oldest timestamptz[], OUT ukeys bigint[], OUT utgs int[],
                                                    OUT rest bigint, OUT estimated boolean)
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    bd record;              -- where the numbering stands (e_unnumbered_from)
    r record;
    v_last bigint;
    v_after bigint;
BEGIN
    SELECT * INTO bd FROM e_unnumbered_from();

    -- Each kind is read in index order up to p_limit + 1 rows and numbered
    -- (o): the first p_limit are counted, one more says there are more.
    WITH f AS MATERIALIZED (
        SELECT x.*, row_number() OVER () AS o
        FROM (SELECT m.id, m.txid, m.target_group, m.deliver_at, m.sent_at, m.key
              FROM (SELECT x.x AS txid, (-1)::bigint AS after FROM unnest(bd.full_txids) AS x(x)
                    UNION ALL
                    SELECT bd.p_txid, bd.p_id WHERE bd.p_txid IS NOT NULL) t
              CROSS JOIN LATERAL (SELECT m.id, m.txid, m.target_group, m.deliver_at, m.sent_at, m.key
                                  FROM messages m
                                  WHERE m.txid = t.txid AND m.id > t.after
                                  ORDER BY m.id
                                  LIMIT p_limit + 1) m
              LIMIT p_limit + 1) x
    ), d AS MATERIALIZED (
        SELECT x.*, row_number() OVER (ORDER BY x.deliver_at, x.id) AS o
        FROM (SELECT m.id, m.txid, m.target_group, m.deliver_at, m.sent_at, m.key
              FROM messages m
              WHERE m.deliver_at IS NOT NULL AND (m.deliver_at, m.id) > (bd.d_due, bd.d_id) AND m.deliver_at <= p_now
              ORDER BY m.deliver_at, m.id
              LIMIT p_limit + 1) x
    ), b AS MATERIALIZED (
        SELECT x.*, row_number() OVER (ORDER BY x.txid, x.id) AS o
        FROM (SELECT m.id, m.txid, m.target_group, m.deliver_at, m.sent_at, m.key
              FROM messages m
              WHERE (m.txid, m.id) > (bd.r_txid, bd.r_id)
              ORDER BY m.txid, m.id
              LIMIT p_limit + 1) x
    ), rd AS (
        SELECT f.target_group, f.deliver_at, f.sent_at, f.key FROM f WHERE f.o <= p_limit
        UNION ALL
        -- (not those of 1 and 3; of a phase 1 in progress, only messages
        -- visible in s0 are numbered, so those left are not numbered)
        SELECT d.target_group, d.deliver_at, d.sent_at, d.key FROM d
        WHERE d.o <= p_limit
          AND NOT (d.txid = ANY (bd.full_txids) OR coalesce(d.txid = bd.p_txid AND d.id > bd.p_id, false)
                   OR (d.txid, d.id) > (bd.r_txid, bd.r_id))
        UNION ALL
        SELECT b.target_group, b.deliver_at, b.sent_at, b.key FROM b WHERE b.o <= p_limit
    )
    SELECT EXISTS (SELECT 1 FROM f WHERE f.o > p_limit) AS f_over,
           EXISTS (SELECT 1 FROM d WHERE d.o > p_limit) AS d_over,
           EXISTS (SELECT 1 FROM b WHERE b.o > p_limit) AS b_over,
           -- the id of the last message of 3 counted (none counted: the
           -- id before the first)
           coalesce((SELECT b.id FROM b WHERE b.o = p_limit), (SELECT b.id - 1 FROM b WHERE b.o = 1)) AS b_last,
           (SELECT count(*) FROM f WHERE f.o <= p_limit) AS f_n,
           (SELECT array_agg(a.tg) FROM (SELECT rd.target_group AS tg FROM rd GROUP BY 1 ORDER BY 1) a) AS tgs,
           (SELECT array_agg(a.n) FROM (SELECT rd.target_group AS tg,
                                               count(*) FILTER (WHERE rd.deliver_at IS NULL OR rd.deliver_at <= p_now) AS n
                                        FROM rd GROUP BY 1 ORDER BY 1) a) AS due,
           (SELECT array_agg(a.o) FROM (SELECT rd.target_group AS tg, min(rd.sent_at) AS o
                                        FROM rd GROUP BY 1 ORDER BY 1) a) AS oldest,
           (SELECT array_agg(hashtextextended(rd.key, 0)) FROM rd
            WHERE rd.key IS NOT NULL AND (rd.deliver_at IS NULL OR rd.deliver_at <= p_now)) AS ukeys,
           (SELECT array_agg(rd.target_group) FROM rd
            WHERE rd.key IS NOT NULL AND (rd.deliver_at IS NULL OR rd.deliver_at <= p_now)) AS utgs
    INTO r;
    tgs := coalesce(r.tgs, '{}');
    due := coalesce(r.due, '{}');
    oldest := coalesce(r.oldest, '{}');
    ukeys := r.ukeys;
    utgs := r.utgs;
    estimated := r.f_over OR r.d_over OR r.b_over;
    rest := 0;
    v_last := CASE WHEN r.b_over THEN r.b_last END;
    IF r.f_over THEN
        -- a transaction's messages have the ids it drew, first to last
        rest := rest + greatest(0, (SELECT coalesce(sum(s.hi - s.lo + 1), 0)
                                    FROM (SELECT x.x AS txid, (-1)::bigint AS after FROM unnest(bd.full_txids) AS x(x)
                                          UNION ALL
                                          SELECT bd.p_txid, bd.p_id WHERE bd.p_txid IS NOT NULL) t
                                    CROSS JOIN LATERAL (
                                        SELECT (SELECT m.id FROM messages m WHERE m.txid = t.txid AND m.id > t.after
                                                ORDER BY m.id LIMIT 1) AS lo,
                                               (SELECT m.id FROM messages m WHERE m.txid = t.txid AND m.id > t.after
                                                ORDER BY m.id DESC LIMIT 1) AS hi) s
                                    WHERE s.lo IS NOT NULL) - r.f_n);
    END IF;

    -- Every delayed message, by target group, merged into the arrays.
    WITH dl AS (
        SELECT m.target_group AS tg, count(*) AS n, min(m.sent_at) AS o,
               count(*) FILTER (WHERE m.origin_id IS NOT NULL) AS rt,
               count(*) FILTER (WHERE m.id > v_last) AS after_last
        FROM messages m
        WHERE m.deliver_at > p_now
        GROUP BY 1
    ), a AS (
        SELECT coalesce(u.tg, dl.tg) AS tg, coalesce(u.due, 0) AS due, coalesce(dl.n, 0) AS delayed,
               coalesce(dl.rt, 0) AS rt, least(u.o, dl.o) AS o
        FROM (SELECT * FROM unnest(tgs, due, oldest) AS u(tg, due, o)) u
        FULL JOIN dl ON coalesce(dl.tg, 0) = coalesce(u.tg, 0)   -- (group ids are above 0)
    )
    SELECT array_agg(a.tg ORDER BY a.tg), array_agg(a.due ORDER BY a.tg), array_agg(a.delayed ORDER BY a.tg),
           array_agg(a.rt ORDER BY a.tg), array_agg(a.o ORDER BY a.tg), (SELECT coalesce(sum(dl.after_last), 0) FROM dl)
    INTO tgs, due, delayed, retries, oldest, v_after
    FROM a;
    IF r.b_over THEN
        -- the ids the queue's sequence gave out after the last message of 3
        -- counted, less the delayed messages among them
        rest := rest + greatest(0, coalesce(pg_sequence_last_value(q.id_seq), 0) - v_last - v_after);
    END IF;
END
$$;

-- e_queue_status: the rows of sluice.status for this queue (see there;
-- named e_status before, which compat.sql keeps for release 0.1.0). The
-- messages not numbered yet are read once for every group (e_unnumbered),
-- at most sluice.status_exact_limit (10,000) of each kind. A group's dead
-- letters (dead, dead_lettered) are counted by sluice._dead_letter_counts,
-- O(the group's dead letters).
--
-- Parameters:
--   q  the queue
-- Returns: one row per group (one row with group_name NULL if none), each
--   started from sluice._status_row
-- Errors: SL006 when the setting sluice.status_exact_limit is not a
--         number from 0 to 1000000000
-- Calls: e_min_lwm, e_unnumbered, e_lane_state, e_window, e_newest, e_completed,
--   e_group_lwm, e_key_waiting, sluice._numbering_holder, sluice._status_row,
--   sluice._dead_letter_counts
CREATE OR REPLACE FUNCTION sluice_tmpl.e_queue_status(q sluice.queue)
RETURNS SETOF sluice.queue_status
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    g sluice.consumer_group;
    head record;
    un record;
    u record;
    s sluice.queue_status;
    v_row sluice.queue_status;   -- (sluice._status_row)
    v_now timestamptz := clock_timestamp();
    v_cur bigint := sluice._current_epoch(q.id);
    v_oldest bigint;
    v_retired_at timestamptz;
    v_min bigint := e_min_lwm(q);
    v_lwm bigint;
    ls record;
    v_waiting bigint;
    v_limit text := coalesce(nullif(current_setting('sluice.status_exact_limit', true), ''), '10000');
    any_group boolean := false;
    h_pid int;
    h_for interval;
BEGIN
    SELECT x.pid, x.held_for INTO h_pid, h_for FROM sluice._numbering_holder(q.id) x;
    IF (CASE WHEN v_limit ~ '^\s*[0-9]{1,10}\s*$' THEN v_limit::bigint > 1000000000 ELSE true END) THEN
        RAISE EXCEPTION USING ERRCODE = 'SL006',
            MESSAGE = format('sluice.status_exact_limit must be a number from 0 to 1000000000, not %s',
                             quote_literal(v_limit));
    END IF;
    SELECT * INTO head FROM batches ORDER BY batch_no DESC LIMIT 1;
    SELECT * INTO un FROM e_unnumbered(q, v_now, v_limit::bigint);
    v_oldest := coalesce((SELECT max(r.epoch) FROM sluice.reclaim r WHERE r.queue_id = q.id) + 1, 0);
    SELECT e.started_at INTO v_retired_at FROM sluice.epoch e WHERE e.queue_id = q.id AND e.epoch = v_oldest + 1;
    v_row := sluice._status_row(q.name, head.last_pos, v_cur - v_oldest + 1, h_pid, h_for);
    FOR g IN SELECT * FROM sluice.consumer_group cg WHERE cg.queue_id = q.id ORDER BY cg.name LOOP
        any_group := true;
        s := v_row;
        -- Over the group's lanes: the positions dispatched and not completed
        -- (leased, or expired and not redelivered yet), and those numbered
        -- after each lane's cursor. The keyed ones of the window and after
        -- the cursor, and the keyed messages not numbered yet, go to
        -- e_key_waiting.
        -- (the window is walked once: its counts and its keyed positions)
        WITH st AS MATERIALIZED (
            SELECT l.lane::smallint AS lane, s_.lwm, s_.cursor
            FROM generate_series(0, q.lanes - 1) AS l(lane)
            CROSS JOIN LATERAL e_lane_state(g, l.lane::smallint) s_
        ), win AS MATERIALIZED (
            SELECT x.pos, x.key, x.expires, x.parked
            FROM st CROSS JOIN LATERAL e_window(g.id, st.lane, st.lwm, st.cursor) x
        )
        SELECT (SELECT max(st.cursor) FROM st) AS cursor,
               (SELECT count(*) FROM win WHERE win.expires > v_now AND NOT win.parked) AS in_flight,
               (SELECT count(*) FROM win WHERE win.expires > v_now AND win.parked) AS parked,
               (SELECT count(*) FROM win WHERE win.expires IS NULL OR win.expires <= v_now) AS expired,
               (SELECT array_agg(st.cursor ORDER BY st.lane) FROM st) AS cursors,
               (SELECT array_agg(win.key ORDER BY win.pos) FROM win WHERE win.key IS NOT NULL) AS wkeys,
               (SELECT array_agg(win.pos ORDER BY win.pos) FROM win WHERE win.key IS NOT NULL) AS wpos,
               (SELECT array_agg(NOT coalesce(win.expires > v_now, false) ORDER BY win.pos)
                FROM win WHERE win.key IS NOT NULL) AS wready,
               -- numbered after the cursor: not the ones meant for other
               -- groups (retries), nor those taken out of order (counted by
               -- e_window, or completed)
               (SELECT coalesce(sum(nb.n), 0) FROM st CROSS JOIN LATERAL (
                    SELECT coalesce(sum(b.last_pos - greatest(b.first_pos, st.cursor + 1) + 1), 0)
                           - coalesce(sum((SELECT count(*) FROM unnest(b.targets) WITH ORDINALITY AS t(tg, o)
                                           WHERE t.tg <> g.id AND b.first_pos + t.o - 1 > st.cursor)), 0)
                           - (SELECT count(*) FROM prio p
                              WHERE p.lane = st.lane AND p.priority > 0 AND p.pos > st.cursor
                                AND (p.target IS NULL OR p.target = g.id)
                                AND (EXISTS (SELECT 1 FROM e_newest(g.id, p.mslot, p.pos))
                                     OR EXISTS (SELECT FROM e_completed(g.id, p.mslot, p.pos)))) AS n
                    FROM batches b
                    WHERE b.lane = st.lane AND b.last_pos > st.cursor AND b.last_pos >= b.first_pos) nb) AS numbered
        INTO ls;
        v_lwm := e_group_lwm(g, q.lanes, true);
        -- Committed messages not numbered yet, of this group: due now (as
        -- read, plus the estimate beyond them), delayed, and the oldest.
        SELECT coalesce(sum(x.due), 0) + un.rest AS due, coalesce(sum(x.delayed), 0) AS delayed,
               coalesce(sum(x.rt), 0) AS retries, min(x.o) AS oldest,
               ARRAY(SELECT k.k FROM unnest(un.ukeys, un.utgs) AS k(k, tg) WHERE k.tg IS NULL OR k.tg = g.id) AS ukeys
        INTO u
        FROM unnest(un.tgs, un.due, un.delayed, un.retries, un.oldest) AS x(tg, due, delayed, rt, o)
        WHERE x.tg IS NULL OR x.tg = g.id;
        s.group_name := g.name;
        s.cursor := ls.cursor;
        s.lwm := v_lwm;
        s.in_flight := ls.in_flight;
        v_waiting := e_key_waiting(g.id, ls.cursors, ls.wkeys, ls.wpos, ls.wready, u.ukeys);
        s.waiting := v_waiting;
        s.ready := ls.numbered + ls.expired + u.due - v_waiting;
        s.delayed := u.delayed + ls.parked;
        SELECT x.dead, x.dead_lettered INTO s.dead, s.dead_lettered FROM sluice._dead_letter_counts(q.id, g.id) x;
        -- (waiting: in numbered, expired, due; a retry copy due later is the
        -- group's, a delayed send is not yet)
        s.lag := ls.numbered + ls.in_flight + ls.expired + ls.parked + u.due + u.retries;
        s.oldest_pending_age := NULL;
        IF v_lwm <= head.last_pos THEN
            SELECT v_now - m.sent_at INTO s.oldest_pending_age
            FROM batches b
            JOIN messages m ON m.slot = b.slots[v_lwm - b.first_pos + 1]
                           AND m.txid = b.txids[v_lwm - b.first_pos + 1]
                           AND m.id = b.ids[v_lwm - b.first_pos + 1]
            WHERE b.first_pos <= v_lwm AND b.last_pos >= v_lwm
            LIMIT 1;
        END IF;
        IF s.oldest_pending_age IS NULL AND u.oldest IS NOT NULL THEN
            s.oldest_pending_age := v_now - u.oldest;
        END IF;
        -- (v_min is made of the stored low-water marks, as reclaim sees them)
        s.holds_reclaim := v_oldest < v_cur AND e_group_lwm(g, q.lanes) = v_min AND v_now >= v_retired_at + q.retention;
        s.estimated := un.estimated;
        RETURN NEXT s;
    END LOOP;
    IF NOT any_group THEN
        RETURN NEXT v_row;
    END IF;
END
$$;
