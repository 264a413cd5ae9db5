-- Group: pgmq compatibility, delete, archive, set_vt.
--
-- These take msg_ids. The newest delivery of a msg_id in _sl_r_<queue> gives
-- its receipt: delete and archive ack it (sluice.ack), set_vt extends it
-- (sluice.extend) or, to make the message visible sooner, gives it back
-- with a delay (sluice.nack). A message deleted or archived without a
-- current lease (never read, or its vt passed) gets only its tombstone in
-- _sl_d_<queue>: the next read that receives it completes it and skips it.

-- _complete: delete or archive messages.
--
-- Parameters:
--   p_name  the queue
--   p_ids   the msg_ids
--   p_kind  'd' delete, 'a' archive (also copy into a_<queue>)
-- Returns: the msg_ids that were in the queue, now deleted or archived
-- Errors: 42P01 no such queue
CREATE OR REPLACE FUNCTION pgmq._complete(p_name text, p_ids bigint[], p_kind "char")
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q constant text := pgmq._queue(p_name);
    rt constant text := pgmq._tbl(q, 'r');
    dt constant text := pgmq._tbl(q, 'd');
    ids bigint[];
    done bigint[];
    read_ids bigint[];
    receipts text[];
    unread bigint[] := '{}';
    now_ts constant timestamptz := clock_timestamp();
BEGIN
    ids := ARRAY(SELECT DISTINCT i FROM unnest(p_ids) i WHERE i IS NOT NULL);
    IF cardinality(ids) = 0 THEN
        RETURN;
    END IF;
    EXECUTE format('SELECT coalesce(array_agg(DISTINCT d.msg_id), ''{}'') FROM pgmq.%I d WHERE d.msg_id = ANY ($1)', dt)
       INTO done USING ids;
    ids := ARRAY(SELECT i FROM unnest(ids) i WHERE NOT i = ANY (done));
    IF cardinality(ids) = 0 THEN
        RETURN;
    END IF;
    EXECUTE format($sql$
        SELECT coalesce(array_agg(x.msg_id), '{}'), coalesce(array_agg(x.receipt) FILTER (WHERE x.receipt IS NOT NULL), '{}')
          FROM (SELECT DISTINCT ON (r.msg_id) r.msg_id, r.receipt FROM pgmq.%I r
                 WHERE r.msg_id = ANY ($1) ORDER BY r.msg_id, r.at DESC) x
        $sql$, rt) INTO read_ids, receipts USING ids;
    IF cardinality(read_ids) < cardinality(ids) THEN
        -- never read: is it in the queue at all? (reads the view: a scan)
        EXECUTE format('SELECT coalesce(array_agg(v.msg_id), ''{}'') FROM pgmq.%I v WHERE v.msg_id = ANY ($1)',
                       pgmq._tbl(q, 'q'))
           INTO unread USING ARRAY(SELECT i FROM unnest(ids) i WHERE NOT i = ANY (read_ids));
    END IF;
    IF cardinality(receipts) > 0 THEN
        PERFORM sluice.ack(q, 'pgmq', receipts);
    END IF;
    IF p_kind = 'a' THEN
        EXECUTE format($sql$
            INSERT INTO pgmq.%1$I (msg_id, read_ct, enqueued_at, last_read_at, archived_at, vt, message, headers)
            SELECT DISTINCT ON (r.msg_id) r.msg_id, r.read_ct, r.enqueued_at, r.read_at, $3, r.vt, r.message, r.headers
              FROM pgmq.%2$I r WHERE r.msg_id = ANY ($1) ORDER BY r.msg_id, r.at DESC;
            INSERT INTO pgmq.%1$I (msg_id, read_ct, enqueued_at, last_read_at, archived_at, vt, message, headers)
            SELECT v.msg_id, v.read_ct, v.enqueued_at, v.last_read_at, $3, v.vt, v.message, v.headers
              FROM pgmq.%3$I v WHERE v.msg_id = ANY ($2)
            $sql$, pgmq._tbl(q, 'a'), rt, pgmq._tbl(q, 'q')) USING read_ids, unread, now_ts;
    END IF;
    EXECUTE format('INSERT INTO pgmq.%I (slot, msg_id, kind, done_at) SELECT $4, i, $2, $3 FROM unnest($1) i', dt)
      USING read_ids || unread, p_kind, now_ts, (pgmq._side(q)).slot;
    RETURN QUERY SELECT i FROM unnest(read_ids || unread) i ORDER BY i;
END
$$;

-- delete: delete one message, whatever its vt.
--
-- Parameters:
--   queue_name  the queue
--   msg_id      the message
-- Returns: true if it was in the queue
-- Errors: 42P01 no such queue
CREATE OR REPLACE FUNCTION pgmq.delete(queue_name text, msg_id bigint)
RETURNS boolean LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $$ SELECT EXISTS (SELECT 1 FROM pgmq._complete(queue_name, ARRAY[msg_id], 'd')) $$;

