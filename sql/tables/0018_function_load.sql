-- Function loads (issue 38, item 1): the digest of every set of function
-- files a migrate loaded. A migrate whose function files have a digest
-- already recorded, and that applied no migration, loads nothing: no DDL,
-- so sessions calling the functions meanwhile are not disturbed. Grows by
-- one row per upgrade.
CREATE TABLE sluice.function_load (
    digest    text PRIMARY KEY,
    loaded_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
