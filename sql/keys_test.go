package sqlsrc_test

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// sendKeyed sends body with an ordering key (and priority) and returns its id.
func (b *bundle) sendKeyed(queue, body, key string, priority int) int64 {
	b.t.Helper()
	var keyArg any
	if key != "" {
		keyArg = key
	}
	return b.int64("SELECT sluice.send($1, $2::jsonb, key => $3, priority => $4)", queue, body, keyArg, priority)
}

// engines runs f once per storage engine (subtests "engine 1" and "engine
// 2"); opts adds the engine to a queue's JSON options.
func engines(t *testing.T, f func(t *testing.T, opts func(string) string)) {
	for _, e := range []int{1, 2} {
		t.Run(fmt.Sprintf("engine %d", e), func(t *testing.T) {
			f(t, func(o string) string { return withEngine(o, e) })
		})
	}
}

// withEngine adds "engine": e to a queue's JSON options.
func withEngine(o string, e int) string {
	o = strings.TrimSpace(o)
	switch {
	case o == "" || o == "{}":
		return fmt.Sprintf(`{"engine": %d}`, e)
	}
	return fmt.Sprintf(`{"engine": %d, `, e) + strings.TrimPrefix(o, "{")
}

func ids(ms []msg) []int64 {
	out := make([]int64, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

func wantIDs(t *testing.T, what string, got []msg, want ...int64) {
	t.Helper()
	if fmt.Sprint(ids(got)) != fmt.Sprint(want) {
		t.Fatalf("%s: got ids %v, want %v", what, ids(got), want)
	}
}

// Messages of one key are delivered one run at a time, in order; other keys
// and unkeyed messages go on in parallel.
func TestKeyedDeliveryKeepsOrderAndBlocksTheKey(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, opts func(string) string) {
		b := setup(t)
		b.createQueue("q", `{"lanes": 1}`) // one lane: the order across keys is the commit order
		a1 := b.sendKeyed("q", `1`, "a", 0)
		a2 := b.sendKeyed("q", `2`, "a", 0)
		b1 := b.sendKeyed("q", `3`, "b", 0)
		u1 := b.sendKeyed("q", `4`, "", 0)
		a3 := b.sendKeyed("q", `5`, "a", 0)
		b2 := b.sendKeyed("q", `6`, "b", 0)

		first := b.receive("q", "default", 1, "")
		wantIDs(t, "first consumer", first, a1)
		// a is in flight: the next consumer gets b1 and the unkeyed one, not a2.
		second := b.receive("q", "default", 2, "")
		wantIDs(t, "second consumer", second, b1, u1)
		if got := b.receive("q", "default", 10, ""); len(got) != 0 {
			t.Fatalf("both keys busy, yet got %v", ids(got))
		}
		b.ack("q", "default", first[0].Receipt)
		// a is free again: its remaining messages come as one run, in order.
		run := b.receive("q", "default", 10, "")
		wantIDs(t, "run of a", run, a2, a3)
		b.ack("q", "default", second[0].Receipt)
		wantIDs(t, "b after its first ack", b.receive("q", "default", 10, ""), b2)
	})
}

// A run of one key acked out of order (its last message first) keeps the
// key blocked until every message of the run is completed: the key's next
// message is not delivered while an earlier one is still leased. (It was:
// the engine looked only at the completion of the position just before
// it.) With eight lanes too: the key's lane keeps it blocked.
func TestKeyedRunAckedOutOfOrderKeepsTheKeyBlocked(t *testing.T) {
	t.Parallel()
	for _, lanes := range []int{1, 8} {
		t.Run(fmt.Sprintf("lanes %d", lanes), func(t *testing.T) {
			engines(t, func(t *testing.T, opts func(string) string) {
				b := setup(t)
				b.createQueue("q", opts(fmt.Sprintf(`{"lanes": %d}`, lanes)))
				var a []int64
				for i := range 4 {
					a = append(a, b.sendKeyed("q", fmt.Sprint(i), "a", 0))
				}
				run := b.receive("q", "default", 3, "")
				wantIDs(t, "run of a", run, a[0], a[1], a[2])
				if n := b.ack("q", "default", run[2].Receipt); n != 1 {
					t.Fatalf("ack of the run's last message counted %d", n)
				}
				if got := b.receive("q", "default", 10, ""); len(got) != 0 {
					t.Fatalf("a[0] and a[1] are still leased, yet got %v", ids(got))
				}
				b.ack("q", "default", run[1].Receipt)
				if got := b.receive("q", "default", 10, ""); len(got) != 0 {
					t.Fatalf("a[0] is still leased, yet got %v", ids(got))
				}
				b.ack("q", "default", run[0].Receipt)
				wantIDs(t, "a after its run is completed", b.receive("q", "default", 10, ""), a[3])
			})
		})
	}
}

