package sluice_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicemq/sluice"
	"github.com/sluicemq/sluice/internal/pgtest"
)

func TestSendReceiveAck(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("orders", nil)
	id, err := b.client.Send(b.ctx, "orders", json.RawMessage(`{"order": 1}`), &sluice.SendOptions{
		Headers: json.RawMessage(`{"trace": "abc"}`), Key: "customer-1", Priority: 3, DedupKey: "o-1",
	})
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := b.client.Receive(b.ctx, "orders", "default", &sluice.ReceiveOptions{Max: 10, Lease: time.Minute, Consumer: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 {
		t.Fatalf("received %d messages, want 1", len(msgs))
	}
	m := msgs[0]
	if m.ID != id || string(m.Body) != `{"order": 1}` || string(m.Headers) != `{"trace": "abc"}` || m.Key != "customer-1" ||
		m.Priority != 3 || m.Attempt != 1 || m.Receipt == "" || m.Queue != "orders" || m.Group != "default" {
		t.Errorf("message %+v", m)
	}
	if d := time.Until(m.LeaseExpiresAt); d < 50*time.Second || d > 70*time.Second {
		t.Errorf("lease expires in %s, want about a minute", d)
	}
	if time.Since(m.SentAt) > time.Minute {
		t.Errorf("sent at %s", m.SentAt)
	}
	if n, err := b.client.Extend(b.ctx, "orders", "default", 2*time.Minute, m.Receipt); err != nil || n != 1 {
		t.Errorf("extend: %d, %v", n, err)
	}
	if n, err := b.client.Ack(b.ctx, "orders", "default", m.Receipt); err != nil || n != 1 {
		t.Errorf("ack: %d, %v", n, err)
	}
	if n, err := b.client.Ack(b.ctx, "orders", "default", m.Receipt); err != nil || n != 0 {
		t.Errorf("second ack: %d, %v; want 0 (stale)", n, err)
	}
	if msgs, err := b.client.Receive(b.ctx, "orders", "default", nil); err != nil || len(msgs) != 0 {
		t.Errorf("receive after ack: %v, %v", msgs, err)
	}
}

// ReceiveOptions.Ack completes the previous batch with the next receive.
func TestReceiveAcksPrevious(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("loop", nil)
	for i := 0; i < 5; i++ {
		b.send("loop", `{"n": `+itoa(i)+`}`)
	}
	var prev []string
	got := 0
	for range 10 {
		msgs, err := b.client.Receive(b.ctx, "loop", "default", &sluice.ReceiveOptions{Max: 2, Ack: prev})
		if err != nil {
			t.Fatal(err)
		}
		got += len(msgs)
		prev = prev[:0]
		for _, m := range msgs {
			prev = append(prev, m.Receipt)
		}
	}
	if got != 5 {
		t.Fatalf("received %d, want 5", got)
	}
	if s := b.status("loop", "default"); s.InFlight != 0 || s.Lag != 0 {
		t.Fatalf("status after the loop %+v, want nothing in flight", s)
	}
	if _, err := b.client.Receive(b.ctx, "loop", "default", &sluice.ReceiveOptions{Ack: []string{"nope"}}); !errors.Is(err, sluice.ErrInvalidReceipt) {
		t.Fatalf("a malformed receipt in Ack: %v, want ErrInvalidReceipt", err)
	}
}

func TestSendDelayAndPlainMessage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", nil)
	if _, err := b.client.Send(b.ctx, "q", json.RawMessage(`"later"`), &sluice.SendOptions{Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	b.send("q", `"now"`)
	msgs, err := b.client.Receive(b.ctx, "q", "default", &sluice.ReceiveOptions{Max: 10})
	if err != nil || len(msgs) != 1 || string(msgs[0].Body) != `"now"` || msgs[0].Headers != nil || msgs[0].Key != "" {
		t.Fatalf("received %+v, %v; want only the undelayed message, without headers or key", msgs, err)
	}
	if s := b.status("q", "default"); s.Delayed != 1 || s.InFlight != 1 {
		t.Errorf("status %+v; want 1 delayed, 1 in flight", s)
	}
}

func TestSendBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("batch", &sluice.QueueOptions{Lanes: sluice.Ptr(1)}) // one lane: one receive returns commit order
	msgs := make([]sluice.BatchMessage, 2500)
	for i := range msgs {
		msgs[i].Body = json.RawMessage(`{"n": ` + itoa(i) + `}`)
		if i%2 == 0 {
			msgs[i].Key = "k" + itoa(i%7)
		}
		if i%3 == 0 {
			msgs[i].Headers = json.RawMessage(`{"h": true}`)
		}
	}
	ids, err := b.client.SendBatch(b.ctx, "batch", msgs, &sluice.SendBatchOptions{ChunkSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != len(msgs) {
		t.Fatalf("%d ids for %d messages", len(ids), len(msgs))
	}
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			t.Fatalf("ids not increasing at %d: %d then %d", i, ids[i-1], ids[i])
		}
	}
	// (Engine 2 takes a lane's positions 256 at a time; a key taken by one
	// take of a receive waits for its ack before another take delivers
	// more of it, so the 2,500 come in a few receives, in order.)
	var got []sluice.Message
	for len(got) < len(msgs) {
		ms, err := b.client.Receive(b.ctx, "batch", "default", &sluice.ReceiveOptions{Max: 10000})
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) == 0 {
			break
		}
		receipts := make([]string, len(ms))
		for i, m := range ms {
			receipts[i] = m.Receipt
		}
		if _, err := b.client.Ack(b.ctx, "batch", "default", receipts...); err != nil {
			t.Fatal(err)
		}
		got = append(got, ms...)
	}
	if len(got) != len(msgs) {
		t.Fatalf("received %d, want %d", len(got), len(msgs))
	}
	// each message once, as sent; each key's in order
	index := make(map[int64]int, len(ids))
	for i, id := range ids {
		index[id] = i
	}
	lastOfKey := map[string]int64{}
	for _, m := range got {
		i, ok := index[m.ID]
		if !ok {
			t.Fatalf("message %d received twice, or not sent", m.ID)
		}
		delete(index, m.ID)
		wantKey := ""
		if i%2 == 0 {
			wantKey = "k" + itoa(i%7)
		}
		if string(m.Body) != `{"n": `+itoa(i)+`}` || m.Key != wantKey || (m.Headers != nil) != (i%3 == 0) {
			t.Fatalf("message %d: %+v", i, m)
		}
		if m.Key != "" && m.ID < lastOfKey[m.Key] {
			t.Fatalf("key %s: message %d after %d", m.Key, m.ID, lastOfKey[m.Key])
		}
		lastOfKey[m.Key] = m.ID
	}

	// A batch is all or nothing: one oversized message fails it whole.
	if ids, err := b.client.SendBatch(b.ctx, "batch", nil, nil); err != nil || len(ids) != 0 {
		t.Errorf("empty batch: %v, %v", ids, err)
	}
	bad := []sluice.BatchMessage{{Body: json.RawMessage(`1`)}, {Body: nil}}
	if _, err := b.client.SendBatch(b.ctx, "batch", bad, &sluice.SendBatchOptions{ChunkSize: 1}); !errors.Is(err, sluice.ErrInvalidArgument) {
		t.Errorf("batch with a NULL body: %v, want ErrInvalidArgument", err)
	}
	if got, err := b.client.Receive(b.ctx, "batch", "default", nil); err != nil || len(got) != 0 {
		t.Errorf("after a failed batch, received %+v, %v; want nothing", got, err)
	}
}

func TestNackRetryAndDeadLetter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("retry", &sluice.QueueOptions{MaxAttempts: sluice.Ptr(2), BackoffBase: sluice.Ptr(time.Hour), BackoffMax: sluice.Ptr(time.Hour)})
	id := b.send("retry", `"x"`)
	m := receiveOne(b, "retry", "default")
	if ok, err := b.client.Nack(b.ctx, "retry", "default", m.Receipt, &sluice.NackOptions{Now: true, Error: "first"}); err != nil || !ok {
		t.Fatalf("nack: %v, %v", ok, err)
	}
	m = receiveOne(b, "retry", "default")
	if m.Attempt != 2 || m.ID != id {
		t.Errorf("redelivery %+v; want attempt 2 of message %d", m, id)
	}
	if ok, err := b.client.Nack(b.ctx, "retry", "default", m.Receipt, &sluice.NackOptions{Error: "second"}); err != nil || !ok {
		t.Fatalf("nack: %v, %v", ok, err)
	}
	dls, err := b.client.DeadLetters(b.ctx, "retry", &sluice.DeadLetterOptions{Group: "default"})
	if err != nil || len(dls) != 1 {
		t.Fatalf("dead letters %+v, %v", dls, err)
	}
	if d := dls[0]; d.ID != id || d.Error != "second" || d.Attempts != 2 || d.Group != "default" || string(d.Body) != `"x"` {
		t.Errorf("dead letter %+v", d)
	}
	if s := b.status("retry", "default"); s.Dead != 1 {
		t.Errorf("status %+v, want 1 dead", s)
	}
	if n, err := b.client.Redrive(b.ctx, "retry", "default", id); err != nil || n != 1 {
		t.Fatalf("redrive: %d, %v", n, err)
	}
	m = receiveOne(b, "retry", "default")
	if m.ID != id || m.Attempt != 1 {
		t.Errorf("redriven message %+v", m)
	}
	if ok, err := b.client.Nack(b.ctx, "retry", "default", "not-a-receipt", nil); ok || !errors.Is(err, sluice.ErrInvalidReceipt) {
		t.Errorf("nack of a malformed receipt: %v, %v; want ErrInvalidReceipt", ok, err)
	}
	if _, err := b.client.Nack(b.ctx, "retry", "default", m.Receipt, &sluice.NackOptions{Delay: -time.Second}); !errors.Is(err, sluice.ErrInvalidArgument) {
		t.Errorf("negative delay: %v", err)
	}
}

