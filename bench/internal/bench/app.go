package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice"
)

// The app scenario: Queen's "app mode" workload (two fan-out consumer
// groups, per-message acks, 20 ms handlers with a slow tail, 5,000 Zipf
// keys, transient failures, poison messages to the dead-letter table, an
// atomic ack+send pipeline into a second queue read by a third group),
// scaled to one machine, with push held above what the consumers sustain
// for a while, then a drain. It runs through the Go library (Send, Consume,
// AckTx + SendTx), records a history, and checks it offline (app_check.go).

// The app scenario's queues and groups.
const (
	appQueue  = "bench_app"
	appQueue2 = "bench_app_stage2"
)

// appGroupNames names the groups: two fan-out groups of appQueue and the
// group of appQueue2.
var appGroupNames = [appGroups]string{"fanout_a", "fanout_b", "stage2"}

// appConfig is the app scenario's workload.
type appConfig struct {
	Rate              int           // offered push rate, messages/s in all
	Push              time.Duration // how long the producers push
	DrainLimit        time.Duration // how long the drain may take after that
	Producers         int           // paced producers, one message per transaction
	Concurrency       int           // handlers of each fan-out group
	Stage2Concurrency int           // handlers of the stage-2 group
	Keys              int           // ordering keys, Zipf(ZipfS)
	ZipfS             float64
	HandlerMin        time.Duration // handler time, uniform in [min, max] ...
	HandlerMax        time.Duration
	SlowPct           float64       // ... except this percentage of deliveries
	Slow              time.Duration // which take this long
	FailPct           float64       // first deliveries that fail once (transient)
	PoisonPct         float64       // messages that always fail
	ForwardPct        float64       // messages group A completes with ack+send
	MaxAttempts       int           // queue option max_attempts
	BackoffBase       time.Duration // queue option backoff_base
	BackoffMax        time.Duration // queue option backoff_max
	Lease             time.Duration // queue option lease
	Retention         time.Duration // queue option retention (0: the engine's)
	Lanes             int           // queue option lanes (0: the engine's)
	Slots             int           // queue option slots (0: the engine's)
	Payload           int           // approximate body size in bytes
}

// Defaults of the app scenario (see bench/README.md for why).
const (
	appDefaultRate        = 500
	appDefaultPush        = time.Minute
	appDefaultDrainLimit  = 2 * time.Minute
	appDefaultProducers   = 4
	appDefaultConcurrency = 8
)

// appConfig returns the workload of the run's options.
func (r *runner) appConfig() appConfig {
	c := appConfig{
		Rate: r.o.Rate, Push: r.dur(appDefaultPush), DrainLimit: r.o.DrainLimit,
		Producers: last(r.o.Producers, appDefaultProducers), Concurrency: last(r.o.Consumers, appDefaultConcurrency),
		Keys: 5000, ZipfS: 1.1,
		HandlerMin: 10 * time.Millisecond, HandlerMax: 30 * time.Millisecond, SlowPct: 1, Slow: 200 * time.Millisecond,
		FailPct: 1, PoisonPct: 0.1, ForwardPct: 5,
		MaxAttempts: 5, BackoffBase: 100 * time.Millisecond, BackoffMax: 2 * time.Second, Lease: 30 * time.Second,
		Retention: r.o.Retention, Lanes: r.o.Lanes, Slots: r.o.Slots, Payload: r.o.Payload,
	}
	if c.Rate <= 0 {
		c.Rate = appDefaultRate
	}
	if c.DrainLimit <= 0 {
		c.DrainLimit = appDefaultDrainLimit
	}
	c.Stage2Concurrency = max(2, c.Concurrency/4)
	return c
}

// meanHandler is the mean handler time.
func (c *appConfig) meanHandler() time.Duration {
	return time.Duration((1-c.SlowPct/100)*float64(c.HandlerMin+c.HandlerMax)/2 + c.SlowPct/100*float64(c.Slow))
}

// handlerTime draws one handler time.
func (c *appConfig) handlerTime() time.Duration {
	if rand.Float64()*100 < c.SlowPct {
		return c.Slow
	}
	return c.HandlerMin + time.Duration(rand.Int64N(int64(c.HandlerMax-c.HandlerMin)+1))
}

