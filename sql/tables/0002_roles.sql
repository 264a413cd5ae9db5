-- sluice roles for least-privilege access (docs/operations.md, "Least privilege").
--
--   sluice_producer  may send (send, send_batch)
--   sluice_consumer  may receive and complete (receive, ack, nack, extend,
--                    status, dead_letters, list_queues)
--   sluice_admin     may call every function of the API
--
-- They are group roles (NOLOGIN): grant them to your application's login
-- roles. What each may call is granted by functions/grants.sql on every
-- migrate; nobody but the owner of the schema gets any access to tables.
--
-- Roles belong to the whole cluster, not to a database: a role that already
-- exists (made by the migration of another database, or by a DBA beforehand)
-- is kept as it is, and then this migration needs no privilege. Creating a
-- missing role needs CREATEROLE (or a superuser). A DBA who does not want to
-- give CREATEROLE to the migrating role creates the three roles first:
--   CREATE ROLE sluice_producer NOLOGIN;
--   CREATE ROLE sluice_consumer NOLOGIN;
--   CREATE ROLE sluice_admin NOLOGIN;
DO $roles$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['sluice_producer', 'sluice_consumer', 'sluice_admin'] LOOP
        CONTINUE WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = r);
        BEGIN
            EXECUTE format('CREATE ROLE %I NOLOGIN', r);
        EXCEPTION
            -- The migration of another database of the cluster created it meanwhile.
            WHEN duplicate_object OR unique_violation THEN
                NULL;
            WHEN insufficient_privilege THEN
                RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
                    MESSAGE = format('role %s does not exist and %s may not create it', r, current_user),
                    HINT = 'Migrate as a role with CREATEROLE, or have a superuser run '
                           'CREATE ROLE sluice_producer NOLOGIN; CREATE ROLE sluice_consumer NOLOGIN; '
                           'CREATE ROLE sluice_admin NOLOGIN; first (see docs/operations.md).';
        END;
    END LOOP;
END
$roles$;
