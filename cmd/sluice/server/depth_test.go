package server_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/cmd/sluice/server"
)

// A message nested deeper than 512 levels is refused at the send (422, the
// engine's SL012), whether the server's JSON decoder would take it or not.
func TestDeepJSONRefused(t *testing.T) {
	ts := start(t)
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "q"})
	deep := strings.Repeat("[", 600) + strings.Repeat("]", 600)
	for _, c := range []struct{ path, body string }{
		{"/v1/queues/q/messages", `{"body": ` + deep + `}`},
		{"/v1/queues/q/messages/batch", `{"messages": [{"body": 1}, {"body": ` + deep + `}]}`},
		{"/v1/transaction", `{"send": [{"queue": "q", "body": ` + deep + `}]}`},
	} {
		p := ts.problem(422, "POST", c.path, tokAdmin, c.body)
		if p["code"] != "SL012" || p["type"] != "urn:sluice:problem:json_too_deep" {
			t.Errorf("%s: %v", c.path, p)
		}
	}
	if msgs := ts.must(200, "GET", "/v1/queues/q/messages", tokAdmin, nil)["messages"].([]any); len(msgs) != 0 {
		t.Fatalf("stored %d messages", len(msgs))
	}
}

// A message the server cannot write back (nested 12,000 deep: stored
// before the engine refused such messages, here by a superuser's INSERT)
// is a 500 problem, logged with the request id, not a 200 with an empty
// body.
func TestUnwritableAnswerIs500(t *testing.T) {
	var log syncBuffer
	ts := start(t, func(c *server.Config) { c.Logger = slog.New(slog.NewTextHandler(&log, nil)) })
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "q"})
	deep := strings.Repeat("[", 12000) + strings.Repeat("]", 12000)
	var qid int
	if err := ts.pool.QueryRow(context.Background(), `SELECT id FROM sluice.queue WHERE name = 'q'`).Scan(&qid); err != nil {
		t.Fatal(err)
	}
	// (engine 2: the queue's own msg table, in its schema)
	if _, err := ts.pool.Exec(context.Background(), fmt.Sprintf(`INSERT INTO sluice_q%d.msg (slot, id, txid, sent_at, body)
	   SELECT (SELECT ns.slot FROM sluice._slot_now(q.id) ns), nextval(q.id_seq), pg_current_xact_id(), clock_timestamp(), $1::jsonb
	   FROM sluice.queue q WHERE q.id = $2`, qid), deep, qid); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/queues/q/messages"},
		{"POST", "/v1/queues/q/groups/default/receive"},
	} {
		var body any
		if c.method == "POST" {
			body = map[string]any{}
		}
		r := ts.do(c.method, c.path, tokAdmin, body)
		if r.status != 500 {
			t.Fatalf("%s %s: %d, %d bytes, want 500", c.method, c.path, r.status, len(r.body))
		}
		p := r.json(t)
		id := r.header.Get("X-Request-Id")
		if p["type"] != "urn:sluice:problem:unwritable_response" || p["request_id"] != id ||
			!strings.Contains(log.String(), "request_id="+id) {
			t.Fatalf("%s %s: %v; the log:\n%s", c.method, c.path, p, log.String())
		}
	}
}
