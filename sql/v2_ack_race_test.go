package sqlsrc_test

import (
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// Two acks of the same receipts of several leases at once (an ack retried
// while the first still runs, or two sessions acking one batch), with their
// receipts in opposite orders: neither fails, and the messages are
// completed once in all. (The whole-batch try locked the first receipt's
// lease before the others, which e2_ack__s locks in key order: one ack held
// the lease of the greater key and waited for the lesser, the other the
// reverse, and PostgreSQL cancelled one of them as a deadlock.) A third
// session holds the lesser lease's lock until both acks wait for it, in
// the order that made the deadlock.
func TestV2AcksOfTheSameLeasesDoNotDeadlock(t *testing.T) {
	b := setup(t)
	b.createV2("v2ar", `"lanes": 2`)
	gid := b.int64(`SELECT g.id FROM sluice.consumer_group g JOIN sluice.queue q ON q.id = g.queue_id
		WHERE q.name = 'v2ar' AND g.name = 'default'`)
	for round := 0; round < 8; round++ {
		// (a receive of 1 numbers the 9: its one to the lane dealt to
		// first, the other 8 four a lane; the receive of 8 then takes two
		// leases)
		b.v2sendBatch("v2ar", 9, "")
		if first := b.v2receive("v2ar", "default", 1, ""); len(first) != 1 || b.ack("v2ar", "default", first[0].Receipt) != 1 {
			t.Fatalf("round %d: the first receive and ack: %v", round, first)
		}
		ms := b.v2receive("v2ar", "default", 8, "")
		// the receipts by lease (lane.lease_no), leases by their lock key
		byLease := map[string][]string{}
		for _, m := range ms {
			p := strings.Split(m.Receipt, ".")
			byLease[p[2]+"."+p[3]] = append(byLease[p[2]+"."+p[3]], m.Receipt)
		}
		if len(byLease) < 2 || len(ms) != 8 {
			t.Fatalf("round %d: %d messages in %d leases, want 8 in at least 2", round, len(ms), len(byLease))
		}
		type lease struct {
			key      int64
			receipts []string
		}
		var leases []lease
		for k, rs := range byLease {
			p := strings.Split(k, ".")
			leases = append(leases, lease{b.int64("SELECT sluice._lease_lock($1::int, $2::int, $3::bigint)", gid, p[0], p[1]), rs})
		}
		sort.Slice(leases, func(i, j int) bool { return leases[i].key < leases[j].key })
		var up, down []string // first receipt in the lesser key's lease, in the greater's
		for i := range leases {
			up = append(up, leases[i].receipts...)
			down = append(down, leases[len(leases)-1-i].receipts...)
		}
		holder, err := b.pool.Begin(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := holder.Exec(b.ctx, "SELECT pg_advisory_xact_lock(sluice._lock_ns('lease'), $1::int)", leases[0].key); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		counts := make([]int, 2)
		errs := make([]error, 2)
		// up first: it waits for the lesser lease's lock at once; down, its
		// whole-batch try done, then waits for it too, after up (the lock's
		// queue is first come, first served)
		for i, rs := range [][]string{up, down} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = b.pool.QueryRow(b.ctx, "SELECT sluice.ack('v2ar', 'default', $1)", rs).Scan(&counts[i])
			}()
			time.Sleep(100 * time.Millisecond) // (each waits for the holder)
		}
		if err := holder.Commit(b.ctx); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatalf("round %d: ack: %v", round, err)
			}
		}
		if counts[0]+counts[1] != len(ms) {
			t.Fatalf("round %d: the two acks completed %d and %d, want %d in all", round, counts[0], counts[1], len(ms))
		}
	}
}
