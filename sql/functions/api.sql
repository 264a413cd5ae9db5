-- Group: receiving and completing
--
-- These functions check their arguments, find the queue and group, and call
-- the queue's copy of the engine function (schema sluice_q<id>).
--
-- A receipt is current while its lease has not expired, it is the newest
-- delivery of the message in the group (no redelivery, no nack or release
-- since), and the message is not completed.
-- ack, nack and extend act only on current receipts; a stale receipt (expired,
-- superseded, already acked, or forged) changes nothing and is not counted.
-- A receipt that is not of sluice's form at all raises SL008.

-- receive: lease up to max_messages ready messages of a queue to the caller,
-- for one consumer group. A queue's messages are split into lanes (the
-- queue's lanes option): a key's messages all in one lane, unkeyed ones
-- dealt out in chunks. A receive takes the lanes that have work and that no
-- other receive of the group holds, lanes with prioritized messages first;
-- when every lane with work is held, it waits for one, at most 100 ms (so
-- consumers beyond the number of lanes wait rather than poll). Within a lane: messages whose lease expired
-- (or whose keyed retry came due) come first (with attempt + 1), then
-- messages of keys that were waiting, then unkeyed messages with a priority
-- above 0 (highest first), then the rest in commit order; messages with a
-- priority below 0 only when no lane the receive holds has anything else.
-- Commit order holds per lane (a queue with lanes = 1 keeps it for the whole
-- queue); engine 2 looks at the lanes in the order its cuts deal to them,
-- from the lane dealt to longest ago, so one consumer gets unkeyed messages
-- in commit order while those it has not received were dealt to fewer lanes
-- than the queue has. A keyed message is returned only when every earlier
-- message of its key is completed in the group, or returned by this same
-- call before it (a run of one key, in order): handle a key's messages in
-- order and stop at the first failure. A message that has used up the queue's max_attempts through
-- expired leases goes to the dead letters instead.
--
-- Call it in its own transaction (autocommit) or at the start of a short one:
-- it holds the lanes it took until the transaction ends (other consumers of
-- the group take other lanes meanwhile), and a receive that numbered new
-- messages holds them back from every group until it commits. It sets synchronous_commit to off
-- for the rest of its transaction (on engine 2, unless it found its group
-- idle and wrote nothing), so that its commit does not wait for the
-- disk: what it writes (leases, the cursor, new cuts) is safe to lose in a
-- crash, since whatever durable depends on it commits later and flushes it;
-- a receive that numbered keyed messages commits as the caller asked, so
-- that a key's order, once handed out, survives a crash.
-- ack, nack, extend, send and send_batch in the same transaction set the
-- caller's synchronous_commit back; other writes of the caller's in that
-- transaction commit asynchronously unless sluice.durable_receive is on
-- (SET sluice.durable_receive = on keeps the caller's setting).
-- A receive that finds nothing to take in an idle group notes so in its
-- session; the session's next receives of the group return nothing at
-- less cost while the note holds and no newer batch is numbered: new
-- messages are seen at once (a receive that carries receipts to ack does
-- not use the note). On engine 1 (the setting sluice.idle_<queue id>) the
-- note holds 25 ms: a lease that expires or a keyed nack of another
-- session is seen up to 25 ms later. On engine 2
-- (sluice.idle_<queue id>_<group id>) it holds until a lease of the group
-- may end, a second at most and 25 ms at least, so a lease that ends is
-- seen at once (up to 25 ms later when it ends within 25 ms of the note);
-- 25 ms while a lane holds keys or has keyed messages waiting (a keyed
-- nack of another session), has no state in the slot, or is another
-- receive's; a message stored in the slot before a rotation by a
-- transaction that commits after it is seen up to a second later. On
-- engine 1, a receive that
-- looked at every lane of its group and took all there was notes the same
-- for 25 ms; while that holds, the session's receives that number new
-- messages look only at the lanes those were numbered into, so a lease
-- that expires or a keyed nack of another session in that time is seen up
-- to 25 ms later.
--
-- Parameters:
--   queue         queue name
--   group_name    consumer group ('default')
--   max_messages  1 to 10000 (1)
--   lease         how long the caller holds the messages (the queue's lease option)
--   consumer      optional free text naming the caller (at most 200 characters)
--   ack           optional receipts to complete first, in the same call (a
--                 consumer loop's previous batch): one round trip and one
--                 transaction for both. They commit with the receive, that
--                 is asynchronously: after a crash of the server they may be
--                 lost, and their messages delivered again (at least once).
--                 Stale receipts are ignored, as by ack.
-- Returns: SETOF sluice.message, in the order above:
--   id                the message id (a retry or a redrive keeps the original id)
--   body              the JSON body
--   headers           the headers object, or NULL
--   key               the ordering key, or NULL
--   priority          the priority given to send
--   attempt           1 on the first delivery, one more per redelivery (expired lease, retry)
--   sent_at           when the message was first sent
--   receipt           names this delivery: pass it to ack, nack or extend
--   lease_expires_at  when the lease ends unless extended
--   pos               the message's position in the queue's commit order
-- Errors: SL001, SL002, SL003, SL006 invalid_argument (max_messages, lease,
--         consumer), SL008 invalid_receipt (ack), SL010 invalid_isolation
CREATE OR REPLACE FUNCTION sluice.receive(queue text, group_name text DEFAULT 'default', max_messages int DEFAULT 1,
                                          lease interval DEFAULT NULL, consumer text DEFAULT NULL,
                                          ack text[] DEFAULT NULL)
RETURNS SETOF sluice.message
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp   -- (and the engine's settings: end of file)
AS $$
DECLARE
    q sluice.queue;
    g sluice.consumer_group;
    v_lease interval;
    v_epoch bigint;
    v_slot smallint;
    v_started timestamptz;
    v_open boolean;
    r sluice.message;
    v_now timestamptz;
    v_note text;       -- the session's idle note of the group (engine 2)
    v_noted bigint;    -- the cut it names while it holds
    v_cut bigint;      -- the newest cut's number, as the probe found it
    v_probed boolean;  -- what the probe found: something to number (NULL: not probed)
    -- (calls on the hot path are made in expressions, v_done := f(...),
    -- whose value is not read: PL/pgSQL evaluates an expression in place,
    -- where a PERFORM is a statement with an executor started for it)
    v_done boolean;
BEGIN
    -- (the argument checks in one expression, the usual case: each
    -- expression costs its own start in every transaction)
    IF max_messages IS NULL OR max_messages < 1 OR max_messages > 10000 OR length(receive.consumer) > 200
       OR current_setting('transaction_isolation') <> 'read committed' THEN
        IF max_messages IS NULL OR max_messages < 1 OR max_messages > 10000 THEN
            RAISE EXCEPTION USING ERRCODE = 'SL006',
                MESSAGE = format('max_messages must be from 1 to 10000, got %s', coalesce(max_messages::text, 'NULL'));
        END IF;
        IF length(receive.consumer) > 200 THEN
            RAISE EXCEPTION USING ERRCODE = 'SL006', MESSAGE = 'consumer must be at most 200 characters';
        END IF;
        PERFORM sluice._isolation_error('receive', 'Receive in its own transaction; acks may run at any isolation level.');
    END IF;
    -- (the lookups inline: _get_queue and _get_group raise when there is no
    -- row; the queue's shared lock first, as sluice._use_queue takes it)
    v_done := pg_advisory_xact_lock_shared(sluice._lock_ns('queue'), hashtext(receive.queue)) IS NULL;
    SELECT * INTO q FROM sluice.queue qq WHERE qq.name = receive.queue;
    SELECT * INTO g FROM sluice.consumer_group gg WHERE gg.queue_id = q.id AND gg.name = receive.group_name;
    -- No queue or no group, a temporary group to touch, a lease to check,
    -- receipts to ack, an engine 1 queue, an upgrade in progress: one test
    -- for them all in the most frequent receive, which has none (each
    -- expression is made ready in every receive, ~3k instructions), then
    -- one by one.
    v_lease := coalesce(receive.lease, q.lease);
    IF NOT FOUND OR (g.ttl IS NOT NULL AND g.used_at < clock_timestamp() - g.ttl / 10)
       OR sluice._lease_ok(v_lease) IS NOT TRUE
       OR receive.ack IS NOT NULL OR q.engine <> 2 OR q.predecessor IS NOT NULL THEN
        IF NOT FOUND THEN   -- (of the group's SELECT)
            IF q.id IS NULL THEN
                q := sluice._get_queue(receive.queue);
            END IF;
            g := sluice._get_group(q.id, q.name, receive.group_name);
        END IF;
        IF g.ttl IS NOT NULL AND g.used_at < clock_timestamp() - g.ttl / 10 THEN
            PERFORM sluice._touch_group(g.id);   -- a temporary group in use (create_group's ttl)
        END IF;
        IF sluice._lease_ok(v_lease) IS NOT TRUE THEN
            PERFORM sluice._check_lease('lease', v_lease);
        END IF;
        -- Receipts to ack, as sluice.ack checks them: one by _receipt_ok; a
        -- batch of engine 2 by e2_ack as it acks it. (Not in the expression
        -- above: PL/pgSQL makes all of an expression ready, once a transaction,
        -- whatever branch runs: ~30k instructions in every receive.)
        IF receive.ack IS NOT NULL THEN
            IF cardinality(receive.ack) = 1 THEN
                IF sluice._receipt_ok(receive.ack[1]) IS NOT TRUE THEN
                    PERFORM sluice._parse_receipts(receive.ack);   -- raises SL008, naming the receipt
                END IF;
            ELSIF cardinality(receive.ack) > 1 AND (q.engine <> 2 OR q.predecessor IS NOT NULL) THEN
                IF sluice._receipts_ok(receive.ack) IS NOT TRUE THEN
                    PERFORM sluice._parse_receipts(receive.ack);
                END IF;
            END IF;
        END IF;
        -- (engine 2's copy does this itself, before it writes anything: an idle
        -- group's poll, which writes nothing, need not)
        IF q.engine <> 2 OR q.predecessor IS NOT NULL THEN
            v_done := sluice._receive_commit();
        END IF;
        IF q.predecessor IS NOT NULL THEN
            -- an upgrade in progress: the predecessor's messages first, the
            -- new queue's once it has nothing ready or in flight for the group
            v_open := false;
            FOR r IN SELECT * FROM sluice._pred_receive(q, g, max_messages, v_lease, receive.consumer, receive.ack) LOOP
                IF r.id IS NULL THEN
                    v_open := true;
                ELSE
                    RETURN NEXT r;
                    max_messages := max_messages - 1;
                END IF;
            END LOOP;
            IF NOT v_open OR max_messages = 0 THEN
                RETURN;
            END IF;
        END IF;
    END IF;
    -- The queue's copy, called statically through its path (_queue_path).
    IF q.engine = 2 THEN
        -- the copy of the current epoch's slot (its statements name the
        -- slot's tables); with it the queue's path set, the time and the
        -- session's idle note of the group read (in the statement: each
        -- expression of their own cost a receive ~3k instructions)
        SELECT e.epoch, e.slot, e.started_at, clock_timestamp(),
               current_setting(sluice._idle_note_name(q.id, g.id), true),
               set_config('search_path', sluice._queue_path(q.id), true) IS NULL
        INTO v_epoch, v_slot, v_started, v_now, v_note, v_done
        FROM sluice.epoch e WHERE e.queue_id = q.id ORDER BY e.epoch DESC LIMIT 1;
        -- An idle group's poll (most calls of a consumer polling a queue
        -- with nothing for it): while the session's idle note of the group
        -- holds and the queue's upkeep is not due, the copy's probe alone
        -- (e2_idle_probe_<slot>: the current slot's messages; one stored in
        -- an older slot is seen once the note has run out, see there);
        -- nothing numbered since the note and nothing to number: nothing to
        -- look at. Else the receive goes on with what it found
        -- (e2_before_look__s, which probes itself when this did not).
        -- (the note read into a variable first: passed to _idle_note_cut,
        -- which names it four times, as the expression that reads it, an
        -- empty receive cost ~0.04M instructions more, measured)
        v_noted := sluice._idle_note_cut(v_note, v_now);
        -- (two IFs: PL/pgSQL makes each expression ready once a transaction,
        -- all of it, and most receives stop at the first)
        IF v_noted IS NOT NULL AND receive.ack IS NULL AND q.predecessor IS NULL THEN
            IF NOT sluice._upkeep_due(q.id, v_now) THEN
                IF v_slot = 0 THEN
                    SELECT x.cut_no, x.due INTO v_cut, v_probed FROM e2_idle_probe_0(v_now) x;
                ELSIF v_slot = 1 THEN
                    SELECT x.cut_no, x.due INTO v_cut, v_probed FROM e2_idle_probe_1(v_now) x;
                ELSIF v_slot = 2 THEN
                    SELECT x.cut_no, x.due INTO v_cut, v_probed FROM e2_idle_probe_2(v_now) x;
                ELSE
                    SELECT x.cut_no, x.due INTO v_cut, v_probed FROM e2_idle_probe_3(v_now) x;
                END IF;
                IF NOT v_probed AND v_cut = v_noted THEN
                    RETURN;
                END IF;
            END IF;
        END IF;
        IF v_slot = 0 THEN
            RETURN QUERY SELECT * FROM e2_receive_0(q, g, max_messages, v_lease, receive.consumer, receive.ack,
                                                    v_epoch, v_started, v_slot, v_noted, v_probed);
        ELSIF v_slot = 1 THEN
            RETURN QUERY SELECT * FROM e2_receive_1(q, g, max_messages, v_lease, receive.consumer, receive.ack,
                                                    v_epoch, v_started, v_slot, v_noted, v_probed);
        ELSIF v_slot = 2 THEN
            RETURN QUERY SELECT * FROM e2_receive_2(q, g, max_messages, v_lease, receive.consumer, receive.ack,
                                                    v_epoch, v_started, v_slot, v_noted, v_probed);
        ELSE
            RETURN QUERY SELECT * FROM e2_receive_3(q, g, max_messages, v_lease, receive.consumer, receive.ack,
                                                    v_epoch, v_started, v_slot, v_noted, v_probed);
        END IF;
        RETURN;
    END IF;
    v_done := set_config('search_path', sluice._queue_path(q.id), true) IS NULL;
    RETURN QUERY SELECT * FROM e_receive(q, g, max_messages, v_lease, receive.consumer, receive.ack);
END
$$;

-- ack: complete messages. Joins the caller's transaction, so the ack, the
-- application's writes and any follow-up sends commit or roll back together.
-- With durable => false the transaction commits asynchronously
-- (synchronous_commit off until it ends): for an ack that is its own
-- transaction, as a consumer loop's usually is, it does not wait for the
-- disk. A server crash may then lose the ack, and its messages are
-- delivered again (at-least-once); it never loses a message. Leave it true
-- (the default) in a transaction whose other writes must be durable.
--
-- Parameters:
--   queue       queue name
--   group_name  consumer group
--   receipts    receipts from receive
--   durable     false: commit this transaction without waiting for the disk
-- Returns: how many messages were completed now; stale receipts are not counted
-- Errors: SL001, SL002, SL003, SL006 (NULL receipts or durable), SL008 invalid_receipt
CREATE OR REPLACE FUNCTION sluice.ack(queue text, group_name text, receipts text[], durable boolean DEFAULT true)
RETURNS int
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp   -- (and the engine's settings: end of file)
AS $$
DECLARE
    q sluice.queue;
    g sluice.consumer_group;
    v_qid int;
    v_engine smallint;
    v_pred boolean;
    v_gid int;
    n int;
    v_done boolean;   -- (calls made in expressions, as in sluice.receive)
BEGIN
    -- (the lookups inline, queue and group in one statement: _use_queue and
    -- _get_group raise when there is no row; the queue's shared lock first,
    -- as sluice._use_queue takes it)
    v_done := pg_advisory_xact_lock_shared(sluice._lock_ns('queue'), hashtext(ack.queue)) IS NULL;
    SELECT qq.id, qq.engine, qq.predecessor IS NOT NULL, gg.id INTO v_qid, v_engine, v_pred, v_gid
    FROM sluice.queue qq
    LEFT JOIN sluice.consumer_group gg ON gg.queue_id = qq.id AND gg.name = ack.group_name
    WHERE qq.name = ack.queue;
    -- (no schema: dropped after the snapshot of a REPEATABLE READ transaction)
    IF v_qid IS NULL OR to_regnamespace(sluice._qschema(v_qid)) IS NULL THEN
        q := sluice._use_queue(ack.queue);
        v_qid := q.id;
        v_engine := q.engine;
        v_pred := q.predecessor IS NOT NULL;
    END IF;
    -- (one expression, the checks one by one only when it says one fails
    -- or a receive in this transaction made its commit asynchronous)
    IF v_gid IS NULL OR ack.receipts IS NULL OR ack.durable IS NULL
       OR current_setting('sluice.caller_synchronous_commit', true) <> '' THEN
        IF v_gid IS NULL THEN
            v_gid := (sluice._get_group(v_qid, ack.queue, ack.group_name)).id;
        END IF;
        IF ack.receipts IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'SL006', MESSAGE = 'receipts must not be NULL';
        END IF;
        IF ack.durable IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'SL006', MESSAGE = 'durable must not be NULL',
                HINT = 'true (the default) waits for the disk at commit; false does not';
        END IF;
        IF current_setting('sluice.caller_synchronous_commit', true) <> '' THEN
            PERFORM sluice._durable_commit();   -- after a receive in this transaction
        END IF;
    END IF;
    -- None: 0. Malformed input raises SL008 and changes nothing (e_ack
    -- reads receipts that are well-formed; e2_ack checks a batch itself,
    -- as it compares the receipts of whole leases with those it makes).
    -- (Expressions, no statement: one receipt by _receipt_ok, a batch of
    -- engine 1 by _receipts_ok, whose bounded repeats cost ~3x as much on
    -- one; in two expressions, as PL/pgSQL makes all of one ready, once a
    -- transaction, whatever branch runs.)
    IF cardinality(ack.receipts) <> 1 OR sluice._receipt_ok(ack.receipts[1]) IS NOT TRUE THEN
        IF cardinality(ack.receipts) = 0 THEN
            RETURN 0;
        ELSIF cardinality(ack.receipts) = 1 OR v_engine <> 2 OR v_pred THEN
            IF cardinality(ack.receipts) = 1 OR sluice._receipts_ok(ack.receipts) IS NOT TRUE THEN
                PERFORM sluice._parse_receipts(ack.receipts);   -- raises SL008, naming the receipt
            END IF;
        END IF;
    END IF;
    v_done := set_config('search_path', sluice._queue_path(v_qid), true) IS NULL;
    IF v_engine = 2 THEN
        n := e2_ack(v_gid, ack.receipts);   -- (each receipt by the copy of its slot)
    ELSE
        n := e_ack(v_gid, ack.receipts);   -- the queue's copy (_queue_path)
    END IF;
    IF v_pred OR NOT ack.durable THEN
        IF v_pred THEN   -- (an upgrade in progress: receipts of the predecessor)
            -- (the queue's row stays under the queue's shared lock; of the
            -- group's, _pred_complete reads the name only, which a concurrent
            -- seek_group or drop_group does not change under this call)
            SELECT * INTO STRICT q FROM sluice.queue qq WHERE qq.id = v_qid;
            g.name := ack.group_name;
            n := n + sluice._pred_complete(q, g, 'ack', ack.receipts, NULL, NULL);
        END IF;
        IF NOT ack.durable THEN
            PERFORM set_config('synchronous_commit', 'off', true);
        END IF;
    END IF;
    RETURN n;
END
$$;

-- nack: give a message back after a failure. It is delivered again to this
-- group after the delay (by default backoff_base * 2^(attempt-1), capped at
-- backoff_max); once the message has had max_attempts deliveries it becomes a
-- dead letter of the group, with the error. A keyed message is retried in
-- place: the later messages of its key wait for it, and those of them still
-- leased (the rest of a run) are released: their receipts go stale and they
-- come back after it, with the same attempt number (also when it becomes a
-- dead letter: then they come back at once). Waits for a receive of
-- the group in progress.
--
-- Parameters:
--   queue       queue name
--   group_name  consumer group
--   receipt     receipt from receive
--   delay       retry delay (NULL: exponential backoff; 0: at once; at most
--               the queue's max_delay)
--   error       optional error text, kept with a dead letter (at most 10000 characters)
-- Returns: true if the receipt was current (retry scheduled or dead-lettered),
--          false for a stale receipt
-- Errors: SL001, SL002, SL003, SL006 (delay negative or over max_delay, error
--         too long), SL008 invalid_receipt
-- Tables: unkeyed: a completion, and either a retry copy for this group or a
--         dead letter; keyed: parked delivery rows, or a dead letter
CREATE OR REPLACE FUNCTION sluice.nack(queue text, group_name text, receipt text, delay interval DEFAULT NULL,
                                       error text DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp   -- (and the engine's settings: end of file)
AS $$
DECLARE
    q sluice.queue := sluice._use_queue(nack.queue);
    g sluice.consumer_group := sluice._get_group(q.id, q.name, nack.group_name);
    ok boolean;
BEGIN
    PERFORM sluice._parse_receipts(ARRAY[nack.receipt]);
    IF current_setting('sluice.caller_synchronous_commit', true) <> '' THEN
        PERFORM sluice._durable_commit();   -- after a receive in this transaction
    END IF;
    IF nack.delay < interval '0' OR nack.delay > q.max_delay THEN
        PERFORM sluice._delay_error(nack.delay, q.max_delay, q.name);
    END IF;
    IF length(nack.error) > 10000 THEN
        RAISE EXCEPTION USING ERRCODE = 'SL006', MESSAGE = 'error must be at most 10000 characters';
    END IF;
    PERFORM set_config('search_path', sluice._queue_path(q.id), true);
    IF q.engine = 2 THEN
        ok := e2_nack(q, g, nack.receipt, nack.delay, nack.error);
        IF NOT ok AND q.predecessor IS NOT NULL THEN   -- (an upgrade in progress)
            ok := sluice._pred_complete(q, g, 'nack', ARRAY[nack.receipt], nack.delay, nack.error) = 1;
        END IF;
        -- (as below: a keyed nack writes the lane's state, which the note
        -- of e2_receive__s would hide for up to 25 ms: e2_idle_until__s)
        PERFORM set_config(sluice._idle_note_name(q.id, g.id), '', false);
        RETURN ok;
    END IF;
    ok := e_nack(q, g, nack.receipt, nack.delay, nack.error);   -- the queue's copy (_queue_path)
    -- What this nack makes due, this session's next receive sees at once
    -- (its idle note goes: e_idle); other sessions' within their note's bound.
    PERFORM set_config(sluice._idle_note_name(q.id), '', false);
    RETURN ok;
END
$$;

-- extend: renew leases (heartbeat): each current lease then lasts at least
-- until now + lease. A lease is never shortened (one that ends later keeps
-- its end); to give a message back sooner, nack it.
--
-- Parameters:
--   queue       queue name
--   group_name  consumer group
--   receipts    receipts from receive
--   lease       from now, 1 microsecond to 7 days
-- Returns: how many leases were renewed; stale receipts are not counted
-- Errors: SL001, SL002, SL003, SL006 (lease), SL008 invalid_receipt
CREATE OR REPLACE FUNCTION sluice.extend(queue text, group_name text, receipts text[], lease interval)
RETURNS int
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp   -- (and the engine's settings: end of file)
AS $$
DECLARE
    q sluice.queue := sluice._use_queue(extend.queue);
    g sluice.consumer_group := sluice._get_group(q.id, q.name, extend.group_name);
    n int;
BEGIN
    IF sluice._lease_ok(extend.lease) IS NOT TRUE THEN
        PERFORM sluice._check_lease('lease', extend.lease);
    END IF;
    PERFORM sluice._parse_receipts(extend.receipts);
    IF current_setting('sluice.caller_synchronous_commit', true) <> '' THEN
        PERFORM sluice._durable_commit();   -- after a receive in this transaction
    END IF;
    IF cardinality(extend.receipts) = 0 THEN
        RETURN 0;
    END IF;
    PERFORM set_config('search_path', sluice._queue_path(q.id), true);
    IF q.engine = 2 THEN
        n := e2_extend(g.id, extend.receipts, extend.lease);
        IF q.predecessor IS NOT NULL THEN   -- (an upgrade in progress)
            n := n + sluice._pred_complete(q, g, 'extend', extend.receipts, extend.lease, NULL);
        END IF;
        RETURN n;
    END IF;
    n := e_extend(g.id, extend.receipts, extend.lease);   -- the queue's copy (_queue_path)
    RETURN n;
END
$$;

-- _status_row: what every row of sluice.status for a queue says of the
-- queue itself, and, as it is, the one row of a queue without groups
-- (group_name and the counts NULL, holds_reclaim and estimated false).
-- e_queue_status of both engines starts each group's row from it.
--
-- Parameters:
--   p_queue        queue name
--   p_head         the last position numbered (engine 2: the sum over its lanes)
--   p_live_epochs  storage epochs the queue keeps
--   p_pid, p_for   the holder of the queue's numbering and how long its
--                  transaction has been open (sluice._numbering_holder), or NULLs
-- Returns: sluice.queue_status
-- Errors: none
-- Calls: nothing
CREATE OR REPLACE FUNCTION sluice._status_row(p_queue text, p_head bigint, p_live_epochs bigint,
                                              p_pid int, p_for interval)
RETURNS sluice.queue_status
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s sluice.queue_status;
BEGIN
    s.queue := p_queue;
    s.head := p_head;
    s.live_epochs := p_live_epochs;
    s.holds_reclaim := false;
    s.estimated := false;
    s.held_by_pid := p_pid;
    s.held_for := p_for;
    RETURN s;
END
$$;

-- status: depth and progress of each group of a queue (or of every queue).
-- Reads only; exact at the time of the call, except ready and lag when a
-- queue has more messages not numbered yet than the limit below (estimated
-- is then true). Costs O(groups x (in-flight window + batch rows and keyed
-- messages numbered after the group's cursors) + delayed messages + dead
-- letters), plus at most 3 x (limit + 1) messages not numbered yet per
-- queue: the same whatever the size of a backlog nobody has received from
-- yet. Of every queue (queue NULL), each queue is read in a subtransaction
-- whose locks are let go once its rows are kept: the call holds no lock on
-- the queues' tables when it returns, however many queues there are (a
-- queue's read takes ~80), and does not fill the lock table that every
-- session shares (a queue whose counts are estimated keeps one lock, on
-- its id sequence). So, in a REPEATABLE READ transaction, nothing keeps
-- reclaim from truncating a slot the call read: a later read of that
-- queue in the same transaction may find the slot empty.
--
-- While receives run (READ COMMITTED), a queue is read in a few statements
-- (its newest cut, its messages not numbered yet, each group's lanes),
-- each seeing what was committed when it began: a message numbered and
-- taken between them can be counted as ready (among those not numbered
-- yet) and also as in flight, or as ready once acked. No count is ever
-- below zero, nor a head behind its cursor; once the queue is still, every
-- count is exact.
--
-- Messages not numbered yet: a committed message is numbered (given its
-- position) by the next receive of any group, at most 4,000 per receive
-- (or its max_messages, rounded up to a thousand, when that is more; on
-- engine 2, by a receive that finds no position to take, 4,096 a cut, and
-- every delayed message come due at once); until then status counts it by
-- reading it. It reads at most limit + 1
-- messages of each of three kinds, in index order, where limit is the
-- setting sluice.status_exact_limit (10,000 by default; 0 to 1,000,000,000;
-- SET per session, or ALTER ROLE ... SET, ALTER DATABASE ... SET): (1)
-- messages of transactions that were in progress at the last cut, (2)
-- delayed messages that came due since the last cut, (3) messages of
-- transactions that began after the last cut, in transaction order (a
-- preloaded backlog is of this kind).
--
-- Up to limit messages of each kind, every count is exact and estimated is
-- false. When a kind has more, estimated is true (in every group's row of
-- the queue) and ready and lag count the first limit of that kind exactly
-- plus, for the rest: of kind 3, the ids the queue's id sequence gave out
-- after the last message counted, less the delayed messages among them
-- (exact for a backlog of committed sends, but it also counts sends rolled
-- back or not committed yet, whose ids were drawn, counts a retry or
-- redrive meant for another group in every group, and may be off by a few
-- where concurrent transactions' ids interleave around the last message
-- counted); of kind 1, each transaction's messages from its first and last
-- id; of kind 2, nothing (ready and lag are then a lower bound).
--
-- The rest counts as ready: waiting counts only the keyed messages among
-- those counted, and oldest_pending_age, when it comes from messages not
-- numbered yet, is the oldest of those counted and of the delayed ones.
-- delayed, in_flight, dead, dead_lettered and the positions are always
-- exact. Receives number a backlog 4,000 messages at a time (more for a
-- receive of more), so while one is
-- consumed its numbered part is counted exactly and only the part not
-- reached yet is estimated.
--
-- Parameters:
--   queue  queue name (NULL: every queue)
-- Returns: SETOF sluice.queue_status, one row per group (a queue without
--   groups gives one row with group_name NULL):
--   queue               the queue
--   group_name          the group
--   ready               deliverable now (new, expired leases, retries due), not
--                       counting waiting
--   waiting             keyed messages that would be ready but wait for an
--                       earlier message of their key to be completed
--   estimated           true when ready and lag include an estimate of the
--                       messages not numbered yet
--   dead_lettered       (the last column) every message the group dead-lettered,
--                       redriven ones included: grows only, while the group
--                       exists (a counter, where dead is a gauge)
--   delayed             not deliverable before a later time (delay, retry backoff)
--   in_flight           leased and not completed
--   dead                dead letters not redriven or discarded
--   oldest_pending_age  age of the oldest message the group has not completed
--   lag                 messages the group has not completed (ready, in flight,
--                       waiting for a retry, committed but not numbered yet):
--                       ready + waiting + in_flight + the retries among delayed
--                       (a send delayed to later is not in lag)
--   cursor, lwm, head   positions: last dispatched, first not completed, last
--                       numbered (engine 2 numbers each lane apart: the sums
--                       over its lanes, lwm 1 + the positions before each
--                       lane's first one not completed)
--   live_epochs         storage epochs the queue keeps (1 to its slots)
--   holds_reclaim       true when this group keeps an old epoch from being reclaimed
--   held_by_pid         the backend whose open transaction holds the queue's
--                       numbering: a receive that numbered new messages and has
--                       not committed, which keeps them from every group until
--                       it does (NULL: none)
--   held_for            how long that transaction has been open (NULL when the
--                       caller may not see it: pg_read_all_stats)
-- Errors: SL001, SL002, SL006 (the setting sluice.status_exact_limit is not
--   a number from 0 to 1000000000)
CREATE OR REPLACE FUNCTION sluice.status(queue text DEFAULT NULL)
RETURNS SETOF sluice.queue_status
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q sluice.queue;
    v_rows sluice.queue_status[];
BEGIN
    IF status.queue IS NOT NULL THEN
        q := sluice._use_queue(status.queue);
        IF q.predecessor IS NOT NULL THEN
            RETURN QUERY SELECT * FROM sluice._pred_status(q);
            RETURN;
        END IF;
        RETURN QUERY EXECUTE format('SELECT * FROM %I.e_queue_status($1)', sluice._qschema(q.id)) USING q;
        RETURN;
    END IF;
    -- Every queue: each read in a subtransaction that is rolled back once
    -- its rows are kept, which releases the locks it took. A queue's read
    -- locks ~80 relations (its tables' partitions and indexes) until the
    -- transaction ends, and the lock table is shared by every session
    -- (max_locks_per_transaction x max_connections entries, 6,400 by
    -- default): kept, 112 queues held 7,026 locks, and a few more queues
    -- made status() (and /metrics, which calls it) fail with "out of shared
    -- memory", and other sessions' statements with it while it ran.
    FOR q IN SELECT * FROM sluice.queue qq
             WHERE NOT EXISTS (SELECT 1 FROM sluice.queue s WHERE s.predecessor = qq.id)   -- (in its successor's)
             ORDER BY qq.name LOOP
        v_rows := NULL;
        BEGIN
            -- (waits for a drop of the queue in progress, then skips it)
            PERFORM pg_advisory_xact_lock_shared(sluice._lock_ns('queue'), hashtext(q.name));
            IF to_regnamespace(sluice._qschema(q.id)) IS NOT NULL
               AND EXISTS (SELECT 1 FROM sluice.queue qq WHERE qq.id = q.id) THEN
                IF q.predecessor IS NOT NULL THEN
                    SELECT array_agg(s) INTO v_rows FROM sluice._pred_status(q) s;
                ELSE
                    EXECUTE format('SELECT array_agg(s) FROM %I.e_queue_status($1) s', sluice._qschema(q.id)) INTO v_rows USING q;
                END IF;
            END IF;
            RAISE EXCEPTION USING ERRCODE = 'SL000';   -- (release the locks; v_rows stays)
        EXCEPTION WHEN SQLSTATE 'SL000' THEN
            NULL;
        END;
        RETURN QUERY SELECT * FROM unnest(v_rows);
    END LOOP;
END
$$;

-- peek: look at the messages a queue stores, without receiving them. Leases
-- nothing, writes nothing, changes nothing (no group's cursor, no attempt).
-- A queue stores a message from its send until its storage epoch is
-- reclaimed (see the retention option): peek shows messages not yet
-- delivered, in flight, and also completed ones that wait for reclaim;
-- not messages whose sending transaction has not committed. A retry
-- (after a nack) or a redrive is stored as a copy of its message for one
-- group, with the same id: peek shows one row per message id, and names
-- those groups in resent_to. Reads every message the queue stores (there is
-- no index by id): O(messages stored).
--
-- Parameters:
--   queue         queue name
--   max_messages  1 to 1000 (10)
--   after_id      only messages with an id above it (NULL: from the first);
--                 pass the last id of a page to get the next one
-- Returns: SETOF sluice.stored_message, by id:
--   id          the message id (as receive returns it)
--   body        the JSON body
--   headers     the headers object, or NULL
--   key         the ordering key, or NULL
--   priority    the priority given to send
--   sent_at     when the message was first sent
--   deliver_at  when it becomes deliverable if sent with a delay, else NULL
--               (of the message as first sent, or of its earliest copy once
--               that is reclaimed; retries have their own backoff)
--   resent_to   the groups it was sent to again (a retry after a nack, or a
--               redrive), or NULL
-- Errors: SL001, SL002, SL006 (max_messages)
CREATE OR REPLACE FUNCTION sluice.peek(queue text, max_messages int DEFAULT 10, after_id bigint DEFAULT NULL)
RETURNS SETOF sluice.stored_message
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q sluice.queue;
BEGIN
    PERFORM sluice._check_count('max_messages', max_messages, 1000);
    q := sluice._use_queue(peek.queue);
    RETURN QUERY EXECUTE format('SELECT * FROM %I.e_peek($1, $2, $3)', sluice._qschema(q.id))
        USING q, max_messages, after_id;
END
$$;

-- leases: the deliveries of a queue in flight now: leased by a receive,
-- lease not expired, not completed (acked, nacked, dead-lettered), and the
-- newest delivery of its message in its group (a receipt of it is current,
-- see above). A message extended shows its new expiry (an extend renews
-- the receipts it is given, not the others its receive returned; on a
-- queue of engine 2, when a receive's messages of one lane include a keyed
-- one, those of them not extended are delivered again only once the last
-- extension ends, and meanwhile are not shown); a nacked one, or one
-- whose lease expired, is not in flight (it is ready or delayed again).
-- Receipts are not shown: leases is for looking, not for completing
-- another consumer's messages. Reads only; costs O(leases of the groups
-- not expired yet).
--
-- Parameters:
--   queue         queue name
--   group_name    only this group's leases (NULL: every group's)
--   max_messages  1 to 1000 (100)
-- Returns: SETOF sluice.lease_info, the earliest expiry first (then by
--   group name and position):
--   group_name        the group that leased the message
--   id                the message id (as receive returns it)
--   pos               its position in the queue's commit order
--   attempt           the delivery's attempt, as receive returned it
--   consumer          the consumer named by the receive, or NULL
--   delivered_at      when the receive leased it
--   lease_expires_at  when the lease ends unless extended
-- Errors: SL001, SL002, SL003, SL006 (max_messages)
CREATE OR REPLACE FUNCTION sluice.leases(queue text, group_name text DEFAULT NULL, max_messages int DEFAULT 100)
RETURNS SETOF sluice.lease_info
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q sluice.queue;
    v_gid int;
BEGIN
    PERFORM sluice._check_count('max_messages', max_messages, 1000);
    q := sluice._use_queue(leases.queue);
    IF leases.group_name IS NOT NULL THEN
        v_gid := (sluice._get_group(q.id, q.name, leases.group_name)).id;
    END IF;
    RETURN QUERY EXECUTE format('SELECT * FROM %I.e_leases($1, $2, $3)', sluice._qschema(q.id))
        USING q, v_gid, max_messages;
END
$$;

-- maintain: scheduled upkeep for every queue: reclaim and rotate. Never
-- needed for correctness (receive does the same while messages flow); run it
-- every few seconds (pg_cron, or any scheduler) so that idle queues and
-- queues without groups rotate and reclaim too. Skips a queue whose
-- maintenance is already running. Lets go of the locks of each queue whose
-- maintenance wrote nothing (they do not pile up over many idle queues);
-- keeps those of the queues it changed until the transaction ends: call it
-- in a transaction of its own.
--
-- Returns: one row per queue whose maintenance was not already running:
--   queue      the queue
--   rotated    whether a new storage epoch was started
--   reclaimed  how many old epochs were truncated
-- Errors: none
CREATE OR REPLACE FUNCTION sluice.maintain()
RETURNS TABLE (queue text, rotated boolean, reclaimed int)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q sluice.queue;
    r record;
    v_ran boolean;
    v_changed boolean;
BEGIN
    PERFORM sluice._drop_leftovers();
    FOR q IN SELECT * FROM sluice.queue qq ORDER BY qq.id LOOP
        -- Each queue in a subtransaction, rolled back when its maintenance
        -- wrote nothing, which lets the locks of its reads go (~18 a queue;
        -- kept until the call ended, 112 queues held 2,043, and a few
        -- hundred could fill the lock table every session shares). What it
        -- wrote stays, with its locks.
        v_ran := false;
        v_changed := false;
        BEGIN
            -- Skip a queue being dropped (its lock is exclusive) or gone since.
            IF pg_try_advisory_xact_lock_shared(sluice._lock_ns('queue'), hashtext(q.name))
               AND to_regnamespace(sluice._qschema(q.id)) IS NOT NULL
               AND pg_try_advisory_xact_lock(sluice._lock_ns('maint'), q.id) THEN
                EXECUTE format('SELECT * FROM %I.e_maintain($1)', sluice._qschema(q.id)) INTO r USING q.id;
                v_ran := true;
                v_changed := r.changed;
            END IF;
            -- (r is not assigned before the first queue that ran: not read here)
            IF NOT v_changed THEN
                RAISE EXCEPTION USING ERRCODE = 'SL000';   -- (let the locks go; v_ran and r stay)
            END IF;
        EXCEPTION WHEN SQLSTATE 'SL000' THEN
            NULL;
        END;
        CONTINUE WHEN NOT v_ran;
        queue := q.name;
        rotated := r.rotated;
        reclaimed := r.reclaimed;
        RETURN NEXT;
    END LOOP;
    -- Upgrades whose every group has drained the predecessor: it goes.
    FOR q IN SELECT * FROM sluice.queue qq WHERE qq.predecessor IS NOT NULL ORDER BY qq.id LOOP
        PERFORM sluice._finish_upgrade(q);
    END LOOP;
END
$$;

-- The engine's settings for the functions above that call a queue's copy
-- through the search path (sluice._engine_settings).
SELECT sluice._apply_engine_settings('sluice', ARRAY['receive', 'ack', 'nack', 'extend']);
