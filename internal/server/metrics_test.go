package server_test

import (
	"strings"
	"testing"
)

// /metrics has the queues' status, the server's counters, request
// durations and pool statistics.
func TestMetrics(t *testing.T) {
	ts := start(t)
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "m"})
	ts.must(201, "POST", "/v1/queues/m/messages/batch", tokAdmin, map[string]any{"messages": []any{
		map[string]any{"body": 1}, map[string]any{"body": 2}, map[string]any{"body": 3}}})
	msgs := ts.must(200, "POST", "/v1/queues/m/groups/default/receive", tokAdmin, map[string]any{"max": 2})["messages"].([]any)
	ts.must(200, "POST", "/v1/queues/m/groups/default/ack", tokAdmin, map[string]any{"receipts": []string{msgs[0].(map[string]any)["receipt"].(string)}})
	ts.must(200, "POST", "/v1/queues/m/groups/default/nack", tokAdmin, map[string]any{"receipt": msgs[1].(map[string]any)["receipt"].(string), "delay": "1h"})
	body := string(ts.do("GET", "/metrics", tokAdmin, nil).body)
	for _, line := range []string{
		`sluice_queue_ready{group="default",queue="m"} 1`,
		`sluice_queue_delayed{group="default",queue="m"} 1`,
		`sluice_queue_in_flight{group="default",queue="m"} 0`,
		`sluice_queue_dead{group="default",queue="m"} 0`,
		`sluice_queue_lag{group="default",queue="m"} `,
		`sluice_queue_status_estimated{group="default",queue="m"} 0`,
		`sluice_http_messages_sent_total{queue="m"} 3`,
		`sluice_http_messages_received_total{group="default",queue="m"} 2`,
		`sluice_http_messages_acked_total{group="default",queue="m"} 1`,
		`sluice_http_messages_nacked_total{group="default",queue="m"} 1`,
		`sluice_http_request_duration_seconds_count{code="201",route="POST /v1/queues/{queue}/messages/batch"} 1`,
		`sluice_status_up 1`,
		`sluice_db_pool_max_connections `,
		`sluice_queue_oldest_pending_age_seconds{group="default",queue="m"} `,
	} {
		if !strings.Contains(body, "\n"+line) {
			t.Errorf("/metrics has no %q", line)
		}
	}
	if t.Failed() {
		t.Log(body)
	}
}
