-- Group: engine v2 - the receive's slow path (templates, schema sluice_tmpl2)
--
-- What the hot path declines, on a lane the receive has locked, through the
-- parents (every slot): the lane's state carried into the current slot, the
-- next expired lease past the lane's scan point handled (its unsettled
-- positions delivered again, parked, or dead-lettered; or, extended, put
-- off to its new end), then new positions (e2_take, the hot statement over
-- the parents).

-- e2_slow: serve a locked lane the hot path declined.
--
-- Parameters:
--   q, g        queue and group
--   p_lane      the lane (locked by the caller)
--   p_need      how many to deliver at most
--   p_lease     lease duration
--   p_consumer  consumer name
--   p_now       the receive's time
--   p_slot      the current slot
-- Returns: the messages delivered (as sluice.receive), and possibly the
--   sentinel rows of e2_take (id NULL) for the caller to skip
-- Calls: e2_settled_run, e2_old_due, e2_next_exp, e2_expire, e2_take, e2_take_keyed
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_slow(q sluice.queue, g sluice.consumer_group, p_lane smallint,
                                               p_need int, p_lease interval, p_consumer text,
                                               p_now timestamptz, p_slot smallint)
RETURNS SETOF sluice.message
LANGUAGE plpgsql
AS $$
DECLARE
    st record;
    r record;
    v_no bigint;
    v_t timestamptz;
    v_tno bigint;
    n int;
BEGIN
    -- A receive that read the current slot before a rotation (and, since a
    -- settled lease holds no slot, perhaps the reclaim of that slot with
    -- its fences) would move the lane back into a slot no longer current,
    -- next to the state written in the current one: nothing here then.
    -- (Under the lane's lock: once the slot is current here, the lane's
    -- state written there keeps it from being reclaimed.)
    IF p_slot IS DISTINCT FROM (SELECT ns.slot FROM sluice._slot_now(q.id) ns) THEN
        RETURN;
    END IF;
    -- the lane's state: its newest lease row, of any slot (every lane of a
    -- group has one from the group's creation)
    SELECT s.* INTO STRICT st FROM lease s WHERE s.group_id = g.id AND s.lane = p_lane
    ORDER BY s.lease_no DESC LIMIT 1;
    v_no := st.lease_no;
    IF st.slot <> p_slot THEN
        -- moving the lane: a fence in its old slot first, so that a receive
        -- there with a stale state writes nothing (e2_take)
        v_no := v_no + 1;
        INSERT INTO lease (slot, group_id, lane, lease_no, kind, first_pos, last_pos, n, token, expires_at,
                           delivered_at, cursor, scan_t, scan_no, old_due, held, waiting, levels)
        VALUES (st.slot, g.id, p_lane, v_no, 'f', 1, 0, 0, 0, '-infinity', p_now, st.cursor,
                st.scan_t, st.scan_no, 'infinity', st.held, st.waiting, st.levels);
    END IF;
    -- the run of ended leases past the scan point (of any slot) that are
    -- completed, passed at once: after a rotation the older slot's leases
    -- of a busy lane end one after another
    SELECT x.expires_at, x.lease_no INTO v_t, v_tno FROM e2_settled_run(g.id, p_lane, st.scan_t, st.scan_no, p_now) x;
    IF v_tno IS NOT NULL THEN
        st.scan_t := v_t;
        st.scan_no := v_tno;
    END IF;
    -- the next expired lease past the scan point, of any slot
    SELECT e.* INTO r FROM lease e
    WHERE e.group_id = g.id AND e.lane = p_lane AND e.expires_at >= st.scan_t AND e.expires_at > '-infinity'
      AND e.expires_at <= p_now AND (e.expires_at, e.lease_no) > (st.scan_t, st.scan_no)
    ORDER BY e.expires_at, e.lease_no LIMIT 1;
    -- (the lease's lock, if free: an ack, nack or extend of it not
    -- committed holds it, and a receive, which may hold the cut lock, never
    -- waits for one; the lease is handled by a later receive)
    IF FOUND AND pg_try_advisory_xact_lock(sluice._lock_ns('lease'),
                                           sluice._lease_lock(g.id, p_lane, CASE WHEN r.kind = 'x' THEN r.ref
                                                                                  ELSE r.lease_no END)) THEN
        RETURN QUERY SELECT * FROM e2_expire(q, g, p_lane, v_no, st.cursor, r.lease_no, p_need, p_lease, p_consumer,
                                             p_now, p_slot);   -- (its state row passes r, after the run)
        GET DIAGNOSTICS n = ROW_COUNT;
        p_need := p_need - n;
    ELSIF st.slot <> p_slot OR st.old_due <= p_now OR v_tno IS NOT NULL THEN
        -- carry the state into the current slot, with what older slots hold
        INSERT INTO lease (slot, group_id, lane, lease_no, kind, first_pos, last_pos, n, token, expires_at,
                           delivered_at, cursor, scan_t, scan_no, old_due, next_exp, held, waiting, levels)
        VALUES (p_slot, g.id, p_lane, v_no + 1, 'c', 1, 0, 0, 0, '-infinity', p_now, st.cursor,
                st.scan_t, st.scan_no, e2_old_due(g.id, p_lane, p_slot, st.scan_t, st.scan_no),
                e2_next_exp(g.id, p_lane, p_slot, st.scan_t, st.scan_no), st.held, st.waiting, st.levels);
    END IF;
    IF p_need > 0 THEN
        -- new positions, through the parents, from the state just written
        -- (e2_take_keyed when keys are held or waiting, or e2_take declines
        -- a keyed position)
        SELECT s.* INTO STRICT st FROM lease s WHERE s.group_id = g.id AND s.lane = p_lane
        ORDER BY s.lease_no DESC LIMIT 1;
        IF st.held IS NULL AND st.waiting IS NULL THEN
            RETURN QUERY SELECT * FROM e2_take(g.id, p_lane, st.lease_no, st.cursor, st.scan_t, st.scan_no, st.old_due,
                                               st.next_exp, false, p_need, p_lease, p_consumer, p_now, p_slot);
            GET DIAGNOSTICS n = ROW_COUNT;
            IF n > 0 THEN
                RETURN;
            END IF;
            SELECT s.* INTO STRICT st FROM lease s WHERE s.group_id = g.id AND s.lane = p_lane
            ORDER BY s.lease_no DESC LIMIT 1;
        END IF;
        RETURN QUERY SELECT * FROM e2_take_keyed(g.id, p_lane, st.lease_no, st.cursor, st.scan_t, st.scan_no,
                                                 st.old_due, st.next_exp, false, p_need, p_lease, p_consumer, p_now,
                                                 p_slot, st.held, st.waiting);
    END IF;
