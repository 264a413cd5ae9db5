-- Enqueue: one message (~100-byte JSON body) per transaction.
SELECT sluice.send('pgbench', jsonb_build_object('t', extract(epoch FROM clock_timestamp()), 'p', repeat('x', 60)));
