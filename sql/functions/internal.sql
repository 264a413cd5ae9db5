-- Group: internal helpers (not part of the public API; names start with "_").
--
-- Error codes raised by sluice (class SL). Clients map them by SQLSTATE:
--   SL001 invalid_name       a queue or group name that is NULL or malformed
--   SL002 undefined_queue    no queue with that name
--   SL003 undefined_group    no group with that name in the queue
--   SL004 duplicate_queue    create_queue of an existing name
--   SL005 duplicate_group    create_group of an existing name
--   SL006 invalid_argument   NULL or out-of-range argument (body, lease, max_messages, ...)
--   SL007 invalid_option     create_queue options: unknown key or bad value
--   SL008 invalid_receipt    a receipt that is not of sluice's form
--   SL009 payload_too_large  body + headers larger than the queue's max_payload
--   SL010 invalid_isolation  receive called outside READ COMMITTED
--   SL011 not_supported      a call the queue does not support (yet), as seek during its upgrade
--   SL012 json_too_deep      body or headers nested deeper than 512 levels

-- _lock_ns: advisory-lock namespaces (first key of pg_advisory_xact_lock(int, int)).
-- No SET clause, so that callers inline it into a constant (it names nothing
-- but its argument).
CREATE OR REPLACE FUNCTION sluice._lock_ns(kind text)
RETURNS int
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE kind
        WHEN 'group' THEN 1372454913   -- (before lanes: dispatch within a group)
        WHEN 'cut'   THEN 1372454914   -- serializes batch cutting within a queue
        WHEN 'maint' THEN 1372454915   -- serializes rotation and reclaim within a queue
        WHEN 'notify' THEN 1372454916  -- one NOTIFY per queue among concurrent sends
        WHEN 'dedup' THEN 1372454917   -- one send per (queue, dedup key) at a time
        WHEN 'queue' THEN 1372454918   -- (queue name hash): shared by every call on a queue, exclusive by drop_queue
        WHEN 'leftovers' THEN 1372454919  -- one _drop_leftovers at a time
        WHEN 'run' THEN 1372454920       -- (group, slot, run hash): acks of one run, one after another
        WHEN 'lease' THEN 1372454921     -- (engine 2: _lease_lock): completions of one lease of many positions
    END
$$;

-- _check_name: raise SL001 unless name is a valid queue or group name.
--
-- Parameters:
--   kind  'queue' or 'group', for the message
--   name  the name to check
-- Errors: SL001 invalid_name
CREATE OR REPLACE FUNCTION sluice._check_name(kind text, name text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF name IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SL001',
            MESSAGE = format('%s name must not be NULL', kind);
    END IF;
    IF name !~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$' THEN
        RAISE EXCEPTION USING ERRCODE = 'SL001',
            MESSAGE = format('invalid %s name %s', kind,
                             CASE WHEN length(name) > 70 THEN quote_literal(left(name, 64)) || '...'
                                  ELSE quote_literal(name) END),
            HINT = 'Names have 1 to 64 characters: ASCII letters, digits, "_", "." and "-", starting with a letter or digit.';
    END IF;
END
$$;

-- _get_queue: the catalog row of a queue.
--
-- Parameters:
--   p_name  queue name
-- Returns: the sluice.queue row
-- Errors: SL001 invalid_name, SL002 undefined_queue
CREATE OR REPLACE FUNCTION sluice._get_queue(p_name text)
RETURNS sluice.queue
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q sluice.queue;
BEGIN
    SELECT * INTO q FROM sluice.queue WHERE name = p_name;
    IF NOT FOUND THEN
        PERFORM sluice._check_name('queue', p_name);
        RAISE EXCEPTION USING ERRCODE = 'SL002',
            MESSAGE = format('queue %s does not exist', quote_literal(p_name)),
            HINT = 'Create it with sluice.create_queue(); sluice.list_queues() shows the existing ones.';
    END IF;
    RETURN q;
END
$$;

-- _use_queue: the catalog row of a queue, for a call that works on it: first
-- takes the queue's lock in shared mode until the transaction ends, so that
-- drop_queue (which takes it exclusively) waits for the call's transaction,
-- and the call, if it comes while a drop is in progress, waits for the drop
-- and then finds no queue (SL002) instead of meeting its tables as they are
-- dropped. The lock is on the hash of the name: it is taken before the
-- lookup, whose statement then sees the drop's commit. The hot paths (send,
-- receive, ack) inline the same two steps.
--
-- Parameters:
--   p_name  queue name
-- Returns: the sluice.queue row
-- Errors: SL001 invalid_name, SL002 undefined_queue
CREATE OR REPLACE FUNCTION sluice._use_queue(p_name text)
RETURNS sluice.queue
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q sluice.queue;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(sluice._lock_ns('queue'), hashtext(p_name));
    q := sluice._get_queue(p_name);
    -- A snapshot older than the drop (REPEATABLE READ) still sees the row:
    -- the catalog does not.
    IF to_regnamespace(sluice._qschema(q.id)) IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SL002',
            MESSAGE = format('queue %s does not exist', quote_literal(p_name)),
            HINT = 'It was dropped.';
    END IF;
    RETURN q;
END
$$;

-- _get_group: the catalog row of a consumer group.
--
-- Parameters:
--   p_queue_id  queue id
--   p_queue     queue name, for the message
--   p_name      group name
-- Returns: the sluice.consumer_group row
-- Errors: SL001 invalid_name, SL003 undefined_group
CREATE OR REPLACE FUNCTION sluice._get_group(p_queue_id int, p_queue text, p_name text)
RETURNS sluice.consumer_group
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    g sluice.consumer_group;
BEGIN
    SELECT * INTO g FROM sluice.consumer_group WHERE queue_id = p_queue_id AND name = p_name;
    IF NOT FOUND THEN
        PERFORM sluice._check_name('group', p_name);
        RAISE EXCEPTION USING ERRCODE = 'SL003',
            MESSAGE = format('group %s of queue %s does not exist', quote_literal(p_name), quote_literal(p_queue)),
            HINT = 'Create it with sluice.create_group(); sluice.status() lists the groups of a queue.';
    END IF;
    RETURN g;
