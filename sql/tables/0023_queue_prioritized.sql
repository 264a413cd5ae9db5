-- Engine v2: whether a queue has had an unkeyed message with a priority
-- other than 0 (issue 37). A receive looks at the priority lane only then:
-- the look is a statement every receive of a queue that never had one paid
-- (~0.1M instructions). The first such send (or redrive) sets it, once per
-- queue (sluice._mark_prioritized); a queue of engine 2 made before this
-- migration has it when it stores such a message or priority lane rows.
ALTER TABLE sluice.queue ADD COLUMN prioritized boolean NOT NULL DEFAULT false;
DO $$
DECLARE
    q record;
    v boolean;
BEGIN
    FOR q IN SELECT qq.id FROM sluice.queue qq WHERE qq.engine = 2 ORDER BY qq.id LOOP
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM %1$I.msg m WHERE m.priority <> 0 AND m.khash IS NULL)
                               OR EXISTS (SELECT 1 FROM %1$I.prio)', 'sluice_q' || q.id) INTO v;
        UPDATE sluice.queue SET prioritized = v WHERE id = q.id;
    END LOOP;
END
$$;
