-- Group: dead letters

-- dead_letters: messages that exhausted their attempts and were not redriven.
--
-- Parameters:
--   queue       queue name
--   group_name  only this group's dead letters (NULL: every group's)
--   max_rows    1 to 10000 (100)
-- Returns: SETOF sluice.dead_letter_info, oldest first:
--   id              the message id
--   group_name      the group the message died in
--   body            the JSON body
--   headers         the headers object, or NULL
--   key             the ordering key, or NULL
--   attempts        deliveries made
--   error           the error given to the last nack, or why the last lease ended
--   died_at         when it became a dead letter
--   sent_at         when the message was first sent
--   dead_letter_id  the dead letter's own id
-- Errors: SL001, SL002, SL003, SL006 (max_rows)
CREATE OR REPLACE FUNCTION sluice.dead_letters(queue text, group_name text DEFAULT NULL, max_rows int DEFAULT 100)
RETURNS SETOF sluice.dead_letter_info
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q sluice.queue := sluice._use_queue(dead_letters.queue);
    v_gid int;
BEGIN
    PERFORM sluice._check_count('max_rows', max_rows, 10000);
    IF dead_letters.group_name IS NOT NULL THEN
        v_gid := (sluice._get_group(q.id, q.name, dead_letters.group_name)).id;
    END IF;
    RETURN QUERY
        SELECT d.message_id, g.name, d.body, d.headers, d.key, d.attempts, d.error, d.died_at, d.sent_at, d.id
        FROM sluice.dead_letter d
        JOIN sluice.consumer_group g ON g.id = d.group_id
        WHERE d.queue_id = q.id AND (v_gid IS NULL OR d.group_id = v_gid)
          AND NOT EXISTS (SELECT 1 FROM sluice.redrive r WHERE r.dead_letter_id = d.id)
        ORDER BY d.id
        LIMIT max_rows;
END
$$;

-- redrive: make dead letters deliverable again. Each is sent again to the
-- group it died in (only that group receives it), with its attempts reset;
-- it keeps its message id, body, headers, key and priority.
--
-- Parameters:
--   queue       queue name
--   group_name  only this group's dead letters (NULL: every group's)
--   ids         only these message ids (NULL: all)
-- Returns: how many dead letters were redriven
-- Errors: SL001, SL002, SL003
-- Tables: inserts into sluice.messages and sluice.redrive
CREATE OR REPLACE FUNCTION sluice.redrive(queue text, group_name text DEFAULT NULL, ids bigint[] DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q sluice.queue := sluice._use_queue(redrive.queue);
    v_gid int;
    v_slot smallint;
    v_dead bigint[];
    v_sent bigint[];
    n bigint;
BEGIN
    IF redrive.group_name IS NOT NULL THEN
        v_gid := (sluice._get_group(q.id, q.name, redrive.group_name)).id;
    END IF;
    v_slot := (SELECT ns.slot FROM sluice._slot_now(q.id) ns);
    -- Three statements that pass arrays rather than one that joined the
    -- dead letters picked with the messages sent for them: that join was
    -- planned as a nested loop, quadratic in the dead letters (6,000: 2 s).
    -- The dead letters to redrive, locked, in id order:
    SELECT coalesce(array_agg(x.id ORDER BY x.id), '{}') INTO v_dead
    FROM (SELECT d.id FROM sluice.dead_letter d
          WHERE d.queue_id = q.id AND (v_gid IS NULL OR d.group_id = v_gid)
            AND (redrive.ids IS NULL OR d.message_id = ANY (redrive.ids))
            AND NOT EXISTS (SELECT 1 FROM sluice.redrive r WHERE r.dead_letter_id = d.id)
          ORDER BY d.id
          FOR UPDATE OF d) x;
    -- a message each, for its group only, ids drawn in that order (after
    -- the sort, as send_batch's):
    WITH sent AS (
        INSERT INTO sluice.messages (queue_id, slot, id, txid, sent_at, priority, attempt_base, target_group,
                                     origin_id, key, headers, body)
        SELECT q.id, v_slot, nextval(q.id_seq), pg_current_xact_id(), d.sent_at, d.priority, 0, d.group_id,
               d.message_id, d.key, d.headers, d.body
        FROM unnest(v_dead) WITH ORDINALITY AS u(id, ord)
        JOIN sluice.dead_letter d ON d.id = u.id
        ORDER BY u.ord
        RETURNING id
    )
    SELECT coalesce(array_agg(sent.id ORDER BY sent.id), '{}') INTO v_sent FROM sent;
    INSERT INTO sluice.redrive (dead_letter_id, redriven_at, message_id)
    SELECT u.dead, clock_timestamp(), u.sent FROM unnest(v_dead, v_sent) AS u(dead, sent)
    ON CONFLICT DO NOTHING;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;
