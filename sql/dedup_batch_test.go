package sqlsrc_test

import (
	"fmt"
	"sync"
	"testing"
)

// A batch of dedup keys mixing keys sent before, keys repeated in the batch
// (not next to each other), and bodies without a key: each body gets the id
// of the message its key names (its own, its key's first body in the batch,
// or the one sent before), and exactly the bodies without a key and the
// first body of each new key are enqueued, in body order, each with its
// own headers. On both engines (engine 2's was
// TestV2SendBatchDedupMapsEveryBody).
func TestSendBatchDedupMapsEveryBody(t *testing.T) {
	onBothEngines(t, "", func(b *bundle, _ int) {
		t := b.t
		const sentBefore = 50
		before := map[string]int64{}
		for i := 0; i < sentBefore; i++ {
			key := fmt.Sprintf("k%d", i*7)
			before[key] = b.v2sendKey("q", "{}", key)
		}
		// 600 bodies: every fifth without a key, the others over 200 keys
		// (about a quarter of them sent before), each key three times.
		var keys []any
		for i := 0; i < 600; i++ {
			if i%5 == 0 {
				keys = append(keys, nil)
			} else {
				keys = append(keys, fmt.Sprintf("k%d", (i*37)%200))
			}
		}
		batch := `SELECT x FROM sluice.send_batch('q', ARRAY(SELECT jsonb_build_object('i', g) FROM generate_series(0, 599) g),
			headers => ARRAY(SELECT jsonb_build_object('h', g) FROM generate_series(0, 599) g), dedup_keys => $1::text[]) x`
		ids := b.int64s(batch, keys)
		if len(ids) != 600 {
			t.Fatalf("%d ids for 600 bodies", len(ids))
		}
		first := map[string]int64{}
		var inserted []int // bodies enqueued, in body order
		for i, k := range keys {
			if k == nil {
				inserted = append(inserted, i)
				continue
			}
			key := k.(string)
			want, ok := before[key]
			if !ok {
				if want, ok = first[key]; !ok {
					first[key] = ids[i]
					want = ids[i]
					inserted = append(inserted, i)
				}
			}
			if ids[i] != want {
				t.Fatalf("body %d (key %s): id %d, want %d", i, key, ids[i], want)
			}
		}
		for j := 1; j < len(inserted); j++ {
			if ids[inserted[j]] <= ids[inserted[j-1]] {
				t.Fatalf("bodies %d and %d enqueued with ids %d, %d: not in body order",
					inserted[j-1], inserted[j], ids[inserted[j-1]], ids[inserted[j]])
			}
		}
		// What is stored: each enqueued body with its own headers, by id.
		stored := b.int64s(`SELECT (body->>'i')::bigint FROM sluice.peek('q', 1000)
			WHERE body ? 'i' AND (headers->>'h')::int = (body->>'i')::int ORDER BY id`)
		if len(stored) != len(inserted) {
			t.Fatalf("%d messages enqueued (with their headers), want %d", len(stored), len(inserted))
		}
		for j, i := range inserted {
			if stored[j] != int64(i) {
				t.Fatalf("message %d enqueued is body %d, want %d", j, stored[j], i)
			}
		}
		// The keys are remembered: the batch again enqueues nothing.
		again := b.int64s(batch, keys)
		for i, k := range keys {
			if k != nil && again[i] != ids[i] {
				t.Fatalf("again, body %d (key %s): id %d, want %d", i, k, again[i], ids[i])
			}
		}
		if n := b.int64(`SELECT count(*) FROM sluice.peek('q', 1000) WHERE body ? 'i'`); n != int64(len(inserted)+120) {
			t.Fatalf("after the batch again: %d messages, want %d (the 120 without a key once more)", n, len(inserted)+120)
		}
		if got := b.v2drainAck("q", "default", 200); len(got) != sentBefore+len(inserted)+120 {
			t.Fatalf("received %d, want %d", len(got), sentBefore+len(inserted)+120)
		}
	})
}

// Batches that share keys, sent at once in opposite orders, neither
// deadlock nor enqueue a key twice, and agree on each key's id. On both
// engines (engine 2's was the second half of TestV2ConcurrentIdempotentSend).
func TestSendBatchDedupConcurrent(t *testing.T) {
	onBothEngines(t, "", func(b *bundle, _ int) {
		t := b.t
		b.v2widen(20) // (every batch holds a connection at once)
		const n, batches = 400, 6
		fwd, rev := make([]string, n), make([]string, n)
		for i := 0; i < n; i++ {
			fwd[i] = fmt.Sprintf("c%d", i)
			rev[n-1-i] = fwd[i]
		}
		var wg sync.WaitGroup
		results := make([]map[string]int64, batches)
		errs := make([]error, batches)
		for w := 0; w < batches; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				keys := fwd
				if w%2 == 1 {
					keys = rev
				}
				rows, err := b.pool.Query(b.ctx, `SELECT x FROM sluice.send_batch('q', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, $2)),
				                                                               dedup_keys => $1::text[]) x`, keys, n)
				if err != nil {
					errs[w] = err
					return
				}
				defer rows.Close()
				got := map[string]int64{}
				i := 0
				for rows.Next() {
					var id int64
					if err := rows.Scan(&id); err != nil {
						errs[w] = err
						return
					}
					got[keys[i]] = id
					i++
				}
				errs[w] = rows.Err()
				results[w] = got
			}(w)
		}
		wg.Wait()
		for w, err := range errs {
			if err != nil {
				t.Fatalf("batch %d: %v", w, err)
			}
		}
		for w := 1; w < len(results); w++ {
			for k, id := range results[0] {
				if results[w][k] != id {
					t.Fatalf("key %s: batch 0 got id %d, batch %d got %d", k, id, w, results[w][k])
				}
			}
		}
		if c := b.int64(`SELECT count(*) FROM sluice.peek('q', 1000)`); c != n {
			t.Fatalf("%d messages stored for %d keys", c, n)
		}
		if got := b.v2drainAck("q", "default", 100); len(got) != n {
			t.Fatalf("%d messages enqueued for %d keys", len(got), n)
		}
	})
}
