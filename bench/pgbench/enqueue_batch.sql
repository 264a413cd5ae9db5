-- Enqueue: 100 messages per transaction (one send_batch call).
SELECT count(*) FROM sluice.send_batch('pgbench', ARRAY(SELECT jsonb_build_object('t', extract(epoch FROM clock_timestamp()), 'p', repeat('x', 60)) FROM generate_series(1, 100)));
