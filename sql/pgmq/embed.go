// Package pgmqsql embeds the SQL sources of sluice's PGMQ compatibility
// layer: schema pgmq, the PGMQ 1.13 SQL API built on sluice's public API.
//
// Layout (the same contract as package sqlsrc, see package migrate):
//
//	tables/NNNN_name.sql   numbered forward migrations, each applied once,
//	                       recorded in pgmq.sluice_migration
//	functions/*.sql        function definitions, reloaded on every install,
//	                       in the order of functions/manifest.txt
package pgmqsql

import "embed"

// FS holds tables/*.sql, functions/*.sql and functions/manifest.txt.
//
//go:embed tables/*.sql functions/*.sql functions/manifest.txt
var FS embed.FS
