-- Group: dead letters

-- dead_letters: messages that exhausted their attempts and were neither
-- redriven nor discarded.
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

-- _dead_letter_counts: a group's dead letters, as sluice.status counts
-- them (e_queue_status of both engines): those neither redriven nor
-- discarded (dead: no row in sluice.redrive, as dead_letters shows them),
-- and every one recorded (dead_lettered: a counter, which redrive and
-- discard leave alone). One scan of dead_letter_group_idx (queue_id,
-- group_id, id), with an anti-join on sluice.redrive's primary key: O(the
-- group's dead letters).
--
-- Parameters:
--   p_queue_id  queue id
--   p_group_id  group id
-- Returns: dead, dead_lettered (0 and 0 when the group has none)
-- Errors: none
-- Calls: nothing (reads sluice.dead_letter and sluice.redrive)
CREATE OR REPLACE FUNCTION sluice._dead_letter_counts(p_queue_id int, p_group_id int,
                                                      OUT dead bigint, OUT dead_lettered bigint)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM sluice.redrive r WHERE r.dead_letter_id = d.id)),
           count(*)
    FROM sluice.dead_letter d
    WHERE d.queue_id = p_queue_id AND d.group_id = p_group_id
$$;

-- redrive: make dead letters deliverable again. Each is sent again to the
-- group it died in (only that group receives it), with its attempts reset;
-- it keeps its message id, body, headers, key and priority. A dead letter
-- is redriven once: a redrive that meets one being redriven by another
-- waits for it, and then skips it if it committed (in a REPEATABLE READ
-- transaction it fails instead, with SQLSTATE 40001: retry it).
--
-- Parameters:
--   queue       queue name
--   group_name  only this group's dead letters (NULL: every group's)
--   ids         only these message ids (NULL: all)
-- Returns: how many dead letters were redriven
-- Errors: SL001, SL002, SL003
-- Tables: inserts into sluice.messages (engine 2: the queue's msg) and sluice.redrive
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
    n bigint;
BEGIN
    IF redrive.group_name IS NOT NULL THEN
        v_gid := (sluice._get_group(q.id, q.name, redrive.group_name)).id;
    END IF;
    v_slot := (SELECT ns.slot FROM sluice._slot_now(q.id) ns);
    -- Two statements that pass an array rather than one that joined the
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
    IF q.engine = 2 THEN
        -- (claimed and sent by the queue's copy, into its msg: v2_send.sql)
        IF NOT q.prioritized AND EXISTS (SELECT FROM sluice.dead_letter d
                                         WHERE d.id = ANY (v_dead) AND sluice._prioritized(d.priority, d.key)) THEN
            PERFORM sluice._mark_prioritized(q.id);   -- (receives look at the priority lane)
        END IF;
        PERFORM set_config('search_path', sluice._queue_path(q.id), true);
        RETURN e2_redrive(q, v_dead);
    END IF;
    -- Claimed first (a redrive row each, naming the id of the message it
    -- sends), then sent: a dead letter that a concurrent redrive claimed
    -- while this one waited for its lock conflicts and is not sent again
    -- (FOR UPDATE does not look at the redrive rows again: sent first, both
    -- redrives sent it). A message each, for its group only.
    WITH claimed AS (
        INSERT INTO sluice.redrive (dead_letter_id, redriven_at, message_id)
        SELECT u.id, clock_timestamp(), nextval(q.id_seq) FROM unnest(v_dead) WITH ORDINALITY AS u(id, ord)
        ORDER BY u.ord
        ON CONFLICT DO NOTHING
        RETURNING dead_letter_id, message_id
    )
    INSERT INTO sluice.messages (queue_id, slot, id, txid, sent_at, priority, attempt_base, target_group,
                                 origin_id, key, headers, body)
    SELECT q.id, v_slot, c.message_id, pg_current_xact_id(), d.sent_at, d.priority, 0, d.group_id,
           d.message_id, d.key, d.headers, d.body
    FROM claimed c
    JOIN sluice.dead_letter d ON d.id = c.dead_letter_id
    ORDER BY c.message_id;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

-- discard_dead_letters: drop dead letters for good: they are no longer
-- listed by dead_letters, counted by status's dead, or redriven. Either
-- every dead letter of one group, or those of the given message ids (of
-- one group, or of every group); not every group's at once without ids, so
-- that a forgotten argument cannot empty a queue's dead letters. A
-- discarded dead letter is recorded (sluice.redrive, message_id NULL) as
-- a redriven one is, and its row stays until its group or queue is
-- dropped: status's dead_lettered still counts it. A dead letter is
-- discarded or redriven once: a discard that meets one being redriven or
-- discarded by another waits for it, and then skips it if it committed (in
-- a REPEATABLE READ transaction it fails instead, with SQLSTATE 40001:
-- retry it). Both engines: dead letters live in the catalog.
--
-- Parameters:
--   queue       queue name
--   group_name  only this group's dead letters (NULL: every group's, with ids)
--   ids         only these message ids (NULL: all of group_name's; not empty)
-- Returns: how many dead letters were discarded
-- Errors: SL001, SL002, SL003, SL006 (neither group_name nor ids, or ids
--   empty or with a NULL)
-- Tables: inserts into sluice.redrive
CREATE OR REPLACE FUNCTION sluice.discard_dead_letters(queue text, group_name text DEFAULT NULL, ids bigint[] DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q sluice.queue := sluice._use_queue(discard_dead_letters.queue);
    v_gid int;
    n bigint;
BEGIN
    IF discard_dead_letters.group_name IS NOT NULL THEN
        v_gid := (sluice._get_group(q.id, q.name, discard_dead_letters.group_name)).id;
    ELSIF discard_dead_letters.ids IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SL006',
            MESSAGE = 'discard_dead_letters needs group_name or ids',
            HINT = 'Name the group whose dead letters to discard, or give the message ids.';
    END IF;
    IF cardinality(discard_dead_letters.ids) = 0 OR array_position(discard_dead_letters.ids, NULL) IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SL006',
            MESSAGE = format('ids must be message ids, got %s', discard_dead_letters.ids),
            HINT = 'Give at least one id, or NULL for all of the group''s dead letters.';
    END IF;
    -- Locked in id order, as redrive locks them (no deadlock between the
    -- two), then claimed: one that another redrive or discard claimed
    -- while this one waited conflicts and is not counted.
    WITH picked AS (
        SELECT d.id FROM sluice.dead_letter d
        WHERE d.queue_id = q.id AND (v_gid IS NULL OR d.group_id = v_gid)
          AND (discard_dead_letters.ids IS NULL OR d.message_id = ANY (discard_dead_letters.ids))
          AND NOT EXISTS (SELECT 1 FROM sluice.redrive r WHERE r.dead_letter_id = d.id)
        ORDER BY d.id
        FOR UPDATE OF d
    )
    INSERT INTO sluice.redrive (dead_letter_id, redriven_at, message_id)
    SELECT p.id, clock_timestamp(), NULL FROM picked p ORDER BY p.id
    ON CONFLICT DO NOTHING;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;