// zipfShare is the share of key 1, the hottest, of Zipf(s) keys over
// [1, n] (continuous, as zipfKey draws them).
func zipfShare(n int, s float64) float64 {
	a := 1 - s
	return (1 - math.Pow(2, a)) / (1 - math.Pow(float64(n), a))
}

// zipfKey maps u, uniform in [0, 1), to a key in [1, n] by the inverse of
// the continuous Zipf(s) distribution: the Go twin of the keyed scenario's
// SQL expression (sluiceSystem.keyExpr), so both skew keys alike.
func zipfKey(u float64, n int, s float64) int32 {
	a := 1 - s
	return int32(math.Floor(math.Pow((math.Pow(float64(n), a)-1)*u+1, 1/a)))
}

// appBody is a message body. Stage-2 messages carry the key, sequence and
// id (Src) of the message they forward.
type appBody struct {
	K      int32  `json:"k"`
	S      int64  `json:"s"`
	Poison bool   `json:"poison,omitempty"`
	Fwd    bool   `json:"fwd,omitempty"`
	Src    int64  `json:"src,omitempty"`
	Pad    string `json:"pad,omitempty"`
}

func appKeyName(k int32) string { return "k" + strconv.Itoa(int(k)) }

var (
	errAppPoison    = errors.New("poison message: always fails")
	errAppTransient = errors.New("transient failure (injected)")
	errAppLeaseLost = errors.New("forward: the ack completed nothing (lease lost); rolled back")
)

// appLog counts what a worker logs (failed acks, nacks, lease renewals,
// receives) and keeps the first lines.
type appLog struct {
	n     atomic.Int64
	mu    sync.Mutex
	first []string
}

func (l *appLog) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelWarn }

func (l *appLog) Handle(_ context.Context, rec slog.Record) error {
	l.n.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.first) < 3 {
		var b strings.Builder
		b.WriteString(rec.Message)
		rec.Attrs(func(a slog.Attr) bool {
			fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
			return true
		})
		l.first = append(l.first, b.String())
	}
	return nil
}

func (l *appLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *appLog) WithGroup(string) slog.Handler      { return l }

// appKeyState serializes the sends of one key, so that its sequence
// numbers are its commit order (a single writer per key, as in Queen's
// sessions).
type appKeyState struct {
	mu  sync.Mutex
	seq int64
}

// appRun is one run of the app scenario.
type appRun struct {
	r      *runner
	cfg    appConfig
	client *sluice.Client
	h      *appHistory
	pad    string
	keys   []appKeyState

	pushed, pushErrors, forwarded atomic.Int64
	finished                      [appGroups]atomic.Int64 // successes and dead letters, live
	uncertain                     [appGroups]atomic.Int64 // forward commits that failed
	busy                          [appGroups]atomic.Int64 // handlers running now
	logs                          [appGroups]*appLog
}

// backlogs returns, per group, the messages sent and not yet finished (the
// live count; the checker has the exact one).
func (a *appRun) backlogs() [appGroups]int64 {
	var b [appGroups]int64
	for g := range appGroups {
		sent := a.pushed.Load()
		if g == appGroupStage2 {
			sent = a.forwarded.Load()
		}
		b[g] = sent - a.finished[g].Load()
	}
	return b
}

func (r *runner) app(ctx context.Context) (*Result, error) {
	res, _, err := r.runApp(ctx, r.appConfig())
	return res, err
}

func (a *appRun) setup(ctx context.Context) error {
	a.cleanup(ctx)
	qo := &sluice.QueueOptions{MaxAttempts: orDefault(a.cfg.MaxAttempts), Lease: orDefault(a.cfg.Lease),
		BackoffBase: orDefault(a.cfg.BackoffBase), BackoffMax: orDefault(a.cfg.BackoffMax), Retention: orDefault(a.cfg.Retention),
		Lanes: orDefault(a.cfg.Lanes), Slots: orDefault(a.cfg.Slots), DefaultGroup: sluice.Ptr(false)}
	for _, q := range []string{appQueue, appQueue2} {
		if err := a.client.CreateQueue(ctx, q, qo); err != nil {
			return err
		}
	}
	for g, name := range appGroupNames {
		q := appQueue
		if g == appGroupStage2 {
			q = appQueue2
		}
		if err := a.client.CreateGroup(ctx, q, name, &sluice.GroupOptions{StartFrom: sluice.StartEarliest}); err != nil {
			return err
		}
	}
	return a.r.recordQueues(ctx, a.r.o.Pool, "sluice", appQueue, appQueue2)
}

