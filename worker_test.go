package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice"
)

// quiet is a logger for consumers whose recovered errors are expected.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// consume runs Consume on a goroutine until the test ends (or stop is
// called) and returns stop, which cancels it and returns its error.
func (b *bundle) consume(queue, group string, h sluice.Handler, opts *sluice.ConsumeOptions) (stop func() error) {
	b.t.Helper()
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	go func() { done <- b.client.Consume(ctx, queue, group, h, opts) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(time.Minute):
				err = errors.New("Consume did not return within a minute of its cancellation")
			}
		})
		return err
	}
	b.t.Cleanup(func() {
		if err := stop(); err != nil {
			b.t.Errorf("Consume: %v", err)
		}
	})
	return stop
}

func TestConsumeProcessesEveryMessageOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("work", nil)
	const n = 200
	msgs := make([]sluice.BatchMessage, n)
	for i := range msgs {
		msgs[i].Body = []byte(fmt.Sprint(i))
	}
	if _, err := b.client.SendBatch(b.ctx, "work", msgs, nil); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]int{}
	b.consume("work", "default", func(ctx context.Context, m *sluice.Message) error {
		mu.Lock()
		seen[string(m.Body)]++
		mu.Unlock()
		return nil
	}, &sluice.ConsumeOptions{Concurrency: 8, BatchSize: 4})
	b.eventually(30*time.Second, "all messages acknowledged", func() bool {
		s := b.status("work", "default")
		return s.Ready == 0 && s.InFlight == 0 && s.Lag == 0
	})
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != n {
		t.Errorf("handled %d distinct messages, want %d", len(seen), n)
	}
	for body, c := range seen {
		if c != 1 {
			t.Errorf("message %s handled %d times", body, c)
		}
	}
}

// TestConsumeHeartbeat runs a handler three times as long as the lease: the
// heartbeat keeps the message from another consumer meanwhile.
func TestConsumeHeartbeat(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("slow", nil)
	b.send("slow", `"long job"`)
	var calls atomic.Int32
	started := make(chan struct{})
	b.consume("slow", "default", func(ctx context.Context, m *sluice.Message) error {
		if calls.Add(1) == 1 {
			close(started)
		}
		time.Sleep(3 * time.Second)
		return nil
	}, &sluice.ConsumeOptions{Lease: time.Second, HeartbeatInterval: 250 * time.Millisecond})
	<-started
	deadline := time.Now().Add(3500 * time.Millisecond)
	for time.Now().Before(deadline) {
		msgs, err := b.client.Receive(b.ctx, "slow", "default", nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) > 0 {
			t.Fatalf("another consumer received the message while its handler ran: %+v", msgs[0])
		}
		time.Sleep(100 * time.Millisecond)
	}
	b.eventually(5*time.Second, "message acknowledged", func() bool {
		s := b.status("slow", "default")
		return s.InFlight == 0 && s.Ready == 0
	})
	if c := calls.Load(); c != 1 {
		t.Errorf("handler ran %d times, want 1", c)
	}
}

// TestConsumeGracefulShutdown cancels Consume while a handler runs: the
// handler finishes, its message is acknowledged, and Consume returns.
func TestConsumeGracefulShutdown(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", nil)
	b.send("q", `1`)
	started := make(chan struct{})
	var finished atomic.Bool
	stop := b.consume("q", "default", func(ctx context.Context, m *sluice.Message) error {
		close(started)
		time.Sleep(time.Second)
		finished.Store(true)
		return nil
	}, nil)
	<-started
	begin := time.Now()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if !finished.Load() {
		t.Error("Consume returned before its running handler finished")
	}
	if d := time.Since(begin); d > 5*time.Second {
		t.Errorf("shutdown took %s", d)
	}
	if s := b.status("q", "default"); s.InFlight != 0 || s.Ready != 0 {
		t.Errorf("status %+v; want the message acknowledged", s)
	}
}

