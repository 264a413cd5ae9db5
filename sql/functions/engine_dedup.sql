-- Group: engine templates - idempotent send (see engine_cut.sql for what a template is)

-- (send and send_batch both use the functions below, a key or many: the
-- one-key forms e_dedup_lookup and e_dedup_record are kept only for release
-- 0.1.0's calls caught by an upgrade, compat.sql)

-- e_dedup_lookup_all: the ids of the messages sent with these deduplication
-- keys within the window, in one statement (a send's key, or a
-- send_batch's). The caller holds every key's advisory lock.
--
-- Parameters:
--   p_keys    the keys (NULLs and repeats allowed)
--   p_window  the queue's dedup_window
-- Returns: (dedup_key, msg_id): one row per key sent within the window, with
--          the id of the message sent with it last
CREATE OR REPLACE FUNCTION sluice_tmpl.e_dedup_lookup_all(p_keys text[], p_window interval)
RETURNS TABLE (dedup_key text, msg_id bigint)
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN QUERY
    SELECT DISTINCT ON (d.dedup_key) d.dedup_key, d.msg_id FROM dedup d
    WHERE d.dedup_key = ANY (p_keys) AND d.at > clock_timestamp() - p_window
    ORDER BY d.dedup_key, d.at DESC;
END
$$;

-- e_dedup_record_all: remember that these messages were sent with these
-- keys, in one statement.
--
-- Parameters:
--   p_slot  the slot the messages were written to
--   p_keys  their keys (a NULL key records nothing)
--   p_ids   their ids, one per key
CREATE OR REPLACE FUNCTION sluice_tmpl.e_dedup_record_all(p_slot smallint, p_keys text[], p_ids bigint[])
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO dedup (slot, dedup_key, msg_id, at)
    SELECT p_slot, u.k, u.id, clock_timestamp() FROM unnest(p_keys, p_ids) AS u(k, id) WHERE u.k IS NOT NULL;
END
$$;
