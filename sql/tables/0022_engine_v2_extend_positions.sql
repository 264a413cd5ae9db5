-- Engine v2: extend renews the receipts it is given, not their lease-mates
-- (as engine 1 does; issue 37, "Public SQL API and semantics unchanged").
-- An extension row names the position it extends; 0 stands for every
-- position of the lease (the rows written before this migration, and an
-- extend of every receipt of a lease).
DO $$
DECLARE
    q record;
BEGIN
    FOR q IN SELECT qq.id FROM sluice.queue qq WHERE qq.engine = 2 ORDER BY qq.id LOOP
        EXECUTE format('ALTER TABLE %I.ext ADD COLUMN pos bigint NOT NULL DEFAULT 0', 'sluice_q' || q.id);
    END LOOP;
END
$$;
