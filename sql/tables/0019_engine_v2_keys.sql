-- Engine v2: ordering keys (issue 37; docs/design.md, "Engine v2", "Keys").
--
-- * e2_held: a key a lane of a group holds back: its messages in flight are
--   those of one lease (slot, lease_no), or, after a nack, its retry is due
--   at `until` (lease_no NULL). A key is held until that lease is settled
--   (every position completed) or that time has come.
-- * e2_wait: a keyed position the lane's cursor passed while its key was
--   held: delivered, in position order, once the key is free. attempt is
--   the attempt to deliver it as (NULL: the message's own).
-- * Queues of engine 2 made before this migration get the new columns:
--   msg.key, khash (hashtextextended(key, 0)), priority; batch.khashes (the
--   key hash of each position, NULL when none is keyed); lease.held and
--   waiting (the lane's state: NULL when empty).
CREATE TYPE sluice.e2_held AS (khash bigint, slot smallint, lease_no bigint, until timestamptz);
CREATE TYPE sluice.e2_wait AS (pos bigint, khash bigint, id bigint, txid xid8, mslot smallint, attempt int);

DO $$
DECLARE
    q record;
BEGIN
    FOR q IN SELECT qq.id FROM sluice.queue qq WHERE qq.engine = 2 ORDER BY qq.id LOOP
        EXECUTE format('ALTER TABLE %1$I.msg ADD COLUMN key text, ADD COLUMN khash bigint,
                                             ADD COLUMN priority int NOT NULL DEFAULT 0;
                        ALTER TABLE %1$I.batch ADD COLUMN khashes bigint[];
                        ALTER TABLE %1$I.lease ADD COLUMN held sluice.e2_held[], ADD COLUMN waiting sluice.e2_wait[]',
                       'sluice_q' || q.id);
    END LOOP;
END
$$;
