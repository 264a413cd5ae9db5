-- Group: privileges
--
-- Loaded on every migrate after the other function files (refresh.sql
-- excepted): makes the public API functions SECURITY DEFINER and grants them
-- to the roles of tables/0002_roles.sql. It defines no function.
--
--   sluice_producer  send, send_batch, version
--   sluice_consumer  receive, ack, nack, extend, status, dead_letters,
--                    peek, leases (reads, like status and dead_letters:
--                    a consumer sees the bodies it receives anyway),
--                    list_queues (the Go worker reads a queue's lease from
--                    it), version
--   sluice_admin     every public function (it is not a member of the other
--                    two roles: it is granted each function itself)
--   PUBLIC           version only
--
-- Nobody but the owner of the schema (the role that migrates) gets any
-- privilege on a table, a sequence, an internal function (name starting with
-- "_") or anything in schemas sluice_tmpl and sluice_q<id>. The public
-- functions run as that owner (SECURITY DEFINER) with search_path pinned to
-- pg_catalog, pg_temp; a public function without a pinned search_path stops
-- the migration. version() reads nothing and stays SECURITY INVOKER.
--
-- Privileges of the three sluice roles and of PUBLIC are reset here on every
-- migrate, so that each role has exactly its functions; privileges granted
-- to other roles are left alone.
--
-- A queue created later gets a schema sluice_q<id> on which nobody but the
-- owner has USAGE, so nothing in it can be reached by another role; its
-- tables carry no grants. (Its functions keep PostgreSQL's default EXECUTE
-- for PUBLIC until the next migrate revokes it, which the missing schema
-- USAGE makes moot.)
DO $grants$
DECLARE
    producer_funcs constant text[] := ARRAY['send', 'send_batch', 'version'];
    consumer_funcs constant text[] := ARRAY['receive', 'ack', 'nack', 'extend', 'status', 'dead_letters',
                                            'peek', 'leases', 'list_queues', 'version'];
    public_funcs   constant text[] := ARRAY['version'];
    invoker_funcs  constant text[] := ARRAY['version'];
    roles constant text := 'PUBLIC, sluice_producer, sluice_consumer, sluice_admin';
    missing text;
    f record;
    sp text;
    sch text;
BEGIN
    SELECT string_agg(r, ', ') INTO missing
    FROM unnest(ARRAY['sluice_producer', 'sluice_consumer', 'sluice_admin']) r
    WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = r);
    IF missing IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'undefined_object',
            MESSAGE = format('sluice roles missing: %s', missing),
            HINT = 'They are created by migration tables/0002_roles.sql; recreate them with CREATE ROLE ... NOLOGIN.';
    END IF;

    -- Start from nothing for PUBLIC and the sluice roles.
    EXECUTE format('REVOKE ALL ON SCHEMA sluice, sluice_tmpl FROM %s', roles);
    EXECUTE format('REVOKE ALL ON ALL TABLES IN SCHEMA sluice, sluice_tmpl FROM %s', roles);
    EXECUTE format('REVOKE ALL ON ALL SEQUENCES IN SCHEMA sluice, sluice_tmpl FROM %s', roles);
    EXECUTE format('REVOKE ALL ON ALL ROUTINES IN SCHEMA sluice, sluice_tmpl FROM %s', roles);
    FOR sch IN SELECT n.nspname FROM sluice.queue q
               JOIN pg_catalog.pg_namespace n ON n.nspname = 'sluice_q' || q.id ORDER BY q.id LOOP
        EXECUTE format('REVOKE ALL ON SCHEMA %1$I FROM %2$s; '
                       'REVOKE ALL ON ALL TABLES IN SCHEMA %1$I FROM %2$s; '
                       'REVOKE ALL ON ALL SEQUENCES IN SCHEMA %1$I FROM %2$s; '
                       'REVOKE ALL ON ALL ROUTINES IN SCHEMA %1$I FROM %2$s', sch, roles);
    END LOOP;

    -- Resolving sluice.<function> needs USAGE on the schema; it gives access
    -- to nothing by itself.
    GRANT USAGE ON SCHEMA sluice TO PUBLIC;

    FOR f IN SELECT p.oid::regprocedure AS sig, p.proname::text AS name, p.proconfig
             FROM pg_catalog.pg_proc p
             WHERE p.pronamespace = 'sluice'::regnamespace AND p.prokind = 'f' AND p.proname !~ '^_'
             ORDER BY 1 LOOP
        IF f.name <> ALL (invoker_funcs) THEN
            -- A SECURITY DEFINER function must not look up names in a schema
            -- its callers can write to, and pg_temp must come last.
            SELECT substr(c, length('search_path=') + 1) INTO sp
            FROM unnest(f.proconfig) c WHERE c LIKE 'search_path=%';
            IF sp IS NULL OR NOT (SELECT bool_and(e ~ '^(pg_catalog|pg_temp|sluice[a-z0-9_]*)$')
                                         AND (array_agg(e ORDER BY i DESC))[1] = 'pg_temp'
                                  FROM unnest(string_to_array(replace(sp, ' ', ''), ',')) WITH ORDINALITY AS u(e, i)) THEN
                RAISE EXCEPTION USING ERRCODE = 'invalid_function_definition',
                    MESSAGE = format('%s must pin its search_path (SET search_path = pg_catalog, pg_temp) '
                                     'to be SECURITY DEFINER, it has %s', f.sig, coalesce(sp, 'none'));
            END IF;
            EXECUTE format('ALTER FUNCTION %s SECURITY DEFINER', f.sig);
        END IF;
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO sluice_admin', f.sig);
        IF f.name = ANY (producer_funcs) THEN
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO sluice_producer', f.sig);
        END IF;
        IF f.name = ANY (consumer_funcs) THEN
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO sluice_consumer', f.sig);
        END IF;
        IF f.name = ANY (public_funcs) THEN
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO PUBLIC', f.sig);
        END IF;
    END LOOP;
END
$grants$;