// cleanup drops the scenario's queues, even when ctx was cancelled.
func (a *appRun) cleanup(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	for _, q := range []string{appQueue, appQueue2} {
		if _, err := a.client.DropQueue(ctx, q); err != nil {
			fmt.Fprintf(a.r.o.Out, "cleanup: %v\n", err)
		}
	}
}

// produce sends one message per transaction at rate messages/s until
// deadline, catching up when late.
func (a *appRun) produce(ctx context.Context, rate float64, deadline time.Time) error {
	failures := 0
	return paced(ctx, rate, deadline, func() error {
		if err := a.sendOne(ctx); err != nil {
			if failures++; failures >= 100 && ctx.Err() == nil {
				return fmt.Errorf("100 sends failed in a row, the last: %w", err)
			}
		} else {
			failures = 0
		}
		return nil
	})
}

// sendOne sends one message of a Zipf-drawn key, with the key's next
// sequence number.
func (a *appRun) sendOne(ctx context.Context) error {
	return a.send(ctx, zipfKey(rand.Float64(), a.cfg.Keys, a.cfg.ZipfS), rand.Float64()*100)
}

// send sends one message of key k with the key's next sequence number; u,
// in [0, 100), decides whether it is poison or forwarded (100: neither).
func (a *appRun) send(ctx context.Context, k int32, u float64) error {
	poison := u < a.cfg.PoisonPct
	fwd := !poison && u < a.cfg.PoisonPct+a.cfg.ForwardPct
	ks := &a.keys[k]
	ks.mu.Lock()
	defer ks.mu.Unlock()
	ks.seq++
	body, err := json.Marshal(appBody{K: k, S: ks.seq, Poison: poison, Fwd: fwd, Pad: a.pad})
	if err != nil {
		return err
	}
	at := a.h.since()
	id, err := a.client.Send(ctx, appQueue, body, &sluice.SendOptions{Key: appKeyName(k)})
	a.h.send(appSend{ID: id, Key: k, Seq: ks.seq, Poison: poison, Fwd: fwd, At: at, Err: err != nil})
	if err != nil {
		a.pushErrors.Add(1)
		return err
	}
	a.pushed.Add(1)
	return nil
}

// handler is group g's handler. Every event is recorded before the worker
// (or the forward's commit) can make it visible to the engine, so that the
// history's order is the real one: a start after the receive, a success or
// failure before the ack or nack.
func (a *appRun) handler(g int) sluice.Handler {
	return func(ctx context.Context, m *sluice.Message) error {
		var b appBody
		if err := json.Unmarshal(m.Body, &b); err != nil {
			return fmt.Errorf("decoding the body: %w", err)
		}
		e := appEvent{Kind: evStart, Group: uint8(g), Attempt: int32(m.Attempt), Key: b.K, ID: m.ID, Src: b.Src, Seq: b.S}
		a.busy[g].Add(1)
		defer a.busy[g].Add(-1)
		a.h.event(e)
		end := func(kind uint8) {
			e.Kind = kind
			a.h.event(e)
			if kind == evOK || kind == evFail && m.Attempt >= a.cfg.MaxAttempts {
				a.finished[g].Add(1)
			}
		}
		sleep(ctx, a.cfg.handlerTime())
		switch {
		case ctx.Err() != nil:
			end(evAbort)
			return ctx.Err()
		case b.Poison:
			end(evFail)
			return errAppPoison
		case m.Attempt == 1 && rand.Float64()*100 < a.cfg.FailPct:
			end(evFail)
			return errAppTransient
		case g == appGroupA && b.Fwd:
			ended := false
			err := a.forward(ctx, m, b, func() { ended = true; end(evOK) })
			if err != nil && !ended {
				end(evFail)
			}
			return err
		}
		end(evOK)
		return nil
	}
}