// TestConsumeDrainTimeout cancels Consume while a handler runs longer than
// the drain timeout: the handler's context is cancelled and its message is
// given back for immediate redelivery.
func TestConsumeDrainTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", nil)
	id := b.send("q", `1`)
	started := make(chan struct{})
	stop := b.consume("q", "default", func(ctx context.Context, m *sluice.Message) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	}, &sluice.ConsumeOptions{DrainTimeout: 200 * time.Millisecond, Logger: quiet})
	<-started
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	m := receiveOne(b, "q", "default")
	if m.ID != id || m.Attempt != 2 {
		t.Errorf("redelivered %+v; want message %d, attempt 2", m, id)
	}
}

// TestConsumePanicDeadLetters: a panicking handler's message is retried,
// then dead-lettered with the panic's text.
func TestConsumePanicDeadLetters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("poison", &sluice.QueueOptions{MaxAttempts: sluice.Ptr(3), BackoffBase: sluice.Ptr(10 * time.Millisecond), BackoffMax: sluice.Ptr(50 * time.Millisecond)})
	id := b.send("poison", `"boom"`)
	b.send("poison", `"fine"`)
	var calls atomic.Int32
	var fine atomic.Bool
	b.consume("poison", "default", func(ctx context.Context, m *sluice.Message) error {
		if string(m.Body) == `"fine"` {
			fine.Store(true)
			return nil
		}
		calls.Add(1)
		panic("handler exploded")
	}, &sluice.ConsumeOptions{PollInterval: 20 * time.Millisecond})
	b.eventually(15*time.Second, "a dead letter", func() bool { return b.status("poison", "default").Dead == 1 })
	dls, err := b.client.DeadLetters(b.ctx, "poison", nil)
	if err != nil || len(dls) != 1 {
		t.Fatalf("dead letters %+v, %v", dls, err)
	}
	if d := dls[0]; d.ID != id || d.Attempts != 3 || !strings.HasPrefix(d.Error, "panic: handler exploded") {
		t.Errorf("dead letter %+v", d)
	}
	if c := calls.Load(); c != 3 {
		t.Errorf("panicking handler ran %d times, want 3", c)
	}
	if !fine.Load() {
		t.Error("the other message was not handled")
	}
}

// TestConsumeListenWakeup: with a 5 s poll interval, a send wakes an idle
// consumer through LISTEN/NOTIFY long before the next poll.
func TestConsumeListenWakeup(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("wake", nil)
	got := make(chan time.Time, 1)
	b.consume("wake", "default", func(ctx context.Context, m *sluice.Message) error {
		got <- time.Now()
		return nil
	}, &sluice.ConsumeOptions{PollInterval: 5 * time.Second})
	time.Sleep(time.Second) // let it find the queue empty and start waiting
	sent := time.Now()
	b.send("wake", `"hello"`)
	select {
	case at := <-got:
		if d := at.Sub(sent); d > 2*time.Second {
			t.Errorf("delivered %s after the send; want a LISTEN wake-up, well under the 5 s poll interval", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("message not delivered")
	}
}

// TestConsumePollingOnly: with LISTEN disabled, polling delivers.
func TestConsumePollingOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("poll", nil)
	got := make(chan struct{}, 10)
	b.consume("poll", "default", func(ctx context.Context, m *sluice.Message) error {
		got <- struct{}{}
		return nil
	}, &sluice.ConsumeOptions{DisableListen: true, PollInterval: 100 * time.Millisecond})
	time.Sleep(300 * time.Millisecond)
	b.send("poll", `1`)
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("message not delivered by polling")
	}
	if listeners := b.listenConns(); listeners != 0 {
		t.Errorf("%d sessions LISTEN with DisableListen", listeners)
	}
}

func TestConsumeErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("q", nil)
	h := func(ctx context.Context, m *sluice.Message) error { return nil }
	if err := b.client.Consume(b.ctx, "missing", "default", h, nil); !errors.Is(err, sluice.ErrQueueNotFound) {
		t.Errorf("unknown queue: %v", err)
	}
	if err := b.client.Consume(b.ctx, "q", "missing", h, nil); !errors.Is(err, sluice.ErrGroupNotFound) {
		t.Errorf("unknown group: %v", err)
	}
	if err := b.client.Consume(b.ctx, "q", "default", h, &sluice.ConsumeOptions{Lease: time.Second, HeartbeatInterval: time.Second}); !errors.Is(err, sluice.ErrInvalidArgument) {
		t.Errorf("heartbeat not shorter than the lease: %v", err)
	}
}

