-- Group: upgrading a queue to engine 2
--
-- sluice.upgrade_queue(name) replaces a queue of engine 1 by a queue of
-- engine 2 of the same name, options and groups, in one short transaction,
-- without copying messages: the old queue is renamed out of the way (to
-- '<id>:engine1', a name no call can give) and becomes the new one's
-- predecessor. Sends go to the new queue from then on. A group receives what
-- the predecessor still holds for it first, with engine 1's semantics, and
-- the new queue's messages only once it has nothing there ready or in
-- flight, so that the key order and the order of the backlog hold across the
-- upgrade. Acks, nacks and extends of a receipt of either engine reach it.
-- Once every group has nothing left in the predecessor (nothing ready, in
-- flight or delayed), sluice.maintain() drops it and moves its dead letters
-- across. docs/operations.md, "Upgrading a queue to engine 2".

-- upgrade_queue: replace a queue of engine 1 by one of engine 2 (see above).
-- Takes the queue's lock exclusively first, as drop_queue does: it waits for
-- the transactions using the queue (in short tries between which the
-- queue's calls go on, once one has held it for a second; for lock_timeout
-- at most when set: sluice._lock_queue_exclusive), and calls that come
-- while it has the lock wait for it (a moment), then go on with the new
-- queue.
-- A queue of the pgmq layer is upgraded the same way, and its view
-- (pgmq.q_<name>) made again over both storages (pgmq._make_view); the
-- layer's side tables and functions name the queue, not its storage, and
-- stay.
--
-- Parameters:
--   queue  name
-- Returns: true if the queue was upgraded, false if it is of engine 2 already
-- Errors: SL001 invalid_name, SL002 undefined_queue, SL011 not_supported (a
--   queue still draining an earlier upgrade), 55P03 lock_not_available (the
--   queue stayed in use for lock_timeout; or a queue of
--   the pgmq layer whose view another transaction holds for more than
--   500 ms: one that read it and is still open; nothing changed either way)
-- Calls: _lock_queue_exclusive, create_queue, create_group, _pgmq_view, pgmq._make_view
CREATE OR REPLACE FUNCTION sluice.upgrade_queue(queue text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET client_min_messages = warning
AS $$
DECLARE
    old sluice.queue;
    v_new int;
    g sluice.consumer_group;
    v_view regclass;   -- its pgmq view (NULL: not a queue of the layer)
    v_timeout text;
    v_done boolean;
BEGIN
    PERFORM sluice._check_name('queue', upgrade_queue.queue);
    PERFORM sluice._lock_queue_exclusive(upgrade_queue.queue, 'upgrade_queue');
    old := sluice._get_queue(upgrade_queue.queue);
    IF old.engine = 2 THEN
        RETURN false;
    END IF;
    -- A queue of the pgmq layer: its view, locked now, before anything
    -- else. A transaction that read the view holds it, and no lock on the
    -- queue: waited for 500 ms at most, as this holds the queue's lock
    -- (every call on the queue waits meanwhile), and less than the default
    -- deadlock_timeout: when that reader then calls on the queue, this has
    -- waited longer and gives up first, and the reader's call goes on.
    v_view := sluice._pgmq_view(old.name);
    IF v_view IS NOT NULL THEN
        v_timeout := current_setting('lock_timeout');
        v_done := set_config('lock_timeout', '500ms', true) IS NULL;
        BEGIN
            -- (ALTER VIEW, as the view is made: it locks the view alone,
            -- where LOCK TABLE on a view locks every table it reads too,
            -- which the calls on other queues use)
            EXECUTE format('ALTER VIEW %s SET (security_barrier = true)', v_view);
        EXCEPTION WHEN lock_not_available THEN
            RAISE EXCEPTION USING ERRCODE = '55P03',
                MESSAGE = format('the view %s of queue %s is held by another transaction', v_view,
                                 quote_literal(old.name)),
                HINT = 'A transaction that read the view holds it until it ends. Retry once it has; the queue was not changed.';
        END;
        v_done := set_config('lock_timeout', v_timeout, true) IS NULL;
    END IF;
    PERFORM pg_advisory_xact_lock(sluice._lock_ns('maint'), old.id);
    PERFORM pg_advisory_xact_lock(sluice._lock_ns('cut'), old.id);
    UPDATE sluice.queue SET name = old.id || ':engine1' WHERE id = old.id;
    PERFORM sluice.create_queue(old.name, (old.options - 'default_group') || '{"engine": 2, "default_group": false}');
    SELECT q.id INTO STRICT v_new FROM sluice.queue q WHERE q.name = old.name;
    UPDATE sluice.queue SET predecessor = old.id WHERE id = v_new;
    -- ids go on from the old queue's (no id is given twice)
    PERFORM setval((SELECT q.id_seq FROM sluice.queue q WHERE q.id = v_new),
                   greatest(1, (SELECT last_value FROM pg_sequences s
                                WHERE format('%I.%I', s.schemaname, s.sequencename)::regclass = old.id_seq)));
    FOR g IN SELECT * FROM sluice.consumer_group cg WHERE cg.queue_id = old.id ORDER BY cg.id LOOP
        PERFORM sluice.create_group(old.name, g.name, 'earliest', g.ttl);
    END LOOP;
    PERFORM sluice._move_dead_letters(old.id, v_new);
    IF v_view IS NOT NULL THEN
        PERFORM pgmq._make_view(old.name);   -- (over both storages; locked above)
    END IF;
    RETURN true;
END
$$;

-- _move_dead_letters: give a queue's dead letters to another queue's groups
-- of the same names (an upgrade's predecessor's to its successor).
--
-- Parameters:
--   p_from, p_to  queue ids
CREATE OR REPLACE FUNCTION sluice._move_dead_letters(p_from int, p_to int)
RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    UPDATE sluice.dead_letter d SET queue_id = p_to, group_id = n.id
    FROM sluice.consumer_group o JOIN sluice.consumer_group n ON n.queue_id = p_to AND n.name = o.name
    WHERE d.queue_id = p_from AND o.id = d.group_id;
$$;

-- _pred_group: the group of the same name in a queue's predecessor, if it
-- has not drained it.
--
-- Parameters:
--   q  the queue (predecessor set)
--   g  its group
-- Returns: the predecessor's group row, or NULL
CREATE OR REPLACE FUNCTION sluice._pred_group(q sluice.queue, g sluice.consumer_group)
RETURNS sluice.consumer_group
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT pg FROM sluice.consumer_group pg WHERE pg.queue_id = q.predecessor AND pg.name = g.name AND NOT pg.drained
$$;

-- _pred_receive: sluice.receive's first step on a queue with a predecessor:
-- what the predecessor holds for the group (engine 1's receive, with the
-- acks passed), then whether the new queue may deliver to the group: only
-- once the predecessor has nothing ready or in flight for it (then, if
-- nothing is delayed there either, the group is marked drained).
--
-- Parameters: as sluice.receive (q and g looked up, lease resolved)
-- Returns: the messages leased (as sluice.receive); a last row with id NULL
--   when the new queue may deliver
-- Calls: the predecessor's e_receive and e_queue_status
CREATE OR REPLACE FUNCTION sluice._pred_receive(q sluice.queue, g sluice.consumer_group, max_messages int,
                                               p_lease interval, p_consumer text, p_ack text[])
RETURNS SETOF sluice.message
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    pg sluice.consumer_group := sluice._pred_group(q, g);
    pq sluice.queue;
    n int;
    st sluice.queue_status;
    v_open sluice.message;   -- all NULL: the new queue may deliver
BEGIN
    IF pg.id IS NULL THEN
        RETURN NEXT v_open;   -- (id NULL)
        RETURN;
    END IF;
    SELECT * INTO STRICT pq FROM sluice.queue x WHERE x.id = q.predecessor;
    -- (engine 1's entry points run in their caller's path and settings)
    PERFORM set_config('search_path', sluice._queue_path(pq.id), true);
    RETURN QUERY EXECUTE 'SELECT * FROM e_receive($1, $2, $3, $4, $5, $6)'
        USING pq, pg, max_messages, p_lease, p_consumer, p_ack;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n >= max_messages THEN
        RETURN;
    END IF;
    EXECUTE format('SELECT * FROM %I.e_queue_status($1) s WHERE s.group_name = $2', sluice._qschema(pq.id))
        INTO st USING pq, pg.name;
    IF st.ready = 0 AND st.in_flight = 0 AND coalesce(st.waiting, 0) = 0 AND NOT coalesce(st.estimated, false) THEN
        IF st.delayed = 0 THEN
            -- (SKIP LOCKED: not waiting for another receive that marks it
            -- too; that one's upkeep may be waiting for the queue's lock,
            -- exclusively, which this receive holds shared: _finish_upgrade)
            UPDATE sluice.consumer_group SET drained = true
            WHERE id = (SELECT x.id FROM sluice.consumer_group x WHERE x.id = pg.id AND NOT x.drained
                        FOR UPDATE SKIP LOCKED);
        END IF;
        RETURN NEXT v_open;   -- (id NULL)
    END IF;
END
$$;

-- _pred_complete: ack, nack or extend on a queue with a predecessor: the
-- receipts of the predecessor's deliveries reach them there (a receipt of
-- the other engine's counts nothing in either).
--
-- Parameters:
--   q, g        the queue (predecessor set) and group
--   p_what      'ack', 'nack' or 'extend'
--   p_receipts  receipts (nack: one)
--   p_arg       extend: the lease; nack: the delay
--   p_error     nack: the error
-- Returns: how many were completed or extended (nack: 1 or 0)
-- Calls: the predecessor's e_ack, e_nack, e_extend
CREATE OR REPLACE FUNCTION sluice._pred_complete(q sluice.queue, g sluice.consumer_group, p_what text,
                                                p_receipts text[], p_arg interval, p_error text)
RETURNS int
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    pg sluice.consumer_group;
    pq sluice.queue;
    n int;
    ok boolean;
BEGIN
    SELECT * INTO pg FROM sluice.consumer_group x WHERE x.queue_id = q.predecessor AND x.name = g.name;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    SELECT * INTO STRICT pq FROM sluice.queue x WHERE x.id = q.predecessor;
    PERFORM set_config('search_path', sluice._queue_path(pq.id), true);
    IF p_what = 'ack' THEN
        EXECUTE 'SELECT e_ack($1, $2)' INTO n USING pg.id, p_receipts;
    ELSIF p_what = 'extend' THEN
        EXECUTE 'SELECT e_extend($1, $2, $3)' INTO n USING pg.id, p_receipts, p_arg;
    ELSE
        EXECUTE 'SELECT e_nack($1, $2, $3, $4, $5)' INTO ok USING pq, pg, p_receipts[1], p_arg, p_error;
        n := CASE WHEN ok THEN 1 ELSE 0 END;
    END IF;
    RETURN coalesce(n, 0);
END
$$;

-- _finish_upgrade: drop a queue's predecessor once every group has drained
-- it (sluice.maintain), moving the dead letters it made meanwhile: first
-- marks drained the groups with nothing left there (by its status), then,
-- if none is left and none was marked now, takes the queue's lock
-- exclusively within 50 ms (else leaves it for a later call). (A call that
-- marked groups holds their rows' locks, which calls holding the queue's
-- lock shared may wait for: it does not wait for that lock too. Nor does
-- one whose transaction holds a lock that receives holding the queue's
-- lock shared may wait for: an advisory lock other than the queues' and
-- the upkeeps' (a lane's, taken by the receive this upkeep runs in, of
-- either engine; a cut lock, after a rotation), or a table held ACCESS
-- EXCLUSIVE (a truncated slot's leaves, after a reclaim): it only tries
-- the lock.) What it drops then, and the pgmq layer's view it makes again,
-- it waits for at most 50 ms, else it leaves it all for a later call; and
-- it does not try while a transaction open for a second or more holds the
-- pgmq view. Any other error of that part is a WARNING, and the session
-- tries again a minute later (it runs inside receives); a finish left undone
-- releases the queue's lock. One that finishes holds it until its
-- transaction ends: a receive inside a longer transaction that finishes an
-- upgrade holds every call on the queue until it commits.
--
-- Parameters:
--   q  the queue (predecessor set)
-- Returns: whether the predecessor was dropped
-- Calls: _drop_storage, _move_dead_letters, _pgmq_view, pgmq._make_view
CREATE OR REPLACE FUNCTION sluice._finish_upgrade(q sluice.queue)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET client_min_messages = warning
AS $$
DECLARE
    pq sluice.queue;
    v_marked bigint;
    v_view regclass;   -- its pgmq view (NULL: not a queue of the layer)
    v_timeout text;
    v_done boolean;
BEGIN
    -- Not again soon after a try that failed (below); not while an upgrade,
    -- a drop or another finish holds the queue's lock exclusively (else
    -- shared, as every call on the queue holds it: sluice.maintain() does
    -- not); and not when a finish committed since q was read.
    IF extract(epoch FROM clock_timestamp())
       < coalesce(nullif(current_setting('sluice.finish_after_' || q.id, true), ''), '0')::float8
       OR NOT pg_try_advisory_xact_lock_shared(sluice._lock_ns('queue'), hashtext(q.name)) THEN
        RETURN false;
    END IF;
    SELECT p.* INTO pq FROM sluice.queue x JOIN sluice.queue p ON p.id = x.predecessor WHERE x.id = q.id;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    -- the groups that have nothing left there (a group whose consumers
    -- stopped is marked here, not by a receive); a group another
    -- transaction is marking is skipped, not waited for (that one may be a
    -- receive waiting for the queue's lock, which this holds shared: its
    -- mark shows once it commits)
    EXECUTE format('UPDATE sluice.consumer_group g SET drained = true
                    WHERE g.id IN (SELECT x.id FROM sluice.consumer_group x JOIN %I.e_queue_status($1) s
                                   ON x.name = s.group_name
                                   WHERE x.queue_id = $1.id AND NOT x.drained AND NOT s.estimated AND s.ready = 0
                                     AND s.in_flight = 0 AND s.delayed = 0 AND coalesce(s.waiting, 0) = 0
                                   FOR UPDATE OF x SKIP LOCKED)',
                   sluice._qschema(pq.id)) USING pq;
    GET DIAGNOSTICS v_marked = ROW_COUNT;
    IF v_marked > 0
       OR EXISTS (SELECT 1 FROM sluice.consumer_group pg WHERE pg.queue_id = pq.id AND NOT pg.drained) THEN
        RETURN false;
    END IF;
    -- Not while a transaction open for a second or more holds the pgmq
    -- layer's view of the queue (one that read it and stays open, holding
    -- the old storage it read too): the drop below would wait for it, so
    -- every try would hold the queue's lock for nothing. (Only the view: the
    -- queue's own calls lock the old storage too, acks of drained groups
    -- among them, and must not keep the finish off. pg_stat_activity shows
    -- other roles' transactions only to a role that may read all
    -- statistics: without, the bounded waits below remain.)
    v_view := sluice._pgmq_view(q.name);
    IF v_view IS NOT NULL
       AND EXISTS (SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                   WHERE l.locktype = 'relation' AND l.pid <> pg_backend_pid() AND l.relation = v_view
                     AND a.xact_start < clock_timestamp() - interval '1 second') THEN
        RETURN false;
    END IF;
    -- The queue's lock, then the rest, under a lock_timeout of 50 ms: a
    -- transaction that holds no lock on the queue may hold locks the drop
    -- needs (one that read the pgmq layer's view pgmq.q_<name> while the
    -- upgrade ran, its tables among them, and stays open). This holds the
    -- queue's lock, for which every call on the queue would wait meanwhile:
    -- it leaves the finish, all of it undone and that lock released (a
    -- subtransaction's), for a later call instead.
    v_timeout := current_setting('lock_timeout');
    v_done := set_config('lock_timeout', '50ms', true) IS NULL;
    BEGIN
        -- (a transaction that holds a lock receives may wait for, holding the
        -- queue's lock shared, only tries it: see the header)
        IF NOT (CASE WHEN EXISTS (SELECT 1 FROM pg_locks l
                                  WHERE l.pid = pg_backend_pid()
                                    AND CASE l.locktype
                                        WHEN 'advisory' THEN l.classid NOT IN (sluice._lock_ns('queue')::oid,
                                                                               sluice._lock_ns('maint')::oid)
                                        WHEN 'relation' THEN l.mode = 'AccessExclusiveLock'
                                        ELSE false END)
                     THEN pg_try_advisory_xact_lock(sluice._lock_ns('queue'), hashtext(q.name))
                     ELSE sluice._xact_lock_within(sluice._lock_ns('queue'), hashtext(q.name), '50ms') END) THEN
            RAISE EXCEPTION USING ERRCODE = 'lock_not_available';   -- (left for a later call: below)
        END IF;
        PERFORM pg_advisory_xact_lock(sluice._lock_ns('maint'), pq.id);
        PERFORM sluice._move_dead_letters(pq.id, q.id);
        UPDATE sluice.queue SET predecessor = NULL WHERE id = q.id;
        DELETE FROM sluice.queue WHERE id = pq.id;
        EXECUTE format('DROP SEQUENCE %s', pq.id_seq);
        PERFORM sluice._drop_storage(pq.id);
        IF v_view IS NOT NULL THEN
            PERFORM pgmq._make_view(q.name);   -- (over the new storage alone)
        END IF;
    EXCEPTION WHEN lock_not_available THEN
        v_done := set_config('lock_timeout', v_timeout, true) IS NULL;
        RETURN false;
    WHEN OTHERS THEN
        -- (anything else, as a pgmq view whose owner changed: the upkeep
        -- runs inside receives, which must not fail for it; said here, and
        -- tried again by this session a minute later, not at every upkeep)
        v_done := set_config('lock_timeout', v_timeout, true) IS NULL;
        v_done := set_config('sluice.finish_after_' || q.id, (extract(epoch FROM clock_timestamp()) + 60)::text,
                             false) IS NULL;
        RAISE WARNING USING MESSAGE = format('sluice: the upgrade of queue %s could not finish: %s (SQLSTATE %s)',
                                             quote_literal(q.name), SQLERRM, SQLSTATE),
                            HINT = 'The queue keeps working with its old storage; this session tries again in a minute.';
        RETURN false;
    END;
    v_done := set_config('lock_timeout', v_timeout, true) IS NULL;
    RETURN true;
END
$$;

-- _pgmq_view: the pgmq layer's view of a queue (pgmq.q_<name>: pgmq._tbl),
-- which an upgrade makes again over the storage the queue has (pgmq._make_view):
-- both engines' once it began, engine 2's alone once it finished.
--
-- Parameters:
--   p_name  the queue
-- Returns: the view; NULL when the queue does not belong to the layer, or
--   the layer is not installed
CREATE OR REPLACE FUNCTION sluice._pgmq_view(p_name text)
RETURNS regclass
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF to_regclass('pgmq.meta') IS NULL THEN
        RETURN NULL;
    END IF;
    RETURN (SELECT to_regclass(format('pgmq.%I', pgmq._tbl(m.sluice_queue, 'q')))
            FROM pgmq.meta m WHERE m.sluice_queue = p_name);
END
$$;

-- _pred_status: sluice.status of a queue with a predecessor: the new
-- queue's rows, with what the predecessor still holds for each group added
-- (ready, delayed, in flight, waiting, lag, dead letters; the oldest age).
--
-- Parameters:
--   q  the queue (predecessor set)
-- Returns: SETOF sluice.queue_status
-- Calls: both queues' e_queue_status
CREATE OR REPLACE FUNCTION sluice._pred_status(q sluice.queue)
RETURNS SETOF sluice.queue_status
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s sluice.queue_status;
    p sluice.queue_status;
    pq sluice.queue;
    v_old sluice.queue_status[];
BEGIN
    SELECT * INTO STRICT pq FROM sluice.queue x WHERE x.id = q.predecessor;
    EXECUTE format('SELECT array_agg(s) FROM %I.e_queue_status($1) s', sluice._qschema(pq.id)) INTO v_old USING pq;
    FOR s IN EXECUTE format('SELECT * FROM %I.e_queue_status($1)', sluice._qschema(q.id)) USING q LOOP
        SELECT * INTO p FROM unnest(v_old) o WHERE o.group_name = s.group_name;
        IF FOUND THEN
            s.ready := s.ready + p.ready;
            s.delayed := s.delayed + p.delayed;
            s.in_flight := s.in_flight + p.in_flight;
            s.waiting := coalesce(s.waiting, 0) + coalesce(p.waiting, 0);
            s.lag := s.lag + p.lag;
            s.dead := s.dead + p.dead;
            s.dead_lettered := s.dead_lettered + p.dead_lettered;
            s.oldest_pending_age := greatest(s.oldest_pending_age, p.oldest_pending_age);
        END IF;
        RETURN NEXT s;
    END LOOP;
END
$$;
