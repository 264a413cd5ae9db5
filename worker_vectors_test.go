package sluice_test

// The Go library's runner of the shared worker behaviour vectors
// (test/worker/*.json, format in test/worker/README.md): each vector's
// messages go to a fresh queue, Consume runs a handler that follows each
// message's script, the runner stops it as the vector says and checks what
// the handler saw and what the queue holds. The queue is created with raw
// SQL (setup, not what is checked).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice"
)

// workerVector is one file of test/worker.
type workerVector struct {
	Name        string         `json:"name"`
	Description string         `json:"description"`
	Queue       map[string]any `json:"queue"`
	Worker      struct {
		Concurrency       int      `json:"concurrency"`
		PollInterval      *float64 `json:"poll_interval"`
		Lease             *float64 `json:"lease"`
		HeartbeatInterval *float64 `json:"heartbeat_interval"`
		DrainTimeout      *float64 `json:"drain_timeout"`
	} `json:"worker"`
	Messages []struct {
		Body   string         `json:"body"`
		Script []scriptAction `json:"script"`
	} `json:"messages"`
	Stop struct {
		Started  int `json:"started"`
		Finished int `json:"finished"`
	} `json:"stop"`
	Expect struct {
		Runs        map[string][]int `json:"runs"`
		Finished    map[string]int   `json:"finished"`
		Status      map[string]int64 `json:"status"`
		DeadLetters *[]struct {
			Body     string `json:"body"`
			Attempts int    `json:"attempts"`
			Error    string `json:"error"`
		} `json:"dead_letters"`
	} `json:"expect"`
}

type scriptAction struct {
	Sleep float64 `json:"sleep"`
	Fail  *string `json:"fail"`
}

// vecSeconds converts a vector's duration (seconds; nil: absent) to a
// time.Duration (0: the default).
func vecSeconds(s *float64) time.Duration {
	if s == nil {
		return 0
	}
	return time.Duration(*s * float64(time.Second))
}

// vectorOptions renders a vector's queue options for sluice.create_queue:
// durations (seconds) as interval text.
func vectorOptions(o map[string]any) ([]byte, error) {
	out := map[string]any{}
	for k, v := range o {
		switch k {
		case "lease", "backoff_base", "backoff_max", "retention", "rotate_interval", "dedup_window":
			out[k] = fmt.Sprintf("%v seconds", v)
		default:
			out[k] = v
		}
	}
	return json.Marshal(out)
}

// handlerLog records the handler's runs, by body.
type handlerLog struct {
	mu       sync.Mutex
	runs     map[string][]int
	finished map[string]int
	started  int
	done     int
	changed  chan struct{} // a run began or returned (capacity 1)
}

func (l *handlerLog) note(f func()) {
	l.mu.Lock()
	f()
	l.mu.Unlock()
	select {
	case l.changed <- struct{}{}:
	default:
	}
}

func TestWorkerVectors(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("test", "worker", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no vectors in test/worker: %v", err)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var v workerVector
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields() // a misspelt key would check nothing
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if stem := strings.TrimSuffix(filepath.Base(file), ".json"); v.Name != stem {
			t.Fatalf("%s: name %q differs from the file's stem", file, v.Name)
		}
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			runWorkerVector(t, setup(t), &v)
		})
	}
}

