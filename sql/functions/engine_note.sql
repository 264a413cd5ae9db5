-- Group: engine templates - the idle note (see engine_cut.sql for what a
-- template is)
--
-- A poll of an idle group looks at every lane (four index probes per table
-- per lane: its state, batches after its cursor, expired leases and runs),
-- about half of what an empty receive costs; in steady traffic, where each
-- receive numbers a few messages and takes them, every receive looked at
-- every lane again to find the one or two the cut had just numbered into
-- (e_work_lanes: the largest statement of a receive, ~30% of its time,
-- measured). A session keeps a note of what it last found (the setting
-- sluice.idle_<queue id>): the group, the newest batch then, until when the
-- note holds (at most 25 ms ahead), and 'idle' (no lane of the group had
-- work, but in batches newer than the note's) or 'busy' (lanes with work
-- were held by other receives). While an idle note holds:
--
-- * the fast path (engine_fast.sql: nothing to number) returns nothing
--   without looking at the lanes, as long as the note's batch is still the
--   newest (e_idle);
-- * a receive that numbered, or waited for a cut, looks only at the lanes
--   of the batches newer than the note's with positions after their cursor
--   (e_note_lanes), not at every lane; when it took all there was in them,
--   the note moves on to the newest batch it looked at (its time limit
--   stays).
--
-- Notes are written by a receive that looked at every lane and took all
-- there was (e_pick), and by a fast-path receive that found no free lane
-- with work (e_idle_note), both until 25 ms ahead. New messages always go
-- through: e_to_number and the priority check run first, a cut makes a newer
-- batch, and so do unkeyed nacks (a retry is a new message). What a note
-- does not see, for at most the 25 ms it holds: a keyed nack of another
-- session (sluice.nack clears its own session's note), a lease written by
-- a receive that committed after the note's snapshot, a lease that expires
-- or a low-water mark that comes due while a note holds, and a group moved
-- back by seek. (extend only lengthens leases.) A receive of a queue with
-- prioritized messages the group may still deliver (e_prio_pending)
-- neither reads nor writes notes on the pick path.
-- Format: 'group_id batch_no until_microseconds idle|busy'.

-- e_note: the session's note of a group, if it holds now.
--
-- Parameters:
--   p_note      the session's note (NULL or '' when there is none)
--   p_group_id  group id
--   p_now       the receive's time
-- Returns: (batch_no, idle, until): the note's newest batch, whether it
--          says idle (else busy), and until when it holds; all NULL when
--          there is no note of the group or it no longer holds
CREATE OR REPLACE FUNCTION sluice_tmpl.e_note(p_note text, p_group_id int, p_now timestamptz,
                                              OUT batch_no bigint, OUT idle boolean, OUT until timestamptz)
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    f constant text[] := string_to_array(p_note, ' ');
BEGIN
    IF p_note IS NULL OR p_note !~ '^[0-9]{1,10} [0-9]{1,19} [0-9]{1,19} (idle|busy)$' OR f[1] <> p_group_id::text
       OR f[3]::numeric <= (extract(epoch FROM p_now) * 1000000)::bigint THEN
        RETURN;
    END IF;
    batch_no := f[2]::bigint;
    idle := f[4] = 'idle';
    until := to_timestamp(f[3]::numeric / 1000000);
END
$$;

-- e_idle: what the session's note says of a group now, for the fast path.
--
-- Parameters:
--   p_note      the session's note (NULL or '' when there is none)
--   p_group_id  group id
--   p_now       the receive's time
-- Returns: true: the group is idle (look at nothing); false: its lanes
--          with work are held (look, but do not note again); NULL: no note
--          holds, or a batch newer than the note's was numbered (look, and
--          note if nothing is found)
CREATE OR REPLACE FUNCTION sluice_tmpl.e_idle(p_note text, p_group_id int, p_now timestamptz)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    n record;
BEGIN
    n := e_note(p_note, p_group_id, p_now);
    IF n.batch_no IS DISTINCT FROM (SELECT b.batch_no FROM batches b ORDER BY b.batch_no DESC LIMIT 1) THEN
        RETURN NULL;
    END IF;
    RETURN n.idle;
END
$$;

-- e_idle_note: the note for a group whose receive found no free lane with
-- work (see above): until 25 ms ahead, with the newest batch, idle or busy.
-- It does not look for a lease of the group that expires, or a low-water
-- mark that comes due, sooner: that is seen when the note runs out, at most
-- 25 ms late, as under a note written on the numbering path. (It did look:
-- three probes of four partitions per lane, ~1.8 ms a note, written on most
-- empty polls of steady traffic, where every cut makes a newer batch: 13% of
-- the consumers' time at 300 msg/s, PostgreSQL 15, 4 consumers.)
--
-- Parameters:
--   p_group_id  group id
--   p_lanes     the queue's number of lanes
--   p_now       the receive's time
-- Returns: the note
CREATE OR REPLACE FUNCTION sluice_tmpl.e_idle_note(p_group_id int, p_lanes int, p_now timestamptz)
RETURNS text
LANGUAGE plpgsql
AS $$
BEGIN
    RETURN (
        SELECT p_group_id || ' ' || nb.batch_no || ' '
               || (extract(epoch FROM p_now + interval '25 ms') * 1000000)::bigint
               || CASE WHEN w.busy THEN ' busy' ELSE ' idle' END
        FROM (SELECT b.batch_no FROM batches b ORDER BY b.batch_no DESC LIMIT 1) nb
        CROSS JOIN (SELECT EXISTS (SELECT FROM e_lanes_with_work(p_group_id, p_lanes, p_now, 0, false, NULL)) AS busy) w);
END
$$;

-- e_note_lanes: the lanes of a group that a receive holding an idle note
-- looks at: those with a batch newer than the note's and numbered
-- positions after their cursor (or no state yet), in turn from p_start.
--
-- Parameters:
--   p_group_id  group id
--   p_lanes     the queue's number of lanes
--   p_start     the first lane in turn
--   p_after     the note's batch
-- Returns: the lanes, in turn order ('{}': none)
CREATE OR REPLACE FUNCTION sluice_tmpl.e_note_lanes(p_group_id int, p_lanes int, p_start int, p_after bigint)
RETURNS smallint[]
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN ARRAY(
        SELECT nb.lane
        FROM (SELECT b.lane, max(b.last_pos) AS last_pos FROM batches b
              WHERE b.batch_no > p_after AND b.last_pos >= b.first_pos
              GROUP BY b.lane) nb
        LEFT JOIN LATERAL (SELECT s.cursor FROM group_states s
                           WHERE s.group_id = p_group_id AND s.lane = nb.lane
                           ORDER BY s.seq DESC LIMIT 1) s ON true
        WHERE s.cursor IS NULL OR nb.last_pos > s.cursor
        ORDER BY (nb.lane - p_start + p_lanes) % p_lanes);
END
$$;

-- e_note_idle: note in the session that a group is idle but for batches
-- newer than p_batch, until p_until (see above).
--
-- Parameters:
--   p_queue_id  queue id
--   p_group_id  group id
--   p_batch     the newest batch the receive looked at
--   p_until     until when the note holds
CREATE OR REPLACE FUNCTION sluice_tmpl.e_note_idle(p_queue_id int, p_group_id int, p_batch bigint,
                                                   p_until timestamptz)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM set_config(sluice._idle_note_name(p_queue_id),
                       p_group_id || ' ' || p_batch || ' ' || (extract(epoch FROM p_until) * 1000000)::bigint || ' idle',
                       false);
END
$$;
