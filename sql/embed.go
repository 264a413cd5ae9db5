// Package sqlsrc embeds the SQL sources of the sluice engine.
//
// Layout (the contract between the SQL engine and the Go migrator):
//
//	tables/NNNN_name.sql   numbered forward migrations (tables, types, indexes);
//	                       each applied once, in order, recorded in sluice.schema_migration
//	functions/*.sql        function definitions, reloaded idempotently (CREATE OR REPLACE)
//	                       on every migrate, in the order listed in functions/manifest.txt
package sqlsrc

import "embed"

// FS holds tables/*.sql, functions/*.sql and functions/manifest.txt.
//
//go:embed tables/*.sql functions/*.sql functions/manifest.txt
var FS embed.FS
