-- Group: migration hook
--
-- Loaded last by every migrate: (re)creates each queue's copies of the engine
-- functions from the templates just loaded, so an upgrade reaches every queue.
SELECT CASE q.engine WHEN 2 THEN sluice._instantiate_v2(q.id) ELSE sluice._instantiate(q.id) END
FROM sluice.queue q ORDER BY q.id;
