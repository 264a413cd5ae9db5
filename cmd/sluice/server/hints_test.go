package server_test

import (
	"strings"
	"testing"
)

// The API's errors say what to do over HTTP, never with a SQL function.
func TestProblemsNameNoSQL(t *testing.T) {
	t.Parallel()
	ts := start(t)
	p := ts.problem(404, "POST", "/v1/queues/nowhere/messages", tokAdmin, map[string]any{"body": 1})
	if d := p["detail"].(string); strings.Contains(d, "sluice.") || !strings.Contains(d, "POST /v1/queues creates one") {
		t.Errorf("send to a missing queue: detail %q", d)
	}
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "q"})
	p = ts.problem(404, "POST", "/v1/queues/q/groups/nope/receive", tokAdmin, map[string]any{"max": 1})
	if d := p["detail"].(string); strings.Contains(d, "sluice.") || !strings.Contains(d, "POST /v1/queues/{queue}/groups creates one") {
		t.Errorf("receive of a missing group: detail %q", d)
	}
}