// forward completes m in group A atomically with a send of its successor
// to the second queue: AckTx and SendTx in one transaction. ok is called
// just before the commit (which makes the ack visible). The worker's own
// ack afterwards finds the receipt stale and changes nothing.
func (a *appRun) forward(ctx context.Context, m *sluice.Message, b appBody, ok func()) error {
	tx, err := a.r.o.Pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("forward: beginning: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	n, err := a.client.AckTx(ctx, tx, appQueue, appGroupNames[appGroupA], m.Receipt)
	if err != nil {
		return err
	}
	if n != 1 {
		return errAppLeaseLost
	}
	body, err := json.Marshal(appBody{K: b.K, S: b.S, Src: m.ID, Pad: a.pad})
	if err != nil {
		return err
	}
	id, err := a.client.SendTx(ctx, tx, appQueue2, body, &sluice.SendOptions{Key: m.Key})
	if err != nil {
		return err
	}
	at := a.h.since()
	ok()
	a.forwarded.Add(1)
	if err := tx.Commit(ctx); err != nil {
		a.forwarded.Add(-1)
		a.uncertain[appGroupA].Add(1)
		a.h.forward(appForward{Src: m.ID, At: at, Err: true})
		return fmt.Errorf("forward: committing: %w", err)
	}
	a.h.forward(appForward{Src: m.ID, ID: id, At: at})
	return nil
}

// appSeries is what the monitor measured.
type appSeries struct {
	pushed     []Point            // pushed per second
	consumed   [appGroups][]Point // finished per second
	backlog    [appGroups][]Point // live backlog, each second
	pushEnd    float64            // seconds from the push start
	endBacklog [appGroups]int64   // live backlog when the push ended
	maxBacklog [appGroups]int64   // largest live backlog
	drainTime  [appGroups]float64 // seconds after the push until the group's backlog was gone
	drainRate  [appGroups]float64 // messages finished after the push / drainTime
	busy       [appGroups]float64 // mean handlers running during the push
	drained    bool               // the engine holds nothing for any group
	elapsed    float64            // seconds from the push start to the end
	pending    [appGroups]int64   // the engine's pending messages when the monitor stopped
}

// monitor prints a progress line every second and records the series
// until the push has ended and the backlog is drained (as the engine says),
// the drain limit has passed, or something failed.
func (a *appRun) monitor(ctx context.Context, start time.Time, pushDone <-chan struct{}, errc <-chan error) (*appSeries, error) {
	s := &appSeries{pushEnd: -1}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var pushEndAt, drainDeadline, nextPoint, lastStatus time.Time
	nextPoint = start.Add(time.Second)
	var lastBusy [appGroups]time.Time
	var prevPushed int64
	var prevDone, endDone [appGroups]int64
	var busySum [appGroups]int64
	busyN := 0
	for {
		select {
		case err := <-errc:
			return s, err
		case <-ctx.Done():
			return s, ctx.Err()
		case <-pushDone:
			pushDone = nil
			pushEndAt = time.Now()
			s.pushEnd = pushEndAt.Sub(start).Seconds()
			s.endBacklog = a.backlogs()
			for g := range appGroups {
				endDone[g] = a.finished[g].Load()
				s.busy[g] = float64(busySum[g]) / float64(max(busyN, 1))
			}
			drainDeadline = pushEndAt.Add(a.cfg.DrainLimit)
		case <-tick.C:
		}
		now := time.Now()
		backlog := a.backlogs()
		if pushEndAt.IsZero() {
			busyN++
		}
		for g := range appGroups {
			if pushEndAt.IsZero() {
				busySum[g] += a.busy[g].Load()
			}
			if backlog[g] > 0 {
				lastBusy[g] = now
			}
			s.maxBacklog[g] = max(s.maxBacklog[g], backlog[g])
		}
		if !now.Before(nextPoint) {
			nextPoint = nextPoint.Add(time.Second)
			secs := now.Sub(start).Seconds()
			p := a.pushed.Load()
			s.pushed = append(s.pushed, Point{X: secs, Y: float64(p - prevPushed)})
			prevPushed = p
			var rates [appGroups]int64
			for g := range appGroups {
				d := a.finished[g].Load()
				rates[g] = d - prevDone[g]
				prevDone[g] = d
				s.consumed[g] = append(s.consumed[g], Point{X: secs, Y: float64(rates[g])})
				s.backlog[g] = append(s.backlog[g], Point{X: secs, Y: float64(backlog[g])})
			}
			phase := "push "
			if !pushEndAt.IsZero() {
				phase = "drain"
			}
			line := fmt.Sprintf("app %s %4.0fs  pushed %4d/s (errors %d)  done/s a %4d b %4d s2 %3d  backlog a %6d b %6d s2 %4d",
				phase, secs, int64(s.pushed[len(s.pushed)-1].Y), a.pushErrors.Load(), rates[0], rates[1], rates[2], backlog[0], backlog[1], backlog[2])
			if a.r.o.TTY {
				fmt.Fprintf(a.r.o.Out, "\r\033[K%s", line)
			} else {
				fmt.Fprintln(a.r.o.Out, line)
			}
		}
		if pushEndAt.IsZero() {
			continue
		}
		finish := func() {
			s.elapsed = now.Sub(start).Seconds()
			for g := range appGroups {
				if lastBusy[g].After(pushEndAt) {
					s.drainTime[g] = lastBusy[g].Add(100 * time.Millisecond).Sub(pushEndAt).Seconds()
					s.drainRate[g] = float64(a.finished[g].Load()-endDone[g]) / s.drainTime[g]
				}
			}
			if a.r.o.TTY {
				fmt.Fprintln(a.r.o.Out)
			}
		}
		if backlog[0] <= 0 && backlog[1] <= 0 && backlog[2] <= 0 && now.Sub(lastStatus) >= 500*time.Millisecond {
			// The live counts say done: ask the engine.
			lastStatus = now
			pending, err := a.pending(ctx)
			if err != nil {
				return s, err
			}
			if pending == [appGroups]int64{} {
				s.drained = true
				finish()
				return s, nil
			}
		}
		if now.After(drainDeadline) {
			finish()
			return s, nil
		}
	}
}

// pending returns, per group, the messages the engine holds: ready,
// waiting behind an earlier message of their key, delayed or in flight
// (sluice.Status.Pending). Leaving the waiting ones out took the messages
// of a hot key that the drain had not reached for lost ones.
func (a *appRun) pending(ctx context.Context) ([appGroups]int64, error) {
	var out [appGroups]int64
	for _, q := range []string{appQueue, appQueue2} {
		st, err := a.client.Status(ctx, q)
		if err != nil {
			return out, err
		}
		for _, s := range st {
			for g, name := range appGroupNames {
				if name == s.Group {
					out[g] = s.Pending()
				}
			}
		}
	}
	return out, nil
}

// deadLetters returns, per group, the attempts of each dead letter by
// message id, and whether a list was cut at its maximum.
func (a *appRun) deadLetters(ctx context.Context) ([appGroups]map[int64]int, bool, error) {
	var out [appGroups]map[int64]int
	const maxRows = 10000
	truncated := false
	for g, name := range appGroupNames {
		q := appQueue
		if g == appGroupStage2 {
			q = appQueue2
		}
		dls, err := a.client.DeadLetters(ctx, q, &sluice.DeadLetterOptions{Group: name, Max: maxRows})
		if err != nil {
			return out, false, err
		}
		truncated = truncated || len(dls) == maxRows
		out[g] = map[int64]int{}
		for _, d := range dls {
			out[g][d.ID] = d.Attempts
		}
	}
	return out, truncated, nil
}

// newAppRun returns a run of the app scenario with cfg, not set up yet.
func (r *runner) newAppRun(cfg appConfig) *appRun {
	a := &appRun{r: r, cfg: cfg, client: sluice.NewClient(r.o.Pool), h: newAppHistory(),
		pad: strings.Repeat("x", max(cfg.Payload-40, 0)), keys: make([]appKeyState, cfg.Keys+1)}
	for g := range a.logs {
		a.logs[g] = &appLog{}
	}
	return a
}

// runApp runs the app scenario with cfg and returns its result and the
// checker's verdict.
func (r *runner) runApp(ctx context.Context, cfg appConfig) (*Result, *appCheck, error) {
	a := r.newAppRun(cfg)
	if err := a.setup(ctx); err != nil {
		return nil, nil, err
	}
	defer a.cleanup(ctx)
	fmt.Fprintf(r.o.Out, "app: %d producers offering %d msg/s for %s (drain limit %s); %d handlers per fan-out group, %d for stage 2\n",
		cfg.Producers, cfg.Rate, cfg.Push, cfg.DrainLimit, cfg.Concurrency, cfg.Stage2Concurrency)

	runCtx, abort := context.WithCancel(ctx)
	defer abort()
	consumeCtx, stopConsumers := context.WithCancel(runCtx)
	defer stopConsumers()
	errc := make(chan error, appGroups+cfg.Producers)
	var consumers sync.WaitGroup
	for g := range appGroups {
		q, conc := appQueue, cfg.Concurrency
		if g == appGroupStage2 {
			q, conc = appQueue2, cfg.Stage2Concurrency
		}
		consumers.Add(1)
		go func() {
			defer consumers.Done()
			err := a.client.Consume(consumeCtx, q, appGroupNames[g], a.handler(g), &sluice.ConsumeOptions{
				Concurrency: conc, Consumer: "sluice bench app", Logger: slog.New(a.logs[g])})
			if err != nil {
				errc <- fmt.Errorf("group %s: %w", appGroupNames[g], err)
			}
		}()
	}
	start := time.Now()
	deadline := start.Add(cfg.Push)
	var producers sync.WaitGroup
	for range cfg.Producers {
		producers.Add(1)
		go func() {
			defer producers.Done()
			if err := a.produce(runCtx, float64(cfg.Rate)/float64(cfg.Producers), deadline); err != nil {
				errc <- fmt.Errorf("producer: %w", err)
			}
		}()
	}
	pushDone := make(chan struct{})
	go func() { producers.Wait(); close(pushDone) }()

	s, err := a.monitor(runCtx, start, pushDone, errc)
	if err != nil {
		abort()
	}
	stopConsumers()
	consumers.Wait()
	abort()
	<-pushDone
	if err != nil {
		return nil, nil, err
	}
	return a.finish(ctx, s)
}

// finish checks the history offline, against the dead letters and what the
// engine still holds, and returns the result and the checker's verdict.
func (a *appRun) finish(ctx context.Context, s *appSeries) (*Result, *appCheck, error) {
	dead, truncated, err := a.deadLetters(ctx)
	if err != nil {
		return nil, nil, err
	}
	pending, err := a.pending(ctx)
	if err != nil {
		return nil, nil, err
	}
	s.pending = pending
	in := appCheckInput{MaxAttempts: a.cfg.MaxAttempts, Dead: dead, Pending: pending}
	a.h.mu.Lock()
	in.Sends, in.Forwards, in.Events = a.h.sends, a.h.fwds, a.h.events
	a.h.mu.Unlock()
	for g := range appGroups {
		in.WorkerErrors[g] = a.logs[g].n.Load() + a.uncertain[g].Load()
	}
	check := checkApp(in)
	res := a.result(s, check, truncated)
	return res, check, nil
}

// behindNote says which keys were still behind when the drain limit ended
// the run, and how many of their messages: when one key holds most of
// them, its messages, handled one at a time per group, bound the drain.
func behindNote(c *appCheck) string {
	var parts []string
	for g := range appGroups {
		unfinished := c.Groups[g].Unfinished
		if unfinished == 0 {
			parts = append(parts, appGroupNames[g]+": none")
			continue
		}
		var ks []string
		for _, k := range c.Behind[g] {
			ks = append(ks, fmt.Sprintf("key %d: %d", k.Key, k.Messages))
		}
		part := fmt.Sprintf("%s: %d messages of %d keys (%s", appGroupNames[g], unfinished, c.BehindKeys[g], strings.Join(ks, ", "))
		if n := c.BehindKeys[g] - len(c.Behind[g]); n > 0 {
			part += fmt.Sprintf(", %d more keys", n)
		}
		part += ")"
		if top := c.Behind[g][0]; 2*top.Messages > unfinished {
			part += fmt.Sprintf(", %.0f%% of them of key %d", 100*float64(top.Messages)/float64(unfinished), top.Key)
		}
		parts = append(parts, part)
	}
	return "Still behind when the drain limit ended the run (messages sent and not finished, by key, the most first): " + strings.Join(parts, "; ") +
		". A key's messages run one at a time in each group, so a key with many left bounds the drain, however many handlers are idle."
}

// result builds the scenario's tables, charts and notes.
func (a *appRun) result(s *appSeries, c *appCheck, truncated bool) *Result {
	cfg := a.cfg
	during := func(ps []Point) []Point { return cut(ps, s.pushEnd) }
	pushed := c.Sent + c.Recovered
	tp := Table{Title: fmt.Sprintf("app: push, %d producers (1 message per transaction, 5,000 Zipf(%.1f) keys, one writer per key at a time) for %s", cfg.Producers, cfg.ZipfS, cfg.Push),
		Columns: []string{"offered msg/s", "pushed msg/s", "pushed/s (median)", "pushed", "push errors", "atomic ack+send (forwards)", "forward errors"}}
	tp.Rows = append(tp.Rows, []string{fmt.Sprint(cfg.Rate), fmtRate(float64(pushed) / math.Max(s.pushEnd, 1e-9)), fmtRate(medianY(during(s.pushed))),
		fmt.Sprint(pushed), fmt.Sprint(c.SendErrors), fmt.Sprint(c.Forwards), fmt.Sprint(c.ForwardErrors)})

	tc := Table{Title: "app: consume, per group (consumed = handler succeeded, or dead-lettered)",
		Columns: []string{"group", "handlers", "busy handlers (mean)", "consumed/s during push (median)", "consumed/s during drain (mean)", "backlog at push end", "backlog growth/s", "max backlog",
			"drained after push (s)", "dead letters", "redeliveries", "lease expiries", "e2e p50 ms", "p99", "max"}}
	for g := range appGroups {
		gc := c.Groups[g]
		conc := cfg.Concurrency
		if g == appGroupStage2 {
			conc = cfg.Stage2Concurrency
		}
		drain := fmt.Sprintf("%.1f", s.drainTime[g])
		if s.pending[g] > 0 {
			drain = fmt.Sprintf("not in %s (%d left)", cfg.DrainLimit, s.pending[g])
		}
		dr := "-"
		if s.drainTime[g] > 0 {
			dr = fmtRate(s.drainRate[g])
		}
		tc.Rows = append(tc.Rows, []string{appGroupNames[g], fmt.Sprint(conc), fmt.Sprintf("%.1f", s.busy[g]), fmtRate(medianY(during(s.consumed[g]))), dr,
			fmt.Sprint(s.endBacklog[g]), fmtRate(float64(s.endBacklog[g]) / math.Max(s.pushEnd, 1e-9)), fmt.Sprint(s.maxBacklog[g]), drain,
			fmt.Sprint(gc.Dead), fmt.Sprint(gc.Redeliveries), fmt.Sprint(gc.Unhandled), fmtMS(gc.Latency.P50), fmtMS(gc.Latency.P99), fmtMS(gc.Latency.Max)})
	}

	tk := Table{Title: "app: offline check of the history (zero everywhere but expected, completed and dead-lettered is a pass)",
		Columns: []string{"group", "expected", "completed", "dead-lettered", "not drained", "lost", "duplicates", "order violations", "other violations"}}
	for g := range appGroups {
		gc := c.Groups[g]
		tk.Rows = append(tk.Rows, []string{appGroupNames[g], fmt.Sprint(gc.Expected), fmt.Sprint(gc.Completed), fmt.Sprint(gc.Dead),
			fmt.Sprint(min(gc.Unfinished, gc.Pending)), fmt.Sprint(gc.Lost), fmt.Sprint(gc.Duplicates), fmt.Sprint(gc.Order), fmt.Sprint(gc.Other)})
	}

	mean := cfg.meanHandler()
	capacity := float64(cfg.Concurrency) / mean.Seconds()
	share := zipfShare(cfg.Keys, cfg.ZipfS)
	verdict := "checker: PASS: no message lost, none completed twice, per-key order kept in every group, every poison message dead-lettered after " +
		strconv.Itoa(cfg.MaxAttempts) + " attempts, every flagged message forwarded exactly once."
	if !c.ok() {
		verdict = fmt.Sprintf("checker: FAIL: %d lost, %d unexplained duplicates, %d order, %d overlapping deliveries, %d dead-letter, %d forward, %d phantom violations.",
			c.Lost, c.Duplicates, c.Order, c.Overlap, c.DeadLetter, c.Forward, c.Phantom)
	}
	notes := []string{verdict}
	if !s.drained {
		notes = append(notes, fmt.Sprintf("The backlog did not drain within the drain limit (%s): the engine still held %d / %d / %d messages (a / b / stage 2: ready, waiting behind an earlier message of their key, delayed or in flight); they are counted as not drained, not lost.",
			cfg.DrainLimit, s.pending[0], s.pending[1], s.pending[2]))
		notes = append(notes, behindNote(c))
	}
	notes = append(notes,
		fmt.Sprintf("Workload (Queen's app mode, scaled): queue %s read by two fan-out groups (%s, %s), each a Consume worker with %d handlers; handlers sleep %s-%s (uniform), %.0f%% of them %s (mean %s); %.0f%% of first deliveries fail once; %.1f%% of messages are poison (always fail: dead letters after max_attempts %d, backoff %s doubling); %.0f%% are completed by %s with AckTx + SendTx in one transaction into %s, read by group %s (%d handlers).",
			appQueue, appGroupNames[0], appGroupNames[1], cfg.Concurrency, cfg.HandlerMin, cfg.HandlerMax, cfg.SlowPct, cfg.Slow, mean.Round(100*time.Microsecond),
			cfg.FailPct, cfg.PoisonPct, cfg.MaxAttempts, cfg.BackoffBase, cfg.ForwardPct, appGroupNames[0], appQueue2, appGroupNames[2], cfg.Stage2Concurrency),
		fmt.Sprintf("Handler capacity of a fan-out group: %d handlers / %s = %.0f msg/s; offered %d msg/s (%.2fx). The hottest key carries %.1f%% of the messages (%.0f msg/s) and runs one handler at a time per group: at most about %.0f msg/s.",
			cfg.Concurrency, mean.Round(100*time.Microsecond), capacity, cfg.Rate, float64(cfg.Rate)/capacity, share*100, share*float64(cfg.Rate), 1/mean.Seconds()),
		"Backlog = committed sends (stage 2: forwards) minus messages finished by the group, counted by the client; the end of the drain is confirmed by sluice.status (ready + waiting + delayed + in flight = 0 in every group). e2e = send (or forward commit) → first handler start, client clock.",
		fmt.Sprintf("Checker: every committed send completed or dead-lettered in both fan-out groups and every forward in %s; duplicates allowed only after a failed ack; per key and group, no handler starts before every earlier message of its key finished and successes follow send order; poison messages dead after %d attempts, nothing else dead; each flagged message forwarded exactly once. Redeliveries: %d / %d / %d (failures and retries), worker errors logged: %d / %d / %d.",
			appGroupNames[2], cfg.MaxAttempts, c.Groups[0].Redeliveries, c.Groups[1].Redeliveries, c.Groups[2].Redeliveries, a.logs[0].n.Load(), a.logs[1].n.Load(), a.logs[2].n.Load()))
	if un := c.Groups[0].Unhandled + c.Groups[1].Unhandled + c.Groups[2].Unhandled; un > 0 {
		notes = append(notes, fmt.Sprintf("Lease expiries: %d attempts were spent on deliveries no handler ran, which came back only when their %s lease expired, holding up their keys meanwhile. "+
			"Known cause: when a keyed message dies (its last attempt fails) inside a run of its key, nack does not release the rest of the run, and Consume, which skips the rest after a failure, leaves them leased.", un, cfg.Lease))
	}
	if truncated {
		notes = append(notes, "A dead-letter list reached 10,000 rows, the most sluice.dead_letters returns: the dead-letter checks saw only those.")
	}
	for _, d := range c.Details {
		notes = append(notes, "violation: "+d)
	}
	for g := range appGroups {
		a.logs[g].mu.Lock()
		for _, l := range a.logs[g].first {
			notes = append(notes, fmt.Sprintf("worker %s logged: %s", appGroupNames[g], l))
		}
		a.logs[g].mu.Unlock()
	}

	rates := []Series{{Name: "pushed/s", Points: s.pushed}}
	var backlogs []Series
	for g := range appGroups {
		rates = append(rates, Series{Name: appGroupNames[g] + " consumed/s", Points: s.consumed[g]})
		backlogs = append(backlogs, Series{Name: appGroupNames[g] + " backlog", Points: s.backlog[g]})
	}
	return &Result{
		Params: map[string]any{"config": cfg, "check": c, "push_s": s.pushEnd, "elapsed_s": s.elapsed, "drained": s.drained},
		Tables: []Table{tp, tc, tk},
		Charts: []Chart{
			{File: "app-rates.svg", Title: fmt.Sprintf("app: pushed and consumed per second (push stops at %.0f s)", s.pushEnd), XLabel: "seconds", YLabel: "messages/s", Series: rates},
			{File: "app-backlog.svg", Title: "app: backlog per group", XLabel: "seconds", YLabel: "messages", Series: backlogs},
		},
		Notes: notes,
	}
}

// orDefault is a queue option of the run's configuration, where 0 means the
// engine's default (nil: unset).
func orDefault[T comparable](v T) *T {
	var zero T
	if v == zero {
		return nil
	}
	return &v
}
