-- Dispatch lanes (docs/design.md, "Lanes").
--
-- A queue's positions are split into lanes: the cut gives each lane its own
-- batch rows (keyed messages by key hash, so a key stays in one lane;
-- unkeyed ones in chunks, round-robin), and each group keeps one cursor per
-- lane, taken with a try-lock, so consumers of a group work side by side and
-- a slow one holds back only its lane.
--
-- * queue.lanes: the number of lanes (1 = one lane, strict commit order);
-- * batches, deliveries, prio: the lane of each row;
-- * group_states, checkpoints: one sequence of rows per (group, lane);
-- * lane_state, picks: what the receive steps pass to each other.
--
-- Existing queues keep one lane, so everything queued, leased or
-- dead-lettered before the upgrade stays where it is: their rows get lane 0.
ALTER TABLE sluice.queue ADD COLUMN lanes int NOT NULL DEFAULT 1;
UPDATE sluice.queue SET options = options || '{"lanes": 1}';

DO $lanes$
DECLARE
    q record;
    sch text;
    ix text;
BEGIN
    FOR q IN SELECT id FROM sluice.queue ORDER BY id LOOP
        sch := 'sluice_q' || q.id;
        EXECUTE format('ALTER TABLE %I.batches ADD COLUMN lane smallint NOT NULL DEFAULT 0', sch);
        EXECUTE format('CREATE INDEX ON %I.batches (lane, last_pos)', sch);
        EXECUTE format('ALTER TABLE %I.deliveries ADD COLUMN lane smallint NOT NULL DEFAULT 0', sch);
        FOR ix IN SELECT i.indexname FROM pg_indexes i
                  WHERE i.schemaname = sch AND i.tablename = 'deliveries'
                    AND i.indexdef LIKE '%(group_id, expires_at)' LOOP
            EXECUTE format('DROP INDEX %I.%I', sch, ix);
        END LOOP;
        EXECUTE format('CREATE INDEX ON %I.deliveries (group_id, lane, expires_at)', sch);
        EXECUTE format('ALTER TABLE %I.prio ADD COLUMN lane smallint NOT NULL DEFAULT 0', sch);
        FOR ix IN SELECT i.indexname FROM pg_indexes i
                  WHERE i.schemaname = sch AND i.tablename = 'prio' AND i.indexdef LIKE '%(priority, pos)' LOOP
            EXECUTE format('DROP INDEX %I.%I', sch, ix);
        END LOOP;
        EXECUTE format('CREATE INDEX ON %I.prio (lane, priority, pos)', sch);
        EXECUTE format('ALTER TABLE %I.group_states ADD COLUMN lane smallint NOT NULL DEFAULT 0,
                            DROP CONSTRAINT group_states_pkey, ADD PRIMARY KEY (group_id, lane, seq, slot)', sch);
        EXECUTE format('ALTER TABLE %I.checkpoints ADD COLUMN lane smallint NOT NULL DEFAULT 0,
                            DROP CONSTRAINT checkpoints_pkey, ADD PRIMARY KEY (group_id, lane, seq, slot)', sch);
    END LOOP;
END
$lanes$;

-- One lane's dispatch state of a group: the newest group_states row of the
-- lane (or where to resume), and whether the receive changed it.
CREATE TYPE sluice.lane_state AS (
    lane      smallint,
    seq       bigint,
    cursor    bigint,
    lwm       bigint,
    scan_from timestamptz,
    lwm_at    timestamptz,
    found     boolean,
    bkeys     bigint[],
    bheads    bigint[],
    lv_prio   int[],
    lv_pos    bigint[],
    changed   boolean
);

-- The positions a receive has picked, in the order it returns them.
CREATE TYPE sluice.picks AS (
    pos     bigint[],
    id      bigint[],
    txid    xid8[],
    slot    smallint[],
    attempt int[],
    key     bigint[],
    lane    smallint[]
);

-- receive gains ack (receipts to complete in the same call): drop the old
-- signature so that the new one does not become an ambiguous overload.
DROP FUNCTION IF EXISTS sluice.receive(text, text, int, interval, text);

-- The engine templates are all reloaded after this migration; drop the old
-- ones, whose signatures changed or which are gone (e_group_state, e_lwm,
-- e_min_lwm, e_window), so that no queue gets a stale copy.
DO $tmpl$
DECLARE
    f oid;
BEGIN
    FOR f IN SELECT p.oid FROM pg_proc p WHERE p.pronamespace = 'sluice_tmpl'::regnamespace LOOP
        EXECUTE format('DROP FUNCTION %s', f::regprocedure);
    END LOOP;
END
$tmpl$;
