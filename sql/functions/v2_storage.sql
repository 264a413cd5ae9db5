-- Group: engine v2 - per-queue storage (internal)
--
-- A queue of engine 2 keeps everything that grows with its traffic in its
-- own schema sluice_q<id>, in nine tables, each LIST-partitioned by slot
-- (0 to the queue's slots - 1; the leaf of slot s is <table>_<s>). Nothing is
-- shared with other queues but the catalog (sluice.queue, consumer_group,
-- epoch, dead_letter). docs/design.md, "Engine v2", draws it.
--
--   msg      the messages, as sent (and retries: a nack's copy, meant for one
--            group, with its attempt and when it is due)
--   cut      one row per numbering: the snapshot it numbered up to and the
--            head (last position) of every lane
--   batch    the positions a cut gave one lane: ids and txids of the
--            messages, in position order
--   lease    one row per receive and lane: what it leased (a range of new
--            positions and redelivered ones), and the lane's state after it
--            (cursor, expiry scan point); the newest row of a lane is its state
--   ack      completions: one row per lease acked whole (pos 0), else one
--            per position (kind a acked, n nacked, d dead-lettered, e ended
--            and passed on: delivered again or parked by a later lease row,
--            while other positions of its lease were extended)
--   ext      lease extensions (extend): of a whole lease (pos 0), or of
--            single positions
--   pending  messages numbered only when due (delays, retries with backoff)
--   prio     the positions of unkeyed messages with a priority other than 0,
--            by level: they are numbered in a lane of their own (lane
--            number = lanes), taken level by level
--   dedup    the dedup_keys sent, with their messages' ids (v2_dedup.sql)

-- The templates are never called (only copied): drop them all before the
-- v2 files create them again, so that a template whose signature changed
-- or that is gone leaves no stale overload to copy.
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid FROM pg_catalog.pg_proc p WHERE p.pronamespace = 'sluice_tmpl2'::regnamespace LOOP
        EXECUTE format('DROP FUNCTION %s', f);
    END LOOP;
END
$$;

-- _create_storage_v2: create the schema, tables and function copies of a
-- queue of engine 2, and its first cut (nothing numbered).
--
-- Parameters:
--   p_queue_id  queue id (its row in sluice.queue exists)
-- Tables: creates schema sluice_q<id> with the nine tables above, each
--   with one partition per slot
-- Calls: _v2_ddl, _v2_dedup_ddl, _v2_tables, _snapshot_with, _instantiate_v2
CREATE OR REPLACE FUNCTION sluice._create_storage_v2(p_queue_id int)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    sch constant text := sluice._qschema(p_queue_id);
    q sluice.queue;
    t text;
    s int;
BEGIN
    SELECT * INTO STRICT q FROM sluice.queue qq WHERE qq.id = p_queue_id;
    EXECUTE format('CREATE SCHEMA %I', sch);
    EXECUTE sluice._v2_ddl(sch);
    EXECUTE sluice._v2_dedup_ddl(sch);
    FOR s IN 0..q.slots - 1 LOOP
        FOREACH t IN ARRAY sluice._v2_tables() LOOP
            EXECUTE format('CREATE TABLE %I.%I PARTITION OF %I.%I FOR VALUES IN (%s)', sch, t || '_' || s, sch, t, s);
        END LOOP;
    END LOOP;
    -- The first cut: nothing numbered, as of now. This transaction's own
    -- messages (a send after the create, in one transaction) are not
    -- committed: in progress for it (as every cut treats its own), else a
    -- transaction that began after this one and committed before this
    -- snapshot would put this one below its xmax, out of its in-progress
    -- list, and no cut would number them.
    EXECUTE format('INSERT INTO %I.cut (slot, cut_no, snap, snap_xmax, snap_xip, heads, rr, due_upto, at, epoch, next_due)
                    SELECT 0, 0, s, pg_snapshot_xmax(s), ARRAY(SELECT pg_snapshot_xip(s)), array_fill(0::bigint, ARRAY[%s]),
                           0, clock_timestamp(), clock_timestamp(), 0, ''infinity''
                    FROM (SELECT CASE WHEN o.own IS NOT NULL AND pg_visible_in_snapshot(o.own, c.snap)
                                      THEN sluice._snapshot_with(c.snap, o.own) ELSE c.snap END AS s
                          FROM (SELECT pg_current_snapshot() AS snap) c
                          CROSS JOIN (SELECT pg_current_xact_id_if_assigned() AS own) o) x', sch, q.lanes + 1);
    PERFORM sluice._instantiate_v2(p_queue_id);
END
$$;

-- _v2_ddl: the DDL of a queue of engine 2's eight tables but dedup
-- (_v2_dedup_ddl), each LIST-partitioned by slot with no partition yet,
-- and their indexes (the file's head says what each holds).
--
-- Parameters:
--   p_schema  the queue's schema
-- Returns: the statements, to EXECUTE
CREATE OR REPLACE FUNCTION sluice._v2_ddl(p_schema text)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT format($ddl$
        CREATE TABLE %1$I.msg (
            slot smallint NOT NULL, id bigint NOT NULL, txid xid8 NOT NULL,
            orig bigint,   -- a retry's: the id of the message it retries (its own id is new)
            attempt int NOT NULL DEFAULT 1, target int, due timestamptz,
            sent_at timestamptz NOT NULL, headers jsonb, body jsonb NOT NULL,
            key text, khash bigint,   -- the ordering key and hashtextextended(key, 0)
            priority int NOT NULL DEFAULT 0
        ) PARTITION BY LIST (slot);
        CREATE INDEX ON %1$I.msg (txid, id);
        CREATE INDEX ON %1$I.msg (txid) WHERE priority <> 0 AND khash IS NULL;   -- (e2_prio_due__s)
        CREATE INDEX msg_due_idx ON %1$I.msg (due) WHERE due IS NOT NULL;   -- (status: the delayed ones)
        CREATE TABLE %1$I.cut (
            slot smallint NOT NULL, cut_no bigint NOT NULL, snap pg_snapshot NOT NULL,
            snap_xmax xid8 NOT NULL, snap_xip xid8[] NOT NULL, heads bigint[] NOT NULL, rr int NOT NULL,
            due_upto timestamptz NOT NULL, at timestamptz NOT NULL, epoch bigint NOT NULL,
            -- a snapshot partly numbered (cuts number at most 4,096 a time):
            -- its messages after (work_txid, work_id) are still to number
            work_snap pg_snapshot, work_txid xid8, work_id bigint,
            -- the first due time after due_upto of a message waiting in
            -- pending ('infinity': none; '-infinity': not known, the next
            -- cut reads pending): a cut at or after it numbers pending ones,
            -- and the probe and the short cut read it instead of pending
            next_due timestamptz NOT NULL,
            PRIMARY KEY (cut_no, slot)
        ) PARTITION BY LIST (slot);
        CREATE TABLE %1$I.batch (
            slot smallint NOT NULL, lane smallint NOT NULL, first_pos bigint NOT NULL,
            last_pos bigint NOT NULL, ids bigint[] NOT NULL, txids xid8[] NOT NULL,
            mslots smallint[] NOT NULL,   -- the slot each message is stored in
            targets int[], cut_no bigint NOT NULL,
            khashes bigint[],              -- key hash of each position (NULL: none keyed)
            PRIMARY KEY (lane, last_pos, slot)
        ) PARTITION BY LIST (slot);
        CREATE TABLE %1$I.lease (
            slot smallint NOT NULL, group_id int NOT NULL, lane smallint NOT NULL,
            lease_no bigint NOT NULL,
            kind "char" NOT NULL,      -- r a receive's, x a deferral of lease ref, p parked redeliveries
            ref bigint,
            first_pos bigint NOT NULL, last_pos bigint NOT NULL,
            n int NOT NULL,            -- how many positions it leased (of the range, those meant for the group)
            redo_pos bigint[], redo_att int[], redo_ids bigint[], redo_txids xid8[],
            token bigint NOT NULL, expires_at timestamptz NOT NULL, delivered_at timestamptz NOT NULL,
            cursor bigint NOT NULL, scan_t timestamptz NOT NULL, scan_no bigint NOT NULL,
            old_due timestamptz NOT NULL, consumer text,
            next_exp timestamptz NOT NULL DEFAULT '-infinity',   -- no lease of the lane here past the scan point ends before
            held sluice.e2_held[],     -- keys held back (a lease in flight, a retry's delay); NULL: none
            waiting sluice.e2_wait[],  -- keyed positions passed while their key was held; NULL: none
            levels sluice.e2_level[],  -- the priority lane's: how far each level is taken (above cursor)
            PRIMARY KEY (group_id, lane, lease_no, slot)
        ) PARTITION BY LIST (slot);
        CREATE INDEX ON %1$I.lease (group_id, lane, expires_at, lease_no);
        CREATE TABLE %1$I.ack (
            slot smallint NOT NULL, group_id int NOT NULL, lane smallint NOT NULL,
            lease_no bigint NOT NULL, pos bigint NOT NULL, kind "char" NOT NULL,
            at timestamptz NOT NULL,
            UNIQUE (group_id, lane, lease_no, pos, slot)
        ) PARTITION BY LIST (slot);
        CREATE TABLE %1$I.ext (
            slot smallint NOT NULL, group_id int NOT NULL, lane smallint NOT NULL,
            lease_no bigint NOT NULL, expires_at timestamptz NOT NULL,
            pos bigint NOT NULL DEFAULT 0   -- the position extended (0: every position of the lease)
        ) PARTITION BY LIST (slot);
        CREATE INDEX ON %1$I.ext (group_id, lane, lease_no, expires_at);
        CREATE TABLE %1$I.prio (
            slot smallint NOT NULL, level int NOT NULL, pos bigint NOT NULL, id bigint NOT NULL,
            txid xid8 NOT NULL, mslot smallint NOT NULL, cut_no bigint NOT NULL, target int,
            PRIMARY KEY (level, pos, slot)
        ) PARTITION BY LIST (slot);
        CREATE INDEX ON %1$I.prio (pos);
        CREATE TABLE %1$I.pending (
            slot smallint NOT NULL, due timestamptz NOT NULL, mslot smallint NOT NULL,
            txid xid8 NOT NULL, id bigint NOT NULL
        ) PARTITION BY LIST (slot);
        CREATE INDEX ON %1$I.pending (due);
    $ddl$, p_schema)
$$;

-- _v2_tables: the slot-partitioned tables of a queue of engine 2.
CREATE OR REPLACE FUNCTION sluice._v2_tables()
RETURNS text[]
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT ARRAY['msg', 'cut', 'batch', 'lease', 'ack', 'ext', 'pending', 'prio', 'dedup']
$$;

-- _v2_dedup_ddl: the statement that creates a queue's dedup table, without
-- its slot partitions. Both engines have the same table: for new queues of
-- engine 1 (sluice._create_storage) and of engine 2 (_create_storage_v2),
-- and for queues of engine 2 made before it (_instantiate_v2). One row per
-- message sent with a dedup_key: the key, the message's id and when it was
-- sent (engine_dedup.sql, v2_dedup.sql).
--
-- Parameters:
--   p_schema  the queue's schema
CREATE OR REPLACE FUNCTION sluice._v2_dedup_ddl(p_schema text)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT format($ddl$
        CREATE TABLE %1$I.dedup (
            slot smallint NOT NULL, dedup_key text NOT NULL, msg_id bigint NOT NULL, at timestamptz NOT NULL
        ) PARTITION BY LIST (slot);
        CREATE INDEX ON %1$I.dedup (dedup_key, at);
    $ddl$, p_schema)
$$;

-- _splice_call: a template's definition with its call of another template
-- replaced by the callee's statement, each of the callee's parameters in it
-- replaced by the value the call passes: the copy runs the statement in
-- place, with no call and no copy of its rows into one more result set (the
-- take in the receive: docs/design.md, "The path of a receive"). The call
-- is a statement of its own, RETURN QUERY SELECT * FROM callee(...);, in
-- named notation (p_x => value, every parameter once); the callee is a
-- template of sluice_tmpl2 whose body is one RETURN QUERY. The statement
-- keeps its comments, where parameter names are replaced too.
--
-- Parameters:
--   p_def     the caller's definition (pg_get_functiondef)
--   p_callee  the callee's name, in sluice_tmpl2
-- Returns: the definition with the call replaced
-- Errors: P0001 when the definition has no such call, the callee is not of
--   that form, or the call does not name each of its parameters once (a
--   template edited apart from the other fails the migration, not a receive)
CREATE OR REPLACE FUNCTION sluice._splice_call(p_def text, p_callee text)
RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_call constant text := substring(p_def FROM 'RETURN QUERY SELECT \* FROM ' || p_callee || '\(([^;]*)\);');
    v_stmt text;
    v_params text[];
    v_args text[];
    v_name text;
    v_value text;
    v_names text[] := '{}';
    a text;
BEGIN
    SELECT substring(p.prosrc FROM '^\s*BEGIN\s+(RETURN QUERY\s.*;)\s*END\s*$'), p.proargnames
    INTO v_stmt, v_params
    FROM pg_proc p WHERE p.pronamespace = 'sluice_tmpl2'::regnamespace AND p.proname = p_callee;
    IF v_call IS NULL OR v_stmt IS NULL THEN
        RAISE EXCEPTION 'cannot splice %: no call of it as a statement of its own, or its body is not one RETURN QUERY',
            p_callee;
    END IF;
    -- (the arguments split where the next "name =>" begins: a value may hold commas)
    v_args := regexp_split_to_array(btrim(v_call), ',\s*(?=[a-z_]+\s*=>)');
    FOREACH a IN ARRAY v_args LOOP
        v_name := btrim(split_part(a, '=>', 1));
        v_value := btrim(substr(a, strpos(a, '=>') + 2));
        IF strpos(a, '=>') = 0 OR NOT v_name = ANY (v_params) OR v_name = ANY (v_names) THEN
            RAISE EXCEPTION 'cannot splice %: argument "%" is not one of its parameters, once, by name', p_callee, a;
        END IF;
        v_names := v_names || v_name;
        -- (in parentheses, as an expression it stands for; \ and & escaped,
        -- which regexp_replace reads in a replacement)
        v_stmt := regexp_replace(v_stmt, '\m' || v_name || '\M',
                                 replace(replace('(' || v_value || ')', '\', '\\'), '&', '\&'), 'g');
    END LOOP;
    IF cardinality(v_names) <> cardinality(v_params) THEN
        RAISE EXCEPTION 'cannot splice %: the call passes % of its % parameters', p_callee,
            cardinality(v_names), cardinality(v_params);
    END IF;
    RETURN replace(p_def, 'RETURN QUERY SELECT * FROM ' || p_callee || '(' || v_call || ');', v_stmt);
END
$$;

-- _instantiate_v2: (re)create a queue's copies of the v2 templates (schema
-- sluice_tmpl2). A template whose name ends in __s is copied once per slot
-- s, with __s replaced by _<s> in its name and body: its statements name
-- slot s's leaves (msg_<s>, lease_<s>, ...), so that the planner sets up no
-- scan of another slot's partition; the takes and e2_settled__s once more
-- with __s removed, the same statements through the parents (the slow
-- path's). Every copy runs with the queue's
-- schema first in its path: the public API sets it before a static call
-- (as for engine 1, see sluice.receive), or the copy carries it in its SET
-- clause with the engine's settings (those called through EXECUTE).
--
-- Parameters:
--   p_queue_id  queue id
CREATE OR REPLACE FUNCTION sluice._instantiate_v2(p_queue_id int)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET check_function_bodies = off
AS $$
DECLARE
    sch constant text := sluice._qschema(p_queue_id);
    v_slots constant int := (SELECT qq.slots FROM sluice.queue qq WHERE qq.id = p_queue_id);
    -- (e2_receive, e2_ack, e2_nack, e2_extend and e2_send are entry points
    -- too, but their public callers set the path and carry the settings, as
    -- for engine 1: see sluice.receive)
    -- (the templates per slot also copied once through the parents: the
    -- slow path's take)
    through_parents constant text[] := ARRAY['e2_take__s', 'e2_take_keyed__s', 'e2_key_done__s'];
    -- (the templates per slot whose statement is spliced into a caller's
    -- copy, _splice_call: no copy of their own per slot)
    spliced constant text[] := ARRAY['e2_take__s', 'e2_take_one__s'];
    entry_points constant text[] := ARRAY['e_queue_status', 'e2_start', 'e_maintain', 'e_peek', 'e_leases',
                                          'e_purge', 'e_start_pos'];
    -- e_peek reads every stored message (msg has no index by id): it keeps
    -- sequential scans, as engine 1's (sluice._instantiate)
    scanners constant text[] := ARRAY['e_peek'];
    f record;
    def text;
    sig text;
    sigs text[] := '{}';   -- the copies made
    s int;
BEGIN
    -- A queue made before dedup keys worked on engine 2 gets its dedup table.
    IF to_regclass(format('%I.dedup', sch)) IS NULL THEN
        EXECUTE sluice._v2_dedup_ddl(sch);
        FOR s IN 0..v_slots - 1 LOOP
            EXECUTE format('CREATE TABLE %I.%I PARTITION OF %I.dedup FOR VALUES IN (%s)', sch, 'dedup_' || s, sch, s);
        END LOOP;
    END IF;
    -- A queue made before status counted its delayed messages by their due
    -- time gets the index (only messages sent with a delay, and retries
    -- with a backoff, have an entry).
    IF to_regclass(format('%I.msg_due_idx', sch)) IS NULL THEN
        EXECUTE format('CREATE INDEX msg_due_idx ON %I.msg (due) WHERE due IS NOT NULL', sch);
    END IF;
    -- A queue made before cuts kept the next due time of pending messages
    -- gets the column: '-infinity' in the rows there are (not known), so
    -- that its next cut reads pending and writes it. (No default after:
    -- every writer of a cut row names it.)
    IF NOT EXISTS (SELECT 1 FROM pg_attribute a
                   WHERE a.attrelid = format('%I.cut', sch)::regclass AND a.attname = 'next_due' AND NOT a.attisdropped) THEN
        EXECUTE format('ALTER TABLE %I.cut ADD COLUMN next_due timestamptz NOT NULL DEFAULT ''-infinity''', sch);
        EXECUTE format('ALTER TABLE %I.cut ALTER COLUMN next_due DROP DEFAULT', sch);
    END IF;
    -- (replaced in place, see sluice._instantiate; then the copies whose
    -- template is gone, or whose signature changed, are dropped)
    FOR f IN SELECT p.oid, p.proname FROM pg_proc p
             WHERE p.pronamespace = 'sluice_tmpl2'::regnamespace ORDER BY p.proname LOOP
        def := replace(pg_get_functiondef(f.oid), 'sluice_tmpl2.', quote_ident(sch) || '.');
        IF f.proname = 'e2_receive__s' THEN
            -- (the hot takes in place: spliced)
            def := sluice._splice_call(sluice._splice_call(def, 'e2_take__s'), 'e2_take_one__s');
        END IF;
        sig := replace(f.oid::regprocedure::text, 'sluice_tmpl2.', quote_ident(sch) || '.');
        IF f.proname LIKE '%\_\_s' THEN
            FOR s IN 0..v_slots - 1 LOOP
                CONTINUE WHEN f.proname = ANY (spliced);   -- (no copy per slot: it is in its caller's)
                PERFORM sluice._replace_function(replace(def, '__s', '_' || s), replace(sig, '__s', '_' || s));
                sigs := sigs || replace(sig, '__s', '_' || s);
            END LOOP;
            IF f.proname = ANY (through_parents) THEN   -- the copy through the parents
                PERFORM sluice._replace_function(replace(def, '__s', ''), replace(sig, '__s', ''));
                sigs := sigs || replace(sig, '__s', '');
            END IF;
        ELSE
            PERFORM sluice._replace_function(def, sig);
            sigs := sigs || sig;
        END IF;
    END LOOP;
    FOR f IN SELECT p.oid FROM pg_proc p
             WHERE p.pronamespace = sch::regnamespace AND NOT p.oid::regprocedure::text = ANY (sigs) LOOP
        EXECUTE format('DROP FUNCTION %s', f.oid::regprocedure);
    END LOOP;
    FOR f IN SELECT p.oid, p.proname FROM pg_proc p
             WHERE p.pronamespace = sch::regnamespace AND p.proname = ANY (entry_points) LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = %s %s', f.oid::regprocedure,
                       sluice._queue_path(p_queue_id), sluice._engine_settings(f.proname = ANY (scanners)));
    END LOOP;
    -- The cut reads a backlog 4,096 messages at a time in (txid, id) order:
    -- by ordered index scans that stop there, not a bitmap scan of all of it
    -- sorted (each cut read the whole backlog; 30,000 preloaded: 17 ms a cut).
    FOR f IN SELECT p.oid FROM pg_proc p WHERE p.pronamespace = sch::regnamespace AND p.proname = 'e2_cut_store' LOOP
        EXECUTE format('ALTER FUNCTION %s SET enable_bitmapscan = off', f.oid::regprocedure);
    END LOOP;
    EXECUTE format('REVOKE ALL ON ALL FUNCTIONS IN SCHEMA %I FROM PUBLIC', sch);
END
$$;
