package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/sluicemq/sluice"
)

// dirtyBatch is a request with every member of every message set, and
// more messages than the requests after it: what they must not inherit.
var dirtyBatch = `{"delay": "5s", "messages": [` + strings.Repeat(
	`{"body": {"old": "`+strings.Repeat("o", 100)+`"}, "headers": {"h": "old"}, "key": "k", "priority": 9, "dedup_key": "d"},`, 7) +
	`{"body": 1, "headers": {"h": 2}, "key": "k", "priority": 9, "dedup_key": "d"}]}`

// A pooled batchScratch decodes each request as a fresh sendBatchRequest
// would, whatever the request before it held: the same messages, the same
// problems, nothing of the earlier request's members, bodies or headers.
func TestBatchScratchDecodesAsFresh(t *testing.T) {
	bodies := []string{
		`{"messages": [{"body": 1}]}`,
		`{"messages": [{"body": {"a": 1}}, {"body": "x"}, {"body": [1, 2]}]}`,
		`{"messages": [{"body": 1, "key": "k2"}, {"body": 2, "priority": 3}, {"body": 3, "dedup_key": "d2"}, {"body": 4, "headers": {"t": 1}}]}`,
		`{"messages": [{"body": 1, "key": null, "priority": null, "dedup_key": null, "headers": null}]}`,
		`{"messages": [{"body": null}]}`,
		`{"messages": [null, {"body": 1}]}`,
		`{"messages": [{}]}`,
		`{"messages": [{"body": 1}, {}]}`,
		`{"messages": []}`,
		`{"messages": null}`,
		`{"delay": null, "messages": [{"body": 1}]}`,
		`{"delay": "1s"}`,
		`{}`,
		`{"messages": [{"body": 1, "extra": 2}]}`,
		`{"messages": [{"body": 1}, {"body": 2, "priority": "x"}]}`,
		`{"messages": [{"body": 1}, {"body": 2, "priority": 1.5}]}`,
		`{"messages": [{"body": 1, "key": 7}]}`,
		`{"messages": [{"body": 1, "body": 2}]}`,
		`{"messages": [{"Body": 1}]}`,
		`{"messages": {"body": 1}}`,
		`{"messages": "x"}`,
		`{"messages": [1]}`,
		`{"messages": [{"body": 1}], "messages": []}`,
		`{"messages": [{"body": 1},`,
		`{"messages": [{"body": 1}]} {}`,
		`{"messages": [{"body": "` + "\xff" + `"}]}`,
		`[1]`,
		`null`,
		``,
		`   `,
	}
	var b batchScratch
	for _, body := range bodies {
		// Fresh: what the handler decoded into before the pool.
		var fresh sendBatchRequest
		wantErr := decode(httptest.NewRequest("POST", "/", strings.NewReader(body)), &fresh)

		for _, before := range []string{dirtyBatch, body} {
			if err := b.decode(httptest.NewRequest("POST", "/", strings.NewReader(before))); err != nil && before == dirtyBatch {
				t.Fatal(err)
			}
			err := b.decode(httptest.NewRequest("POST", "/", strings.NewReader(body)))
			if !sameProblem(err, wantErr) {
				t.Errorf("%s after %.20s: error %v, want %v", body, before, err, wantErr)
				continue
			}
			if err == nil && !reflect.DeepEqual(normal(&b.req), normal(&fresh)) {
				t.Errorf("%s after %.20s: decoded %+v, want %+v", body, before, normal(&b.req), normal(&fresh))
			}
		}
	}
}

// sameProblem reports whether two decode errors are the same problem.
func sameProblem(a, b error) bool {
	var pa, pb *Problem
	if a == nil || b == nil {
		return a == b
	}
	return errors.As(a, &pa) && errors.As(b, &pb) && *pa == *pb
}

// normal is req with its bytes as strings: an empty slice and a nil one
// are alike to the handler, which looks at lengths (an absent body or
// messages member is a problem, absent headers are none).
func normal(req *sendBatchRequest) any {
	type msg struct {
		Body, Headers, Key, DedupKey string
		Priority                     int
	}
	out := struct {
		Delay    string
		Messages []msg
	}{Delay: req.Delay}
	for _, m := range req.Messages {
		out.Messages = append(out.Messages, msg{string(m.Body), string(m.Headers), m.Key, m.DedupKey, m.Priority})
	}
	return out
}

