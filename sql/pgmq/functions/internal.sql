-- Group: pgmq compatibility, name checks and internal helpers.
--
-- Errors are raised with PGMQ's texts (SQLSTATE P0001, as PGMQ's RAISE
-- EXCEPTION gives), so that clients matching on them keep working. A call
-- naming a queue that does not exist raises what PGMQ's query on the missing
-- table raises: 'relation "pgmq.q_<name>" does not exist' (42P01).

-- format_table_name: PGMQ's table name of a queue: prefix || '_' || the
-- lowercased queue name.
--
-- Parameters:
--   queue_name  the queue name
--   prefix      'q' or 'a'
-- Returns: the table (or view) name, without schema
-- Errors: P0001 'queue name contains invalid characters: $, ;, --, or \''
CREATE OR REPLACE FUNCTION pgmq.format_table_name(queue_name text, prefix text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF queue_name ~ '\$|;|--|''' THEN
        RAISE EXCEPTION 'queue name contains invalid characters: $, ;, --, or \''';
    END IF;
    RETURN lower(prefix || '_' || queue_name);
END
$$;

-- validate_queue_name: PGMQ's length check (its table names must fit in 63
-- bytes: "q_" and the longest suffix leave 47 characters).
--
-- Parameters:
--   queue_name  the queue name
-- Returns: nothing
-- Errors: P0001 'queue name is too long, maximum length is 47 characters'
CREATE OR REPLACE FUNCTION pgmq.validate_queue_name(queue_name text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF length(queue_name) > 47 THEN
        RAISE EXCEPTION 'queue name is too long, maximum length is 47 characters';
    END IF;
END
$$;

-- _queue: the sluice queue behind a pgmq queue.
--
-- Parameters:
--   p_name  the pgmq queue name (any case)
-- Returns: the sluice queue name (the lowercased pgmq name)
-- Errors: P0001 invalid characters; 42P01 'relation "pgmq.q_<name>" does not exist'
CREATE OR REPLACE FUNCTION pgmq._queue(p_name text)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q text;
BEGIN
    SELECT m.sluice_queue INTO q FROM pgmq.meta m WHERE m.sluice_queue = lower(p_name);
    IF q IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '42P01',
            MESSAGE = format('relation "pgmq.%s" does not exist', pgmq.format_table_name(p_name, 'q'));
    END IF;
    RETURN q;
END
$$;

-- _tbl: the name of a per-queue object of the layer.
--
-- Parameters:
--   p_queue  the sluice queue name (lowercase)
--   p_kind   'q' (view), 'a' (archive), 'r' (read log), 'd' (done log),
--            'n' (insert notification marker, see _mark_notify)
-- Returns: the object name, without schema
-- (No SET clause, so that it is inlined; qualified, so that the caller's
-- search_path does not matter.)
CREATE OR REPLACE FUNCTION pgmq._tbl(p_queue text, p_kind text)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE WHEN p_kind OPERATOR(pg_catalog.=) ANY (ARRAY['q', 'a'])
                THEN p_kind OPERATOR(pg_catalog.||) '_' OPERATOR(pg_catalog.||) p_queue
                ELSE '_sl_' OPERATOR(pg_catalog.||) p_kind OPERATOR(pg_catalog.||) '_' OPERATOR(pg_catalog.||) p_queue END
$$;

-- _is_queue: whether a pgmq queue exists, by the catalog: whether its view
-- q_<name> does (made by create, dropped by drop_queue, in the transactions
-- that add and remove its pgmq.meta row; PGMQ's own statements fail on the
-- missing q_<name> too). The sends' check: a catalog lookup costs ~10k
-- instructions, a query of pgmq.meta ~25k.
--
-- Parameters:
--   p_queue  the sluice queue name (lowercase), or NULL
-- Returns: true if the queue exists (false for NULL)
-- (No SET clause, so that it is inlined; qualified, so that the caller's
-- search_path does not matter.)
CREATE OR REPLACE FUNCTION pgmq._is_queue(p_queue text)
RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT CASE WHEN p_queue IS NOT NULL
                THEN pg_catalog.to_regclass(pg_catalog.format('pgmq.%I', pgmq._tbl(p_queue, 'q'))) END IS NOT NULL
$$;

-- _notifies: whether sends to a queue NOTIFY (enable_notify_insert is on),
-- by the catalog: whether its marker view _sl_n_<name> exists (see
-- _mark_notify). The sends' check, a catalog lookup (~10k instructions)
-- where a query of pgmq.notify_insert_throttle would cost ~25k.
--
-- Parameters:
--   p_queue  the sluice queue name (lowercase, not NULL)
-- Returns: true if enable_notify_insert is on for the queue
-- (No SET clause, so that it is inlined; qualified.)
CREATE OR REPLACE FUNCTION pgmq._notifies(p_queue text)
RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT pg_catalog.to_regclass(pg_catalog.format('pgmq.%I', pgmq._tbl(p_queue, 'n'))) IS NOT NULL
$$;

-- _notify_insert: NOTIFY a queue's insert channel, PGMQ's
-- 'pgmq.q_<queue_name>.INSERT' (queue_name as given to create), empty
-- payload. Called by send and send_batch when _notifies; no SET clause
-- (qualified).
--
-- Parameters:
--   p_queue  the sluice queue name
-- Returns: nothing
CREATE OR REPLACE FUNCTION pgmq._notify_insert(p_queue text)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM pg_catalog.pg_notify('pgmq.q_' OPERATOR(pg_catalog.||) m.queue_name OPERATOR(pg_catalog.||) '.INSERT', '')
       FROM pgmq.meta m WHERE m.sluice_queue OPERATOR(pg_catalog.=) p_queue;
END
$$;

-- _mark_notify: make a queue's insert notification marker match
-- pgmq.notify_insert_throttle: the view pgmq._sl_n_<name> (one column,
-- the channel) exists while the queue has a row there, so that a send
-- learns from the catalog whether to NOTIFY (_notifies). Run by
-- enable_notify_insert, disable_notify_insert, create and drop_queue
-- (under the queue's lock), and for every queue on every install
-- (refresh.sql), which makes the markers of queues from before them.
--
-- Parameters:
--   p_queue  the sluice queue name (NULL: nothing to do)
-- Returns: nothing
CREATE OR REPLACE FUNCTION pgmq._mark_notify(p_queue text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_name text;
BEGIN
    IF p_queue IS NULL THEN
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('pgmq.queue_' || p_queue));
    SELECT m.queue_name INTO v_name
      FROM pgmq.meta m JOIN pgmq.notify_insert_throttle t ON t.queue_name = m.queue_name
     WHERE m.sluice_queue = p_queue;
    IF v_name IS NOT NULL AND NOT pgmq._notifies(p_queue) THEN
        EXECUTE format('CREATE VIEW pgmq.%I AS SELECT %L::text AS channel', pgmq._tbl(p_queue, 'n'),
                       'pgmq.q_' || v_name || '.INSERT');
        EXECUTE format('COMMENT ON VIEW pgmq.%I IS %L', pgmq._tbl(p_queue, 'n'),
                       format('sluice: marks insert notifications on for the pgmq queue %s (send and send_batch NOTIFY this channel)', v_name));
    ELSIF v_name IS NULL AND pgmq._notifies(p_queue) THEN
        EXECUTE format('DROP VIEW pgmq.%I', pgmq._tbl(p_queue, 'n'));
    END IF;
END
$$;

-- _lease: the sluice lease that makes a message visible again at vt.
-- (No SET clause, so that it is inlined into the calling statement; it
-- runs under the pinned search_path of the functions that call it.)
--
-- Parameters:
--   p_vt  the visibility timeout, as a time
-- Returns: vt - now, at least 1 microsecond and at most 7 days (sluice's bounds)
CREATE OR REPLACE FUNCTION pgmq._lease(p_vt timestamptz)
RETURNS interval
LANGUAGE sql VOLATILE
AS $$
    SELECT least(greatest(coalesce(p_vt, clock_timestamp()) - clock_timestamp(), interval '1 microsecond'),
                 interval '7 days')
$$;

-- (gone: _side, whose lookup is _lookup's now)
DROP FUNCTION IF EXISTS pgmq._side(text, interval);

-- _lookup: what a read, delete, archive or set_vt needs, in one statement:
-- the sluice queue, the side slot of the current generation and whether a
-- rotation may be due (the generation is over a second old; _try_rotate
-- checks it against the sluice queue's rotate_interval). It reads only the
-- layer's tables: the functions run as the caller, who may not read
-- sluice's catalog (see _try_rotate). No row: no such queue.
--
-- Hot path: a set-returning SQL function without SET clause, so that the
-- planner inlines it into the caller's (cached) statement. Called by the
-- public functions, which pin search_path.
--
-- Parameters:
--   p_name  the pgmq queue name (any case)
-- Returns: (q, slot, due), one row or none
CREATE OR REPLACE FUNCTION pgmq._lookup(p_name text)
RETURNS TABLE (q text, slot smallint, due boolean)
LANGUAGE sql STABLE
AS $$
    SELECT m.sluice_queue, (g.gen % 2)::smallint, g.started_at < now() - interval '1 second'
      FROM pgmq.meta m
      LEFT JOIN LATERAL (SELECT s.gen, s.started_at FROM pgmq.side_generation s
                          WHERE s.sluice_queue = m.sluice_queue ORDER BY s.gen DESC LIMIT 1) g ON true
     WHERE m.sluice_queue = lower(p_name)
$$;

-- _fn: the name of a queue's copy of a template function (see _instantiate).
--
-- Parameters:
--   p_queue  the sluice queue name
--   p_kind   'deliver', 'complete' or 'set_vt'
-- Returns: the function name, without schema (at most 10 + 47 characters)
-- (No SET clause, so that it is inlined into the calling statement.)
CREATE OR REPLACE FUNCTION pgmq._fn(p_queue text, p_kind text)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT '_sl_' || CASE p_kind WHEN 'deliver' THEN 'read' WHEN 'complete' THEN 'done' ELSE 'setvt' END
           || '_' || p_queue
$$;

-- _instantiate: (re)create a queue's copies of the template functions
-- (pgmq._t_deliver, _t_complete, _t_set_vt), whose statements name the
-- queue's side tables, archive and view statically: PL/pgSQL caches their
-- plans, where dynamic SQL would plan every statement on every call. A
-- template names placeholders (pgmq._t_rlog, _t_dlog, _t_arch, _t_view);
-- a copy names the queue's objects instead. Run by _create and, for every
-- queue, on every install (refresh.sql), so that an upgrade reaches every
-- queue.
--
-- Parameters:
--   p_queue  the sluice queue name
-- Returns: nothing
CREATE OR REPLACE FUNCTION pgmq._instantiate(p_queue text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    f record;
    src text;
BEGIN
    FOR f IN SELECT p.oid, substr(p.proname, 4) AS kind FROM pg_proc p
              WHERE p.pronamespace = 'pgmq'::regnamespace AND p.proname IN ('_t_deliver', '_t_complete', '_t_set_vt')
              ORDER BY p.proname LOOP
        src := pg_get_functiondef(f.oid);
        src := replace(src, 'pgmq._t_' || f.kind || '(', format('pgmq.%I(', pgmq._fn(p_queue, f.kind)));
        src := replace(src, 'pgmq._t_rlog', format('pgmq.%I', pgmq._tbl(p_queue, 'r')));
        src := replace(src, 'pgmq._t_dlog', format('pgmq.%I', pgmq._tbl(p_queue, 'd')));
        src := replace(src, 'pgmq._t_arch', format('pgmq.%I', pgmq._tbl(p_queue, 'a')));
        src := replace(src, 'pgmq._t_view', format('pgmq.%I', pgmq._tbl(p_queue, 'q')));
        -- a template whose signature changed could not replace its old copy
        IF EXISTS (SELECT 1 FROM pg_proc p WHERE p.pronamespace = 'pgmq'::regnamespace
                                             AND p.proname = pgmq._fn(p_queue, f.kind)
                                             AND (pg_get_function_identity_arguments(p.oid)
                                                      <> pg_get_function_identity_arguments(f.oid)
                                                  OR pg_get_function_result(p.oid) <> pg_get_function_result(f.oid))) THEN
            EXECUTE format('DROP FUNCTION pgmq.%I', pgmq._fn(p_queue, f.kind));
        END IF;
        EXECUTE src;   -- CREATE OR REPLACE
        -- (a new function may be executed by PUBLIC: nobody but the owner
        -- calls the copies, from the public functions)
        EXECUTE format('REVOKE ALL ON FUNCTION pgmq.%I FROM PUBLIC', pgmq._fn(p_queue, f.kind));
    END LOOP;
END
$$;

-- _make_view: (re)create a queue's view q_<name> over the storage of its
-- sluice queue's engine: each message in sluice's storage once, under its
-- msg_id (sluice's message id, which a retry keeps), with read_ct, vt and
-- last_read_at from its newest row in _sl_r_<name> (none: 0, when it is
-- due, NULL), less the messages with a tombstone in _sl_d_<name>.
--   engine 1: the queue's rows of sluice.messages, less the retry copies
--             (target_group set), as the view always read it;
--   engine 2: sluice_q<id>.msg: every row without orig, and of the retry
--             and redrive copies (orig = the message's id) the oldest of
--             each message whose own row is no longer stored (a slot
--             reclaimed while its retry waits);
--   engine 2 with a predecessor (sluice.upgrade_queue of an engine 1
--             queue, until every group drained it): both, the
--             predecessor's rows (engine 1's form) less those of a message
--             with a copy in the new storage (a dead letter redriven), whose
--             copy shows instead.
-- Called by _create, and by sluice.upgrade_queue and sluice.maintain (an
-- upgrade begun, finished: sluice._pgmq_view); the view of a queue
-- made by an earlier version is otherwise not remade (it is the engine 1
-- form).
--
-- Parameters:
--   p_queue  the sluice queue name (the pgmq queue exists in sluice.queue)
-- Returns: nothing
-- Errors: P0002 no such sluice queue (an internal call: _create made it)
CREATE OR REPLACE FUNCTION pgmq._make_view(p_queue text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    sq record;
    stored text;
BEGIN
    SELECT x.id, x.engine, x.predecessor INTO STRICT sq FROM sluice.queue x WHERE x.name = p_queue;
    IF sq.engine = 1 THEN
        stored := format('SELECT m.id, m.sent_at, m.deliver_at AS due, m.body, m.headers FROM sluice.messages m
                           WHERE m.queue_id = %s AND m.target_group IS NULL', sq.id);
    ELSE
        stored := format('SELECT m.id, m.sent_at, m.due, m.body, m.headers FROM %1$I.msg m WHERE m.orig IS NULL
                          UNION ALL
                          SELECT c.orig, c.sent_at, c.due, c.body, c.headers
                            FROM (SELECT DISTINCT ON (m.orig) m.orig, m.sent_at, m.due, m.body, m.headers
                                    FROM %1$I.msg m WHERE m.orig IS NOT NULL ORDER BY m.orig, m.id) c
                           WHERE NOT EXISTS (SELECT 1 FROM %1$I.msg o WHERE o.id = c.orig AND o.orig IS NULL)',
                         sluice._qschema(sq.id));
        IF sq.predecessor IS NOT NULL THEN
            stored := stored || format('
                          UNION ALL
                          SELECT m.id, m.sent_at, m.deliver_at, m.body, m.headers FROM sluice.messages m
                           WHERE m.queue_id = %1$s AND m.target_group IS NULL
                             AND NOT EXISTS (SELECT 1 FROM %2$I.msg c WHERE c.orig = m.id)',
                                       sq.predecessor, sluice._qschema(sq.id));
        END IF;
    END IF;
    EXECUTE format($ddl$
        CREATE OR REPLACE VIEW pgmq.%1$I WITH (security_barrier) AS
        SELECT m.id AS msg_id,
               coalesce(r.read_ct, 0) AS read_ct,
               m.sent_at AS enqueued_at,
               r.read_at AS last_read_at,
               coalesce(r.vt, m.due, m.sent_at) AS vt,
               m.body AS message,
               m.headers
          FROM (%2$s) m
          LEFT JOIN LATERAL (SELECT x.read_ct, x.read_at, x.vt FROM pgmq.%3$I x
                              WHERE x.msg_id = m.id ORDER BY x.at DESC LIMIT 1) r ON true
         WHERE NOT EXISTS (SELECT 1 FROM pgmq.%4$I d WHERE d.msg_id = m.id);
        COMMENT ON VIEW pgmq.%1$I IS 'sluice: read-only view of the pgmq queue %5$s (writes are not supported)';
        $ddl$,
        pgmq._tbl(p_queue, 'q'), stored, pgmq._tbl(p_queue, 'r'), pgmq._tbl(p_queue, 'd'), p_queue);
END
$$;

-- _rotate: start a new side generation for a queue when the slot it would
-- write (the older one) holds nothing still needed: no delivery whose vt has
-- not passed of a message not completed, and no completed message still in
-- sluice's storage (so q_<name> would not show it again and a read would
-- not deliver it): for a queue of engine 1 its rows of sluice.messages, of
-- engine 2 the rows of sluice_q<id>.msg (a retry copy counts for the
-- message it retries, orig), and during an upgrade both (the predecessor's
-- rows of sluice.messages). Then that slot is truncated and becomes the
-- current one. Skips (returns false) when another session holds a lock on
-- the slot, or rotates already.
--
-- Called by a read, under the read's settings (see _deliver): its own SET
-- clauses give its scans of the old slot back their defaults, and make its
-- joins hash (or merge) joins, linear in the tables' sizes whatever the
-- statistics of a slot just truncated say (sluice's storage has no index
-- by message id).
--
-- Parameters:
--   p_queue  the sluice queue name
-- Returns: true if a new generation started
CREATE OR REPLACE FUNCTION pgmq._rotate(p_queue text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = auto
SET enable_seqscan = on
SET enable_nestloop = off
AS $$
DECLARE
    g bigint;
    old smallint;
    sq record;
    r_old text;
    d_old text;
    busy boolean;
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtext('pgmq.rotate_' || p_queue)) THEN
        RETURN false;
    END IF;
    SELECT s.gen INTO g FROM pgmq.side_generation s WHERE s.sluice_queue = p_queue ORDER BY s.gen DESC LIMIT 1;
    IF g IS NULL THEN
        RETURN false;
    END IF;
    old := ((g + 1) % 2)::smallint;
    r_old := pgmq._tbl(p_queue, 'r') || '_' || old;
    d_old := pgmq._tbl(p_queue, 'd') || '_' || old;
    SELECT x.id, x.engine, x.predecessor INTO sq FROM sluice.queue x WHERE x.name = p_queue;
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM pgmq.%I r WHERE r.vt >= clock_timestamp()
                                     AND NOT EXISTS (SELECT 1 FROM pgmq.%I d WHERE d.msg_id = r.msg_id))',
                   r_old, pgmq._tbl(p_queue, 'd')) INTO busy;
    IF NOT busy AND sq.engine = 2 THEN
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I.msg m WHERE coalesce(m.orig, m.id) IN (SELECT d.msg_id FROM pgmq.%I d))',
                       sluice._qschema(sq.id), d_old) INTO busy;
    END IF;
    IF NOT busy AND (sq.engine = 1 OR sq.predecessor IS NOT NULL) THEN
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM pgmq.%I d JOIN sluice.messages m ON m.queue_id = $1 AND m.id = d.msg_id)',
                       d_old) INTO busy USING coalesce(sq.predecessor, sq.id);
    END IF;
    IF busy THEN
        RETURN false;
    END IF;
    BEGIN
        EXECUTE format('LOCK TABLE pgmq.%I, pgmq.%I IN ACCESS EXCLUSIVE MODE NOWAIT', r_old, d_old);
    EXCEPTION WHEN lock_not_available THEN
        RETURN false;
    END;
    EXECUTE format('TRUNCATE pgmq.%I, pgmq.%I', r_old, d_old);
    INSERT INTO pgmq.side_generation (sluice_queue, gen, started_at) VALUES (p_queue, g + 1, clock_timestamp());
    RETURN true;
END
$$;
