-- Group: engine templates - idempotent send (see engine_cut.sql for what a template is)

-- e_dedup_lookup: the id of the message sent with this deduplication key
-- within the window, or NULL. The caller holds the key's advisory lock.
CREATE OR REPLACE FUNCTION sluice_tmpl.e_dedup_lookup(p_key text, p_window interval)
RETURNS bigint
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN (SELECT d.msg_id FROM dedup d
            WHERE d.dedup_key = p_key AND d.at > clock_timestamp() - p_window
            ORDER BY d.at DESC LIMIT 1);
END
$$;

-- e_dedup_record: remember that message p_id was sent with key p_key.
CREATE OR REPLACE FUNCTION sluice_tmpl.e_dedup_record(p_slot smallint, p_key text, p_id bigint)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO dedup (slot, dedup_key, msg_id, at) VALUES (p_slot, p_key, p_id, clock_timestamp());
END
$$;