END
$$;

-- _epoch_now: the current epoch of a queue (its slot: _slot_now), as a
-- one-row table: a set-returning SQL function without SET clauses, which
-- the planner inlines into the calling statement, so that hot paths read it
-- as (SELECT ne.epoch FROM sluice._epoch_now(id) ne) at the cost of the
-- lookup alone (a scalar SQL function with a FROM is called, not inlined).
CREATE OR REPLACE FUNCTION sluice._epoch_now(p_queue_id int)
RETURNS TABLE (epoch bigint)
LANGUAGE sql STABLE
AS $$
    SELECT e.epoch FROM sluice.epoch e WHERE e.queue_id = p_queue_id ORDER BY e.epoch DESC LIMIT 1
$$;

-- _slot_now: the current epoch of a queue and the slot it writes into (see
-- _epoch_now: inlined the same way).
CREATE OR REPLACE FUNCTION sluice._slot_now(p_queue_id int)
RETURNS TABLE (epoch bigint, slot smallint)
LANGUAGE sql STABLE
AS $$
    SELECT e.epoch, e.slot FROM sluice.epoch e WHERE e.queue_id = p_queue_id ORDER BY e.epoch DESC LIMIT 1
$$;

-- _current_epoch: the current epoch of a queue, for
-- callers off the hot paths.
CREATE OR REPLACE FUNCTION sluice._current_epoch(p_queue_id int)
RETURNS bigint
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT ne.epoch FROM sluice._epoch_now(p_queue_id) ne
$$;