END
$$;

-- e2_old_due: when the first lease of a lane in a slot other than the
-- current one, past the given scan point, expires: the hot path, which
-- reads the current slot only, leaves the lane to the slow path from then.
--
-- Parameters:
--   p_group, p_lane  group and lane
--   p_slot           the current slot
--   p_t, p_no        the scan point (expires_at, lease_no)
-- Returns: that time, or infinity
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_old_due(p_group int, p_lane smallint, p_slot smallint,
                                                  p_t timestamptz, p_no bigint)
RETURNS timestamptz
LANGUAGE plpgsql
AS $$
BEGIN
    RETURN coalesce((SELECT min(e.expires_at) FROM lease e
                     WHERE e.group_id = p_group AND e.lane = p_lane AND e.slot <> p_slot
                       AND e.expires_at >= p_t AND e.expires_at > '-infinity'
                       AND (e.expires_at, e.lease_no) > (p_t, p_no)), 'infinity');
END
$$;

-- e2_lease_end: when an expired lease (or the lease a deferral puts off)
-- ends now that its extensions are counted (e2_expire). An extension of
-- the whole lease (ext, pos 0) moves its end; positions extended on their
-- own past now stay in the lease, which is put off to the first of their
-- ends while the others are passed on; a lease holding keys is put off
-- whole, to the last of them (its keys stay held).
--
-- Parameters:
--   p_group, p_lane, p_no  the lease
--   p_expires              its expires_at
--   p_held                 the lane's held keys (its state)
--   p_now                  the receive's time
-- Returns: end_at (past p_now: put off whole), later (the positions
--   extended on their own past now, NULL when none or put off whole) and
--   first_end (when the lease is put off to: the first of their ends, or
--   end_at; NULL when nothing is put off)
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_lease_end(p_group int, p_lane smallint, p_no bigint, p_expires timestamptz,
                                                    p_held sluice.e2_held[], p_now timestamptz,
                                                    OUT end_at timestamptz, OUT later bigint[], OUT first_end timestamptz)
RETURNS record
LANGUAGE plpgsql
AS $$
DECLARE
    v_last timestamptz;
