-- A fresh queue "pgbench" (group "default") for the pgbench scripts.
SET client_min_messages = warning;
SELECT sluice.drop_queue('pgbench');
SELECT sluice.create_queue('pgbench', '{"lease": "30 seconds"}');
