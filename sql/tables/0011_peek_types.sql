-- What sluice.peek and sluice.leases return (functions/api.sql,
-- functions/engine_peek.sql): read-only views of a queue for operators and
-- the dashboard.

-- What peek returns: one row per message stored in the queue.
CREATE TYPE sluice.stored_message AS (
    id         bigint,
    body       jsonb,
    headers    jsonb,
    key        text,
    priority   int,
    sent_at    timestamptz,
    deliver_at timestamptz,
    resent_to  text[]
);

-- What leases returns: one row per delivery in flight.
CREATE TYPE sluice.lease_info AS (
    group_name       text,
    id               bigint,
    pos              bigint,
    attempt          int,
    consumer         text,
    delivered_at     timestamptz,
    lease_expires_at timestamptz
);
