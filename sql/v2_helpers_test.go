package sqlsrc_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Helpers of the engine v2 tests (v2_*_test.go): black-box, through the
// public SQL API only.

// v2msg is a row of sluice.receive with the lease's end.
type v2msg struct {
	ID      int64
	Body    string
	Attempt int
	Receipt string
	Pos     int64
	Expires time.Time
	SentAt  time.Time
}

// createV2 creates a queue of engine 2 with the given extra options (a JSON
// object's members without braces, or "").
func (b *bundle) createV2(name, extra string) {
	b.t.Helper()
	opts := `{"engine": 2}`
	if extra != "" {
		opts = `{"engine": 2, ` + extra + `}`
	}
	b.createQueue(name, opts)
	var engine int
	if err := b.pool.QueryRow(b.ctx, "SELECT engine FROM sluice.queue WHERE name = $1", name).Scan(&engine); err != nil {
		b.t.Fatal(err)
	}
	if engine != 2 {
		b.t.Fatalf("queue %s has engine %d, want 2", name, engine)
	}
}

func v2receiveOn(ctx context.Context, db q, queue, group string, n int, lease string) ([]v2msg, error) {
	var leaseArg any
	if lease != "" {
		leaseArg = lease
	}
	rows, err := db.Query(ctx,
		`SELECT id, body::text, attempt, receipt, pos, lease_expires_at, sent_at
		 FROM sluice.receive($1, $2, $3, $4::interval)`, queue, group, n, leaseArg)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (v2msg, error) {
		var m v2msg
		err := r.Scan(&m.ID, &m.Body, &m.Attempt, &m.Receipt, &m.Pos, &m.Expires, &m.SentAt)
		return m, err
	})
}

func (b *bundle) v2receive(queue, group string, n int, lease string) []v2msg {
	b.t.Helper()
	ms, err := v2receiveOn(b.ctx, b.pool, queue, group, n, lease)
	if err != nil {
		b.t.Fatalf("receive %s/%s: %v", queue, group, err)
	}
	return ms
}

// v2drain receives (batches of n) until a receive returns nothing, and
// returns everything received.
func (b *bundle) v2drain(queue, group string, n int, lease string) []v2msg {
	b.t.Helper()
	var all []v2msg
	for i := 0; ; i++ {
		ms := b.v2receive(queue, group, n, lease)
		if len(ms) == 0 {
			return all
		}
		all = append(all, ms...)
		if i > 100000 {
			b.t.Fatalf("drain %s/%s: no end", queue, group)
		}
	}
}

// v2drainAck receives and acks until nothing is left, checking every ack
// counts, and returns what was received.
func (b *bundle) v2drainAck(queue, group string, n int) []v2msg {
	b.t.Helper()
	var all []v2msg
	for {
		ms := b.v2receive(queue, group, n, "")
		if len(ms) == 0 {
			return all
		}
		if got := b.ack(queue, group, v2receipts(ms)...); got != len(ms) {
			b.t.Fatalf("ack of %d fresh receipts counted %d", len(ms), got)
		}
		all = append(all, ms...)
	}
}

func v2receipts(ms []v2msg) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Receipt
	}
	return out
}