func runWorkerVector(t *testing.T, b *bundle, v *workerVector) {
	queue := fmt.Sprintf("wv_%d", time.Now().UnixNano()%1e12)
	opts, err := vectorOptions(v.Queue)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(b.ctx, `SELECT sluice.create_queue($1, $2::jsonb)`, queue, opts); err != nil {
		t.Fatal(err)
	}
	scripts := map[string][]scriptAction{}
	for _, m := range v.Messages {
		scripts[m.Body] = m.Script
		body, _ := json.Marshal(m.Body)
		if _, err := b.client.Send(b.ctx, queue, body, nil); err != nil {
			t.Fatal(err)
		}
	}

	log := &handlerLog{runs: map[string][]int{}, finished: map[string]int{}, changed: make(chan struct{}, 1)}
	handler := func(ctx context.Context, m *sluice.Message) error {
		var body string
		if err := json.Unmarshal(m.Body, &body); err != nil {
			return err
		}
		var run int
		log.note(func() {
			log.runs[body] = append(log.runs[body], m.Attempt)
			log.started++
			run = len(log.runs[body])
		})
		defer log.note(func() { log.finished[body]++; log.done++ })
		script := scripts[body]
		if len(script) == 0 {
			return nil
		}
		a := script[min(run, len(script))-1]
		if a.Sleep > 0 {
			select {
			case <-time.After(time.Duration(a.Sleep * float64(time.Second))):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if a.Fail != nil {
			return errors.New(*a.Fail)
		}
		return nil
	}
	w := v.Worker
	co := &sluice.ConsumeOptions{
		Concurrency: w.Concurrency, PollInterval: vecSeconds(w.PollInterval), Lease: vecSeconds(w.Lease),
		HeartbeatInterval: vecSeconds(w.HeartbeatInterval), DrainTimeout: vecSeconds(w.DrainTimeout), Logger: quiet,
		OnHandlerError: func(sluice.HandlerFailure) {},
	}
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- b.client.Consume(ctx, queue, "default", handler, co) }()

	// Stop as the vector says.
	timeout := time.After(20 * time.Second)
	for {
		log.mu.Lock()
		due := (v.Stop.Started > 0 && log.started >= v.Stop.Started) || (v.Stop.Finished > 0 && log.done >= v.Stop.Finished)
		log.mu.Unlock()
		if due {
			break
		}
		select {
		case <-log.changed:
		case err := <-done:
			t.Fatalf("Consume returned before the stop: %v", err)
		case <-timeout:
			cancel()
			<-done
			t.Fatalf("the stop condition %+v did not hold within 20s; runs %v", v.Stop, log.runs)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Consume: %v", err)
		}
	case <-time.After(vecSeconds(w.DrainTimeout) + 10*time.Second):
		t.Fatal("Consume did not return within the drain timeout and 10s after the stop")
	}
	checkWorkerVector(t, b, queue, v, log)
}

func checkWorkerVector(t *testing.T, b *bundle, queue string, v *workerVector, log *handlerLog) {
	log.mu.Lock()
	defer log.mu.Unlock()
	if e := v.Expect.Runs; e != nil {
		for body, runs := range log.runs {
			if _, ok := e[body]; !ok {
				t.Errorf("message %q: runs %v, want none", body, runs)
			}
		}
		for body, want := range e {
			if got := log.runs[body]; !slices.Equal(got, want) {
				t.Errorf("message %q: runs with attempts %v, want %v", body, got, want)
			}
		}
	}
	for body, want := range v.Expect.Finished {
		if got := log.finished[body]; got != want {
			t.Errorf("message %q: %d runs finished, want %d", body, got, want)
		}
	}
	if len(v.Expect.Status) > 0 {
		st := b.status(queue, "default")
		got := map[string]int64{"ready": st.Ready, "delayed": st.Delayed, "in_flight": st.InFlight, "dead": st.Dead, "lag": st.Lag}
		for k, want := range v.Expect.Status {
			g, ok := got[k]
			if !ok {
				t.Fatalf("status field %q unknown to the runner", k)
			}
			if g != want {
				t.Errorf("status %s = %d, want %d (%+v)", k, g, want, st)
			}
		}
	}
	if v.Expect.DeadLetters != nil {
		want := *v.Expect.DeadLetters
		got, err := b.client.DeadLetters(b.ctx, queue, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("%d dead letters, want %d: %+v", len(got), len(want), got)
		}
		for i, w := range want {
			var body string
			_ = json.Unmarshal(got[i].Body, &body)
			if body != w.Body || got[i].Attempts != w.Attempts || !strings.Contains(got[i].Error, w.Error) {
				t.Errorf("dead letter %d: body %q, attempts %d, error %q; want %q, %d, containing %q",
					i, body, got[i].Attempts, got[i].Error, w.Body, w.Attempts, w.Error)
			}
		}
	}
}
