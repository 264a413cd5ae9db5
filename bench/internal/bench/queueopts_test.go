package bench_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicemq/sluice/bench/internal/bench"
)

// TestXminQueueIsTheReclaimQueue makes the xmin scenario's queues as it
// would with its systems named by --xmin-systems, by --systems, or by
// neither (the fallback, sluice): sluice's queue must have retention 0 and
// a 10 s rotation in every case, as sluice.list_queues() reads them back.
// (The fallback made a queue with the engine's defaults, retention 1 hour
// and rotation 1 minute, under a note saying retention 0 and 10 s.)
func TestXminQueueIsTheReclaimQueue(t *testing.T) {
	pool := server.NewPool(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tc := range []struct {
		name                 string
		xminSystems, systems []string
	}{
		{"fallback", nil, nil},
		{"--systems", nil, []string{"sluice", "skiplocked"}},
		{"--xmin-systems", []string{"sluice"}, []string{"skiplocked"}},
	} {
		recs, err := bench.XminQueueOptions(ctx, bench.Options{Pool: pool, XminSystems: tc.xminSystems, Systems: tc.systems})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if len(recs) != 1 || recs[0].System != "sluice" || len(recs[0].Queues) != 1 || recs[0].Queues[0] != "bench" {
			t.Fatalf("%s: records %+v: want sluice's queue bench only", tc.name, recs)
		}
		if o := recs[0].Options; o["retention"] != "0 seconds" || o["rotate_interval"] != "10 seconds" {
			t.Errorf("%s: options %v: want retention 0 seconds and rotate_interval 10 seconds", tc.name, o)
		}
	}
}

// TestXminReportStatesQueueOptions runs a short xmin scenario without
// --xmin-systems: its report must state the options its queue had, read
// back from sluice.list_queues(), and what its size shows.
func TestXminReportStatesQueueOptions(t *testing.T) {
	o := bench.Options{Out: &bytes.Buffer{}, Command: "test", XminDuration: 2 * time.Second, Interval: time.Second,
		Producers: []int{1}, Consumers: []int{1}, Rate: 200}
	cfg, err := pgxpool.ParseConfig(server.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = int32(bench.MaxConnections(o))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	o.Pool = pool
	rep, err := bench.Run(ctx, []string{"xmin"}, o)
	out := o.Out.(*bytes.Buffer).String()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	res := rep.Results[0]
	if len(res.Queues) != 1 || res.Queues[0].System != "sluice" || res.Queues[0].Options["retention"] != "0 seconds" {
		t.Fatalf("queues %+v: want sluice's, with retention 0 seconds\n%s", res.Queues, out)
	}
	notes := strings.Join(res.Notes, "\n")
	for _, want := range []string{
		"sluice's queue bench had retention 0 seconds and rotate_interval 10 seconds: it keeps nothing after completion",
		"Queue options, read back from sluice.list_queues() once each queue was made (the engine's defaults filled in): sluice, queue bench: backoff_base 1 second,",
		"retention 0 seconds, rotate_interval 10 seconds,",
	} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes want %q:\n%s", want, notes)
		}
	}
	t.Logf("notes:\n%s", notes)
}
