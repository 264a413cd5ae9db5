-- A lane a group has taken from has a checkpoint: its first take writes one
-- (e_lane_checkpoint; from this version on also when that take found
-- nothing to take), so that a lane without one is known never to have been
-- taken from, and its state starts with nothing completed ahead of its
-- cursor (e_lane_state). A lane whose first take found nothing had a state
-- but no checkpoint: it gets one here, at its newest state's low-water
-- mark. (A queue's states are unlogged: after a crash there are none, and
-- nothing to add.)
DO $ckpt$
DECLARE
    q record;
BEGIN
    FOR q IN SELECT id FROM sluice.queue ORDER BY id LOOP
        EXECUTE format($f$
            INSERT INTO %1$I.checkpoints (slot, group_id, lane, seq, lwm, at)
            SELECT s.slot, s.group_id, s.lane, s.seq, s.lwm, clock_timestamp()
            FROM (SELECT DISTINCT ON (gs.group_id, gs.lane) gs.slot, gs.group_id, gs.lane, gs.seq, gs.lwm
                  FROM %1$I.group_states gs
                  ORDER BY gs.group_id, gs.lane, gs.seq DESC) s
            WHERE NOT EXISTS (SELECT 1 FROM %1$I.checkpoints c WHERE c.group_id = s.group_id AND c.lane = s.lane)
        $f$, 'sluice_q' || q.id);
    END LOOP;
END
$ckpt$;
