-- PGMQ compatibility layer: catalog tables and result types.
--
-- Storage model: a pgmq queue is a sluice queue of the same name (lowercased)
-- with one consumer group, 'pgmq'. The messages live in sluice's tables. Each
-- pgmq queue has, in schema pgmq, besides the read-only view q_<name> and the
-- archive table a_<name>:
--   _sl_r_<name>  UNLOGGED, append-only: one row per delivery (read) and per
--                 set_vt: msg_id -> newest receipt, vt, read_ct, the message.
--                 Leases do not survive a crash in sluice either, so neither
--                 does this table.
--   _sl_d_<name>  append-only: one row per deleted, archived or popped message
--                 (the tombstones that hide it from q_<name>, and that make a
--                 later read complete and skip a message deleted without a
--                 current lease).
-- Both are partitioned by slot (0, 1), written in the slot of the queue's
-- current side generation (pgmq.side_generation): pgmq._rotate truncates the
-- other slot and starts a new generation there once nothing in it is needed
-- any more (no lease in it can be current, none of its completed messages is
-- still in sluice's storage). Both are also emptied by purge_queue (TRUNCATE)
-- and go with drop_queue (DROP).

-- One row per pgmq queue (as PGMQ's pgmq.meta, plus the sluice queue name).
CREATE TABLE pgmq.meta (
    queue_name     varchar NOT NULL UNIQUE,
    is_partitioned boolean NOT NULL,
    is_unlogged    boolean NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    sluice_queue   text NOT NULL UNIQUE
);

-- Side generations (append-only): generation g of a queue writes its side
-- tables' slot g % 2; the current generation is the newest row.
CREATE TABLE pgmq.side_generation (
    sluice_queue text NOT NULL REFERENCES pgmq.meta (sluice_queue) ON DELETE CASCADE,
    gen          bigint NOT NULL,
    started_at   timestamptz NOT NULL,
    PRIMARY KEY (sluice_queue, gen)
);

-- Topic bindings (PGMQ 1.11+): pattern -> queue.
CREATE TABLE pgmq.topic_bindings (
    pattern        text NOT NULL,
    queue_name     text NOT NULL REFERENCES pgmq.meta (queue_name) ON DELETE CASCADE,
    bound_at       timestamptz NOT NULL DEFAULT now(),
    compiled_regex text NOT NULL,
    CONSTRAINT topic_bindings_unique_pattern_queue UNIQUE (pattern, queue_name)
);

-- Insert notifications (PGMQ 1.7+). last_notified_at is kept for the shape
-- of list_notify_insert_throttles; sluice does not update it (see notify.sql).
CREATE TABLE pgmq.notify_insert_throttle (
    queue_name           varchar NOT NULL UNIQUE REFERENCES pgmq.meta (queue_name) ON DELETE CASCADE,
    throttle_interval_ms integer NOT NULL DEFAULT 0,
    last_notified_at     timestamptz NOT NULL DEFAULT to_timestamp(0)
);

-- What read, pop and set_vt return (PGMQ 1.13's columns, in its order).
CREATE TYPE pgmq.message_record AS (
    msg_id       bigint,
    read_ct      integer,
    enqueued_at  timestamptz,
    last_read_at timestamptz,
    vt           timestamptz,
    message      jsonb,
    headers      jsonb
);

-- What list_queues returns.
CREATE TYPE pgmq.queue_record AS (
    queue_name     varchar,
    is_partitioned boolean,
    is_unlogged    boolean,
    created_at     timestamptz
);

-- What metrics and metrics_all return.
CREATE TYPE pgmq.metrics_result AS (
    queue_name           text,
    queue_length         bigint,
    newest_msg_age_sec   integer,
    oldest_msg_age_sec   integer,
    total_messages       bigint,
    scrape_time          timestamptz,
    queue_visible_length bigint,
    default_partition_length bigint
);