// A batch's messages as the library gets them hold nothing of the batch
// before them, headers included (a principal without a role adds none).
func TestBatchScratchMessagesAfterAFullBatch(t *testing.T) {
	var b batchScratch
	p := &Principal{}
	if err := b.decode(httptest.NewRequest("POST", "/", strings.NewReader(dirtyBatch))); err != nil {
		t.Fatal(err)
	}
	if _, err := b.messages(p); err != nil {
		t.Fatal(err)
	}
	if err := b.decode(httptest.NewRequest("POST", "/", strings.NewReader(`{"messages": [{"body": 1}, {"body": "x"}]}`))); err != nil {
		t.Fatal(err)
	}
	msgs, err := b.messages(p)
	if err != nil {
		t.Fatal(err)
	}
	want := []sluice.BatchMessage{{Body: json.RawMessage(`1`)}, {Body: json.RawMessage(`"x"`)}}
	if !reflect.DeepEqual(msgs, want) {
		t.Fatalf("messages %+v, want %+v", msgs, want)
	}
	if b.req.Delay != "" {
		t.Fatalf("delay %q kept", b.req.Delay)
	}
}

// putBatch keeps what a batch of the usual size needs, and drops what a
// huge one grew so that the pool does not pin it.
func TestPutBatchCaps(t *testing.T) {
	s := &Server{cfg: Config{MaxBatch: 10}}
	s.batches.New = func() any { return new(batchScratch) }

	small := new(batchScratch)
	if err := small.decode(httptest.NewRequest("POST", "/", strings.NewReader(dirtyBatch))); err != nil {
		t.Fatal(err)
	}
	if _, err := small.messages(&Principal{}); err != nil {
		t.Fatal(err)
	}
	s.putBatch(small)
	if small.body.Cap() == 0 || cap(small.req.Messages) == 0 || cap(small.msgs) == 0 {
		t.Fatalf("a small batch's memory was dropped: body %d, messages %d, library messages %d",
			small.body.Cap(), cap(small.req.Messages), cap(small.msgs))
	}
	for _, m := range small.msgs[:cap(small.msgs)] {
		if m.Body != nil || m.Headers != nil || m.Key != "" {
			t.Fatalf("a pooled library message still refers to the request: %+v", m)
		}
	}

	big := new(batchScratch)
	huge := `{"messages": [{"body": "` + strings.Repeat("x", maxPooledBytes) + `"}]}`
	if err := big.decode(httptest.NewRequest("POST", "/", strings.NewReader(huge))); err != nil {
		t.Fatal(err)
	}
	s.putBatch(big)
	if big.body.Cap() != 0 || big.req.Messages != nil {
		t.Fatalf("a huge batch's memory was kept: body %d, messages %d", big.body.Cap(), cap(big.req.Messages))
	}

	many := new(batchScratch)
	if err := many.decode(httptest.NewRequest("POST", "/", strings.NewReader(
		`{"messages": [`+strings.Repeat(`{"body": 1},`, 20)+`{"body": 1}]}`))); err != nil {
		t.Fatal(err)
	}
	s.putBatch(many)
	if many.req.Messages != nil {
		t.Fatalf("%d messages kept, more than MaxBatch", cap(many.req.Messages))
	}
}

// Decoding a batch into a scratch that held one of its size reuses the
// scratch's memory: the body buffer, the messages and their bodies' bytes.
func TestBatchScratchReusesItsMemory(t *testing.T) {
	body := []byte(`{"messages": [` + strings.Repeat(`{"body": {"pad": "`+strings.Repeat("x", 60)+`"}},`, 99) + `{"body": 1}]}`)
	rd := bytes.NewReader(body)
	r := httptest.NewRequest("POST", "/", rd)
	var b batchScratch
	allocs := testing.AllocsPerRun(20, func() {
		rd.Reset(body)
		if err := b.decode(r); err != nil {
			t.Fatal(err)
		}
		if _, err := b.messages(&Principal{}); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 2 {
		t.Fatalf("%v allocations to decode a batch of 100 into a used scratch", allocs)
	}
}
