package sluice

// The SQL the library runs: each statement calls one function of the SQL
// API (sql/functions/*.sql, documented in docs/sql.md), whose header comment
// is the contract. Casts pin the parameter types so that pgx encodes Go
// values the same way whatever the server infers.
const (
	sqlSend = `SELECT sluice.send($1, $2::jsonb, $3::jsonb, $4::text, $5::interval, $6::int, $7::text)`

	sqlSendBatch = `SELECT id FROM sluice.send_batch($1, $2::jsonb[], $3::jsonb[], $4::text[], $5::interval, $6::int[], $7::text[]) AS s(id)`

	sqlReceive = `SELECT id, body, headers, key, priority, attempt, sent_at, receipt, lease_expires_at, pos
FROM sluice.receive($1, $2, $3::int, $4::interval, $5::text, $6::text[])`

	sqlAck = `SELECT sluice.ack($1, $2, $3::text[], $4::boolean)`

	sqlNack = `SELECT sluice.nack($1, $2, $3, $4::interval, $5::text)`

	sqlExtend = `SELECT sluice.extend($1, $2, $3::text[], $4::interval)`

	sqlCreateQueue = `SELECT sluice.create_queue($1, $2::jsonb)`

	sqlDropQueue = `SELECT sluice.drop_queue($1)`

	// sqlQueueSettings reads one queue's lease option in microseconds and
	// its max_attempts, and tells whether the queue exists (no row when it
	// does not).
	sqlQueueSettings = `SELECT (extract(epoch FROM (options->>'lease')::interval) * 1000000)::bigint,
       (options->>'max_attempts')::int
FROM sluice.list_queues() WHERE queue = $1`

	sqlPurgeQueue = `SELECT sluice.purge_queue($1)`

	sqlUpgradeQueue = `SELECT sluice.upgrade_queue($1)`

	sqlCreateGroup = `SELECT sluice.create_group($1, $2, $3, $4::interval)`

	sqlDropGroup = `SELECT sluice.drop_group($1, $2)`

	sqlSeekGroup = `SELECT sluice.seek_group($1, $2, $3)`

	// (a queue without groups has one row, group_name NULL, whose counts and
	// positions are NULL: Status gives it zeros, and Group "")
	sqlStatus = `SELECT queue, group_name, coalesce(ready, 0), coalesce(delayed, 0), coalesce(in_flight, 0),
       coalesce(dead, 0), oldest_pending_age, coalesce(lag, 0), coalesce(cursor, 0), coalesce(lwm, 0),
       coalesce(head, 0), coalesce(live_epochs, 0), coalesce(holds_reclaim, false), coalesce(waiting, 0),
       coalesce(estimated, false), coalesce(dead_lettered, 0), coalesce(held_by_pid, 0), held_for
FROM sluice.status($1::text)`

	sqlDeadLetters = `SELECT id, group_name, body, headers, key, attempts, error, died_at, sent_at, dead_letter_id
FROM sluice.dead_letters($1, $2::text, $3::int)`

	sqlRedrive = `SELECT sluice.redrive($1, $2::text, $3::bigint[])`

	sqlDiscardDeadLetters = `SELECT sluice.discard_dead_letters($1, $2::text, $3::bigint[])`

	sqlPeek = `SELECT id, body, headers, key, priority, sent_at, deliver_at, resent_to
FROM sluice.peek($1, $2::int, $3::bigint)`

	sqlLeases = `SELECT group_name, id, pos, attempt, consumer, delivered_at, lease_expires_at
FROM sluice.leases($1, $2::text, $3::int)`

	sqlMaintain = `SELECT queue, rotated, reclaimed FROM sluice.maintain()`
)

// The queries that read queue options back (not constants: they share
// sqlTypedOptions).
var (
	// sqlAlterQueue returns the options after the change as
	// sqlTypedOptions renders them ($3: the options that are intervals).
	sqlAlterQueue = `SELECT ` + sqlTypedOptions("o", "$3") + ` FROM sluice.alter_queue($1, $2::jsonb) AS a(o)`

	// sqlListQueues returns each queue's options as the engine stores them
	// and as sqlTypedOptions renders them ($1: the options that are intervals).
	sqlListQueues = `SELECT queue, created_at, options, ` + sqlTypedOptions("options", "$1") + `, groups FROM sluice.list_queues()`
)

// sqlTypedOptions is an expression that renders the jsonb options in column
// col with the options named in the text[] parameter param (the intervals)
// as whole microseconds: the one place where the library reads intervals of
// queue options, whatever form they were given in ("30 seconds",
// "00:00:30", "1 day").
func sqlTypedOptions(col, param string) string {
	return `(SELECT jsonb_object_agg(key, CASE WHEN key = ANY(` + param + `::text[]) AND jsonb_typeof(value) = 'string'
        THEN to_jsonb((extract(epoch FROM (value #>> '{}')::interval) * 1000000)::bigint) ELSE value END)
 FROM jsonb_each(` + col + `))`
}
