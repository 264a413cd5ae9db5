package server

import (
	"math"
	"net/http"

	jsonv1 "github.com/go-json-experiment/json/v1"

	"github.com/sluicemq/sluice"
)

// maxPooledBytes bounds the bytes a pooled batchScratch keeps: its body
// buffer, and its messages' bodies and headers together. A larger request
// drops them when it ends, so that one huge request does not pin its memory
// in the pool.
const maxPooledBytes = 1 << 20

// batchScratch is the memory of one batch send (POST
// /v1/queues/{queue}/messages/batch): the request body as read, the decoded
// request with each message's body and headers bytes, and the messages
// given to the library. Server.batches keeps them from one request to the
// next: allocated per request they were ~56 of the ~119 KB a batch of 100
// cost (BenchmarkSendBatch100/http-64, pprof), the decoded messages' slice
// grown one element at a time the largest part.
type batchScratch struct {
	decoder
	req  sendBatchRequest
	msgs []sluice.BatchMessage
}

// getBatch takes a batchScratch from the pool; putBatch gives it back.
func (s *Server) getBatch() *batchScratch { return s.batches.Get().(*batchScratch) }

// putBatch gives b back to the pool once nothing refers to its memory any
// more: after the database call (pgx has encoded the parameters when it
// returns) and the response. It keeps at most maxPooledBytes of bytes and
// MaxBatch messages.
func (s *Server) putBatch(b *batchScratch) {
	if b.body.Cap() > maxPooledBytes {
		b.release()
	}
	if cap(b.req.Messages) > s.cfg.MaxBatch || b.req.pooledBytes() > maxPooledBytes {
		b.req.Messages = nil
	}
	// (the library's messages refer to the request's bytes and the
	// principal's headers: cleared, not to keep the latter alive)
	clear(b.msgs)
	b.msgs = b.msgs[:0]
	if cap(b.msgs) > s.cfg.MaxBatch {
		b.msgs = nil
	}
	s.batches.Put(b)
}

// decode reads the request into b.req, which holds nothing of an earlier
// request after it: every field not in this request's JSON is zero.
//
// The messages are decoded in place, each message's body and headers
// appended to the bytes an earlier request left (json.RawMessage's
// UnmarshalJSON appends). json v2 zeroes a slice's elements before decoding
// into them, which drops those bytes; MergeWithLegacySemantics (encoding/
// json's behaviour) does not, so reset clears every element beforehand
// instead. The option changes nothing else for these types: a JSON null
// keeps a string's or an int's value, and reset made it zero already
// (TestBatchScratchDecodesAsFresh compares with a fresh value, problems
// included).
func (b *batchScratch) decode(r *http.Request) error {
	b.req.reset()
	return b.decoder.decode(r, &b.req, jsonv1.MergeWithLegacySemantics(true))
}

// reset empties req for the next request, keeping the capacity of its
// messages and of their bodies and headers. It clears every element up to
// the slice's capacity: decoding fills them without zeroing them.
func (req *sendBatchRequest) reset() {
	all := req.Messages[:cap(req.Messages)]
	for i := range all {
		m := &all[i]
		*m = batchMessage{Body: m.Body[:0], Headers: m.Headers[:0]}
	}
	*req = sendBatchRequest{Messages: all[:0]}
}

// pooledBytes is the capacity req's messages keep for their bodies and
// headers.
func (req *sendBatchRequest) pooledBytes() int {
	n := 0
	for _, m := range req.Messages[:cap(req.Messages)] {
		n += cap(m.Body) + cap(m.Headers)
	}
	return n
}

// messages is req's messages as the library takes them, in b.msgs (p's
// headers added); a problem names the first message that is wrong.
func (b *batchScratch) messages(p *Principal) ([]sluice.BatchMessage, error) {
	n := len(b.req.Messages)
	if cap(b.msgs) < n {
		b.msgs = make([]sluice.BatchMessage, n)
	}
	msgs := b.msgs[:n]
	b.msgs = msgs // (putBatch clears them, those filled before a problem too)
	for i := range b.req.Messages {
		m := &b.req.Messages[i]
		// (the member's name only for a problem: building it for each
		// message was two allocations a message)
		if len(m.Body) == 0 {
			prefix := "messages[" + itoa(i) + "]."
			return nil, fieldProblem(prefix+"body", "%sbody is required (any JSON value)", prefix)
		}
		if m.Priority < math.MinInt32 || m.Priority > math.MaxInt32 {
			return nil, checkPriority("messages["+itoa(i)+"].priority", m.Priority)
		}
		if nulMember(m.Body, m.Headers, m.Key, m.DedupKey) != "" {
			return nil, checkNUL("messages["+itoa(i)+"].", m.Body, m.Headers, m.Key, m.DedupKey)
		}
		h, err := headers(p, m.Headers, func() string { return "messages[" + itoa(i) + "].headers" })
		if err != nil {
			return nil, err
		}
		msgs[i] = sluice.BatchMessage{Body: m.Body, Headers: h, Key: m.Key, Priority: m.Priority, DedupKey: m.DedupKey}
	}
	return msgs, nil
}
