-- Group: meta

-- version: the version of the installed sluice engine.
--
-- Returns: the version string, e.g. '0.1.0'
-- Errors: none
CREATE OR REPLACE FUNCTION sluice.version()
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT '0.1.0'::text
$$;
