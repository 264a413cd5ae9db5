INSERT INTO pgbench_queue (body) VALUES (jsonb_build_object('t', extract(epoch FROM clock_timestamp()), 'p', repeat('x', 60)));