// A nacked keyed message is retried in place: later messages of its key wait
// for it, the rest of its run is released (stale receipts, same attempt), and
// the retry comes first, with attempt + 1.
func TestKeyedNackRetriesInPlaceAndHoldsTheKey(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, opts func(string) string) {
		b := setup(t)
		b.createQueue("q", opts(`{"backoff_base": "200 milliseconds", "backoff_max": "200 milliseconds"}`))
		k1 := b.sendKeyed("q", `1`, "k", 0)
		k2 := b.sendKeyed("q", `2`, "k", 0)
		run := b.receive("q", "default", 10, "")
		wantIDs(t, "run", run, k1, k2)
		if !b.nack("q", "default", run[0].Receipt, "", "boom") {
			t.Fatal("nack of a current receipt returned false")
		}
		if n := b.ack("q", "default", run[1].Receipt); n != 0 {
			t.Fatalf("ack of a released message counted %d, want 0", n)
		}
		k3 := b.sendKeyed("q", `3`, "k", 0)
		other := b.sendKeyed("q", `4`, "other", 0)
		wantIDs(t, "during the backoff only the other key", b.receive("q", "default", 10, ""), other)
		time.Sleep(300 * time.Millisecond)
		retry := b.receive("q", "default", 10, "")
		wantIDs(t, "after the backoff", retry, k1, k2, k3)
		if retry[0].Attempt != 2 || retry[1].Attempt != 1 || retry[2].Attempt != 1 {
			t.Fatalf("attempts %d %d %d, want 2 1 1", retry[0].Attempt, retry[1].Attempt, retry[2].Attempt)
		}
		if n := b.ack("q", "default", receipts(retry)...); n != 3 {
			t.Fatalf("ack = %d, want 3", n)
		}
		if got := b.receive("q", "default", 10, ""); len(got) != 0 {
			t.Fatalf("got %v after acking everything", ids(got))
		}
	})
}

// A keyed message that exhausts its attempts becomes a dead letter, and the
// key moves on.
func TestKeyedDeadLetterUnblocksTheKey(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, opts func(string) string) {
		b := setup(t)
		b.createQueue("q", opts(`{"max_attempts": 2}`))
		k1 := b.sendKeyed("q", `1`, "k", 0)
		k2 := b.sendKeyed("q", `2`, "k", 0)
		for attempt := 1; attempt <= 2; attempt++ {
			got := b.receive("q", "default", 1, "")
			wantIDs(t, fmt.Sprintf("attempt %d", attempt), got, k1)
			b.nack("q", "default", got[0].Receipt, "0", "poison")
		}
		wantIDs(t, "after the dead letter", b.receive("q", "default", 10, ""), k2)
		if n := b.int64("SELECT count(*) FROM sluice.dead_letters('q', 'default')"); n != 1 {
			t.Fatalf("%d dead letters, want 1", n)
		}
	})
}

// A message that becomes a dead letter in the middle of a run releases the
// rest of the run, as a retry does: the key goes on at once, not when the
// rest's leases expire.
func TestKeyedDeadLetterReleasesTheRun(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, opts func(string) string) {
		b := setup(t)
		b.createQueue("q", opts(`{"max_attempts": 2, "lease": "1 hour"}`))
		k1 := b.sendKeyed("q", `1`, "k", 0)
		k2 := b.sendKeyed("q", `2`, "k", 0)
		k3 := b.sendKeyed("q", `3`, "k", 0)
		for attempt := 1; attempt <= 2; attempt++ {
			run := b.receive("q", "default", 10, "")
			wantIDs(t, fmt.Sprintf("run of attempt %d", attempt), run, k1, k2, k3)
			b.nack("q", "default", run[0].Receipt, "0", "poison")
		}
		rest := b.receive("q", "default", 10, "")
		wantIDs(t, "after the dead letter", rest, k2, k3)
		for _, m := range rest {
			if m.Attempt != 1 {
				t.Fatalf("released message %d has attempt %d, want 1 (a release is not an attempt)", m.ID, m.Attempt)
			}
		}
		if n := b.int64("SELECT count(*) FROM sluice.dead_letters('q', 'default')"); n != 1 {
			t.Fatalf("%d dead letters, want 1", n)
		}
	})
}

// Expired leases of a run are delivered again in order; a message behind an
// expired one is not delivered before it.
func TestKeyedLeaseExpiryKeepsOrder(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, opts func(string) string) {
		b := setup(t)
		b.createQueue("q", opts(""))
		k1 := b.sendKeyed("q", `1`, "k", 0)
		k2 := b.sendKeyed("q", `2`, "k", 0)
		// A 2 s lease: the checks before it ends have a wide margin on a busy machine.
		wantIDs(t, "run", b.receive("q", "default", 10, "2 seconds"), k1, k2)
		k3 := b.sendKeyed("q", `3`, "k", 0)
		if got := b.receive("q", "default", 10, ""); len(got) != 0 {
			t.Fatalf("got %v while the key is leased", ids(got))
		}
		time.Sleep(2100 * time.Millisecond)
		// Only one at a time: k2 and k3 must wait for k1's new lease.
		again := b.receive("q", "default", 1, "")
		wantIDs(t, "after expiry", again, k1)
		if again[0].Attempt != 2 {
			t.Fatalf("attempt %d, want 2", again[0].Attempt)
		}
		if got := b.receive("q", "default", 10, ""); len(got) != 0 {
			t.Fatalf("got %v while k1 is leased again", ids(got))
		}
		b.ack("q", "default", again[0].Receipt)
		rest := b.receive("q", "default", 10, "")
		wantIDs(t, "the rest", rest, k2, k3)
		if rest[0].Attempt != 2 || rest[1].Attempt != 1 {
			t.Fatalf("attempts %d %d, want 2 1", rest[0].Attempt, rest[1].Attempt)
		}
	})
}