-- _json_too_deep: whether a JSON value is nested deeper than 512 levels
-- (arrays and objects; [] is 1), the most a message may have. Deeper JSON
-- cannot be read back by every client: the HTTP server's JSON encoder stops
-- at 10,000 levels, Python's json near 1,000 (its recursion limit), and a
-- message stored 12,000 deep made HTTP receives answer 200 with an empty
-- body. Cheap for most messages: a jsonb nested d levels takes at least 8d
-- bytes (an array of one element: a header and an entry of 4 bytes each),
-- so a value of at most 4,096 bytes uncompressed is never walked; a larger
-- one is walked by jsonb_path_exists down to level 512 at most (about a
-- tenth of the cost of parsing it: 3 ms for 1.8 MB).
--
-- Parameters:
--   p   the JSON value (NULL: false)
-- Returns: true when some item sits at level 512 below the top (513 levels
--          of nesting or more)
-- Errors: none (the caller raises SL012 json_too_deep)
-- Calls: jsonb_path_exists
CREATE OR REPLACE FUNCTION sluice._json_too_deep(p jsonb)
RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT p IS NOT NULL
       AND pg_column_size(CASE WHEN pg_column_compression(p) IS NULL THEN p ELSE p #> '{}' END) > 4096
       AND jsonb_path_exists(p, 'strict $.**{512}')
$$;

-- _payload_size: the size a message counts against its queue's max_payload:
-- body and headers as uncompressed jsonb, and the key. A value read from a
-- table may come compressed (pg_column_size would count its compressed
-- size): it is expanded first (#> '{}' returns the whole document, detoasted).
-- STABLE, as pg_column_size and pg_column_compression are: the planner
-- inlines a SQL function only when its body is no more volatile than it is
-- declared, and a call that is not inlined is parsed and planned again in
-- every transaction (declared IMMUTABLE, this was a third of a send's time).
CREATE OR REPLACE FUNCTION sluice._payload_size(p_body jsonb, p_headers jsonb, p_key text)
RETURNS int
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT pg_catalog.pg_column_size(CASE WHEN pg_catalog.pg_column_compression(p_body) IS NULL THEN p_body
                                          ELSE p_body OPERATOR(pg_catalog.#>) '{}' END)
         OPERATOR(pg_catalog.+) coalesce(pg_catalog.pg_column_size(
             CASE WHEN pg_catalog.pg_column_compression(p_headers) IS NULL THEN p_headers
                  ELSE p_headers OPERATOR(pg_catalog.#>) '{}' END), 0)
         OPERATOR(pg_catalog.+) coalesce(pg_catalog.octet_length(p_key), 0)
$$;

-- _lane_chunk: how many consecutive unkeyed messages of a cut go to one
-- lane (the cut deals them out chunk by chunk, lane after lane): as many as
-- spread the cut evenly over the lanes, but at least 16 and at most 64. A
-- cut of a few messages, as in steady traffic, so goes to one lane, and a
-- receive finds a run of them in the lane it takes rather than one message
-- in each of several lanes (each lane a receive visits costs it a state
-- read and write); a cut of 1,000 messages goes to 16 chunks, two per lane
-- of 8.
-- (No SET search_path: the body names nothing, and a SET clause would keep
-- the planner from inlining it.)
--
-- Parameters:
--   p_n      the cut's number of unkeyed messages
--   p_lanes  the queue's number of lanes
-- Returns: the chunk size
CREATE OR REPLACE FUNCTION sluice._lane_chunk(p_n int, p_lanes int)
RETURNS int
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT greatest(16, least(64, (p_n + p_lanes - 1) / p_lanes))
$$;

-- _idle_note_name: the setting in which a session keeps its idle note of a
-- queue (engine_fast.sql, e_idle). No SET clause, so that callers inline it.
CREATE OR REPLACE FUNCTION sluice._idle_note_name(p_queue_id int)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT 'sluice.idle_' OPERATOR(pg_catalog.||) p_queue_id::pg_catalog.text
$$;

-- _idle_note_name: the name of engine 2's idle note of a group in this
-- session (e2_receive__s writes it, e2_before_look__s reads it, nack clears
-- it). No SET clause, so that callers inline it.
--
-- Parameters:
--   p_queue_id, p_group_id  queue and group ids
-- Returns: the setting's name, sluice.idle_<queue id>_<group id>
CREATE OR REPLACE FUNCTION sluice._idle_note_name(p_queue_id int, p_group_id int)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT 'sluice.idle_' OPERATOR(pg_catalog.||) p_queue_id::pg_catalog.text
           OPERATOR(pg_catalog.||) '_' OPERATOR(pg_catalog.||) p_group_id::pg_catalog.text
$$;

-- _idle_note_cut: what a session's idle note of a group (engine 2,
-- _idle_note_name: "cut_no:until", until in microseconds since the epoch,
-- written by e2_receive__s when a receive found every lane of the group
-- idle) says at p_now: the newest cut's number then, while it holds; NULL
-- once it has run out, and for a setting of that name that is no such note
-- (the "n" of a receive that had to number, or anything a user set). No SET
-- clause, so that callers inline it (pass the note in a variable: an
-- argument that is a call is evaluated once per use and not inlined).
--
-- Parameters:
--   p_note  the setting's value (current_setting(name, true))
--   p_now   the receive's time
-- Returns: the cut number the note names, or NULL
CREATE OR REPLACE FUNCTION sluice._idle_note_cut(p_note text, p_now timestamptz)
RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    -- (a CASE in a CASE: what is no note is never cast; numeric and the
    -- length, as no number overflows them: a bound in the pattern, {1,18},
    -- made each call ~20k instructions dearer)
    SELECT CASE WHEN p_note OPERATOR(pg_catalog.~) '^[0-9]+:[0-9]+$'
                THEN CASE WHEN pg_catalog.split_part(p_note, ':', 2)::pg_catalog.numeric
                               OPERATOR(pg_catalog.>) (EXTRACT(epoch FROM p_now) OPERATOR(pg_catalog.*) 1000000)
                               AND (pg_catalog.octet_length(pg_catalog.split_part(p_note, ':', 1)) OPERATOR(pg_catalog.<=) 18)
                          THEN pg_catalog.split_part(p_note, ':', 1)::pg_catalog.int8 END END
$$;

-- _upkeep_due: whether a session's receive of an engine 2 queue is to run
-- the queue's upkeep (e_maintain, by e2_before_look__s): about once a
-- second per session, the time of its last one kept in the setting
-- sluice.maint_<queue id>. No SET clause, so that callers inline it.
--
-- Parameters:
--   p_queue_id  the queue's id
--   p_now       the receive's time
-- Returns: true when the session's last upkeep of the queue is a second old or more, or none
CREATE OR REPLACE FUNCTION sluice._upkeep_due(p_queue_id int, p_now timestamptz)
RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT COALESCE(pg_catalog.current_setting('sluice.maint_' OPERATOR(pg_catalog.||) p_queue_id::pg_catalog.text, true), '')
           OPERATOR(pg_catalog.<) pg_catalog.to_char(p_now OPERATOR(pg_catalog.-) '1 second'::pg_catalog.interval,
                                                     'YYYYMMDDHH24MISSUS')
$$;

-- _lane_lock: the key of the transaction-scoped advisory lock that one
-- receive at a time holds on a (group, lane): one bigint (the bigint form
-- has its own key space, apart from the (int, int) locks of _lock_ns), the
-- top 16 bits marking sluice's lanes, then the group id and the lane.
CREATE OR REPLACE FUNCTION sluice._lane_lock(p_group_id int, p_lane int)
RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT (x'51ce'::pg_catalog.int8 OPERATOR(pg_catalog.<<) 48)
           OPERATOR(pg_catalog.|) (p_group_id::pg_catalog.int8 OPERATOR(pg_catalog.<<) 8)
           OPERATOR(pg_catalog.|) p_lane::pg_catalog.int8
$$;

-- _lease_lock: the second key of the advisory lock (namespace 'lease')
-- under which engine 2 completes positions of a lease of more than one
-- position: a completion of the whole lease (one row, pos 0) and of single
-- positions cannot see each other's uncommitted rows, so each takes this
-- lock first and checks after it. Two leases may share a key (it is a
-- hash): they then wait for each other, never more.
CREATE OR REPLACE FUNCTION sluice._lease_lock(p_group_id int, p_lane int, p_lease_no bigint)
RETURNS int
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    -- (the high half of a 64-bit hash of the lease_no seeded by group and
    -- lane: hashint8 alone folds the halves of its argument together, so
    -- that keys of near leases of two lanes were equal)
    SELECT (pg_catalog.hashint8extended(p_lease_no, (p_group_id::pg_catalog.int8 OPERATOR(pg_catalog.<<) 16)
                                                    OPERATOR(pg_catalog.|) p_lane::pg_catalog.int8)
            OPERATOR(pg_catalog.>>) 32)::pg_catalog.int4
$$;

-- _receipt_ok: whether a receipt is of sluice's form,
-- slot.position.attempt.token, or slot.position.attempt.token.run for a
-- message leased as part of a run (run: the run's first position), each
-- part digits, at most 9, 18, 9, 18 and 18 of them (so that they cast to
-- int, bigint, int, bigint, bigint). The lengths are checked apart: a
-- regular expression with bounded repeats costs twice as much, on every
-- receipt of every ack. No SET clause, so that callers inline it.
CREATE OR REPLACE FUNCTION sluice._receipt_ok(p_receipt text)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT p_receipt OPERATOR(pg_catalog.~) '^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+(\.[0-9]+)?$'
       AND pg_catalog.length(pg_catalog.split_part(p_receipt, '.', 1)) OPERATOR(pg_catalog.<=) 9
       AND pg_catalog.length(pg_catalog.split_part(p_receipt, '.', 2)) OPERATOR(pg_catalog.<=) 18
       AND pg_catalog.length(pg_catalog.split_part(p_receipt, '.', 3)) OPERATOR(pg_catalog.<=) 9
       AND pg_catalog.length(pg_catalog.split_part(p_receipt, '.', 4)) OPERATOR(pg_catalog.<=) 18
       AND pg_catalog.length(pg_catalog.split_part(p_receipt, '.', 5)) OPERATOR(pg_catalog.<=) 18
$$;

-- _receipts_ok: whether every receipt of an array is of sluice's form (see
-- _receipt_ok; none NULL), with one regular expression over the receipts
-- joined by commas (which no receipt has): a check per receipt cost ~24k
-- instructions each, ~2.4M for an ack of 100 (callgrind, PostgreSQL 15),
-- this ~0.5M. The bounded repeats keep each part castable, as _receipt_ok's
-- length checks do. An expression, no SET clause, so that callers inline it
-- (STABLE, as array_to_string is: see _payload_size).
CREATE OR REPLACE FUNCTION sluice._receipts_ok(p_receipts text[])
RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT pg_catalog.array_position(p_receipts, NULL) IS NULL
       AND pg_catalog.array_to_string(p_receipts, ',') OPERATOR(pg_catalog.~)
           '^[0-9]{1,9}\.[0-9]{1,18}\.[0-9]{1,9}\.[0-9]{1,18}(\.[0-9]{1,18})?(,[0-9]{1,9}\.[0-9]{1,18}\.[0-9]{1,9}\.[0-9]{1,18}(\.[0-9]{1,18})?)*$'
$$;

-- _names_run: whether any of these receipts names a run (five parts, see
-- _receipt_ok; engine_runs.sql). An expression, no SET clause, so that a
-- PL/pgSQL caller evaluates it without a statement. STABLE, as
-- array_to_string is, so that it is inlined (see _payload_size).
CREATE OR REPLACE FUNCTION sluice._names_run(p_receipts text[])
RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT pg_catalog.array_to_string(p_receipts, ' ')
           OPERATOR(pg_catalog.~) '[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+'
$$;

-- _parse_receipts: split receipts into their parts.
--
-- Parameters:
--   p_receipts  receipts as returned by receive
-- Returns: one row per receipt (part, pos, attempt, token, run: NULL
--          unless the message was leased as part of a run), in input order
-- Errors: SL006 invalid_argument (NULL array), SL008 invalid_receipt
CREATE OR REPLACE FUNCTION sluice._parse_receipts(p_receipts text[])
RETURNS TABLE (part int, pos bigint, attempt int, token bigint, run bigint)
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    bad text;
BEGIN
    IF p_receipts IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SL006', MESSAGE = 'receipts must not be NULL';
    END IF;
    SELECT coalesce(quote_literal(left(x, 64)), 'NULL') INTO bad
    FROM unnest(p_receipts) AS x
    WHERE x IS NULL OR NOT sluice._receipt_ok(x)
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'SL008',
            MESSAGE = format('invalid receipt %s', bad),
            HINT = 'Pass the receipt column of sluice.receive() unchanged.';
    END IF;
    RETURN QUERY SELECT * FROM sluice._receipt_parts(p_receipts);
END
$$;

-- _receipt_parts: _parse_receipts without the checks, for receipts already
-- checked (the public API checks them before it calls the engine). A SQL
-- function without SET clauses, so that the planner inlines it into the
-- statement that reads it: a call of _parse_receipts (PL/pgSQL, a SET
-- clause, a tuplestore) cost an ack 42-99 us (function time, two profiles).
--
-- Parameters:
--   p_receipts  receipts of sluice's form (_receipt_ok)
-- Returns: as _parse_receipts
CREATE OR REPLACE FUNCTION sluice._receipt_parts(p_receipts text[])
RETURNS TABLE (part int, pos bigint, attempt int, token bigint, run bigint)
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT pg_catalog.split_part(u.x, '.', 1)::pg_catalog.int4, pg_catalog.split_part(u.x, '.', 2)::pg_catalog.int8,
           pg_catalog.split_part(u.x, '.', 3)::pg_catalog.int4, pg_catalog.split_part(u.x, '.', 4)::pg_catalog.int8,
           NULLIF(pg_catalog.split_part(u.x, '.', 5), '')::pg_catalog.int8
    FROM pg_catalog.unnest(p_receipts) WITH ORDINALITY AS u(x, ord)
    ORDER BY u.ord
$$;

-- _check_count: raise SL006 unless v (a count a caller asks for, named what)
-- is from 1 to hi. (receive checks its max_messages inline: its hot path
-- does not pay for a call.)
CREATE OR REPLACE FUNCTION sluice._check_count(what text, v int, hi int)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF v IS NULL OR v < 1 OR v > hi THEN
        RAISE EXCEPTION USING ERRCODE = 'SL006',
            MESSAGE = format('%s must be from 1 to %s, got %s', what, hi, coalesce(v::text, 'NULL'));
    END IF;
END
$$;

-- _prioritized: whether a message of this priority and key is served by
-- the priority lane: an unkeyed one with a priority other than 0 (a keyed
-- one keeps its key's order whatever its priority). The rule that sets
-- sluice.queue.prioritized (send, send_batch, redrive); the cut deals by
-- the same rule (e2_cut_store, on khash). No SET clause, so that callers
-- inline it.
--
-- Parameters:
--   p_priority  the message's priority
--   p_key       its ordering key (NULL: none)
-- Returns: true for the priority lane
CREATE OR REPLACE FUNCTION sluice._prioritized(p_priority int, p_key text)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT p_priority OPERATOR(pg_catalog.<>) 0 AND p_key IS NULL
$$;

-- _snapshot_xips: the transactions a snapshot holds in progress, as an
-- array (pg_snapshot_xip's set), from the snapshot's text form: a scalar
-- expression where ARRAY(SELECT pg_snapshot_xip(s)) is a subplan, whose
-- nodes a statement sets up at every run (a cut's row). No SET clause, so
-- that callers inline it.
--
-- Parameters:
--   p_snap  the snapshot
-- Returns: its xip list, in the snapshot's order ('{}' when none)
CREATE OR REPLACE FUNCTION sluice._snapshot_xips(p_snap pg_snapshot)
RETURNS xid8[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT pg_catalog.string_to_array(pg_catalog.split_part(p_snap::pg_catalog.text, ':', 3), ',')::pg_catalog.xid8[]
$$;

-- _mark_prioritized: note that a queue has had an unkeyed message with a
-- priority other than 0 (sluice.queue.prioritized): its receives look at
-- the priority lane from then on (e2_receive__s). Once per queue: callers
-- call it only while the queue's row says false. Keyed messages keep their
-- key's order whatever their priority, so a caller may pass over them.
-- It never waits: when another transaction holds the queue's row (the
-- first prioritized send of another producer, not committed yet; an
-- alter_queue), it leaves the row as it is, and the first receive whose
-- cut numbered a position in the priority lane sets it (e2_receive__s), so
-- a send left open in a transaction holds up no other producer. Under
-- REPEATABLE READ, a row updated by a transaction that committed after the
-- caller's snapshot is left as it is too (the flag, if that was not what
-- it set, is then set by a receive).
--
-- Parameters:
--   p_queue_id  queue id
-- Returns: true when this call set it
CREATE OR REPLACE FUNCTION sluice._mark_prioritized(p_queue_id int)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    UPDATE sluice.queue SET prioritized = true
    WHERE id = (SELECT x.id FROM sluice.queue x WHERE x.id = p_queue_id AND NOT x.prioritized
                FOR NO KEY UPDATE SKIP LOCKED);
    RETURN FOUND;
EXCEPTION WHEN serialization_failure THEN
    RETURN false;
END
$$;

-- _lease_ok: whether v is a valid lease: a positive interval of at most 7
-- days (NULL: not known, so not valid either). No SET clause, so that
-- callers inline it: receive tests it on every call and calls _check_lease
-- only when it fails (a call of a function with a SET clause costs ~30 us).
CREATE OR REPLACE FUNCTION sluice._lease_ok(v interval)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT v OPERATOR(pg_catalog.>) '0 seconds'::pg_catalog.interval
       AND v OPERATOR(pg_catalog.<=) '7 days'::pg_catalog.interval
$$;

-- _check_lease: raise SL006 unless v is a valid lease (_lease_ok).
CREATE OR REPLACE FUNCTION sluice._check_lease(what text, v interval)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF sluice._lease_ok(v) THEN
        RETURN;
    END IF;
    IF v IS NULL OR v <= interval '0' THEN
        RAISE EXCEPTION USING ERRCODE = 'SL006',
            MESSAGE = format('%s must be a positive interval, got %s', what, coalesce(v::text, 'NULL'));
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'SL006', MESSAGE = format('%s must be at most 7 days, got %s', what, v);
END
$$;

-- _delay_error: raise SL006 for a delay that is negative or longer than the
-- queue's max_delay. A delay has a bound so that one message cannot be
-- scheduled centuries ahead (storage keeps it, and status counts it, until
-- it is delivered).
--
-- Parameters:
--   p_delay  the delay given
--   p_max    the queue's max_delay
--   p_queue  the queue name, for the message
-- Errors: SL006 invalid_argument, always
CREATE OR REPLACE FUNCTION sluice._delay_error(p_delay interval, p_max interval, p_queue text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_delay < interval '0' THEN
        RAISE EXCEPTION USING ERRCODE = 'SL006', MESSAGE = format('delay must not be negative, got %s', p_delay);
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'SL006',
        MESSAGE = format('delay must be at most %s (the max_delay of queue %s), got %s',
                         p_max, quote_literal(p_queue), p_delay),
        HINT = 'Raise the queue''s max_delay with sluice.alter_queue() (at most 365 days), or schedule the message later.';
END
$$;

-- _isolation_error: raise SL010 for an operation that needs READ COMMITTED
-- (every statement must see the latest commits) in a transaction that is not.
--
-- Parameters:
--   what  the operation, for the message ("receive")
--   hint  what to do instead, or NULL
-- Errors: SL010 invalid_isolation, always
CREATE OR REPLACE FUNCTION sluice._isolation_error(what text, hint text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    msg constant text := format('%s needs READ COMMITTED isolation, the transaction is %s',
                                what, upper(current_setting('transaction_isolation')));
BEGIN
    IF hint IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'SL010', MESSAGE = msg;
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'SL010', MESSAGE = msg, HINT = hint;
END
$$;

-- _dedup_lock_all: take the transaction-scoped locks of a queue's
-- deduplication keys (a send's, or a send_batch's), so that concurrent
-- sends of one key enqueue one message: in one statement, in the order of
-- the locks (so that concurrent batches cannot deadlock, whatever keys
-- share a lock). Under REPEATABLE READ or SERIALIZABLE a send could not see
-- the message a concurrent send committed after its snapshot: it raises
-- SL010 instead.
--
-- Parameters:
--   p_queue_id  queue id
--   p_keys      the keys (NULLs skipped)
-- Errors: SL010 invalid_isolation (not READ COMMITTED), when a key is given
CREATE OR REPLACE FUNCTION sluice._dedup_lock_all(p_queue_id int, p_keys text[])
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF cardinality(array_remove(p_keys, NULL)) = 0 THEN
        RETURN;   -- no key
    END IF;
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        PERFORM sluice._isolation_error('a send with a dedup_key',
            'Send it in a READ COMMITTED transaction: only then can it see a duplicate sent concurrently.');
    END IF;
    PERFORM pg_advisory_xact_lock(sluice._lock_ns('dedup'), l.h)
    FROM (SELECT DISTINCT hashtext(x) # p_queue_id AS h FROM unnest(p_keys) AS x WHERE x IS NOT NULL) l
    ORDER BY l.h;
END
$$;

-- _dedup_batch_ids: the ids send_batch returns for a batch with
-- dedup_keys (both engines: sluice._send_batch_dedup, e2_send_batch_dedup),
-- one per body in body order: a key sent before gives its message's id, a
-- key repeated in the batch the id of its first body, any other body the
-- next id of those the batch inserted (the j-th body inserted, in body
-- order, has p_ids[j]). One statement, whatever the number of keys.
-- (No SET clause, so that the caller's RETURN QUERY inlines it, as its
-- statement was before: every name is qualified instead.)
--
-- Parameters:
--   p_dedup  the batch's dedup keys, one per body (NULLs allowed)
--   p_old    key -> id of the keys sent before (a jsonb object)
--   p_ids    the ids of the bodies inserted, in body order (NULL: none)
-- Returns: one id per body, in the order of bodies
-- Errors: none
-- Calls: nothing
CREATE OR REPLACE FUNCTION sluice._dedup_batch_ids(p_dedup text[], p_old jsonb, p_ids bigint[])
RETURNS SETOF bigint
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE WHEN v.old_id IS NOT NULL THEN v.old_id
                WHEN v.dk IS NULL THEN p_ids[v.j::int]
                ELSE p_ids[v.first_j::int] END
    FROM (SELECT w.*, pg_catalog.first_value(w.j) OVER (PARTITION BY w.dk ORDER BY w.ord) AS first_j
          FROM (SELECT u.*, pg_catalog.count(*) FILTER (WHERE u.inserted) OVER (ORDER BY u.ord) AS j
                FROM (SELECT x.dk, x.ord, (p_old OPERATOR(pg_catalog.->>) x.dk)::bigint AS old_id,
                             x.dk IS NULL
                             OR (pg_catalog.row_number() OVER (PARTITION BY x.dk ORDER BY x.ord) OPERATOR(pg_catalog.=) 1
                                 AND p_old OPERATOR(pg_catalog.->>) x.dk IS NULL) AS inserted
                      FROM pg_catalog.unnest(p_dedup) WITH ORDINALITY AS x(dk, ord)) u) w) v
    ORDER BY v.ord
$$;

-- _receive_commit: let the receiving transaction commit asynchronously
-- (synchronous_commit off until it ends), remembering the caller's setting.
-- A receive writes leases and cursors (unlogged: lost in a crash anyway) and
-- sometimes a cut, a dead letter or a checkpoint (logged). Losing those in a
-- crash loses nothing: anything durable that depends on them (an ack, a
-- checkpoint, a send) commits later, and its synchronous commit flushes the
-- write-ahead log up to itself, the receive's records included; what was not
-- flushed is cut again, except keyed messages: a new cut could number a
-- key's messages in another order than the lost one handed out, so a cut
-- that numbers keyed messages restores the caller's setting
-- (_durable_commit). Without a flush to wait for, the group's dispatch
-- lock is held for CPU time only. ack, nack, extend, send and send_batch in
-- the same transaction restore the caller's setting (_durable_commit), so a
-- transaction that receives and completes commits as the caller asked.
-- Setting sluice.durable_receive to on keeps the caller's setting.
-- (No SET clause, which would cost each receive ~30 us: every name is
-- qualified instead.)
-- Returns: whether this call made the commit asynchronous (a value, so that
-- callers call it in an expression, v := sluice._receive_commit(), which
-- PL/pgSQL evaluates in place: a PERFORM is a statement, with an executor
-- started for it; docs/design.md, "What PL/pgSQL costs per transaction")
CREATE OR REPLACE FUNCTION sluice._receive_commit()
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v text;
BEGIN
    IF pg_catalog.current_setting('synchronous_commit') OPERATOR(pg_catalog.<>) 'off'
       AND coalesce(pg_catalog.current_setting('sluice.durable_receive', true), '')
           OPERATOR(pg_catalog.<>) ALL (ARRAY['on', 'true', '1'])
       AND coalesce(pg_catalog.current_setting('sluice.caller_synchronous_commit', true), '')
           OPERATOR(pg_catalog.=) '' THEN
        v := pg_catalog.set_config('sluice.caller_synchronous_commit',
                                   pg_catalog.current_setting('synchronous_commit'), true);
        v := pg_catalog.set_config('synchronous_commit', 'off', true);
        RETURN true;
    END IF;
    RETURN false;
END
$$;

-- _durable_commit: undo _receive_commit for the rest of the transaction: it
-- completes or sends messages, or its cut numbered keyed ones, so it commits
-- with the caller's synchronous_commit. Callers test
-- sluice.caller_synchronous_commit first (set only after a receive in this
-- transaction) to keep their hot path short. (No SET clause, which would
-- cost each call ~30 us: every name is qualified instead, as in
-- _receive_commit.)
CREATE OR REPLACE FUNCTION sluice._durable_commit()
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v text := pg_catalog.current_setting('sluice.caller_synchronous_commit', true);
BEGIN
    IF coalesce(v, '') OPERATOR(pg_catalog.<>) '' THEN
        PERFORM pg_catalog.set_config('synchronous_commit', v, true);
        PERFORM pg_catalog.set_config('sluice.caller_synchronous_commit', '', true);
    END IF;
END
$$;

-- _numbering_holder: the backend that holds a queue's cut lock (a receive
-- that numbered new messages and has not committed yet: they reach no group
-- until it does), and how long its transaction has been open (NULL when the
-- caller may not see that session's xact_start: pg_read_all_stats). No row
-- when nobody holds it.
--
-- Parameters:
--   p_queue_id  queue id
-- Returns: pid, held_for
CREATE OR REPLACE FUNCTION sluice._numbering_holder(p_queue_id int, OUT pid int, OUT held_for interval)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT l.pid, clock_timestamp() - a.xact_start
    FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
      AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
      AND l.classid = sluice._lock_ns('cut')::oid AND l.objid = p_queue_id::oid
    LIMIT 1
$$;

-- _lock_within: run a statement that takes a lock (LOCK TABLE, ALTER TABLE,
-- SELECT pg_advisory_xact_lock ...) with lock_timeout set to p_timeout, in a
-- block, so that a lock not granted in time ends the statement, not the
-- transaction; the caller's lock_timeout is put back either way. A lock
-- taken is kept until the transaction ends. A wait that the deadlock
-- detector ends (a deadlock_timeout below p_timeout: a statement that
-- takes several locks, one after the other, and a transaction that holds
-- one of them waits for another) counts as one that ran out.
--
-- Parameters:
--   p_sql      the statement (names qualified)
--   p_timeout  how long to wait, such as '50ms'
-- Returns: true when the statement ran (its lock granted), false when the
--   wait ran out
CREATE OR REPLACE FUNCTION sluice._lock_within(p_sql text, p_timeout text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_timeout constant text := current_setting('lock_timeout');
BEGIN
    PERFORM set_config('lock_timeout', p_timeout, true);
    BEGIN
        EXECUTE p_sql;
    EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
        PERFORM set_config('lock_timeout', v_timeout, true);
        RETURN false;
    END;
    PERFORM set_config('lock_timeout', v_timeout, true);
    RETURN true;
END
$$;

-- _lock_queue_exclusive: take a queue's lock exclusively (the lock every
-- call on the queue holds shared until its transaction ends), for
-- drop_queue, purge_queue and upgrade_queue, without holding the queue's
-- calls up behind a transaction that stays open with it. While an exclusive
-- request waits, PostgreSQL queues every new request for the lock behind it:
-- every send and receive of the queue would wait as long as the oldest
-- holder stays open. So it waits as PostgreSQL would, in blocking tries as
-- long as the holders' transactions last (1 s, or twice the longest seen to
-- end since it began, from its start to when last seen holding, 5 s at
-- most), until a holder has been open longer than that (by
-- pg_stat_activity's xact_start where the caller may read it, else since
-- this first saw it in pg_locks): a job run inside a receive's
-- transaction, a session idle in one. Then it waits in tries of 100 ms,
-- 200-600 ms apart, between which the queue's calls go on. A holder that
-- waits, itself or through others, for a lock this transaction holds (a
-- cycle that such short waits would keep PostgreSQL's deadlock check from
-- seeing) ends it with 40P01. It waits as long as the holders stay when lock_timeout is not
-- set; for lock_timeout at most when it is, then raises 55P03 naming the
-- holders' pids (none: a prepared transaction), holding nothing.
--
-- Parameters:
--   p_queue  the queue's name (its lock is the name's, existing or not)
--   p_what   the caller, for the messages ('purge_queue', ...)
-- Errors: 55P03 lock_not_available (lock_timeout passed; nothing changed),
--   40P01 deadlock_detected (a holder waits for this transaction)
-- Calls: _xact_lock_within
CREATE OR REPLACE FUNCTION sluice._lock_queue_exclusive(p_queue text, p_what text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    -- (pg_settings: lock_timeout in ms, where current_setting gives units)
    v_ms constant int := (SELECT s.setting FROM pg_settings s WHERE s.name = 'lock_timeout')::int;
    v_until constant timestamptz := CASE WHEN v_ms > 0 THEN clock_timestamp() + make_interval(secs => v_ms / 1000.0) END;
    v_db constant oid := (SELECT d.oid FROM pg_database d WHERE d.datname = current_database());
    -- each holding transaction (its virtualtransaction): [since when, last
    -- seen holding], in epoch seconds; at the last look, and now
    v_seen jsonb := '{}';
    v_held jsonb;
    v_pids int[];            -- the holders' pids
    v_long float8 := 1;      -- how long a holder's transaction may last before it counts as stuck, in seconds
    v_now timestamptz;
    v_stuck boolean;
    v_try interval;
BEGIN
    LOOP
        v_now := clock_timestamp();
        PERFORM pg_stat_clear_snapshot();   -- (pg_stat_activity as it is now)
        SELECT coalesce(jsonb_object_agg(l.virtualtransaction,
                                         jsonb_build_array(coalesce((v_seen -> l.virtualtransaction ->> 0)::float8,
                                                                    extract(epoch FROM coalesce(a.xact_start, v_now))),
                                                           extract(epoch FROM v_now))), '{}'),
               array_agg(l.pid ORDER BY l.pid) FILTER (WHERE l.pid IS NOT NULL)
        INTO v_held, v_pids
        FROM pg_locks l
        LEFT JOIN pg_stat_activity a ON a.pid = l.pid
        WHERE l.locktype = 'advisory' AND l.granted AND l.database = v_db AND l.pid IS DISTINCT FROM pg_backend_pid()
          AND l.classid = sluice._lock_ns('queue')::oid AND l.objid = hashtext(p_queue)::oid AND l.objsubid = 2;
        -- a cycle: a holder that waits for this transaction, itself or
        -- through others, each for a lock the next holds (not one only
        -- queued ahead of it, as pg_blocking_pids reports too: such a
        -- request, another call's try, may end by itself)
        IF EXISTS (WITH RECURSIVE w(pid) AS (
                       SELECT h FROM unnest(v_pids) h
                       UNION
                       SELECT g.pid
                       FROM w
                       JOIN pg_locks x ON x.pid = w.pid AND NOT x.granted
                       JOIN pg_locks g ON g.granted AND g.locktype = x.locktype
                                      AND g.database IS NOT DISTINCT FROM x.database
                                      AND g.relation IS NOT DISTINCT FROM x.relation
                                      AND g.page IS NOT DISTINCT FROM x.page AND g.tuple IS NOT DISTINCT FROM x.tuple
                                      AND g.virtualxid IS NOT DISTINCT FROM x.virtualxid
                                      AND g.transactionid IS NOT DISTINCT FROM x.transactionid
                                      AND g.classid IS NOT DISTINCT FROM x.classid
                                      AND g.objid IS NOT DISTINCT FROM x.objid
                                      AND g.objsubid IS NOT DISTINCT FROM x.objsubid
                       WHERE g.pid = ANY (pg_blocking_pids(w.pid)))
                   SELECT 1 FROM w WHERE w.pid = pg_backend_pid()) THEN
            RAISE EXCEPTION USING ERRCODE = '40P01',
                MESSAGE = format('%s of queue %s would deadlock: a transaction that holds the queue (pid %s) waits for a lock this one holds',
                                 p_what, quote_literal(p_queue), array_to_string(v_pids, ', ')),
                HINT = 'Retry; nothing was changed.';
        END IF;
        -- the holders seen before and gone since: how long transactions last
        -- here (at least: from their start to when last seen holding)
        -- (5 s at most: a blocking try holds the queue's calls up that long)
        v_long := least(5, greatest(v_long, (SELECT 2 * max((e.value ->> 1)::float8 - (e.value ->> 0)::float8)
                                             FROM jsonb_each(v_seen) e WHERE NOT v_held ? e.key)));
        v_seen := v_held;
        v_stuck := EXISTS (SELECT 1 FROM jsonb_each(v_held) e
                           WHERE (e.value ->> 0)::float8 <= extract(epoch FROM v_now) - v_long);
        v_try := greatest(least(coalesce(v_until - v_now, interval '1 hour'),
                                CASE WHEN v_stuck THEN interval '100 ms' ELSE make_interval(secs => v_long) END),
                          interval '1 ms');
        IF sluice._xact_lock_within(sluice._lock_ns('queue'), hashtext(p_queue),
                                    ceil(extract(epoch FROM v_try) * 1000)::int || 'ms') THEN
            RETURN;
        END IF;
        EXIT WHEN clock_timestamp() >= v_until;
        IF v_stuck THEN
            -- (the queue's calls go on meanwhile; a random pause, so that two
            -- such calls in a cycle do not each look while the other sleeps)
            PERFORM pg_sleep(least(0.2 + 0.4 * random(), coalesce(extract(epoch FROM v_until - clock_timestamp()), 1)));
        END IF;
    END LOOP;
    RAISE EXCEPTION USING ERRCODE = '55P03',
        MESSAGE = format('queue %s is in use by %s, and %s waited lock_timeout (%s ms) for it', quote_literal(p_queue),
                         CASE coalesce(cardinality(v_pids), 0) WHEN 1 THEN 'the transaction of pid ' || v_pids[1]
                              WHEN 0 THEN 'a prepared transaction'
                              ELSE 'the transactions of pids ' || array_to_string(v_pids, ', ') END,
                         p_what, v_ms),
        DETAIL = 'Every call on a queue holds it until its transaction ends; nothing was changed.',
        HINT = 'Retry once those transactions have ended (or end them), or set a longer lock_timeout.';
END
$$;

-- _xact_lock_within: take a transaction-level advisory lock, (p_key,
-- p_key2) or p_key alone (p_key2 NULL), waiting at most p_timeout, as
-- _lock_within does for any statement, without its dynamic statement
-- (planned anew at each call: ~55k instructions more a wait; a receive
-- waits for another's cut or lane). The caller's lock_timeout is put back
-- either way. (No SET clause, which would cost each call ~30 us: every name
-- is qualified instead.)
--
-- Parameters:
--   p_key, p_key2  the lock's key: pg_advisory_xact_lock(p_key, p_key2)
--                  (p_key an int), or pg_advisory_xact_lock(p_key)
--   p_timeout      how long to wait, such as '100ms'
-- Returns: true when the lock is held, false when the wait ran out
DROP FUNCTION IF EXISTS sluice._xact_lock_within(int, int, text);   -- (two overloads before)
DROP FUNCTION IF EXISTS sluice._xact_lock_within(bigint, text);
CREATE OR REPLACE FUNCTION sluice._xact_lock_within(p_key bigint, p_key2 int, p_timeout text)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_timeout constant text := pg_catalog.current_setting('lock_timeout');
    v text;
BEGIN
    v := pg_catalog.set_config('lock_timeout', p_timeout, true);
    BEGIN
        -- (statements, not assignments: a lock granted as lock_timeout
        -- fires is kept and leaves the cancel pending, raised at the next
        -- check for interrupts. A statement makes one before it ends,
        -- inside this block; an assignment need not, and the error comes
        -- after the block: the likely cause of a receive that failed in CI
        -- with "canceling statement due to lock timeout" while waits were
        -- assignments.)
        IF p_key2 IS NULL THEN
            PERFORM pg_catalog.pg_advisory_xact_lock(p_key);
        ELSE
            PERFORM pg_catalog.pg_advisory_xact_lock(p_key::int, p_key2);
        END IF;
    EXCEPTION WHEN lock_not_available THEN
        v := pg_catalog.set_config('lock_timeout', v_timeout, true);
        RETURN false;
    END;
    v := pg_catalog.set_config('lock_timeout', v_timeout, true);
    RETURN true;
END
$$;

-- _snapshot_with: a snapshot with one more transaction in progress (a cut
-- of engine 2 treats its own transaction so: its messages are not
-- committed).
--
-- Parameters:
--   p_snap  the snapshot
--   p_xid   a transaction id below its xmax
-- Returns: the snapshot, p_xid in its in-progress list
CREATE OR REPLACE FUNCTION sluice._snapshot_with(p_snap pg_snapshot, p_xid xid8)
RETURNS pg_snapshot
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT format('%s:%s:%s', least(pg_snapshot_xmin(p_snap), p_xid), pg_snapshot_xmax(p_snap),
                  array_to_string(ARRAY(SELECT DISTINCT x FROM (SELECT pg_snapshot_xip(p_snap) AS x
                                                                UNION ALL SELECT p_xid) u ORDER BY x), ','))::pg_snapshot
$$;
