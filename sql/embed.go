// Package sqlsrc embeds the SQL sources of the sluice engine.
//
// Layout (the contract between the SQL engine and the Go migrator):
//
//	tables/NNNN_name.sql   numbered forward migrations (tables, types, indexes);
//	                       each applied once, in order, recorded in sluice.schema_migration
//	functions/*.sql        function definitions, reloaded idempotently (CREATE OR REPLACE)
//	                       on every migrate, in the order listed in functions/manifest.txt
//
// # Per-queue function copies
//
// The engine's functions are written once, as templates in schema
// sluice_tmpl (functions/engine_*.sql), and copied into each queue's schema
// sluice_q<id> by sluice._instantiate (functions/storage.sql) when the queue
// is created and, for every queue, on each migrate. A copy differs from its
// template only in its schema, so its unqualified table names are the
// queue's own tables: PL/pgSQL plans each statement once per session, and no
// statement plans over other queues' partitions.
//
// Templates carry no SET clauses. The copier gives the copies of the entry
// points (the functions the public API in schema sluice calls) the engine's
// settings in one ALTER FUNCTION: search_path = the queue's schema
// (sluice._queue_path), plan_cache_mode = force_generic_plan, enable_seqscan
// = off (except e_peek), jit = off and max_parallel_workers_per_gather = 0
// (the four hot ones below: not that one; they start no parallel plan that
// was seen, and each setting costs every call). The other copies run inside an entry
// point and inherit them: a SET clause costs ~30 us a call.
//
// The public API reaches a copy in one of two ways. receive, ack, nack and
// extend set search_path to sluice._queue_path(id) (local to themselves)
// and call the copy by its bare name, a plan PL/pgSQL keeps until the path
// changes; they carry the other settings in their own SET clause, and their
// copies (e_receive, e_ack, e_nack, e_extend) none, so that these hot calls
// pay for one SET clause, not two. The rest use
// EXECUTE format('%I.e_...', sluice._qschema(id)).
// Small SQL helpers on hot paths are written to be inlined by the planner
// (one SELECT, no SET clause, no more volatile than declared); the test
// TestHotPathSQLHelpersAreInlined fails when one is called instead.
// docs/design.md ("Per-queue function copies") gives the measurements.
package sqlsrc

import "embed"

// FS holds tables/*.sql, functions/*.sql and functions/manifest.txt.
//
//go:embed tables/*.sql functions/*.sql functions/manifest.txt
var FS embed.FS