BEGIN
    end_at := greatest(p_expires, (SELECT max(x.expires_at) FROM ext x
                                 WHERE x.group_id = p_group AND x.lane = p_lane AND x.lease_no = p_no AND x.pos = 0));
    SELECT array_agg(t.pos), min(t.ends), max(t.ends) INTO later, first_end, v_last
    FROM (SELECT x.pos, max(x.expires_at) AS ends FROM ext x
          WHERE x.group_id = p_group AND x.lane = p_lane AND x.lease_no = p_no AND x.pos <> 0
          GROUP BY x.pos HAVING max(x.expires_at) > p_now) t;
    IF later IS NOT NULL AND EXISTS (SELECT FROM unnest(p_held) h WHERE h.lease_no = p_no) THEN
        end_at := greatest(end_at, v_last);
    END IF;
    IF end_at > p_now THEN
        later := NULL;
        first_end := end_at;
    END IF;
END
$$;

-- e2_expire: handle a lane's next expired lease (e), passing the lane's
-- scan point over it. When e, or the lease that e puts off (kind x), was
-- extended past now, a deferral (kind x) to its new end is written; when
-- only some of its positions were, those stay (a deferral to the first of
-- their ends) and the others are handled now, as follows. Else
-- its positions that are not completed come back: those whose attempts are
-- used up (max_attempts) become dead letters, up to p_need are delivered
-- again (attempt + 1) in a new lease of this receive, the rest are parked:
-- an unkeyed one in a lease of kind p, due at once, for the next receives;
-- a keyed one among the lane's waiting positions. The keys the lease held
-- pass to the new lease when it has positions of theirs, else are freed
-- (their parked positions come first among their waiting ones).
--
-- Parameters:
--   q, g        queue and group
--   p_lane      lane (locked)
--   p_st_no     the lane's newest lease_no (its state)
--   p_cursor    the lane's cursor
--   p_e_no      the expired lease's lease_no
--   p_need, p_lease, p_consumer, p_now, p_slot: as e2_slow
-- Returns: the messages delivered again (as sluice.receive)
-- Tables: lease (deferral, parked, delivery or carry row: the last is the
--   lane's new state), ack and sluice.dead_letter (dead letters)
-- Calls: e2_lease_end, e2_unsettled, e2_keys_passed, e2_old_due, e2_next_exp
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_expire(q sluice.queue, g sluice.consumer_group, p_lane smallint,
                                                 p_st_no bigint, p_cursor bigint, p_e_no bigint, p_need int,
                                                 p_lease interval, p_consumer text, p_now timestamptz,
                                                 p_slot smallint)
RETURNS SETOF sluice.message
LANGUAGE plpgsql
AS $$
DECLARE
    e record;
    l record;
    r record;
    st record;
    v_end timestamptz;
    v_no bigint := p_st_no;
    u record;
    v_kind "char" := 'c';
    v_token bigint := 0;
    v_exp timestamptz := 'infinity';
    v_held sluice.e2_held[];
    v_wait sluice.e2_wait[];
    v_later bigint[];       -- positions extended on their own past now
    v_first timestamptz;    -- when the first of them ends (or the lease, put off whole)
BEGIN
    -- (each lease by its key in the primary key's order: see e2_ack__s)
    SELECT * INTO STRICT e FROM lease x WHERE x.group_id = g.id AND x.lane = p_lane AND x.lease_no = p_e_no
    ORDER BY x.slot LIMIT 1;
    SELECT x.held, x.waiting, x.levels INTO STRICT st FROM lease x
    WHERE x.group_id = g.id AND x.lane = p_lane AND x.lease_no = p_st_no
    ORDER BY x.slot LIMIT 1;
    v_held := st.held;
    v_wait := st.waiting;
    r := e;
    IF e.kind = 'x' THEN
        SELECT * INTO STRICT r FROM lease x WHERE x.group_id = g.id AND x.lane = p_lane AND x.lease_no = e.ref
        ORDER BY x.slot LIMIT 1;
    END IF;
    SELECT * INTO v_end, v_later, v_first FROM e2_lease_end(g.id, p_lane, r.lease_no, r.expires_at, v_held, p_now);
    -- (no row when it is put off whole: u's fields are then NULL; the
    -- caller holds the lease's lock, so completions of its positions
    -- committed meanwhile are seen: see e2_ack__s)
    SELECT * INTO u FROM e2_unsettled(g.id, p_lane, r.lease_no, r.slot, q.max_attempts, p_need, p_now, p_slot, q.id,
                                      v_later)
    WHERE v_end <= p_now;
    IF v_later IS NOT NULL THEN
        -- the others are passed on now (delivered again, parked): r is
        -- done with them
        INSERT INTO ack (slot, group_id, lane, lease_no, pos, kind, at)
        SELECT r.slot, g.id, p_lane, r.lease_no, w.pos, 'e', p_now
        FROM unnest(coalesce(u.redo, '{}') || coalesce(u.park, '{}')) w
        ON CONFLICT DO NOTHING;
    END IF;
    IF v_first > p_now THEN
        v_no := v_no + 1;   -- put off to the lease's (or its extended positions') new end
        INSERT INTO lease (slot, group_id, lane, lease_no, kind, ref, first_pos, last_pos, n, token, expires_at,
                           delivered_at, cursor, scan_t, scan_no, old_due, held, waiting, levels)
        VALUES (p_slot, g.id, p_lane, v_no, 'x', r.lease_no, 1, 0, 0, 0, v_first, p_now, p_cursor,
                e.expires_at, e.lease_no, 'infinity', v_held, v_wait, st.levels);
    END IF;
    IF EXISTS (SELECT FROM unnest(u.park) w WHERE w.khash IS NULL) THEN
        v_no := v_no + 1;
        INSERT INTO lease (slot, group_id, lane, lease_no, kind, first_pos, last_pos, n, redo_pos, redo_att,
                           redo_ids, redo_txids, token, expires_at, delivered_at, cursor, scan_t, scan_no, old_due)
        SELECT p_slot, g.id, p_lane, v_no, 'p', 1, 0, count(*), array_agg(w.pos ORDER BY w.pos),
               array_agg(w.attempt ORDER BY w.pos), array_agg(w.id ORDER BY w.pos), array_agg(w.txid ORDER BY w.pos),
               0, p_now, p_now, p_cursor, e.expires_at, e.lease_no, 'infinity'
        FROM unnest(u.park) w WHERE w.khash IS NULL;
    END IF;
    IF cardinality(u.redo) > 0 THEN
        v_kind := 'r';
        v_token := 1 + (random() * 4503599627370495)::bigint;
        v_exp := p_now + p_lease;
    END IF;
    IF v_end <= p_now THEN
        SELECT * INTO v_held, v_wait FROM e2_keys_passed(v_held, v_wait, r.lease_no, u.redo, u.park, p_slot, v_no + 1);
    END IF;
    INSERT INTO lease AS x (slot, group_id, lane, lease_no, kind, first_pos, last_pos, n, redo_pos, redo_att,
                            redo_ids, redo_txids, token, expires_at, delivered_at, cursor, scan_t, scan_no,
                            old_due, consumer, next_exp, held, waiting, levels)
    SELECT p_slot, g.id, p_lane, v_no + 1, v_kind, 1, 0, count(w.pos),
           array_agg(w.pos ORDER BY w.pos) FILTER (WHERE w.pos IS NOT NULL),
           array_agg(w.attempt ORDER BY w.pos) FILTER (WHERE w.pos IS NOT NULL),
           array_agg(w.id ORDER BY w.pos) FILTER (WHERE w.pos IS NOT NULL),
           array_agg(w.txid ORDER BY w.pos) FILTER (WHERE w.pos IS NOT NULL),
           v_token, CASE WHEN v_kind = 'r' THEN v_exp ELSE '-infinity' END, p_now, p_cursor,
           e.expires_at, e.lease_no, e2_old_due(g.id, p_lane, p_slot, e.expires_at, e.lease_no), p_consumer,
           least(v_exp, e2_next_exp(g.id, p_lane, p_slot, e.expires_at, e.lease_no)),
           nullif(v_held, '{}'), nullif(v_wait, '{}'), st.levels
    FROM (SELECT 1) one LEFT JOIN unnest(u.redo) w ON true
    RETURNING * INTO l;
    RETURN QUERY
    SELECT coalesce(m.orig, m.id), m.body, m.headers, m.key, m.priority, w.att, m.sent_at,
           p_slot || '.' || w.pos || '.' || p_lane || '.' || l.lease_no || '.' || l.token, l.expires_at, w.pos
    FROM unnest(l.redo_pos, l.redo_ids, l.redo_txids, l.redo_att) WITH ORDINALITY AS w(pos, id, txid, att, o)
    JOIN msg m ON m.txid = w.txid AND m.id = w.id
    ORDER BY w.o;
END
$$;

-- e2_unsettled: the positions of a lease that are not completed, with
-- their messages and last attempts: those whose attempts are used up
-- become dead letters of the group (and count as completed), the first
-- p_need of the rest are to be delivered again (attempt + 1), the others
-- parked (with the attempt to deliver them as).
--
-- Parameters:
--   p_group, p_lane, p_no, p_lslot  the lease (group, lane, lease_no, slot)
--   p_max       the queue's max_attempts
--   p_need      how many to deliver again at most
--   p_now       now
--   p_slot      current slot
--   p_queue_id  queue id
--   p_skip      positions left out (extended on their own; NULL: none)
-- Returns: redo (to deliver again, with the attempt of that delivery) and
--   park (to park, with their last attempt), each in position order
-- Tables: sluice.dead_letter and ack (kind d) for the dead
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_unsettled(p_group int, p_lane smallint, p_no bigint, p_lslot smallint,
                                                    p_max int, p_need int, p_now timestamptz, p_slot smallint,
                                                    p_queue_id int, p_skip bigint[],
                                                    OUT redo sluice.e2_wait[], OUT park sluice.e2_wait[])
RETURNS record
LANGUAGE plpgsql
AS $$
DECLARE
    v_all sluice.e2_wait[];   -- every position not completed, with its last attempt
    -- (the lease by its key in the primary key's order, here and below: see
    -- e2_ack__s; slot last, from p_lslot on)
    v_n int := (SELECT l.n
                FROM (SELECT ll.n, ll.slot FROM lease ll
                      WHERE ll.group_id = p_group AND ll.lane = p_lane AND ll.lease_no = p_no AND ll.slot >= p_lslot
                      ORDER BY ll.slot LIMIT 1) l
                WHERE l.slot = p_lslot);
BEGIN
    SELECT array_agg(ROW(x.pos, m.khash, x.id, x.txid, m.slot, x.att)::sluice.e2_wait ORDER BY x.pos)
    INTO v_all
    FROM (SELECT p.pos, b.id, b.txid, NULL::int AS att
          FROM (SELECT ll.* FROM lease ll
                WHERE ll.group_id = p_group AND ll.lane = p_lane AND ll.lease_no = p_no AND ll.slot >= p_lslot
                ORDER BY ll.slot LIMIT 1) l
          CROSS JOIN LATERAL generate_series(l.first_pos, l.last_pos) p(pos)
          CROSS JOIN LATERAL (SELECT bb.ids[p.pos - bb.first_pos + 1] AS id, bb.txids[p.pos - bb.first_pos + 1] AS txid
                              FROM batch bb WHERE bb.lane = p_lane AND bb.last_pos >= p.pos
                              ORDER BY bb.last_pos LIMIT 1) b
          WHERE l.slot = p_lslot
          UNION ALL
          SELECT x.pos, x.id, x.txid, x.att
          FROM (SELECT ll.* FROM lease ll
                WHERE ll.group_id = p_group AND ll.lane = p_lane AND ll.lease_no = p_no AND ll.slot >= p_lslot
                ORDER BY ll.slot LIMIT 1) l
          CROSS JOIN LATERAL unnest(l.redo_pos, l.redo_ids, l.redo_txids, l.redo_att) x(pos, id, txid, att)
          WHERE l.slot = p_lslot) x
    JOIN LATERAL (SELECT mm.* FROM msg mm WHERE mm.txid = x.txid AND mm.id = x.id) m ON true
    WHERE (x.att IS NOT NULL OR m.target IS NULL OR m.target = p_group)
      AND NOT x.pos = ANY (coalesce(p_skip, '{}'))
      AND NOT EXISTS (SELECT 1 FROM ack a WHERE a.group_id = p_group AND a.lane = p_lane AND a.lease_no = p_no
                                            AND a.pos IN (0, x.pos));
    -- (a range position's last attempt is its message's)
    v_all := ARRAY(SELECT ROW(w.pos, w.khash, w.id, w.txid, w.mslot, coalesce(w.attempt, m.attempt))::sluice.e2_wait
                   FROM unnest(v_all) w JOIN msg m ON m.slot = w.mslot AND m.txid = w.txid AND m.id = w.id
                   ORDER BY w.pos);
    -- (a lease of one position is completed by a row pos 0: see e2_ack__s;
    -- one completed meanwhile, not committed when v_all was read, wins)
    WITH dead AS (
        INSERT INTO ack (slot, group_id, lane, lease_no, pos, kind, at)
        SELECT p_lslot, p_group, p_lane, p_no, CASE WHEN v_n = 1 THEN 0 ELSE w.pos END, 'd', p_now
        FROM unnest(v_all) w WHERE w.attempt >= p_max
        ON CONFLICT DO NOTHING
        RETURNING ack.pos
    )
    INSERT INTO sluice.dead_letter (queue_id, group_id, message_id, attempts, error, died_at, sent_at, priority,
                                    key, headers, body)
    SELECT p_queue_id, p_group, coalesce(m.orig, m.id), w.attempt, 'lease expired', p_now, m.sent_at, m.priority,
           m.key, m.headers, m.body
    FROM unnest(v_all) w
    JOIN dead d ON d.pos IN (0, w.pos) JOIN msg m ON m.slot = w.mslot AND m.txid = w.txid AND m.id = w.id;
    -- the rest: the first p_need again (attempt + 1), the others parked
    -- (with their last attempt)
    SELECT array_agg(ROW(u.pos, u.khash, u.id, u.txid, u.mslot, u.attempt + 1)::sluice.e2_wait ORDER BY u.pos)
               FILTER (WHERE u.k <= p_need),
           array_agg(ROW(u.pos, u.khash, u.id, u.txid, u.mslot, u.attempt)::sluice.e2_wait ORDER BY u.pos)
               FILTER (WHERE u.k > p_need)
    INTO redo, park
    FROM (SELECT w.*, row_number() OVER (ORDER BY w.pos) AS k FROM unnest(v_all) w WHERE w.attempt < p_max) u;
END
$$;

-- e2_next_exp: when the first lease of a lane in the current slot, past the
-- given scan point, ends (a lane state's next_exp: the hot path looks for an
-- ended lease only from then).
--
-- Parameters: as e2_old_due
-- Returns: that time, or infinity
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_next_exp(p_group int, p_lane smallint, p_slot smallint,
                                                   p_t timestamptz, p_no bigint)
RETURNS timestamptz
LANGUAGE plpgsql
AS $$
BEGIN
    RETURN coalesce((SELECT min(e.expires_at) FROM lease e
                     WHERE e.group_id = p_group AND e.lane = p_lane AND e.slot = p_slot
                       AND e.expires_at >= p_t AND e.expires_at > '-infinity'
                       AND (e.expires_at, e.lease_no) > (p_t, p_no)), 'infinity');
END
$$;

-- e2_settled_run: the last of the run of a lane's ended leases, from its
-- scan point on in scan order (of any slot), that are all completed (acked
-- whole or every position completed, and not extended): the slow path
-- passes them at once. At most 1,000.
--
-- Parameters:
--   p_group, p_lane  group and lane
--   p_t, p_no        the scan point
--   p_now            now
-- Returns: expires_at and lease_no of the last of the run; NULL when the
--   first ended lease is not completed (or none has ended)
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_settled_run(p_group int, p_lane smallint, p_t timestamptz, p_no bigint,
                                                      p_now timestamptz, OUT expires_at timestamptz,
                                                      OUT lease_no bigint)
LANGUAGE plpgsql
AS $$
BEGIN
    SELECT x.expires_at, x.lease_no INTO expires_at, lease_no
    FROM (SELECT e.expires_at, e.lease_no,
                 bool_and(e.kind = 'r'
                          AND (EXISTS (SELECT 1 FROM ack a WHERE a.slot = e.slot AND a.group_id = p_group
                                                             AND a.lane = p_lane AND a.lease_no = e.lease_no AND a.pos = 0)
                               OR (SELECT count(*) FROM ack a WHERE a.slot = e.slot AND a.group_id = p_group
                                                                AND a.lane = p_lane AND a.lease_no = e.lease_no) = e.n)
                          AND NOT EXISTS (SELECT 1 FROM ext x WHERE x.slot = e.slot AND x.group_id = p_group
                                                                AND x.lane = p_lane AND x.lease_no = e.lease_no
                                                                AND x.expires_at > p_now))
                     OVER (ORDER BY e.expires_at, e.lease_no ROWS UNBOUNDED PRECEDING) AS done
          FROM (SELECT e.* FROM lease e
                WHERE e.group_id = p_group AND e.lane = p_lane AND e.expires_at > '-infinity'
                  AND e.expires_at >= p_t AND e.expires_at <= p_now AND (e.expires_at, e.lease_no) > (p_t, p_no)
                ORDER BY e.expires_at, e.lease_no LIMIT 1000) e) x
    WHERE x.done
    ORDER BY x.expires_at DESC, x.lease_no DESC
    LIMIT 1;
END
$$;
