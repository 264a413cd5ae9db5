#!/bin/sh
# AlloyDB-style pgbench runs of sluice: enqueue alone, dequeue alone over a
# preloaded backlog, then both at once; the same for the DIY SKIP LOCKED
# table with SKIPLOCKED=1. The connection comes from the libpq variables
# (PGHOST, PGPORT, PGDATABASE, PGUSER, ...) and the database needs the
# sluice schema (sluice migrate). CLIENTS (default 8) and DURATION (seconds, default
# 30) size the runs; PGBENCH names the pgbench binary.
set -eu
cd "$(dirname "$0")"
PGBENCH=${PGBENCH:-pgbench}
CLIENTS=${CLIENTS:-8}
DURATION=${DURATION:-30}
run() { # label, then pgbench arguments
	label=$1; shift
	printf '%-40s ' "$label"
	"$PGBENCH" -n -M simple -c "$CLIENTS" -j "$CLIENTS" -T "$DURATION" "$@" 2>&1 | sed -n 's/^tps = \([0-9.]*\).*/\1 tps/p'
}
if [ "${SKIPLOCKED:-0}" = 1 ]; then
	psql -X -q -v ON_ERROR_STOP=1 -f skiplocked_setup.sql
	run "SKIP LOCKED enqueue" -f skiplocked_enqueue.sql
	run "SKIP LOCKED dequeue (backlog above)" -f skiplocked_dequeue.sql
	run "SKIP LOCKED enqueue + dequeue" -f skiplocked_enqueue.sql -f skiplocked_dequeue.sql
	psql -X -q -c 'DROP TABLE pgbench_queue'
	exit 0
fi
psql -X -q -v ON_ERROR_STOP=1 -f setup.sql >/dev/null
run "sluice enqueue (1 msg/txn)" -f enqueue.sql
run "sluice dequeue (receive 1 + ack)" -f dequeue.sql
run "sluice enqueue + dequeue (concurrently)" -f enqueue.sql -f dequeue.sql
run "sluice dequeue batch (receive 100 + ack)" -f dequeue_batch.sql
psql -X -q -c "SELECT sluice.drop_queue('pgbench')" >/dev/null
