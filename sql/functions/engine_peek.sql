-- Group: engine templates - peek and leases (see engine_cut.sql for what a template is)
--
-- Read-only views of a queue, for operators and the dashboard: the messages
-- it stores (e_peek) and the deliveries in flight (e_leases). Neither
-- leases, locks (beyond the tables' ACCESS SHARE) nor writes anything.
-- What is current and what is completed is asked of e_newest and
-- e_completed (engine_runs.sql), as receipts see it.

-- e_peek: the body of sluice.peek for this queue (see there): the messages
-- stored in the queue, one row per message id, by id, the first p_max
-- after p_after. A retry or redrive copy keeps its message's id, body,
-- headers, key, priority and sent_at: it gets no row of its own, its group
-- is named in resent_to. The row shown is the one first sent while it is
-- stored, else (reclaimed) the earliest copy.
--
-- The queue's messages have no index on id (sends would pay for it): this
-- reads them twice, the first time for the ids only (the page's last id),
-- the second for the rows of the page. O(messages stored).
--
-- Parameters:
--   q        the queue
--   p_max    how many messages (1 to 1000, checked by the caller)
--   p_after  only ids above it (NULL: from the first)
-- Returns: SETOF sluice.stored_message, by id
CREATE OR REPLACE FUNCTION sluice_tmpl.e_peek(q sluice.queue, p_max int, p_after bigint)
RETURNS SETOF sluice.stored_message
LANGUAGE plpgsql STABLE
AS $$
#variable_conflict use_column
DECLARE
    v_after constant bigint := coalesce(p_after, -9223372036854775808);
    v_last bigint;
BEGIN
    -- The page's last id: the p_max-th distinct id after p_after.
    SELECT max(x.pid) INTO v_last
    FROM (SELECT DISTINCT coalesce(m.origin_id, m.id) AS pid
          FROM messages m
          WHERE coalesce(m.origin_id, m.id) > v_after
          ORDER BY 1
          LIMIT p_max) x;
    IF v_last IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH page AS MATERIALIZED (
        SELECT coalesce(m.origin_id, m.id) AS pid, m.id, m.origin_id, m.target_group, m.body, m.headers, m.key,
               m.priority, m.sent_at, m.deliver_at
        FROM messages m
        WHERE coalesce(m.origin_id, m.id) > v_after AND coalesce(m.origin_id, m.id) <= v_last
    ), resent AS (
        SELECT c.pid, array_agg(DISTINCT g.name ORDER BY g.name) AS names
        FROM page c
        JOIN sluice.consumer_group g ON g.id = c.target_group
        GROUP BY c.pid
    )
    -- the row as first sent if it is still stored, else its earliest copy
    SELECT o.pid, o.body, o.headers, o.key, o.priority, o.sent_at, o.deliver_at, r.names
    FROM (SELECT DISTINCT ON (p.pid) p.*
          FROM page p
          ORDER BY p.pid, p.origin_id IS NOT NULL, p.id) o
    LEFT JOIN resent r ON r.pid = o.pid
    ORDER BY o.pid;
END
$$;

-- e_leases: the body of sluice.leases for this queue (see there): the
-- positions whose newest delivery (e_newest) is a lease that has not
-- expired, of a position not completed (e_completed), the earliest expiry
-- first, at most p_max.
--
-- Candidates are the deliveries rows and the runs (each of its positions)
-- of a group whose expiry is still to come, found per lane through the
-- (group_id, lane, expires_at) indexes; parked rows (token 0: a keyed
-- retry, or a released message of a key, due later) are not leases. A
-- position with a newer row (an extend, a redelivery, a nack) or completed
-- since is then dropped by the e_newest and e_completed test. consumer and
-- delivered_at are those of the receive that made the delivery (an extend
-- writes a row of its own with the same attempt and token, but no
-- consumer); attempt counts as receive does (attempts of a retry copy's
-- earlier deliveries included).
--
-- Costs O(deliveries and run positions of the group whose expiry is still
-- to come), a few index probes each.
--
-- Parameters:
--   q           the queue
--   p_group_id  one group's (NULL: every group of the queue)
--   p_max       how many rows (1 to 1000, checked by the caller)
-- Returns: SETOF sluice.lease_info, by expiry, then group name and position
CREATE OR REPLACE FUNCTION sluice_tmpl.e_leases(q sluice.queue, p_group_id int, p_max int)
RETURNS SETOF sluice.lease_info
LANGUAGE plpgsql STABLE
AS $$
#variable_conflict use_column
DECLARE
    v_now constant timestamptz := clock_timestamp();
BEGIN
    RETURN QUERY
    WITH cand AS MATERIALIZED (
        SELECT DISTINCT c.group_id, g.name, c.slot, c.pos, c.lane
        FROM sluice.consumer_group g
        CROSS JOIN generate_series(0, q.lanes - 1) AS l(lane)
        CROSS JOIN LATERAL (
            SELECT d.group_id, d.slot, d.pos, d.lane
            FROM deliveries d
            WHERE d.group_id = g.id AND d.lane = l.lane AND d.expires_at > v_now AND d.token <> 0
            UNION ALL
            SELECT r.group_id, r.slot, p.pos, r.lane
            FROM runs r
            CROSS JOIN LATERAL generate_series(r.pos, r.last_pos) AS p(pos)
            WHERE r.group_id = g.id AND r.lane = l.lane AND r.expires_at > v_now) c
        WHERE g.queue_id = q.id AND (p_group_id IS NULL OR g.id = p_group_id)
    ), cur AS MATERIALIZED (
        SELECT c.group_id, c.name, c.slot, c.pos, c.lane, n.attempt, n.token, n.expires_at
        FROM cand c
        CROSS JOIN LATERAL e_newest(c.group_id, c.slot, c.pos) n
        WHERE n.token <> 0 AND n.expires_at > v_now
          AND NOT EXISTS (SELECT FROM e_completed(c.group_id, c.slot, c.pos))
        ORDER BY n.expires_at, c.name, c.pos
        LIMIT p_max
    )
    SELECT cur.name, m.public_id, cur.pos, m.attempt_base + cur.attempt,
           CASE WHEN fr.delivered_at IS NOT NULL THEN fr.consumer ELSE fd.consumer END,
           coalesce(fr.delivered_at, fd.delivered_at), cur.expires_at
    FROM cur
    -- the delivery as the receive made it: the run it is part of, else its
    -- earliest deliveries row of this attempt and token
    LEFT JOIN LATERAL (
        SELECT r.consumer, r.delivered_at
        FROM (SELECT r.token, r.last_pos, r.consumer, r.delivered_at FROM runs r
              WHERE r.slot = cur.slot AND r.group_id = cur.group_id AND r.pos <= cur.pos
              ORDER BY r.pos DESC LIMIT 1) r
        WHERE r.last_pos >= cur.pos AND r.token = cur.token AND cur.attempt = 1) fr ON true
    LEFT JOIN LATERAL (
        SELECT d.consumer, d.delivered_at, d.msg_id, d.txid
        FROM deliveries d
        WHERE d.slot = cur.slot AND d.group_id = cur.group_id AND d.pos = cur.pos
          AND d.attempt = cur.attempt AND d.token = cur.token
        ORDER BY d.delivered_at
        LIMIT 1) fd ON true
    LEFT JOIN LATERAL e_run_message(cur.lane, cur.pos) rm ON fd.msg_id IS NULL
    LEFT JOIN LATERAL e_message(cur.slot, coalesce(fd.txid, rm.txid), coalesce(fd.msg_id, rm.id)) m ON true
    ORDER BY cur.expires_at, cur.name, cur.pos;
END
$$;
