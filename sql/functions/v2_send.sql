-- Group: engine v2 - send (templates, schema sluice_tmpl2)
--
-- A send to a queue of engine 2 is one INSERT into the queue's own msg
-- table, in the slot of its current epoch (sluice.send and send_batch check
-- the arguments, draw the ids and call these through the queue's path).

-- e2_send: insert one message.
--
-- Parameters:
--   p_queue_id  queue id
--   p_id        the message id (from the queue's sequence)
--   p_due       when it is due (NULL: at once)
--   p_now       sent_at
--   p_headers   headers or NULL
--   p_body      body
--   p_key       ordering key or NULL
--   p_priority  priority
-- Returns: p_id
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_send(p_queue_id int, p_id bigint, p_due timestamptz, p_now timestamptz,
                                               p_headers jsonb, p_body jsonb, p_key text, p_priority int)
RETURNS bigint
LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO msg (slot, id, txid, due, sent_at, headers, body, key, khash, priority)
    VALUES ((SELECT ns.slot FROM sluice._slot_now(p_queue_id) ns), p_id, pg_current_xact_id(), p_due, p_now,
            p_headers, p_body, p_key, hashtextextended(p_key, 0), p_priority);
    RETURN p_id;
END
$$;

-- e2_send_batch: insert messages, their ids drawn in body order.
--
-- Parameters:
--   q          the queue's row
--   p_due      when they are due (NULL: at once)
--   p_now      sent_at
--   p_headers  headers per body, or NULL
--   p_bodies   bodies
--   p_keys     ordering keys per body, or NULL
--   p_priorities  priorities per body, or NULL (0)
-- Returns: the ids, in body order
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_send_batch(q sluice.queue, p_due timestamptz, p_now timestamptz,
                                                     p_headers jsonb[], p_bodies jsonb[], p_keys text[],
                                                     p_priorities int[])
RETURNS SETOF bigint
LANGUAGE plpgsql
AS $$
BEGIN
    RETURN QUERY
    WITH ins AS (
        INSERT INTO msg (slot, id, txid, due, sent_at, headers, body, key, khash, priority)
        SELECT (SELECT ns.slot FROM sluice._slot_now(q.id) ns), nextval(q.id_seq), pg_current_xact_id(), p_due, p_now,
               u.h, u.b, u.k, hashtextextended(u.k, 0), coalesce(u.p, 0)
        FROM unnest(p_bodies, p_headers, p_keys, p_priorities) WITH ORDINALITY AS u(b, h, k, p, ord)
        ORDER BY u.ord
        RETURNING id
    )
    SELECT ins.id FROM ins ORDER BY ins.id;
END
$$;

-- e2_redrive: send dead letters again (sluice.redrive of a queue of engine
-- 2, the dead letters picked and locked by the caller): each is claimed (a
-- sluice.redrive row naming the id of the message it sends; one claimed
-- meanwhile by a concurrent redrive conflicts and is not sent again), then
-- sent for its group only, in the form of a nack's retry copy (e2_nack): a
-- msg row with an id of its own, orig = the dead letter's message id,
-- target = its group, attempt 1 (its attempts start again), due at once,
-- with the dead letter's sent_at, key (a keyed one goes to its key's lane
-- and waits behind the key's messages in flight, as a send of the key
-- would), priority, headers and body.
--
-- Parameters:
--   q       the queue's row
--   p_dead  ids of the dead letters (sluice.dead_letter), in id order
-- Returns: how many were sent
-- Tables: sluice.redrive, msg
CREATE OR REPLACE FUNCTION sluice_tmpl2.e2_redrive(q sluice.queue, p_dead bigint[])
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    n bigint;
BEGIN
    WITH claimed AS (
        INSERT INTO sluice.redrive (dead_letter_id, redriven_at, message_id)
        SELECT u.id, clock_timestamp(), nextval(q.id_seq) FROM unnest(p_dead) WITH ORDINALITY AS u(id, ord)
        ORDER BY u.ord
        ON CONFLICT DO NOTHING
        RETURNING dead_letter_id, message_id
    )
    INSERT INTO msg (slot, id, txid, orig, attempt, target, due, sent_at, headers, body, key, khash, priority)
    SELECT ns.slot, c.message_id, pg_current_xact_id(), d.message_id, 1, d.group_id, NULL, d.sent_at, d.headers, d.body,
           d.key, hashtextextended(d.key, 0), d.priority
    FROM claimed c
    JOIN sluice.dead_letter d ON d.id = c.dead_letter_id
    CROSS JOIN sluice._slot_now(q.id) ns
    ORDER BY c.message_id;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;
