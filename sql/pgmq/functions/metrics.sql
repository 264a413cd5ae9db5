-- Group: pgmq compatibility, metrics.

-- metrics: depth and ages of a queue, computed from q_<queue> as PGMQ does
-- from its table (a scan of the queue's retained messages).
--
-- Parameters:
--   queue_name  the queue
-- Returns: one pgmq.metrics_result (total_messages: messages ever sent;
--          default_partition_length: 0, there is no pg_partman)
-- Errors: 42P01 no such queue
CREATE OR REPLACE FUNCTION pgmq.metrics(queue_name text)
RETURNS pgmq.metrics_result
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q constant text := pgmq._queue(queue_name);
    res pgmq.metrics_result;
    seq regclass;
BEGIN
    EXECUTE format($sql$
        SELECT $1::text, count(*), extract(epoch FROM now() - max(v.enqueued_at))::int,
               extract(epoch FROM now() - min(v.enqueued_at))::int, 0::bigint, now(),
               count(*) FILTER (WHERE v.vt <= now()), 0::bigint
          FROM pgmq.%I v
        $sql$, pgmq._tbl(q, 'q')) INTO res USING metrics.queue_name;
    SELECT sq.id_seq INTO seq FROM sluice.queue sq WHERE sq.name = q;
    res.total_messages := coalesce(pg_sequence_last_value(seq), 0);
    RETURN res;
END
$$;

-- metrics_all: metrics of every queue.
--
-- Returns: one pgmq.metrics_result per queue
-- Errors: none
CREATE OR REPLACE FUNCTION pgmq.metrics_all()
RETURNS SETOF pgmq.metrics_result
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT (pgmq.metrics(m.queue_name)).* FROM pgmq.meta m ORDER BY m.queue_name
$$;
