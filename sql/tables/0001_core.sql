-- sluice engine core: catalog tables, per-queue data tables, types.
--
-- Storage model (docs/design.md has the full argument):
--   * Every table that grows with traffic is append-only, lives in the queue's
--     own schema sluice_q<id> and is partitioned by "slot" (0..3). A queue
--     writes into the slot of its current epoch; an old epoch's slot is
--     reclaimed with TRUNCATE once every group is past it and its retention
--     has passed. The per-queue tables are created by sluice._create_storage()
--     (functions/storage.sql); the engine functions that read them are copied
--     into each queue schema from the templates in schema sluice_tmpl.
--   * Nothing is updated or deleted per message. Small catalog rows (queue,
--     consumer_group) change only on administrative calls.
--   * Leases (deliveries) and the per-group cursor (group_states) are UNLOGGED:
--     a receive that writes nothing else commits without waiting for the disk;
--     after a crash they are empty and delivery resumes from the durable
--     checkpoint, redelivering what was in flight (at-least-once).

-- Catalog: one row per queue. Options are kept as typed columns (what the
-- engine reads) and as the normalized jsonb the user gave (what list_queues shows).
CREATE TABLE sluice.queue (
    id              int GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name            text NOT NULL UNIQUE,
    created_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    max_attempts    int NOT NULL,
    lease           interval NOT NULL,
    backoff_base    interval NOT NULL,
    backoff_max     interval NOT NULL,
    retention       interval NOT NULL,
    rotate_interval interval NOT NULL,
    max_payload     int NOT NULL,
    notify          boolean NOT NULL,
    id_seq          regclass NOT NULL,
    options         jsonb NOT NULL
);

-- Catalog: consumer groups. start_pos is the first position the group reads.
CREATE TABLE sluice.consumer_group (
    id         int GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue_id   int NOT NULL REFERENCES sluice.queue (id) ON DELETE CASCADE,
    name       text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    start_pos  bigint NOT NULL,
    UNIQUE (queue_id, name)
);

-- Epoch log (append-only): epoch e of a queue writes into slot e % 4.
-- The current epoch is the newest row.
CREATE TABLE sluice.epoch (
    queue_id   int NOT NULL REFERENCES sluice.queue (id) ON DELETE CASCADE,
    epoch      bigint NOT NULL,
    started_at timestamptz NOT NULL,
    PRIMARY KEY (queue_id, epoch)
);

-- Reclaim log (append-only): epochs whose slot has been truncated.
CREATE TABLE sluice.reclaim (
    queue_id     int NOT NULL REFERENCES sluice.queue (id) ON DELETE CASCADE,
    epoch        bigint NOT NULL,
    reclaimed_at timestamptz NOT NULL,
    PRIMARY KEY (queue_id, epoch)
);

-- Dead letters: a copy of each message that exhausted its attempts in a group.
-- Grows only with failures; rows go with drop_group / drop_queue.
CREATE TABLE sluice.dead_letter (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue_id   int NOT NULL REFERENCES sluice.queue (id) ON DELETE CASCADE,
    group_id   int NOT NULL REFERENCES sluice.consumer_group (id) ON DELETE CASCADE,
    message_id bigint NOT NULL,
    attempts   int NOT NULL,
    error      text,
    died_at    timestamptz NOT NULL,
    sent_at    timestamptz NOT NULL,
    priority   int NOT NULL,
    key        text,
    headers    jsonb,
    body       jsonb NOT NULL
);
CREATE INDEX dead_letter_group_idx ON sluice.dead_letter (queue_id, group_id, id);

-- Redrive log (append-only): which dead letters were sent again, as which message.
CREATE TABLE sluice.redrive (
    dead_letter_id bigint PRIMARY KEY REFERENCES sluice.dead_letter (id) ON DELETE CASCADE,
    redriven_at    timestamptz NOT NULL,
    message_id     bigint NOT NULL
);

-- Messages of every queue: partitioned by queue (a partition per queue, in
-- its schema, itself partitioned by slot), so that send is one static INSERT.
-- txid is the sending transaction's id: consumers cut batches by comparing it
-- with snapshots, so a message is seen exactly when its transaction commits,
-- whatever order ids were drawn in. target_group is set on copies made by
-- nack (retry) and redrive: only that group receives them.
CREATE TABLE sluice.messages (
    queue_id     int NOT NULL,
    slot         smallint NOT NULL,
    id           bigint NOT NULL,
    txid         xid8 NOT NULL,
    sent_at      timestamptz NOT NULL,
    deliver_at   timestamptz,
    priority     int NOT NULL DEFAULT 0,
    attempt_base int NOT NULL DEFAULT 0,
    target_group int,
    origin_id    bigint,
    key          text,
    dedup_key    text,
    headers      jsonb,
    body         jsonb NOT NULL
) PARTITION BY LIST (queue_id);
CREATE INDEX messages_txid_idx ON sluice.messages (txid, id);
CREATE INDEX messages_due_idx ON sluice.messages (deliver_at, id) WHERE deliver_at IS NOT NULL;

-- Template schema: the engine functions that sluice copies into each queue's
-- schema (see functions/engine_*.sql).
CREATE SCHEMA sluice_tmpl;

-- What receive returns.
CREATE TYPE sluice.message AS (
    id               bigint,
    body             jsonb,
    headers          jsonb,
    key              text,
    priority         int,
    attempt          int,
    sent_at          timestamptz,
    receipt          text,
    lease_expires_at timestamptz,
    pos              bigint
);

-- What list_queues returns.
CREATE TYPE sluice.queue_info AS (
    queue      text,
    created_at timestamptz,
    options    jsonb,
    groups     text[]
);

-- What dead_letters returns.
CREATE TYPE sluice.dead_letter_info AS (
    id             bigint,
    group_name     text,
    body           jsonb,
    headers        jsonb,
    key            text,
    attempts       int,
    error          text,
    died_at        timestamptz,
    sent_at        timestamptz,
    dead_letter_id bigint
);

-- What status returns (one row per group; a queue without groups gives one
-- row with group_name NULL).
CREATE TYPE sluice.queue_status AS (
    queue              text,
    group_name         text,
    ready              bigint,
    delayed            bigint,
    in_flight          bigint,
    dead               bigint,
    oldest_pending_age interval,
    lag                bigint,
    cursor             bigint,
    lwm                bigint,
    head               bigint,
    live_epochs        int,
    holds_reclaim      boolean
);
