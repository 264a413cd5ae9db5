package sluice_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice"
)

// syncBuffer is a bytes.Buffer safe for a logger written from many
// goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestConsumeReportsHandlerFailures: OnHandlerError hears of every failed
// attempt, with the message, the error, the attempt and whether the message
// is retried or was dead-lettered.
func TestConsumeReportsHandlerFailures(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("failing", &sluice.QueueOptions{MaxAttempts: sluice.Ptr(3), BackoffBase: sluice.Ptr(10 * time.Millisecond), BackoffMax: sluice.Ptr(50 * time.Millisecond)})
	id := b.send("failing", `"secret body"`)
	var mu sync.Mutex
	var got []sluice.HandlerFailure
	b.consume("failing", "default", func(ctx context.Context, m *sluice.Message) error {
		return errors.New("no such customer")
	}, &sluice.ConsumeOptions{PollInterval: 20 * time.Millisecond, OnHandlerError: func(f sluice.HandlerFailure) {
		mu.Lock()
		got = append(got, f)
		mu.Unlock()
	}})
	b.eventually(15*time.Second, "three failures reported", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 3
	})
	mu.Lock()
	defer mu.Unlock()
	for i, f := range got {
		dead := i == 2
		if f.Queue != "failing" || f.Group != "default" || f.Message == nil || f.Message.ID != id ||
			f.Attempt != i+1 || f.MaxAttempts != 3 || f.DeadLettered != dead || f.Err == nil || f.Err.Error() != "no such customer" {
			t.Errorf("failure %d: %+v (message %+v)", i, f, f.Message)
		}
	}
}

// TestConsumeLogsHandlerFailures: without OnHandlerError, every failed
// attempt is a warning on the consumer's logger, saying whether the message
// is retried or dead-lettered, without the message's body.
func TestConsumeLogsHandlerFailures(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createQueue("logged", &sluice.QueueOptions{MaxAttempts: sluice.Ptr(2), BackoffBase: sluice.Ptr(10 * time.Millisecond), BackoffMax: sluice.Ptr(50 * time.Millisecond)})
	id := b.send("logged", `"secret body"`)
	var out syncBuffer
	logger := slog.New(slog.NewJSONHandler(&out, nil))
	b.consume("logged", "default", func(ctx context.Context, m *sluice.Message) error {
		return errors.New("no such customer")
	}, &sluice.ConsumeOptions{PollInterval: 20 * time.Millisecond, Logger: logger})
	b.eventually(15*time.Second, "a dead letter", func() bool { return b.status("logged", "default").Dead == 1 })
	b.eventually(5*time.Second, "two warnings", func() bool { return strings.Count(out.String(), "handler failed") == 2 })
	var outcomes []string
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["msg"] != "sluice: handler failed" {
			continue
		}
		if rec["level"] != "WARN" || rec["queue"] != "logged" || rec["group"] != "default" ||
			rec["id"] != float64(id) || rec["error"] != "no such customer" || rec["max_attempts"] != float64(2) {
			t.Errorf("log record %v", rec)
		}
		outcomes = append(outcomes, rec["outcome"].(string))
	}
	if strings.Join(outcomes, ",") != "retried,dead-lettered" {
		t.Errorf("outcomes %v, want retried then dead-lettered", outcomes)
	}
	if strings.Contains(out.String(), "secret body") {
		t.Errorf("the message body is in the log:\n%s", out.String())
	}
}