-- delete: delete messages. Parameters: queue_name, msg_ids.
-- Returns: the msg_ids deleted. Errors: as delete
CREATE OR REPLACE FUNCTION pgmq.delete(queue_name text, msg_ids bigint[])
RETURNS SETOF bigint LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM pgmq._complete(queue_name, msg_ids, 'd') $$;

-- archive: move one message to the archive table a_<queue>.
--
-- Parameters:
--   queue_name  the queue
--   msg_id      the message
-- Returns: true if it was in the queue
-- Errors: 42P01 no such queue
CREATE OR REPLACE FUNCTION pgmq.archive(queue_name text, msg_id bigint)
RETURNS boolean LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $$ SELECT EXISTS (SELECT 1 FROM pgmq._complete(queue_name, ARRAY[msg_id], 'a')) $$;

-- archive: archive messages. Parameters: queue_name, msg_ids.
-- Returns: the msg_ids archived. Errors: as archive
CREATE OR REPLACE FUNCTION pgmq.archive(queue_name text, msg_ids bigint[])
RETURNS SETOF bigint LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM pgmq._complete(queue_name, msg_ids, 'a') $$;

-- set_vt: change the visibility timeout of read messages. A later vt
-- extends the lease (sluice.extend); an earlier one gives the message back
-- with a delay of vt - now (sluice.nack), its next read counting one more.
-- A message without a current lease (never read, or its vt has passed) is
-- not changed and not returned.
--
-- Parameters:
--   queue_name  the queue
--   msg_ids     the messages
--   vt          the new visibility time
-- Returns: the changed messages, with their new vt
-- Errors: 42P01 no such queue
CREATE OR REPLACE FUNCTION pgmq.set_vt(queue_name text, msg_ids bigint[], vt timestamptz)
RETURNS SETOF pgmq.message_record
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q constant text := pgmq._queue(queue_name);
    rt constant text := pgmq._tbl(q, 'r');
    v_vt constant timestamptz := coalesce(set_vt.vt, clock_timestamp());
    r record;
    ok boolean;
    new_receipt text;
    v_slot constant smallint := (pgmq._side(q)).slot;
BEGIN
    FOR r IN EXECUTE format($sql$
        SELECT x.* FROM (SELECT DISTINCT ON (r.msg_id) r.* FROM pgmq.%I r
                          WHERE r.msg_id = ANY ($1) ORDER BY r.msg_id, r.at DESC) x
         WHERE x.receipt IS NOT NULL AND x.vt > clock_timestamp()
           AND NOT EXISTS (SELECT 1 FROM pgmq.%I d WHERE d.msg_id = x.msg_id)
         ORDER BY x.msg_id
        $sql$, rt, pgmq._tbl(q, 'd')) USING msg_ids
    LOOP
        IF v_vt >= r.vt THEN
            ok := sluice.extend(q, 'pgmq', ARRAY[r.receipt], pgmq._lease(v_vt)) = 1;
            new_receipt := r.receipt;
        ELSE
            ok := sluice.nack(q, 'pgmq', r.receipt, greatest(v_vt - clock_timestamp(), interval '0'));
            new_receipt := NULL;
        END IF;
        CONTINUE WHEN NOT ok;
        EXECUTE format($sql$
            INSERT INTO pgmq.%I (slot, msg_id, at, read_at, vt, read_ct, receipt, enqueued_at, message, headers)
            VALUES ($9, $1, clock_timestamp(), $2, $3, $4, $5, $6, $7, $8)
            $sql$, rt) USING r.msg_id, r.read_at, v_vt, r.read_ct, new_receipt, r.enqueued_at, r.message, r.headers, v_slot;
        RETURN NEXT (r.msg_id, r.read_ct, r.enqueued_at, r.read_at, v_vt, r.message, r.headers)::pgmq.message_record;
    END LOOP;
END
$$;

-- set_vt: vt in seconds from now. Parameters: queue_name, msg_ids, vt.
-- Returns: the changed messages. Errors: as set_vt
CREATE OR REPLACE FUNCTION pgmq.set_vt(queue_name text, msg_ids bigint[], vt integer)
RETURNS SETOF pgmq.message_record LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM pgmq.set_vt(queue_name, msg_ids, clock_timestamp() + make_interval(secs => vt)) $$;

-- set_vt: one message. Parameters: queue_name, msg_id, vt (a time).
-- Returns: the message with its new vt, or no row. Errors: as set_vt
CREATE OR REPLACE FUNCTION pgmq.set_vt(queue_name text, msg_id bigint, vt timestamptz)
RETURNS SETOF pgmq.message_record LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM pgmq.set_vt(queue_name, ARRAY[msg_id], vt) $$;

-- set_vt: one message, vt in seconds from now. Parameters: queue_name,
-- msg_id, vt. Returns: the message with its new vt, or no row. Errors: as set_vt
CREATE OR REPLACE FUNCTION pgmq.set_vt(queue_name text, msg_id bigint, vt integer)
RETURNS SETOF pgmq.message_record LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM pgmq.set_vt(queue_name, ARRAY[msg_id], clock_timestamp() + make_interval(secs => vt)) $$;
