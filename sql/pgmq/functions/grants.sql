-- Group: pgmq compatibility, privileges
--
-- Loaded on every install after the other function files (refresh.sql
-- excepted). It defines no function: it gives the pgmq layer the roles of
-- sluice (tables/0002_roles.sql), as narrow as sluice's own:
--
--   sluice_producer  send, send_batch, send_topic, send_batch_topic,
--                    test_routing, and the name checks (validate_*,
--                    format_table_name)
--   sluice_consumer  read and its forms (read_with_poll, read_grouped*,
--                    pop), delete, archive, set_vt, list_queues, metrics,
--                    metrics_all, the name checks; SELECT on each queue's
--                    view q_<name> and archive a_<name> (a consumer reads
--                    the bodies anyway)
--   sluice_admin     every public function of pgmq; SELECT on the views
--                    and archives
--   PUBLIC           USAGE on schema pgmq only (nothing by itself)
--
-- So a producer can neither read messages nor complete them. Before, the
-- documented grants (SELECT and INSERT on every table of pgmq, EXECUTE on
-- every function) let a producer-only login read every message through
-- q_<name> (a view runs with its owner's rights) and delete messages by
-- inserting into the layer's side tables.
--
-- The public functions run as the layer's owner (SECURITY DEFINER) with
-- search_path pinned, as sluice's do, so that a role needs no privilege on
-- a table, and reads of any role rotate the side tables. send and
-- send_batch are the exception: they are the hot path and have no SET
-- clause (every name in them is qualified), so they stay SECURITY INVOKER;
-- what they call is sluice.send and send_batch (sluice_producer's), the
-- catalog lookups and array helpers listed in send_helpers, and pgmq.meta
-- (read by _queue and _notify_insert), which the roles that send are
-- granted. A public function without a pinned search_path other than
-- these stops the install.
--
-- Privileges of PUBLIC and the three sluice roles on pgmq's objects are
-- reset here on every install; privileges granted to other roles are left
-- alone (revoke those given by the older docs' advice by hand).
DO $grants$
DECLARE
    checks         constant text[] := ARRAY['validate_queue_name', 'validate_routing_key', 'validate_topic_pattern',
                                            'format_table_name'];
    producer_funcs constant text[] := ARRAY['send', 'send_batch', 'send_topic', 'send_batch_topic', 'test_routing']
                                      || checks;
    consumer_funcs constant text[] := ARRAY['read', 'read_with_poll', 'read_grouped', 'read_grouped_with_poll',
                                            'read_grouped_head', 'read_grouped_head_with_poll', 'read_grouped_rr',
                                            'read_grouped_rr_with_poll', 'pop', 'delete', 'archive', 'set_vt',
                                            'list_queues', 'metrics', 'metrics_all'] || checks;
    invoker_funcs  constant text[] := ARRAY['send', 'send_batch'];
    send_helpers   constant text[] := ARRAY['_is_queue', '_tbl', '_notifies', '_notify_insert', '_queue',
                                            '_validate_batch_params', '_json_nulls', '_group_keys'];
    roles constant text := 'PUBLIC, sluice_producer, sluice_consumer, sluice_admin';
    f record;
    m record;
BEGIN
    EXECUTE format('REVOKE ALL ON SCHEMA pgmq FROM %s', roles);
    EXECUTE format('REVOKE ALL ON ALL TABLES IN SCHEMA pgmq FROM %s', roles);
    EXECUTE format('REVOKE ALL ON ALL SEQUENCES IN SCHEMA pgmq FROM %s', roles);
    EXECUTE format('REVOKE ALL ON ALL ROUTINES IN SCHEMA pgmq FROM %s', roles);
    -- Resolving pgmq.<function> and its types needs USAGE on the schema; it
    -- gives access to nothing by itself.
    GRANT USAGE ON SCHEMA pgmq TO PUBLIC;

    FOR f IN SELECT p.oid::regprocedure AS sig, p.proname::text AS name,
                    EXISTS (SELECT FROM unnest(p.proconfig) c WHERE c = 'search_path=pg_catalog, pg_temp') AS pinned
             FROM pg_catalog.pg_proc p
             WHERE p.pronamespace = 'pgmq'::regnamespace AND p.prokind = 'f'
               AND (p.proname !~ '^_' OR p.proname = ANY (send_helpers))
             ORDER BY 1 LOOP
        IF f.name = ANY (send_helpers) THEN
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO sluice_producer, sluice_admin', f.sig);
            CONTINUE;
        END IF;
        IF f.name <> ALL (invoker_funcs) THEN
            IF NOT f.pinned THEN
                RAISE EXCEPTION USING ERRCODE = 'invalid_function_definition',
                    MESSAGE = format('%s must pin its search_path (SET search_path = pg_catalog, pg_temp) '
                                     'to be SECURITY DEFINER', f.sig);
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
    END LOOP;
    GRANT SELECT ON pgmq.meta TO sluice_producer, sluice_admin;
    FOR m IN SELECT meta.sluice_queue FROM pgmq.meta ORDER BY 1 LOOP
        EXECUTE format('GRANT SELECT ON pgmq.%I, pgmq.%I TO sluice_consumer, sluice_admin',
                       pgmq._tbl(m.sluice_queue, 'q'), pgmq._tbl(m.sluice_queue, 'a'));
    END LOOP;
END
$grants$;
