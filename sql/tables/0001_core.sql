-- sluice engine core: catalog tables, per-queue data tables, types.
--
-- Storage model (docs/design.md has the full argument):
--   * Every table that grows with traffic is append-only and split by queue and
--     "slot": part = queue_id * 4 + slot, slot in 0..3. A queue writes into the
--     slot of its current epoch; an old epoch's slot is reclaimed with TRUNCATE
--     once every group is past it and its retention has passed.
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

-- Messages. txid is the sending transaction's id: consumers cut batches by
-- comparing it with snapshots, so a message is seen exactly when its
-- transaction commits, whatever the id order. target_group is set on copies
-- made by nack (retry) and redrive: only that group receives them.
CREATE TABLE sluice.messages (
    part         int NOT NULL,
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
) PARTITION BY LIST (part);
CREATE INDEX messages_txid_idx ON sluice.messages (txid, id);
CREATE INDEX messages_due_idx ON sluice.messages (deliver_at, id) WHERE deliver_at IS NOT NULL;

-- Batches: the queue's commit-ordered log of positions. Each row numbers the
-- messages that became visible between two snapshots (prev_snap, snap) and
-- became due between (prev_t, t]; position first_pos + i - 1 is ids[i].
-- A round larger than the cut limit spans several rows (done = false until the
-- last), resuming after (res_phase, res_due | res_txid, res_id).
CREATE TABLE sluice.batches (
    part      int NOT NULL,
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
    PRIMARY KEY (part, batch_no)
) PARTITION BY LIST (part);
CREATE INDEX batches_last_pos_idx ON sluice.batches (last_pos);

-- Deliveries (UNLOGGED leaves): one row per lease, and one more per extend.
-- Stored in the slot of the message, so they go when its slot is reclaimed.
CREATE TABLE sluice.deliveries (
    part         int NOT NULL,
    group_id     int NOT NULL,
    pos          bigint NOT NULL,
    attempt      int NOT NULL,
    token        bigint NOT NULL,
    msg_id       bigint NOT NULL,
    txid         xid8 NOT NULL,
    expires_at   timestamptz NOT NULL,
    delivered_at timestamptz NOT NULL,
    consumer     text
) PARTITION BY LIST (part);
CREATE INDEX deliveries_pos_idx ON sluice.deliveries (group_id, pos, attempt);

-- Completions (durable): kind 'a' acked, 'n' nacked (a retry copy was sent),
-- 'd' dead-lettered. At most one per (group, position).
CREATE TABLE sluice.acks (
    part     int NOT NULL,
    group_id int NOT NULL,
    pos      bigint NOT NULL,
    kind     "char" NOT NULL,
    acked_at timestamptz NOT NULL,
    UNIQUE (part, group_id, pos)
) PARTITION BY LIST (part);

-- Group cursor (UNLOGGED leaves, append-only, newest seq wins): the next
-- position to dispatch is cursor + 1; positions below lwm are all completed;
-- leases in [lwm, cursor] are checked for expiry once next_scan_at passes.
CREATE TABLE sluice.group_states (
    part         int NOT NULL,
    group_id     int NOT NULL,
    seq          bigint NOT NULL,
    cursor       bigint NOT NULL,
    lwm          bigint NOT NULL,
    next_scan_at timestamptz NOT NULL,
    lwm_at       timestamptz NOT NULL,
    PRIMARY KEY (part, group_id, seq)
) PARTITION BY LIST (part);

-- Durable low-water marks (append-only, newest seq wins, at most one per
-- second per group): where delivery resumes after a crash.
CREATE TABLE sluice.checkpoints (
    part     int NOT NULL,
    group_id int NOT NULL,
    seq      bigint NOT NULL,
    lwm      bigint NOT NULL,
    at       timestamptz NOT NULL,
    PRIMARY KEY (part, group_id, seq)
) PARTITION BY LIST (part);

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
