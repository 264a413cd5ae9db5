package server_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
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
		`sluice_queue_dead_lettered_total{group="default",queue="m"} 0`,
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

// sluice_queue_dead_lettered_total counts every message a group
// dead-lettered, whichever client did it (here SQL consumers, which the
// server's own counters never see, and one HTTP nack), per group, and a
// redrive leaves it as it is while sluice_queue_dead goes down.
func TestMetricsDeadLetteredCounter(t *testing.T) {
	ts := start(t)
	ctx := context.Background()
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "dl", "options": map[string]any{"max_attempts": 1}})
	ts.must(201, "POST", "/v1/queues/dl/groups", tokAdmin, map[string]any{"name": "other"})
	ts.must(201, "POST", "/v1/queues/dl/messages/batch", tokAdmin, map[string]any{"messages": []any{
		map[string]any{"body": 1}, map[string]any{"body": 2}, map[string]any{"body": 3}}})
	// receiveNack receives up to max of group default over SQL, wants got of
	// them, and nacks the first nack (max_attempts 1: each a dead letter).
	receiveNack := func(max, got, nack int) {
		t.Helper()
		rows, err := ts.pool.Query(ctx, "SELECT receipt FROM sluice.receive('dl', 'default', $1)", max)
		if err != nil {
			t.Fatal(err)
		}
		receipts, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil || len(receipts) != got {
			t.Fatalf("receive %d: %v, %v; want %d", max, receipts, err, got)
		}
		for _, r := range receipts[:nack] {
			if _, err := ts.pool.Exec(ctx, "SELECT sluice.nack('dl', 'default', $1, NULL, 'poison')", r); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Group default: two dead letters by SQL nacks, both redriven.
	receiveNack(2, 2, 2)
	var redriven int64
	if err := ts.pool.QueryRow(ctx, "SELECT sluice.redrive('dl', 'default', NULL)").Scan(&redriven); err != nil || redriven != 2 {
		t.Fatalf("redrive: %d, %v", redriven, err)
	}
	// the redriven copies are delivered again and dead-lettered again: 4
	receiveNack(10, 3, 2)
	// Group other: one dead letter by an HTTP nack.
	msgs := ts.must(200, "POST", "/v1/queues/dl/groups/other/receive", tokAdmin, map[string]any{"max": 1})["messages"].([]any)
	ts.must(200, "POST", "/v1/queues/dl/groups/other/nack", tokAdmin, map[string]any{"receipt": msgs[0].(map[string]any)["receipt"].(string)})

	body := string(ts.do("GET", "/metrics", tokAdmin, nil).body)
	for _, line := range []string{
		`# TYPE sluice_queue_dead_lettered_total counter`,
		`sluice_queue_dead_lettered_total{group="default",queue="dl"} 4`,
		`sluice_queue_dead{group="default",queue="dl"} 2`,
		`sluice_queue_dead_lettered_total{group="other",queue="dl"} 1`,
		`sluice_queue_dead{group="other",queue="dl"} 1`,
		`sluice_http_messages_nacked_total{group="other",queue="dl"} 1`,
	} {
		if !strings.Contains(body, "\n"+line+"\n") {
			t.Errorf("/metrics has no %q", line)
		}
	}
	if strings.Contains(body, `sluice_http_messages_nacked_total{group="default",queue="dl"}`) {
		t.Error("the server counted nacks it did not serve")
	}
	if t.Failed() {
		t.Log(body)
	}
	// /v1/status has the same count.
	st := ts.must(200, "GET", "/v1/status?queue=dl", tokAdmin, nil)["status"].([]any)
	got := map[string]float64{}
	for _, s := range st {
		row := s.(map[string]any)
		got[row["group"].(string)] = row["dead_lettered"].(float64)
	}
	if got["default"] != 4 || got["other"] != 1 {
		t.Fatalf("/v1/status dead_lettered: %v, want default 4, other 1", got)
	}
}

// Keyed messages waiting behind an earlier one of their key show in
// /v1/status (waiting) and /metrics (sluice_queue_waiting), apart from
// ready: without them a hot key's backlog was invisible over HTTP.
func TestStatusAndMetricsShowWaiting(t *testing.T) {
	ts := start(t)
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "w"})
	ts.must(201, "POST", "/v1/queues/w/messages/batch", tokAdmin, map[string]any{"messages": []any{
		map[string]any{"body": 1, "key": "hot"}, map[string]any{"body": 2, "key": "hot"}, map[string]any{"body": 3, "key": "hot"}}})
	msgs := ts.must(200, "POST", "/v1/queues/w/groups/default/receive", tokAdmin, map[string]any{"max": 1})["messages"].([]any)
	if len(msgs) != 1 || msgs[0].(map[string]any)["key"] != "hot" {
		t.Fatalf("receive: %v, want the first message of key hot", msgs)
	}
	ts.must(201, "POST", "/v1/queues/w/messages", tokAdmin, map[string]any{"body": 4})
	st := ts.must(200, "GET", "/v1/status?queue=w", tokAdmin, nil)["status"].([]any)[0].(map[string]any)
	if st["ready"] != float64(1) || st["waiting"] != float64(2) || st["in_flight"] != float64(1) {
		t.Errorf("status %v: want 1 ready, 2 waiting, 1 in flight", st)
	}
	body := string(ts.do("GET", "/metrics", tokAdmin, nil).body)
	for _, line := range []string{
		`sluice_queue_ready{group="default",queue="w"} 1`,
		`sluice_queue_waiting{group="default",queue="w"} 2`,
		`sluice_queue_in_flight{group="default",queue="w"} 1`,
	} {
		if !strings.Contains(body, "\n"+line) {
			t.Errorf("/metrics has no %q", line)
		}
	}
}