func receiveOne(b *bundle, queue, group string) sluice.Message {
	b.t.Helper()
	msgs, err := b.client.Receive(b.ctx, queue, group, nil)
	if err != nil || len(msgs) != 1 {
		b.t.Fatalf("receive from %s/%s: %+v, %v; want one message", queue, group, msgs, err)
	}
	return msgs[0]
}

func TestAdmin(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("jobs", &sluice.QueueOptions{MaxAttempts: sluice.Ptr(7), Lease: sluice.Ptr(1500 * time.Millisecond),
		Retention: sluice.Ptr(2 * time.Hour), Notify: sluice.Ptr(false), DefaultGroup: sluice.Ptr(false)})
	b.createQueue("audit", nil)
	if err := b.client.CreateGroup(b.ctx, "jobs", "billing", nil); err != nil {
		t.Fatal(err)
	}
	if err := b.client.CreateGroup(b.ctx, "jobs", "late", &sluice.GroupOptions{StartFrom: sluice.StartLatest}); err != nil {
		t.Fatal(err)
	}
	if err := b.client.CreateGroup(b.ctx, "jobs", "replay", &sluice.GroupOptions{StartFrom: sluice.StartAt(time.Now().Add(-time.Hour))}); err != nil {
		t.Fatal(err)
	}
	qs, err := b.client.ListQueues(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) != 2 || qs[0].Name != "audit" || qs[1].Name != "jobs" {
		t.Fatalf("queues %+v", qs)
	}
	if strings.Join(qs[1].Groups, ",") != "billing,late,replay" || strings.Join(qs[0].Groups, ",") != "default" {
		t.Errorf("groups %v and %v", qs[0].Groups, qs[1].Groups)
	}
	var opts map[string]any
	if err := json.Unmarshal(qs[1].RawOptions, &opts); err != nil {
		t.Fatal(err)
	}
	if opts["max_attempts"] != 7.0 || opts["lease"] != "1500 milliseconds" || opts["retention"] != "7200 seconds" ||
		opts["notify"] != false || opts["default_group"] != false {
		t.Errorf("options %v", opts)
	}

	b.send("jobs", `1`)
	b.send("jobs", `2`)
	st, err := b.client.Status(b.ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 4 {
		t.Errorf("status of all queues: %d rows, want 4: %+v", len(st), st)
	}
	if s := b.status("jobs", "billing"); s.Ready != 2 || s.Lag != 2 || s.OldestPendingAge <= 0 {
		t.Errorf("billing status %+v", s)
	}
	if n, err := b.client.PurgeQueue(b.ctx, "jobs"); err != nil || n != 2 {
		t.Errorf("purge: %d, %v", n, err)
	}
	if s := b.status("jobs", "billing"); s.Ready != 0 {
		t.Errorf("status after purge %+v", s)
	}
	if ok, err := b.client.DropGroup(b.ctx, "jobs", "late"); err != nil || !ok {
		t.Errorf("drop group: %v, %v", ok, err)
	}
	if ok, err := b.client.DropGroup(b.ctx, "jobs", "late"); err != nil || ok {
		t.Errorf("drop group again: %v, %v", ok, err)
	}
	if _, err := b.client.Maintain(b.ctx); err != nil {
		t.Errorf("maintain: %v", err)
	}
	if ok, err := b.client.DropQueue(b.ctx, "jobs"); err != nil || !ok {
		t.Errorf("drop queue: %v, %v", ok, err)
	}
	if ok, err := b.client.DropQueue(b.ctx, "jobs"); err != nil || ok {
		t.Errorf("drop queue again: %v, %v", ok, err)
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("small", &sluice.QueueOptions{MaxPayload: sluice.Ptr(100)})
	big := json.RawMessage(`"` + strings.Repeat("x", 200) + `"`)
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"unknown queue", sendErr(b, "nope", `1`), sluice.ErrQueueNotFound},
		{"invalid name", sendErr(b, "bad name!", `1`), sluice.ErrInvalidName},
		{"duplicate queue", b.client.CreateQueue(b.ctx, "small", nil), sluice.ErrQueueExists},
		{"duplicate group", b.client.CreateGroup(b.ctx, "small", "default", nil), sluice.ErrGroupExists},
		{"unknown group", receiveErr(b, "small", "nobody"), sluice.ErrGroupNotFound},
		{"invalid option", b.client.CreateQueue(b.ctx, "q2", &sluice.QueueOptions{MaxAttempts: sluice.Ptr(-1)}), sluice.ErrInvalidOption},
		{"payload too large", sendErr(b, "small", string(big)), sluice.ErrPayloadTooLarge},
		{"headers not an object", func() error {
			_, err := b.client.Send(b.ctx, "small", json.RawMessage(`1`), &sluice.SendOptions{Headers: json.RawMessage(`[1]`)})
			return err
		}(), sluice.ErrInvalidArgument},
	} {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, tc.err, tc.want)
			continue
		}
		var serr *sluice.Error
		if !errors.As(tc.err, &serr) || !strings.HasPrefix(serr.Code, "SL") || serr.Message == "" {
			t.Errorf("%s: %v is not an *sluice.Error with an SL code", tc.name, tc.err)
		}
	}
	err := sendErr(b, "nope", `1`)
	if want := `sending to queue "nope": queue 'nope' does not exist`; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error text %q, want it to start with %q", err, want)
	}

	// receive refuses a transaction that is not READ COMMITTED.
	err = pgx.BeginTxFunc(b.ctx, b.pool, pgx.TxOptions{IsoLevel: pgx.Serializable}, func(tx pgx.Tx) error {
		_, err := b.client.ReceiveTx(b.ctx, tx, "small", "default", nil)
		return err
	})
	if !errors.Is(err, sluice.ErrInvalidIsolation) {
		t.Errorf("receive in a serializable transaction: %v", err)
	}

	// A database without the schema.
	empty := sluice.NewClient(pgtest.NewPool(t, server.NewDatabaseFrom(t, nil)))
	if _, err := empty.Send(b.ctx, "q", json.RawMessage(`1`), nil); !errors.Is(err, sluice.ErrSchemaMissing) {
		t.Errorf("send without the schema: %v, want ErrSchemaMissing", err)
	}
	if _, err := empty.ListQueues(b.ctx); !errors.Is(err, sluice.ErrSchemaMissing) || !strings.Contains(err.Error(), "sluice migrate") {
		t.Errorf("list queues without the schema: %v, want ErrSchemaMissing", err)
	}
}

