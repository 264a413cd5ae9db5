-- The DIY SKIP LOCKED queue of the AlloyDB post, for comparison.
SET client_min_messages = warning;
DROP TABLE IF EXISTS pgbench_queue;
CREATE TABLE pgbench_queue (id bigserial PRIMARY KEY, body jsonb NOT NULL, enqueued_at timestamptz NOT NULL DEFAULT now());
