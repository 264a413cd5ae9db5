-- Group: engine templates - ordered keys (see engine_cut.sql for what a template is)
--
-- A key's messages all live in one lane (the cut puts them in the lane of
-- the key's hash), so these lookups by key hash stay inside a lane.

-- e_done: whether a group has completed a position.
CREATE OR REPLACE FUNCTION sluice_tmpl.e_done(p_group_id int, p_pos bigint)
RETURNS boolean
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM acks a WHERE a.group_id = p_group_id AND a.pos = p_pos);
END
$$;

-- e_pos: a group's view of one position: whether it is completed, and its
-- newest delivery row (attempt NULL if none; newest by attempt, then time):
-- the attempt, whether it is a parked retry (token 0) rather than a lease,
-- and when it expires (or is due).
CREATE OR REPLACE FUNCTION sluice_tmpl.e_pos(p_group_id int, p_pos bigint,
    OUT done boolean, OUT attempt int, OUT parked boolean, OUT expires timestamptz)
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    done := e_done(p_group_id, p_pos);
    SELECT d.attempt, d.token = 0, d.expires_at INTO attempt, parked, expires
    FROM deliveries d WHERE d.group_id = p_group_id AND d.pos = p_pos
    ORDER BY d.attempt DESC, d.delivered_at DESC, d.token DESC LIMIT 1;
END
$$;

-- e_key_prev: the position of a key before p_pos that is meant for the group
-- (NULL if none is left).
CREATE OR REPLACE FUNCTION sluice_tmpl.e_key_prev(p_group_id int, p_key bigint, p_pos bigint)
RETURNS bigint
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN (SELECT k.pos FROM keyed k
            WHERE k.key_hash = p_key AND k.pos < p_pos AND (k.target IS NULL OR k.target = p_group_id)
            ORDER BY k.pos DESC LIMIT 1);
END
$$;

-- e_key_head: the earliest incomplete position of a key, given an
-- incomplete one (p_pos): the messages of a run are in flight together, so
-- the ones before p_pos may be too.
CREATE OR REPLACE FUNCTION sluice_tmpl.e_key_head(p_group_id int, p_key bigint, p_pos bigint, p_lwm bigint)
RETURNS bigint
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v bigint := p_pos;
    pv bigint;
BEGIN
    LOOP
        pv := e_key_prev(p_group_id, p_key, v);
        EXIT WHEN pv IS NULL OR pv < p_lwm OR e_done(p_group_id, pv);
        v := pv;
    END LOOP;
    RETURN v;
END
$$;

-- e_key_next: the position of a key after p_pos that is meant for the group,
-- with its message (pos NULL if none).
CREATE OR REPLACE FUNCTION sluice_tmpl.e_key_next(p_group_id int, p_key bigint, p_pos bigint,
    OUT pos bigint, OUT mslot smallint, OUT id bigint, OUT txid xid8)
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    SELECT k.pos, k.mslot, k.id, k.txid INTO pos, mslot, id, txid
    FROM keyed k
    WHERE k.key_hash = p_key AND k.pos > p_pos AND (k.target IS NULL OR k.target = p_group_id)
    ORDER BY k.pos LIMIT 1;
END
$$;