func sendErr(b *bundle, queue, body string) error {
	_, err := b.client.Send(b.ctx, queue, json.RawMessage(body), nil)
	return err
}

func receiveErr(b *bundle, queue, group string) error {
	_, err := b.client.Receive(b.ctx, queue, group, nil)
	return err
}

// TestAckAndSendAtomically acknowledges a message and sends its follow-up in
// one transaction: rolled back, neither happened; committed, both did.
func TestAckAndSendAtomically(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("orders", nil)
	b.createQueue("invoices", nil)
	b.send("orders", `{"order": 7}`)
	m := receiveOne(b, "orders", "default")

	errRollback := errors.New("roll back")
	err := b.client.InTx(b.ctx, func(tx pgx.Tx) error {
		if n, err := b.client.AckTx(b.ctx, tx, "orders", "default", m.Receipt); err != nil || n != 1 {
			t.Errorf("ack in tx: %d, %v", n, err)
		}
		if _, err := b.client.SendTx(b.ctx, tx, "invoices", json.RawMessage(`{"invoice_for": 7}`), nil); err != nil {
			t.Error(err)
		}
		return errRollback
	})
	if !errors.Is(err, errRollback) {
		t.Fatalf("InTx: %v", err)
	}
	if s := b.status("orders", "default"); s.InFlight != 1 {
		t.Errorf("after rollback, orders %+v; want the message still in flight", s)
	}
	if s := b.status("invoices", "default"); s.Ready != 0 {
		t.Errorf("after rollback, invoices %+v; want nothing sent", s)
	}

	err = b.client.InTx(b.ctx, func(tx pgx.Tx) error {
		if _, err := b.client.AckTx(b.ctx, tx, "orders", "default", m.Receipt); err != nil {
			return err
		}
		_, err := b.client.SendTx(b.ctx, tx, "invoices", json.RawMessage(`{"invoice_for": 7}`), nil)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if s := b.status("orders", "default"); s.InFlight != 0 || s.Ready != 0 {
		t.Errorf("after commit, orders %+v; want the message completed", s)
	}
	if got := receiveOne(b, "invoices", "default"); string(got.Body) != `{"invoice_for": 7}` {
		t.Errorf("invoice %s", got.Body)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestSendBatchPrioritiesAndDedup(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", nil)
	msgs := []sluice.BatchMessage{
		{Body: json.RawMessage(`{"n": 0}`), Priority: 3, DedupKey: "a"},
		{Body: json.RawMessage(`{"n": 1}`), DedupKey: "b"},
		{Body: json.RawMessage(`{"n": 2}`), DedupKey: "a"}, // a duplicate within the batch (and chunk 2)
		{Body: json.RawMessage(`{"n": 3}`), Priority: -1},
	}
	ids, err := b.client.SendBatch(b.ctx, "q", msgs, &sluice.SendBatchOptions{ChunkSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 4 || ids[2] != ids[0] || ids[1] == ids[0] || ids[3] == ids[1] {
		t.Fatalf("ids = %v, want the third to repeat the first", ids)
	}
	again, err := b.client.SendBatch(b.ctx, "q", []sluice.BatchMessage{{Body: json.RawMessage(`{}`), DedupKey: "b"}}, nil)
	if err != nil || len(again) != 1 || again[0] != ids[1] {
		t.Fatalf("resending key b: %v, %v; want [%d]", again, err, ids[1])
	}
	got, err := b.client.Receive(b.ctx, "q", "default", &sluice.ReceiveOptions{Max: 10})
	if err != nil {
		t.Fatal(err)
	}
	var prios []int
	for _, m := range got {
		prios = append(prios, m.Priority)
	}
	if len(got) != 3 || fmt.Sprint(prios) != "[3 0 -1]" {
		t.Fatalf("received %d messages with priorities %v, want 3 with [3 0 -1]", len(got), prios)
	}
}

// SeekGroup moves a group back (it receives what it acked again) and forward;
// SeekGroupTx moves it only when the transaction commits; bad input fails
// with the matching error.
func TestSeekGroup(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// (one lane: the receives return commit order; with several, unkeyed
	// messages of two lanes come in either order)
	b.createQueue("jobs", &sluice.QueueOptions{Lanes: sluice.Ptr(1)})
	first, second := b.send("jobs", `1`), b.send("jobs", `2`)
	receiveAll := func() []int64 {
		msgs, err := b.client.Receive(b.ctx, "jobs", "default", &sluice.ReceiveOptions{Max: 10})
		if err != nil {
			t.Fatal(err)
		}
		var ids, receipts []string
		var out []int64
		for _, m := range msgs {
			out = append(out, m.ID)
			receipts = append(receipts, m.Receipt)
			ids = append(ids, fmt.Sprint(m.ID))
		}
		if len(receipts) > 0 {
			if n, err := b.client.Ack(b.ctx, "jobs", "default", receipts...); err != nil || n != len(receipts) {
				t.Fatalf("ack %v: %d, %v", ids, n, err)
			}
		}
		return out
	}
	if got := receiveAll(); fmt.Sprint(got) != fmt.Sprint([]int64{first, second}) {
		t.Fatalf("first receive: %v", got)
	}
	if err := b.client.SeekGroup(b.ctx, "jobs", "default", sluice.StartEarliest); err != nil {
		t.Fatal(err)
	}
	if got := receiveAll(); fmt.Sprint(got) != fmt.Sprint([]int64{first, second}) {
		t.Fatalf("after seeking to earliest: %v, want the acked messages again", got)
	}
	rollback := errors.New("roll back")
	err := b.client.InTx(b.ctx, func(tx pgx.Tx) error {
		if err := b.client.SeekGroupTx(b.ctx, tx, "jobs", "default", sluice.StartAt(time.Now().Add(-time.Hour))); err != nil {
			return err
		}
		return rollback
	})
	if !errors.Is(err, rollback) {
		t.Fatalf("InTx: %v", err)
	}
	if got := receiveAll(); len(got) != 0 {
		t.Fatalf("a rolled-back seek moved the group: %v", got)
	}
	b.send("jobs", `3`)
	if err := b.client.SeekGroup(b.ctx, "jobs", "default", sluice.StartLatest); err != nil {
		t.Fatal(err)
	}
	if got := receiveAll(); len(got) != 0 {
		t.Fatalf("after seeking to latest: %v, want nothing", got)
	}
	for _, tc := range []struct {
		queue, group, position string
		want                   error
	}{
		{"jobs", "nobody", sluice.StartEarliest, sluice.ErrGroupNotFound},
		{"nope", "default", sluice.StartEarliest, sluice.ErrQueueNotFound},
		{"jobs", "default", "soon", sluice.ErrInvalidArgument},
		{"jobs", "bad name!", sluice.StartEarliest, sluice.ErrInvalidName},
	} {
		if err := b.client.SeekGroup(b.ctx, tc.queue, tc.group, tc.position); !errors.Is(err, tc.want) {
			t.Errorf("SeekGroup(%q, %q, %q): %v, want %v", tc.queue, tc.group, tc.position, err, tc.want)
		}
	}
}

// TestStatusOfAQueueWithoutGroups checks that a queue without groups, whose
// status row has NULL counts, neither fails Status of every queue nor of
// itself: its row has Group "" and zeros, and the other queues' rows are
// read as before.
func TestStatusOfAQueueWithoutGroups(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("bare", &sluice.QueueOptions{DefaultGroup: sluice.Ptr(false)})
	b.createQueue("work", nil)
	b.send("work", `1`)
	st, err := b.client.Status(b.ctx, "")
	if err != nil {
		t.Fatalf("status of every queue with one that has no groups: %v", err)
	}
	var bare, work int
	for _, s := range st {
		switch {
		case s.Queue == "bare" && s.Group == "" && s.Ready == 0 && s.Lag == 0 && s.Cursor == 0 && s.DeadLettered == 0:
			bare++
		case s.Queue == "work" && s.Group == "default" && s.Ready == 1:
			work++
		}
	}
	if bare != 1 || work != 1 || len(st) != 2 {
		t.Errorf("status rows %+v: want one row of bare without a group and work's default with 1 ready", st)
	}
	if st, err := b.client.Status(b.ctx, "bare"); err != nil || len(st) != 1 || st[0].Group != "" {
		t.Errorf("status of bare: %+v, %v", st, err)
	}
}

// A priority outside the engine's int is refused (ErrInvalidArgument), and
// nothing is sent: a batch stored 3000000000 as -1294967296, a single send
// failed in the driver with an error of no class.
func TestSendPriorityOutOfRange(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", nil)
	for _, p := range []int{math.MaxInt32 + 1, math.MinInt32 - 1, 3000000000} {
		_, err := b.client.Send(b.ctx, "q", json.RawMessage(`1`), &sluice.SendOptions{Priority: p})
		if !errors.Is(err, sluice.ErrInvalidArgument) {
			t.Errorf("Send with priority %d: %v, want ErrInvalidArgument", p, err)
		}
		_, err = b.client.SendBatch(b.ctx, "q", []sluice.BatchMessage{{Body: json.RawMessage(`1`)}, {Body: json.RawMessage(`2`), Priority: p}}, nil)
		if !errors.Is(err, sluice.ErrInvalidArgument) {
			t.Errorf("SendBatch with priority %d: %v, want ErrInvalidArgument", p, err)
		}
	}
	for _, p := range []int{math.MaxInt32, math.MinInt32} {
		if _, err := b.client.SendBatch(b.ctx, "q", []sluice.BatchMessage{{Body: json.RawMessage(`1`), Priority: p}}, nil); err != nil {
			t.Errorf("SendBatch with priority %d: %v", p, err)
		}
	}
	got, err := b.client.Receive(b.ctx, "q", "default", &sluice.ReceiveOptions{Max: 10})
	if err != nil {
		t.Fatal(err)
	}
	var prios []int
	for _, m := range got {
		prios = append(prios, m.Priority)
	}
	if fmt.Sprint(prios) != fmt.Sprint([]int{math.MaxInt32, math.MinInt32}) {
		t.Fatalf("received priorities %v, want only the two in range", prios)
	}
}

// TestStatusPendingCountsWaiting checks that Pending counts every message
// the engine holds for a group: with the first message of a key in
// flight, the rest of the key are waiting (not ready), and a sum that left
// them out would take a group with 4 messages to handle for one with 2.
func TestStatusPendingCountsWaiting(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("keyed", &sluice.QueueOptions{Lanes: sluice.Ptr(1)}) // (one lane: the first receive takes the first message sent)
	for range 3 {
		if _, err := b.client.Send(b.ctx, "keyed", []byte(`1`), &sluice.SendOptions{Key: "hot"}); err != nil {
			t.Fatal(err)
		}
	}
	b.send("keyed", `2`)
	got, err := b.client.Receive(b.ctx, "keyed", "default", &sluice.ReceiveOptions{Max: 1})
	if err != nil || len(got) != 1 || got[0].Key != "hot" {
		t.Fatalf("receive: %+v, %v: want the first message of key hot", got, err)
	}
	s := b.status("keyed", "default")
	if s.InFlight != 1 || s.Waiting != 2 || s.Ready != 1 || s.Delayed != 0 {
		t.Fatalf("status %+v: want 1 in flight, 2 waiting, 1 ready", s)
	}
	if s.Pending() != 4 {
		t.Errorf("Pending() = %d, want 4 (ready, waiting, delayed and in flight)", s.Pending())
	}
	if _, err := b.client.Ack(b.ctx, "keyed", "default", got[0].Receipt); err != nil {
		t.Fatal(err)
	}
	if s := b.status("keyed", "default"); s.Pending() != 3 {
		t.Errorf("after the ack: %+v, Pending() = %d, want 3", s, s.Pending())
	}
}
