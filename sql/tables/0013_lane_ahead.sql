-- A lane state knows how far ahead of its cursor positions may be
-- completed (docs/design.md, "Lanes"), so that a receive checks completions
-- only where there can be any.
--
-- * group_states.ahead: no position of the lane after max(cursor, ahead) is
--   completed or leased by the group. A state rebuilt from its checkpoint
--   (first receive, after a crash lost the unlogged states, after a purge)
--   sets it to the group's highest completed position; messages taken out
--   of position order (priorities) raise it; every state carries it on.
--   NULL in the rows written before this migration: unknown, every check is
--   made, and the next full receive of the lane computes it.
-- * lane_state.ahead: the same, in the state a receive works on (a new last
--   attribute).
DO $ahead$
DECLARE
    q record;
BEGIN
    FOR q IN SELECT id FROM sluice.queue ORDER BY id LOOP
        EXECUTE format('ALTER TABLE %I.group_states ADD COLUMN ahead bigint', 'sluice_q' || q.id);
    END LOOP;
END
$ahead$;
ALTER TYPE sluice.lane_state ADD ATTRIBUTE ahead bigint;