// TestConsumeKeepsKeyOrder: 20 keys, 300 messages, 8 handlers, every message
// failing on its first attempt with probability 1/10: per key, the
// successful handlings follow send order, and a key's messages never run at
// the same time.
func TestConsumeKeepsKeyOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("ordered", &sluice.QueueOptions{BackoffBase: sluice.Ptr(5 * time.Millisecond), BackoffMax: sluice.Ptr(20 * time.Millisecond)})
	const n, keys = 300, 20
	msgs := make([]sluice.BatchMessage, n)
	for i := range msgs {
		msgs[i] = sluice.BatchMessage{Body: []byte(fmt.Sprint(i)), Key: fmt.Sprintf("k%d", i%keys)}
	}
	if _, err := b.client.SendBatch(b.ctx, "ordered", msgs, nil); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	done := map[string][]int{}   // key -> bodies handled successfully, in order
	running := map[string]bool{} // key -> a handler of the key is running
	var overlaps, failures atomic.Int64
	b.consume("ordered", "default", func(ctx context.Context, m *sluice.Message) error {
		var body int
		if _, err := fmt.Sscan(string(m.Body), &body); err != nil {
			return err
		}
		mu.Lock()
		if running[m.Key] {
			overlaps.Add(1)
		}
		running[m.Key] = true
		mu.Unlock()
		time.Sleep(time.Millisecond)
		fail := m.Attempt == 1 && body%10 == 3
		mu.Lock()
		running[m.Key] = false
		if !fail {
			done[m.Key] = append(done[m.Key], body)
		}
		mu.Unlock()
		if fail {
			failures.Add(1)
			return errors.New("first attempt fails")
		}
		return nil
	}, &sluice.ConsumeOptions{Concurrency: 8, BatchSize: 8, Logger: quiet})
	b.eventually(60*time.Second, "all messages acknowledged", func() bool {
		s := b.status("ordered", "default")
		return s.Ready == 0 && s.InFlight == 0 && s.Lag == 0
	})
	mu.Lock()
	defer mu.Unlock()
	total := 0
	for key, bodies := range done {
		total += len(bodies)
		for i := 1; i < len(bodies); i++ {
			if bodies[i] <= bodies[i-1] {
				t.Fatalf("key %s: message %d handled after %d", key, bodies[i], bodies[i-1])
			}
		}
	}
	if total != n {
		t.Errorf("%d successful handlings, want %d", total, n)
	}
	if overlaps.Load() != 0 {
		t.Errorf("%d handlers started while another of their key was running", overlaps.Load())
	}
	if failures.Load() == 0 {
		t.Error("no handler failed: the test did not exercise retries")
	}
}