// Each group keeps its own per-key order.
func TestKeyedOrderIsPerGroup(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, opts func(string) string) {
		b := setup(t)
		b.createQueue("q", opts(""))
		b.exec("SELECT sluice.create_group('q', 'other')")
		k1 := b.sendKeyed("q", `1`, "k", 0)
		k2 := b.sendKeyed("q", `2`, "k", 0)
		got := b.receive("q", "default", 1, "")
		wantIDs(t, "default", got, k1)
		wantIDs(t, "other group, not blocked by default", b.receive("q", "other", 10, ""), k1, k2)
		b.ack("q", "default", got[0].Receipt)
		wantIDs(t, "default after its ack", b.receive("q", "default", 10, ""), k2)
	})
}

// Unkeyed messages never wait behind a blocked key, even when a long run of
// that key sits before them.
func TestUnkeyedNeverWaitsBehindKeyed(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, opts func(string) string) {
		b := setup(t)
		b.createQueue("q", `{"lanes": 1}`) // one lane: the key's run and the unkeyed message share it
		b.exec(`SELECT sluice.send_batch('q', array(SELECT g::text::jsonb FROM generate_series(1, 500) g),
		keys => array(SELECT 'hot' FROM generate_series(1, 500)))`)
		u := b.sendKeyed("q", `0`, "", 0)
		first := b.receive("q", "default", 1, "")
		if len(first) != 1 || first[0].Key == nil {
			t.Fatalf("first receive %+v", first)
		}
		wantIDs(t, "unkeyed behind 499 blocked", b.receive("q", "default", 5, ""), u)
	})
}

// Higher priorities first, equal priorities in commit order, negative ones
// after everything else; keyed messages ignore priority. (In one lane: with
// several, the rule holds per lane.)
func TestPriorityOrder(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, opts func(string) string) {
		b := setup(t)
		b.createQueue("q", opts(`{"lanes": 1}`))
		low := b.sendKeyed("q", `1`, "", -5)
		n1 := b.sendKeyed("q", `2`, "", 0)
		h1 := b.sendKeyed("q", `3`, "", 10)
		m1 := b.sendKeyed("q", `4`, "", 5)
		h2 := b.sendKeyed("q", `5`, "", 10)
		n2 := b.sendKeyed("q", `6`, "", 0)
		low2 := b.sendKeyed("q", `7`, "", -1)
		var got []int64
		for i := 0; i < 7; i++ {
			ms := b.receive("q", "default", 1, "")
			if len(ms) != 1 {
				t.Fatalf("receive %d got %d messages", i, len(ms))
			}
			got = append(got, ms[0].ID)
		}
		want := []int64{h1, h2, m1, n1, n2, low2, low}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("order %v, want %v", got, want)
		}
		// One receive returns them in the same order.
		b.createQueue("q2", opts(`{"lanes": 1}`))
		for i, p := range []int{0, 3, -2, 3, 7} {
			b.sendKeyed("q2", fmt.Sprint(i), "", p)
		}
		var prios []int
		for _, m := range b.receive("q2", "default", 10, "") {
			prios = append(prios, m.Priority)
		}
		if fmt.Sprint(prios) != "[7 3 3 0 -2]" {
			t.Fatalf("one receive returned priorities %v, want [7 3 3 0 -2]", prios)
		}
	})
}

// A high-priority message sent behind a backlog is delivered next.
func TestPriorityJumpsTheBacklog(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, opts func(string) string) {
		b := setup(t)
		b.createQueue("q", opts(""))
		b.exec(`SELECT sluice.send_batch('q', array(SELECT g::text::jsonb FROM generate_series(1, 100) g))`)
		if got := b.receive("q", "default", 10, ""); len(got) != 10 {
			t.Fatalf("got %d", len(got))
		}
		urgent := b.sendKeyed("q", `"urgent"`, "", 1)
		wantIDs(t, "next", b.receive("q", "default", 1, ""), urgent)
		// The backlog goes on where it was, without the urgent one again.
		rest := b.receive("q", "default", 200, "")
		if len(rest) != 90 {
			t.Fatalf("rest: %d messages, want 90", len(rest))
		}
		for _, m := range rest {
			if m.ID == urgent {
				t.Fatal("urgent message delivered twice")
			}
		}
	})
}
