-- Dequeue: receive up to 100 messages, then acknowledge them all (two
-- transactions). Needs -M simple.
SELECT coalesce(array_agg(receipt)::text, '{}') AS receipts FROM sluice.receive('pgbench', 'default', 100) \gset
SELECT sluice.ack('pgbench', 'default', r::text[]) FROM (VALUES (':receipts')) AS v(r) WHERE r <> '{}';