// TestConsumeRunAckFailureKeepsOrder: when the ack of a message in the
// middle of a key's run fails, the worker does not go on with the rest of the
// run, so no later message of the key completes before it. A trigger makes
// the first ack of the key's first message fail.
func TestConsumeRunAckFailureKeepsOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("runack", &sluice.QueueOptions{Lease: sluice.Ptr(time.Second)})
	msgs := make([]sluice.BatchMessage, 3)
	for i := range msgs {
		msgs[i] = sluice.BatchMessage{Body: []byte(fmt.Sprint(i)), Key: "k"}
	}
	ids, err := b.client.SendBatch(b.ctx, "runack", msgs, nil)
	if err != nil {
		t.Fatal(err)
	}
	var qid int
	if err := b.pool.QueryRow(b.ctx, `SELECT id FROM sluice.queue WHERE name = 'runack'`).Scan(&qid); err != nil {
		t.Fatal(err)
	}
	// The first message's position: the first receive numbers it first
	// (engine 2: the first of its lane's batches; an ack of its whole lease
	// is a row of pos 0).
	for _, stmt := range []string{
		`CREATE SEQUENCE public.runack_fail`,
		fmt.Sprintf(`CREATE FUNCTION public.runack_fail() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.kind = 'a' AND (NEW.pos = 0 OR NEW.pos = (SELECT min(b.first_pos) FROM sluice_q%d.batch b
			                                                  WHERE b.lane = NEW.lane))
			   AND nextval('public.runack_fail') = 1 THEN
				RAISE EXCEPTION 'injected ack failure';
			END IF;
			RETURN NEW;
		END $$`, qid),
		fmt.Sprintf(`CREATE TRIGGER runack_fail BEFORE INSERT ON sluice_q%d.ack FOR EACH ROW EXECUTE FUNCTION public.runack_fail()`, qid),
	} {
		if _, err := b.pool.Exec(b.ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	var mu sync.Mutex
	var handled []int // bodies, in the order their handlers succeeded
	b.consume("runack", "default", func(ctx context.Context, m *sluice.Message) error {
		var body int
		if _, err := fmt.Sscan(string(m.Body), &body); err != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond) // so that each ack would go alone
		mu.Lock()
		handled = append(handled, body)
		mu.Unlock()
		return nil
	}, &sluice.ConsumeOptions{Concurrency: 4, BatchSize: 10, Logger: quiet})
	b.eventually(30*time.Second, "all messages acknowledged", func() bool {
		s := b.status("runack", "default")
		return s.Ready == 0 && s.InFlight == 0 && s.Lag == 0
	})
	mu.Lock()
	defer mu.Unlock()
	if len(handled) < len(ids)+1 {
		t.Fatalf("handled %v: the injected ack failure did not happen", handled)
	}
	// after body i succeeded, no earlier body may be handled again
	for i := 1; i < len(handled); i++ {
		for j := 0; j < i; j++ {
			if handled[i] < handled[j] {
				t.Fatalf("handled %v: message %d handled again after message %d had completed", handled, handled[i], handled[j])
			}
		}
	}
}

// TestConsumeRunTakesOneSlot: the messages of one key that a receive returns
// together run one after the other in one slot, so the other slots go on
// with other messages meanwhile. With one lane (global order) and two slots,
// the first receive gets the run k1, k2 of key k; while k1's handler is held,
// the unkeyed message sent after them must still start (with a slot per
// message of the run, both slots waited for the run).
func TestConsumeRunTakesOneSlot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("runslot", &sluice.QueueOptions{Lanes: sluice.Ptr(1)})
	msgs := []sluice.BatchMessage{
		{Body: []byte(`"k1"`), Key: "k"}, {Body: []byte(`"k2"`), Key: "k"}, {Body: []byte(`"k3"`), Key: "k"},
		{Body: []byte(`"u"`)},
	}
	if _, err := b.client.SendBatch(b.ctx, "runslot", msgs, nil); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	unkeyed := make(chan struct{})
	var mu sync.Mutex
	var order []string
	var inFlight int64 // when the unkeyed message's handler ran
	var statusErr error
	b.consume("runslot", "default", func(ctx context.Context, m *sluice.Message) error {
		if m.Key == "" {
			st, err := b.client.Status(ctx, "runslot")
			for _, s := range st {
				if s.Group == "default" {
					inFlight = s.InFlight
				}
			}
			statusErr = err
			close(unkeyed)
			return nil
		}
		if string(m.Body) == `"k1"` {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		mu.Lock()
		order = append(order, strings.Trim(string(m.Body), `"`))
		mu.Unlock()
		return nil
	}, &sluice.ConsumeOptions{Concurrency: 2, BatchSize: 2})
	select {
	case <-unkeyed:
	case <-time.After(30 * time.Second):
		t.Fatal("the unkeyed message did not start while the run of key k held one slot")
	}
	// (the test's premise: the first receive returned the run k1, k2, so
	// k1, k2 and the unkeyed message are leased; a first receive of k1
	// alone would have left a slot free with either accounting)
	if statusErr != nil || inFlight != 3 {
		t.Fatalf("in flight while the unkeyed message ran: %d (%v), want 3: k1, k2 and it", inFlight, statusErr)
	}
	close(release)
	b.eventually(30*time.Second, "all messages acknowledged", func() bool {
		s := b.status("runslot", "default")
		return s.Ready == 0 && s.InFlight == 0 && s.Lag == 0
	})
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(order, ",") != "k1,k2,k3" {
		t.Errorf("key k handled in the order %v, want k1,k2,k3", order)
	}
}
