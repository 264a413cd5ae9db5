-- Dequeue: receive one message (its own transaction), then acknowledge it
-- (a second transaction), as a consumer does. Needs -M simple (pgbench's
-- default): :receipt is substituted into a string literal. An empty queue
-- costs one receive and no ack.
SELECT coalesce(min(receipt), 'none') AS receipt FROM sluice.receive('pgbench', 'default', 1) \gset
SELECT sluice.ack('pgbench', 'default', ARRAY[r]) FROM (VALUES (':receipt')) AS v(r) WHERE r <> 'none';
