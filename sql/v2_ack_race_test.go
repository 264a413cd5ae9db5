package sqlsrc_test

import (
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/pgtest"
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
		// the receipts by lease (lane.lease_no), leases by their lock key
		byLease, _ := b.v2leasesOf8("v2ar")
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
		if counts[0]+counts[1] != 8 {
			t.Fatalf("round %d: the two acks completed %d and %d, want 8 in all", round, counts[0], counts[1])
		}
	}
}

// An ack of receipts of several leases reads each lease by its key, not
// every lease of the group: its plan, made while the slot was nearly empty,
// merged the receipts with all of the group's leases in key order, and an
// ack cost more with every lease the slot held (in steady traffic, ~2.6 ms
// an ack 15 s after a rotation). The acks run on one connection, so that
// they all use the plan its first ack made.
func TestV2AckDoesNotReadEveryLease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createV2("v2ackmany", `"rotate_interval": "1 day", "lanes": 2`)
	conn := pgtest.Connect(t, b.pool.Config().ConnString())
	// the buffers an ack of 8 receipts of two leases touches (median of 5)
	ack := func() int64 {
		var reads []int64
		for i := 0; i < 5; i++ {
			// (a receive of 1 numbers the 9: one to the lane dealt to first,
			// four to each lane; the receive of 8 then takes two leases)
			b.v2sendBatch("v2ackmany", 9, "")
			b.ack("v2ackmany", "default", v2receipts(b.v2receive("v2ackmany", "default", 1, ""))...)
			ms := b.v2receive("v2ackmany", "default", 8, "")
			if len(ms) != 8 {
				t.Fatalf("received %d, want 8", len(ms))
			}
			_, buffers := explainBuffers(t, b.ctx, conn, `SELECT sluice.ack('v2ackmany', 'default', $1)`, v2receipts(ms))
			reads = append(reads, buffers)
		}
		sort.Slice(reads, func(i, j int) bool { return reads[i] < reads[j] })
		return reads[2]
	}
	small := ack()
	b.exec(`SELECT count(*) FROM sluice.send_batch('v2ackmany', ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 3000) g))`)
	if got := len(b.v2drainAck("v2ackmany", "default", 1)); got != 3000 {
		t.Fatalf("drained %d, want 3,000", got)
	}
	// (deeper indexes add a few buffers a lookup: 36 to 56 here; reading
	// every lease, 118 to 140)
	if many := ack(); many > 2*small {
		t.Errorf("an ack of two leases read %d buffers (median of 5) with 3,000 leases in its slot, %d with a few: it reads every lease", many, small)
	}
}
