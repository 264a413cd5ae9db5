-- Group: per-queue storage (internal)
--
-- Each queue owns a schema sluice_q<id> holding its data tables, each
-- partitioned by slot (0 to the queue's slots - 1), and a copy of every engine function of schema
-- sluice_tmpl. A copy differs from its template only in its search_path, so
-- its statements name the queue's own tables statically: PL/pgSQL caches
-- their plans, and no statement plans over other queues' partitions.

-- _qschema: the schema of a queue. No SET search_path, so that callers
-- inline it (a function with SET clauses is called, ~30 us a time on every
-- receive and ack); its one operator is schema-qualified instead.
CREATE OR REPLACE FUNCTION sluice._qschema(p_queue_id int)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT 'sluice_q' OPERATOR(pg_catalog.||) p_queue_id::pg_catalog.text
$$;

-- _queue_path: the search_path a queue's engine functions run with: the
-- queue's schema first. The entry points have it as their SET clause
-- (_instantiate), and the public API sets it (set_config, local to the
-- calling function, whose own SET clause restores it) before it calls an
-- entry point by its bare name: a static call, whose plan PL/pgSQL keeps
-- and makes again only when the path (the queue) changes, where a dynamic
-- EXECUTE was parsed and planned on every call.
CREATE OR REPLACE FUNCTION sluice._queue_path(p_queue_id int)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT pg_catalog.quote_ident(sluice._qschema(p_queue_id)) OPERATOR(pg_catalog.||) ', pg_catalog, pg_temp'
$$;

-- _slot_tables: the slot-partitioned tables of a queue and whether their
-- slots are UNLOGGED (leases and cursors: not needed after a crash).
CREATE OR REPLACE FUNCTION sluice._slot_tables()
RETURNS TABLE (name text, unlogged boolean)
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    VALUES ('messages', false), ('batches', false), ('deliveries', true),
           ('acks', false), ('group_states', true), ('checkpoints', false), ('dedup', false),
           ('keyed', false), ('prio', false), ('runs', true), ('run_acks', false)
$$;

-- _runs_ddl: the statements that create a queue's runs and run_acks
-- tables (engine_runs.sql), without their slot partitions: for new queues
-- (_create_storage) and for those made before runs (migration 0010).
--
-- * runs (UNLOGGED, like deliveries): one row per run a receive leased:
--   the lane's positions pos..last_pos, attempt 1, under one token;
-- * run_acks: one row per run an ack completed whole.
CREATE OR REPLACE FUNCTION sluice._runs_ddl(p_schema text)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT format($ddl$
        CREATE TABLE %1$I.runs (
            slot         smallint NOT NULL,
            group_id     int NOT NULL,
            lane         smallint NOT NULL,
            pos          bigint NOT NULL,
            last_pos     bigint NOT NULL,
            token        bigint NOT NULL,
            expires_at   timestamptz NOT NULL,
            delivered_at timestamptz NOT NULL,
            consumer     text
        ) PARTITION BY LIST (slot);
        CREATE INDEX ON %1$I.runs (group_id, pos);
        CREATE INDEX ON %1$I.runs (group_id, lane, expires_at);
        CREATE TABLE %1$I.run_acks (
            slot     smallint NOT NULL,
            group_id int NOT NULL,
            pos      bigint NOT NULL,
            last_pos bigint NOT NULL,
            acked_at timestamptz NOT NULL,
            PRIMARY KEY (group_id, pos, slot)
        ) PARTITION BY LIST (slot);
    $ddl$, p_schema)
$$;

-- _create_storage: create the schema, tables and functions of a queue.
--
-- The queue's messages table is made on its own, then attached to
-- sluice.messages: ATTACH PARTITION takes SHARE UPDATE EXCLUSIVE on the
-- parent, which lets sends and receives of every other queue go on (CREATE
-- TABLE ... PARTITION OF would take ACCESS EXCLUSIVE, and wait for every
-- open transaction that sent to any queue while they all queued behind it).
--
-- Parameters:
--   p_queue_id  queue id
-- Tables: creates schema sluice_q<id>: messages (a partition of
--   sluice.messages), batches, deliveries, acks, group_states, checkpoints,
--   dedup, keyed, prio, runs, run_acks, each with 4 slot partitions
-- Calls: sluice._runs_ddl, sluice._v2_dedup_ddl (the dedup table, engine 2's
--   too), sluice._slot_tables, sluice._instantiate
CREATE OR REPLACE FUNCTION sluice._create_storage(p_queue_id int)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    sch constant text := sluice._qschema(p_queue_id);
    t record;
    s int;
BEGIN
    EXECUTE format('CREATE SCHEMA %I', sch);
    EXECUTE format('CREATE TABLE %I.messages (LIKE sluice.messages INCLUDING DEFAULTS) PARTITION BY LIST (slot)', sch);
    EXECUTE format('ALTER TABLE %I.messages ADD CHECK (queue_id = %s)', sch, p_queue_id);   -- attach without a scan
    EXECUTE format($ddl$
        CREATE TABLE %1$I.batches (
            slot      smallint NOT NULL,
            batch_no  bigint NOT NULL,
            first_pos bigint NOT NULL,
            last_pos  bigint NOT NULL,
            done      boolean NOT NULL,
            res_phase smallint,
            res_due   timestamptz,
            res_txid  xid8,
            res_id    bigint,
            cut_at    timestamptz NOT NULL,
            prev_t    timestamptz NOT NULL,
            t         timestamptz NOT NULL,
            prev_snap pg_snapshot NOT NULL,
            snap      pg_snapshot NOT NULL,
            ids       bigint[] NOT NULL,
            txids     xid8[] NOT NULL,
            slots     smallint[] NOT NULL,
            targets   int[],
            keys      bigint[],   -- key hash per position (NULL: no keyed message)
            prios     int[],      -- priority per position (NULL: all 0)
            lane      smallint NOT NULL DEFAULT 0,
            PRIMARY KEY (batch_no, slot)
        ) PARTITION BY LIST (slot);
        CREATE INDEX ON %1$I.batches (last_pos);
        CREATE INDEX ON %1$I.batches (lane, last_pos);
        CREATE TABLE %1$I.deliveries (
            slot         smallint NOT NULL,
            group_id     int NOT NULL,
            pos          bigint NOT NULL,
            attempt      int NOT NULL,
            token        bigint NOT NULL,
            msg_id       bigint NOT NULL,
            txid         xid8 NOT NULL,
            expires_at   timestamptz NOT NULL,
            delivered_at timestamptz NOT NULL,
            consumer     text,
            key_hash     bigint,     -- token 0: a parked retry due at expires_at
            lane         smallint NOT NULL DEFAULT 0
        ) PARTITION BY LIST (slot);
        CREATE INDEX ON %1$I.deliveries (group_id, pos, attempt);
        CREATE INDEX ON %1$I.deliveries (group_id, lane, expires_at);
        CREATE TABLE %1$I.acks (
            slot     smallint NOT NULL,
            group_id int NOT NULL,
            pos      bigint NOT NULL,
            kind     "char" NOT NULL,   -- a acked, n nacked, d dead letter, x message gone (reclaimed, purged)
            acked_at timestamptz NOT NULL,
            UNIQUE (group_id, pos, slot)
        ) PARTITION BY LIST (slot);
        CREATE TABLE %1$I.group_states (
            slot      smallint NOT NULL,
            group_id  int NOT NULL,
            seq       bigint NOT NULL,
            cursor    bigint NOT NULL,
            lwm       bigint NOT NULL,
            scan_from timestamptz NOT NULL,
            lwm_at    timestamptz NOT NULL,
            bkeys     bigint[],   -- blocked keys, and the earliest incomplete
            bheads    bigint[],   -- position of each
            lv_prio   int[],      -- priority levels dispatched out of position
            lv_pos    bigint[],   -- order, and the last position of each
            lane      smallint NOT NULL DEFAULT 0,
            ahead     bigint,     -- nothing after max(cursor, ahead) is completed or leased
            PRIMARY KEY (group_id, lane, seq, slot)
        ) PARTITION BY LIST (slot);
        CREATE TABLE %1$I.keyed (
            slot     smallint NOT NULL,
            key_hash bigint NOT NULL,
            pos      bigint NOT NULL,
            target   int,
            mslot    smallint NOT NULL,
            id       bigint NOT NULL,
            txid     xid8 NOT NULL
        ) PARTITION BY LIST (slot);
        CREATE INDEX ON %1$I.keyed (key_hash, pos);
        CREATE TABLE %1$I.prio (
            slot     smallint NOT NULL,
            priority int NOT NULL,
            pos      bigint NOT NULL,
            target   int,
            mslot    smallint NOT NULL,
            id       bigint NOT NULL,
            txid     xid8 NOT NULL,
            lane     smallint NOT NULL DEFAULT 0
        ) PARTITION BY LIST (slot);
        CREATE INDEX ON %1$I.prio (lane, priority, pos);
        %3$s
        %2$s
        CREATE TABLE %1$I.checkpoints (
            slot     smallint NOT NULL,
            group_id int NOT NULL,
            seq      bigint NOT NULL,
            lwm      bigint NOT NULL,
            at       timestamptz NOT NULL,
            lane     smallint NOT NULL DEFAULT 0,
            PRIMARY KEY (group_id, lane, seq, slot)
        ) PARTITION BY LIST (slot);
    $ddl$, sch, sluice._runs_ddl(sch), sluice._v2_dedup_ddl(sch));
    FOR s IN 0..(SELECT qq.slots FROM sluice.queue qq WHERE qq.id = p_queue_id) - 1 LOOP
        FOR t IN SELECT * FROM sluice._slot_tables() LOOP
            EXECUTE format('CREATE %s TABLE %I.%I PARTITION OF %I.%I FOR VALUES IN (%s)',
                           CASE WHEN t.unlogged THEN 'UNLOGGED' ELSE '' END,
                           sch, t.name || '_' || s, sch, t.name, s);
        END LOOP;
    END LOOP;
    EXECUTE format('ALTER TABLE sluice.messages ATTACH PARTITION %I.messages FOR VALUES IN (%s)', sch, p_queue_id);
    PERFORM sluice._instantiate(p_queue_id);
END
$$;

-- _drop_storage: drop the schema of a dropped queue (its row is gone), or,
-- if its messages table cannot be detached from sluice.messages at once,
-- empty its tables, rename the schema sluice_dropped_q<id> (so that a call
-- whose snapshot still shows the queue finds its schema gone, see
-- _use_queue) and leave it to sluice._drop_leftovers. Detaching takes
-- ACCESS EXCLUSIVE on the parent, which conflicts with every send and
-- receive of every queue: it is tried with a short lock_timeout, so that
-- traffic on the other queues waits at most that long for it (and never
-- behind an open transaction that it would wait for). Nothing else of the
-- queue's storage needs a lock on a shared table.
--
-- Parameters:
--   p_queue_id  queue id
-- Returns: true if the schema is gone, false if it is left (empty) for later
CREATE OR REPLACE FUNCTION sluice._drop_storage(p_queue_id int)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    sch constant text := sluice._qschema(p_queue_id);
    t record;
BEGIN
    IF sluice._detach(sch) THEN
        EXECUTE format('DROP SCHEMA %I CASCADE', sch);
        RETURN true;
    END IF;
    -- Empty everything now (these locks are the queue's own), drop the rest
    -- with the schema later.
    FOR t IN SELECT * FROM sluice._slot_tables() LOOP
        EXECUTE format('TRUNCATE %s', sluice._table(p_queue_id, t.name));
    END LOOP;
    EXECUTE format('ALTER SCHEMA %I RENAME TO %I', sch, 'sluice_dropped_q' || p_queue_id);
    RETURN false;
END
$$;

-- _detach: detach table messages of schema p_schema (a queue's) from
-- sluice.messages if that can be done at once (lock_timeout 20 ms: others
-- wait at most that long behind it; see _drop_storage). An already
-- detached table counts as done.
--
-- Returns: whether the table is detached
CREATE OR REPLACE FUNCTION sluice._detach(p_schema text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    sch constant text := p_schema;
    v_rel regclass := to_regclass(format('%I.messages', sch));
BEGIN
    IF v_rel IS NULL OR NOT EXISTS (SELECT 1 FROM pg_inherits i
                                    WHERE i.inhrelid = v_rel AND i.inhparent = 'sluice.messages'::regclass) THEN
        RETURN true;
    END IF;
    RETURN sluice._lock_within(format('ALTER TABLE sluice.messages DETACH PARTITION %I.messages', sch), '20ms');
END
$$;

-- _drop_leftovers: drop the schemas sluice_dropped_q<id> that dropped
-- queues left behind (_drop_storage could not detach their messages table
-- at once), each if its table can be detached now. Called by maintain,
-- create_queue and drop_queue. Only schemas sluice's owner owns and no live
-- queue uses: a schema of that name that another role created (squatting:
-- a role with CREATE on the database) is skipped, where its "permission
-- denied for schema" made every create_queue, drop_queue and maintain fail
-- until someone dropped it.
--
-- Returns: how many schemas were dropped
CREATE OR REPLACE FUNCTION sluice._drop_leftovers()
RETURNS int
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    sch text;
    n int := 0;
BEGIN
    -- One at a time (another one is at it: leave it the work); a later one
    -- sees what an earlier one dropped (the catalog is read fresh).
    IF NOT pg_try_advisory_xact_lock(sluice._lock_ns('leftovers'), 0) THEN
        RETURN 0;
    END IF;
    FOR sch IN SELECT ns.nspname FROM pg_namespace ns
               WHERE ns.nspname ~ '^sluice_dropped_q[0-9]+$'
                 AND ns.nspowner = (SELECT s.nspowner FROM pg_namespace s WHERE s.nspname = 'sluice')
                 AND NOT EXISTS (SELECT FROM sluice.queue q WHERE 'sluice_dropped_q' || q.id = ns.nspname)
               ORDER BY 1 LOOP
        IF sluice._detach(sch) THEN
            EXECUTE format('DROP SCHEMA %I CASCADE', sch);
            n := n + 1;
        END IF;
    END LOOP;
    RETURN n;
END
$$;

-- _engine_settings: the SET clauses of the engine's entry points, as
-- ALTER FUNCTION takes them: plan_cache_mode = force_generic_plan (plan
-- once per session), enable_seqscan = off (an index probe, whatever the
-- statistics say of a table that just rotated), jit = off (a plan that
-- keeps a disabled seq scan is costed at 1e10 and would be JIT-compiled on
-- every run) and max_parallel_workers_per_gather = 0 (maintenance's
-- rotation check and status were planned as parallel scans of the
-- messages: the parallel part of the rotation check took 8 and 14 ms in
-- two calls measured, for a statement that reads a few pages; and a
-- receive over a backlog of ~150,000 started parallel workers for its
-- probe of messages not yet numbered, 211 against 628 receives/s). The
-- entry points are a queue's copies that the public API calls (given them
-- by _instantiate) and the public functions that call a copy through the
-- search path (given them by _apply_engine_settings: sluice.receive, ack,
-- nack, extend, and the pgmq layer's reads and completions). The functions
-- they call inherit the settings: a function with SET clauses costs ~30 us
-- a call.
--
-- Parameters:
--   p_seqscan  whether to leave sequential scans on (a function that reads
--              whole tables)
-- Returns: the clauses ('SET name = value SET ...')
CREATE OR REPLACE FUNCTION sluice._engine_settings(p_seqscan boolean DEFAULT false)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT 'SET plan_cache_mode = force_generic_plan SET enable_seqscan = '
           || CASE WHEN p_seqscan THEN 'on' ELSE 'off' END
           || ' SET jit = off SET max_parallel_workers_per_gather = 0'
$$;

-- _apply_engine_settings: give the engine's settings (_engine_settings) to
-- every function of a schema with one of the given names, all overloads.
-- Run by the function files of those functions after they are (re)created:
-- CREATE OR REPLACE FUNCTION replaces a function's SET clauses with its
-- own, which leave these out.
--
-- Parameters:
--   p_schema  the schema
--   p_names   the functions' names
-- Errors: SL900 when a name matches no function (a renamed entry point
--         must not lose its settings silently)
CREATE OR REPLACE FUNCTION sluice._apply_engine_settings(p_schema text, p_names text[])
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    f record;
    v_missing text;
BEGIN
    SELECT string_agg(x.name, ', ') INTO v_missing
    FROM unnest(p_names) AS x(name)
    WHERE NOT EXISTS (SELECT FROM pg_proc p WHERE p.pronamespace = p_schema::regnamespace AND p.proname = x.name);
    IF v_missing IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SL900',
            MESSAGE = format('no function %s in schema %s to give the engine''s settings', v_missing, p_schema);
    END IF;
    FOR f IN SELECT p.oid FROM pg_proc p
             WHERE p.pronamespace = p_schema::regnamespace AND p.proname = ANY (p_names) LOOP
        EXECUTE format('ALTER FUNCTION %s %s', f.oid::regprocedure, sluice._engine_settings());
    END LOOP;
END
$$;

-- _replace_function: run a CREATE OR REPLACE FUNCTION statement; when it
-- fails because the function's result type changed (42P13), drop the
-- function (p_signature) and create it. Used by the copiers, so that an
-- upgrade replaces a queue's copies in place.
--
-- Parameters:
--   p_def        the CREATE OR REPLACE FUNCTION statement
--   p_signature  the function's regprocedure text (schema.name(args))
CREATE OR REPLACE FUNCTION sluice._replace_function(p_def text, p_signature text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET check_function_bodies = off
AS $$
BEGIN
    BEGIN
        EXECUTE p_def;
    EXCEPTION WHEN invalid_function_definition THEN
        EXECUTE format('DROP FUNCTION %s', p_signature);
        EXECUTE p_def;
    END;
END
$$;

-- _instantiate: (re)create a queue's copies of the engine functions from the
-- templates in schema sluice_tmpl. Run for every queue on each migrate. For
-- a queue of engine 2 it calls _instantiate_v2 instead.
--
-- Templates are written without SET clauses. A copy differs from its
-- template in its schema, and the entry points (the functions the public
-- API calls) get the engine's settings (_engine_settings), applied here
-- once, and search_path = the queue's schema (their unqualified table
-- names are the queue's tables). The other functions run only inside an
-- entry point and inherit them. e_peek reads all of the queue's messages
-- (there is no index to read them by id): it keeps sequential scans, which
-- an index scan of every row would cost more than.
--
-- Parameters:
--   p_queue_id  queue id
CREATE OR REPLACE FUNCTION sluice._instantiate(p_queue_id int)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET check_function_bodies = off   -- (engine_runs.sql: SQL templates name the queue's tables)
AS $$
DECLARE
    sch constant text := sluice._qschema(p_queue_id);
    -- (e_receive, e_ack, e_nack and e_extend are entry points too, but
    -- their public callers set the path and carry the other settings in
    -- their own SET clause: see sluice.receive. A SET clause here would
    -- cost each of those calls ~30 us more.)
    entry_points constant text[] := ARRAY['e_queue_status', 'e_maintain',
                                          'e_purge', 'e_start_pos', 'e_base', 'e_dedup_lookup_all', 'e_dedup_record_all',
                                          'e_peek', 'e_leases'];
    scanners constant text[] := ARRAY['e_peek'];
    f record;
    s int;
BEGIN
    -- A queue of engine 2 has copies of the other templates: whoever reloads
    -- a queue's copies by this name gets them (copying engine 1's here would
    -- drop engine 2's, and the queue's next receive would fail).
    IF (SELECT qq.engine FROM sluice.queue qq WHERE qq.id = p_queue_id) = 2 THEN
        PERFORM sluice._instantiate_v2(p_queue_id);
        RETURN;
    END IF;
    -- A queue made before runs (migration 0010) gets their tables.
    IF to_regclass(format('%I.runs', sch)) IS NULL THEN
        EXECUTE sluice._runs_ddl(sch);
        FOR s IN 0..3 LOOP
            EXECUTE format('CREATE UNLOGGED TABLE %I.%I PARTITION OF %I.runs FOR VALUES IN (%s)', sch, 'runs_' || s, sch, s);
            EXECUTE format('CREATE TABLE %I.%I PARTITION OF %I.run_acks FOR VALUES IN (%s)', sch, 'run_acks_' || s, sch, s);
        END LOOP;
    END IF;
    -- The prio rows by position (e_prio_pending: those at or after a group's
    -- low-water mark); a queue made before it gets it here, new ones too.
    IF to_regclass(format('%I.prio_pos', sch)) IS NULL THEN
        EXECUTE format('CREATE INDEX prio_pos ON %I.prio (pos)', sch);
    END IF;
    -- Replace the copies in place (CREATE OR REPLACE keeps a function's oid:
    -- a session calling the old copy meanwhile goes on, where a DROP made it
    -- fail with "cache lookup failed for function"); drop one only when its
    -- result type changed, and the copies whose template is gone.
    FOR f IN SELECT p.oid, p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
             WHERE n.nspname = 'sluice_tmpl' ORDER BY p.proname LOOP
        PERFORM sluice._replace_function(replace(pg_get_functiondef(f.oid), 'sluice_tmpl', sch),
                                         replace(f.oid::regprocedure::text, 'sluice_tmpl.', quote_ident(sch) || '.'));
    END LOOP;
    FOR f IN SELECT p.oid FROM pg_proc p
             WHERE p.pronamespace = sch::regnamespace
               AND NOT EXISTS (SELECT FROM pg_proc t WHERE t.pronamespace = 'sluice_tmpl'::regnamespace
                                                       AND t.proname = p.proname
                                                       AND t.proargtypes = p.proargtypes) LOOP
        EXECUTE format('DROP FUNCTION %s', f.oid::regprocedure);
    END LOOP;
    FOR f IN SELECT p.oid, p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
             WHERE n.nspname = sch AND p.proname = ANY (entry_points) LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = %s %s', f.oid::regprocedure, sluice._queue_path(p_queue_id),
                       sluice._engine_settings(f.proname = ANY (scanners)));
    END LOOP;
    -- The copies are internal: only the owner (through the public API) calls them.
    EXECUTE format('REVOKE ALL ON ALL FUNCTIONS IN SCHEMA %I FROM PUBLIC', sch);
END
$$;

-- _table: the qualified name of a queue's table (or of one slot of it).
CREATE OR REPLACE FUNCTION sluice._table(p_queue_id int, p_name text, p_slot int DEFAULT NULL)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT format('%I.%I', sluice._qschema(p_queue_id),
                  p_name || CASE WHEN p_slot IS NULL THEN '' ELSE '_' || p_slot END)
$$;
