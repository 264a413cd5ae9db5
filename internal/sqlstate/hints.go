package sqlstate

import "strings"

// Surface is where an engine error is shown: the hints the engine writes
// name SQL functions ("Create it with sluice.create_queue()"), which mean
// nothing to a user of the sluice command or of the HTTP API.
type Surface int

// The surfaces that restate the engine's hints.
const (
	CLI Surface = iota
	HTTP
)

// restated are the engine's hints that name SQL, by their start, with what
// they say on each surface.
var restated = []struct {
	prefix    string
	cli, http string
}{
	{"Create it with sluice.create_queue()",
		`"sluice queue list" shows the queues; "sluice queue create NAME" makes one`,
		"GET /v1/queues lists the queues; POST /v1/queues creates one"},
	{"Create it with sluice.create_group()",
		`"sluice queue list" shows the groups of each queue; "sluice group create QUEUE GROUP" makes one`,
		"GET /v1/queues/{queue} shows the queue's groups; POST /v1/queues/{queue}/groups creates one"},
	{"Pass the receipt column of sluice.receive() unchanged",
		`pass the receipt that "sluice receive" printed, unchanged`,
		"pass the receipt of a receive response unchanged"},
	{"Raise the queue's max_delay with sluice.alter_queue()",
		`raise the queue's max_delay with "sluice queue config QUEUE --set max_delay=DURATION" (at most 365 days), or send the message later`,
		"raise the queue's max_delay with PATCH /v1/queues/{queue} (at most 365 days), or send the message later"},
	{"Use sluice.create_group() or sluice.drop_group()",
		`use "sluice group create" or "sluice group drop"`,
		"use POST /v1/queues/{queue}/groups or DELETE /v1/queues/{queue}/groups/{group}"},
	{"Leave it NULL for a group that lasts until drop_group",
		"leave out --ttl for a group that lasts until it is dropped",
		"leave out ttl for a group that lasts until it is dropped"},
	{"Give at least one id, or NULL for all of the group's dead letters",
		"give at least one dead letter id, or --group alone for all of the group's dead letters",
		"give at least one id in ids, or leave ids out (with a group) for all of the group's dead letters"},
	{"Send a JSON value; use 'null'::jsonb for a JSON null",
		"send a JSON value (null for a JSON null)",
		"send a JSON value (null for a JSON null)"},
}

// Hint returns the engine's hint as the surface says it: the same, unless it
// names SQL; then the surface's own words, or "" when it has none (a hint
// that names a function of schema sluice is never shown as it is).
func Hint(hint string, s Surface) string {
	for _, r := range restated {
		if strings.HasPrefix(hint, r.prefix) {
			if s == HTTP {
				return r.http
			}
			return r.cli
		}
	}
	if strings.Contains(hint, "sluice.") || strings.Contains(hint, "::") {
		return ""
	}
	return hint
}
