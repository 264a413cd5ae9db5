-- Group: migration hook
--
-- Loaded last by every migrate: (re)creates each queue's copies of the engine
-- functions from the templates just loaded, so an upgrade reaches every queue.
SELECT sluice._instantiate(q.id) FROM sluice.queue q ORDER BY q.id;
