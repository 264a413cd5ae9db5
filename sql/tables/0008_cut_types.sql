-- The cut (engine_cut.sql) passes its messages and where it stands between
-- its phases and the function that stores it as two composite values.

-- A cut's messages in commit order, and whether any is targeted at one
-- group, keyed or prioritized (most cuts have none, and then store and
-- index nothing for them).
CREATE TYPE sluice.cut AS (
    ids        bigint[],
    txids      xid8[],
    slots      smallint[],
    targets    int[],
    keys       bigint[],
    prios      int[],
    any_target boolean,
    any_key    boolean,
    any_prio   boolean
);

-- Where a cut stands, written into each of its batch rows: whether its
-- round is done, else the phase and message to resume from; the times and
-- snapshots it cuts between.
CREATE TYPE sluice.cut_point AS (
    done      boolean,
    res_phase smallint,
    res_due   timestamptz,
    res_txid  xid8,
    res_id    bigint,
    prev_t    timestamptz,
    t         timestamptz,
    prev_snap pg_snapshot,
    snap      pg_snapshot
);