func v2ids(ms []v2msg) []int64 {
	out := make([]int64, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

func v2sorted(ids []int64) []int64 {
	out := append([]int64(nil), ids...)
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// v2same reports whether got holds exactly the ids of want, each once.
func v2same(got, want []int64) bool {
	g, w := v2sorted(got), v2sorted(want)
	if len(g) != len(w) {
		return false
	}
	for i := range g {
		if g[i] != w[i] {
			return false
		}
	}
	return true
}

// v2diff describes what got lacks and has twice or extra, compared with want.
func v2diff(got, want []int64) string {
	cnt := map[int64]int{}
	for _, id := range got {
		cnt[id]++
	}
	wantSet := map[int64]bool{}
	for _, id := range want {
		wantSet[id] = true
	}
	var missing, dup, extra []int64
	for _, id := range want {
		if cnt[id] == 0 {
			missing = append(missing, id)
		}
	}
	for id, c := range cnt {
		if !wantSet[id] {
			extra = append(extra, id)
		} else if c > 1 {
			dup = append(dup, id)
		}
	}
	return fmt.Sprintf("got %d, want %d; missing %v; duplicated %v; unexpected %v",
		len(got), len(want), v2short(v2sorted(missing)), v2short(v2sorted(dup)), v2short(v2sorted(extra)))
}

func v2short(ids []int64) string {
	if len(ids) > 20 {
		return fmt.Sprintf("%v... (%d)", ids[:20], len(ids))
	}
	return fmt.Sprint(ids)
}

// v2leased makes queue (engine 2, one lane), sends it n messages (v2sendN)
// and receives them with one receive of up to upTo messages under lease:
// it fails the test unless that receive returns exactly the messages sent.
// It returns their ids and what was received.
func (b *bundle) v2leased(queue string, n, upTo int, lease string) ([]int64, []v2msg) {
	b.t.Helper()
	b.createV2(queue, `"lanes": 1`)
	ids := b.v2sendN(queue, n)
	ms := b.v2receive(queue, "default", upTo, lease)
	if !v2same(v2ids(ms), ids) {
		b.t.Fatalf("receive: %s", v2diff(v2ids(ms), ids))
	}
	return ids, ms
}

// v2sendN sends n messages one by one (autocommit) and returns their ids.
func (b *bundle) v2sendN(queue string, n int) []int64 {
	b.t.Helper()
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = b.send(b.pool, queue, fmt.Sprintf(`{"i": %d}`, i))
	}
	return ids
}

// v2sendBatch sends n messages in one send_batch and returns their ids.
func (b *bundle) v2sendBatch(queue string, n int, delay string) []int64 {
	b.t.Helper()
	var delayArg any
	if delay != "" {
		delayArg = delay
	}
	return b.int64s(`SELECT * FROM sluice.send_batch($1,
		array(SELECT jsonb_build_object('i', g) FROM generate_series(1, $2::int) g), delay => $3::interval)`,
		queue, n, delayArg)
}

// v2leasesOf8 leases 8 messages of a queue of two lanes in at least two
// leases: it sends 9 (a receive of 1 numbers them: its one to the lane
// dealt to first, the other 8 four a lane), receives and acks 1, then
// receives 8. It returns their receipts by lease (lane.lease_no) and the
// leases in the order of their first receipt.
func (b *bundle) v2leasesOf8(queue string) (byLease map[string][]string, order []string) {
	b.t.Helper()
	b.v2sendBatch(queue, 9, "")
	if first := b.v2receive(queue, "default", 1, ""); len(first) != 1 || b.ack(queue, "default", first[0].Receipt) != 1 {
		b.t.Fatalf("the first receive and ack: %v", first)
	}
	ms := b.v2receive(queue, "default", 8, "")
	byLease = map[string][]string{}
	for _, m := range ms {
		p := strings.Split(m.Receipt, ".")
		k := p[2] + "." + p[3]
		if _, ok := byLease[k]; !ok {
			order = append(order, k)
		}
		byLease[k] = append(byLease[k], m.Receipt)
	}
	if len(byLease) < 2 || len(ms) != 8 {
		b.t.Fatalf("%d messages in %d leases, want 8 in at least 2", len(ms), len(byLease))
	}
	return byLease, order
}

// v2status is the row of one group in sluice.status.
func (b *bundle) v2status(queue, group string) status {
	b.t.Helper()
	st, ok := b.status(queue)[group]
	if !ok {
		b.t.Fatalf("status of %s has no group %s", queue, group)
	}
	return st
}

// v2expectEmpty fails unless the group's status shows nothing ready, delayed
// or in flight.
func (b *bundle) v2expectEmpty(queue, group string) {
	b.t.Helper()
	st := b.v2status(queue, group)
	if st.Ready != 0 || st.Delayed != 0 || st.InFlight != 0 {
		b.t.Errorf("status %s/%s: ready %d delayed %d in_flight %d, want all 0",
			queue, group, st.Ready, st.Delayed, st.InFlight)
	}
}

// v2expectState runs sql and fails unless it raises the given SQLSTATE.
func (b *bundle) v2expectState(code, sql string, args ...any) {
	b.t.Helper()
	_, err := b.pool.Exec(b.ctx, sql, args...)
	if got := sqlstate(err); got != code {
		b.t.Errorf("%s: want SQLSTATE %s, got %v", sql, code, err)
	}
}

// reclaims counts the slots reclaimed (truncated) of a queue.
func (b *bundle) v2reclaims(queue string) int64 {
	b.t.Helper()
	return b.int64(`SELECT count(*) FROM sluice.reclaim r JOIN sluice.queue q ON q.id = r.queue_id
		WHERE q.name = $1`, queue)
}

// epochs returns the newest epoch of a queue.
func (b *bundle) v2epoch(queue string) int64 {
	b.t.Helper()
	return b.int64(`SELECT max(e.epoch) FROM sluice.epoch e JOIN sluice.queue q ON q.id = e.queue_id
		WHERE q.name = $1`, queue)
}

func (b *bundle) v2maintain() {
	b.t.Helper()
	b.exec("SELECT count(*) FROM sluice.maintain()")
}

// forge replaces part i (0-based) of a receipt with v.
func v2forge(receipt string, i int, v string) string {
	parts := strings.Split(receipt, ".")
	parts[i] = v
	return strings.Join(parts, ".")
}

// v2widen replaces the bundle's pool by one of up to n connections on the
// same database (the default pool has max(4, CPUs) connections: too few for
// tests that hold several transactions open at once).
func (b *bundle) v2widen(n int32) {
	b.t.Helper()
	cfg := b.pool.Config()
	cfg.MaxConns = n
	pool, err := pgxpool.NewWithConfig(b.ctx, cfg)
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(pool.Close)
	b.pool = pool
}
