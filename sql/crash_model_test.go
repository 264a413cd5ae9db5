package sqlsrc_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// A model check of crash recovery. Random sends (in batches, unkeyed and
// keyed over a few keys), receives of random sizes, acks of random subsets
// of what is in flight, and crashes (the unlogged lane states and leases
// emptied, as crash recovery does), in phases that mostly produce or mostly
// consume, then a drain. The lease is an hour, so nothing is delivered
// again but after a crash. Checked against the model: every message is
// acked in the end (none stranded); none is delivered after its ack; none
// twice between two crashes; a keyed message only once every earlier
// message of its key is acked, or delivered before it in the same receive
// (the model acks a key's messages in order, as a consumer must).
// SLUICE_MODEL_SEED repeats a run's random choices, SLUICE_MODEL_ROUNDS
// sets the number of queues (4), SLUICE_MODEL_TRACE logs every call.
func TestRandomCrashesLoseNothing(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("SLUICE_MODEL_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("SLUICE_MODEL_SEED=%q: %v", v, err)
		}
		seed = s
	}
	rounds := 4
	if v, err := strconv.Atoi(os.Getenv("SLUICE_MODEL_ROUNDS")); err == nil {
		rounds = v
	}
	t.Logf("seed %d (SLUICE_MODEL_SEED repeats it)", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	b := setup(t)
	// One session, as a consumer loop's: its plans are made once. (A real
	// crash ends every session; what a session keeps of a queue, its idle
	// note, is reset at each crash below.)
	conn, err := b.pool.Acquire(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for round := 0; round < rounds; round++ {
		lanes := []int{1, 2, 4}[rng.IntN(3)]
		m := &crashModel{b: b, conn: conn, rng: rng, queue: fmt.Sprintf("q%d", round),
			key: map[int64]string{}, acked: map[int64]bool{}, inflight: map[int64]string{}, seen: map[int64]int{}}
		b.createQueue(m.queue, fmt.Sprintf(`{"lanes": %d, "lease": "1 hour", "max_attempts": 1000}`, lanes))
		m.qid = b.int64("SELECT id FROM sluice.queue WHERE name = $1", m.queue)
		start := time.Now()
		for step := 0; step < 120; step++ {
			m.step()
		}
		m.drain()
		t.Logf("round %d: %d lanes, %d messages, %d crashes, %s", round, lanes, len(m.sent), m.crashes,
			time.Since(start).Round(time.Millisecond))
		if t.Failed() {
			t.Fatalf("round %d (%d lanes, %d messages, %d crashes): see above", round, lanes, len(m.sent), m.crashes)
		}
	}
}

// crashModel is what one queue of TestRandomCrashesLoseNothing should hold.
type crashModel struct {
	b        *bundle
	conn     *pgxpool.Conn
	rng      *rand.Rand
	queue    string
	qid      int64
	consume  bool             // phase: mostly consuming, else mostly producing
	sent     []int64          // in commit order (one session sends)
	key      map[int64]string // "" when unkeyed
	acked    map[int64]bool
	inflight map[int64]string // receipt of each message delivered and not acked since the last crash
	seen     map[int64]int    // deliveries since the last crash
	crashes  int
}

func (m *crashModel) step() {
	if m.rng.IntN(100) < 15 {
		m.consume = !m.consume
	}
	r := m.rng.IntN(100)
	if m.consume {
		r = 25 + r*3/4 // no sends
	}
	switch {
	case r < 40:
		m.send(1 + m.rng.IntN(12))
	case r < 70:
		m.receive([]int{1, 2, 3, 5, 10, 40}[m.rng.IntN(6)])
	case r < 96:
		m.ackSome()
	default:
		m.crash()
	}
}

func (m *crashModel) trace(format string, args ...any) {
	if os.Getenv("SLUICE_MODEL_TRACE") != "" {
		m.b.t.Logf(format, args...)
	}
}

func (m *crashModel) send(n int) {
	keys := make([]*string, n)
	for i := range keys {
		if m.rng.IntN(10) < 4 {
			k := fmt.Sprintf("k%d", m.rng.IntN(4))
			keys[i] = &k
		}
	}
	rows, err := m.conn.Query(m.b.ctx, `SELECT sluice.send_batch($1, ARRAY(SELECT jsonb_build_object('n', i) FROM generate_series(1, $2) i),
	                                                            keys => $3::text[])`, m.queue, n, keys)
	if err != nil {
		m.b.t.Fatalf("send_batch: %v", err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			m.b.t.Fatalf("send_batch: %v", err)
		}
		ids = append(ids, id)
	}
	if rows.Err() != nil || len(ids) != n {
		m.b.t.Fatalf("send_batch of %d: %d ids (%v)", n, len(ids), rows.Err())
	}
	m.trace("send %v", ids)
	for i, id := range ids {
		m.sent = append(m.sent, id)
		if keys[i] != nil {
			m.key[id] = *keys[i]
		}
	}
}

// receive takes up to n and checks each message against the model.
func (m *crashModel) receive(n int) int {
	t := m.b.t
	ms, err := receiveOn(m.b.ctx, m.conn, m.queue, "default", n, "")
	if err != nil {
		t.Fatalf("receive: %v", err)
	}
	here := map[int64]bool{}
	var got []string
	for _, msg := range ms {
		id := msg.ID
		got = append(got, fmt.Sprintf("%d%s@%d", id, m.key[id], msg.Pos))
		switch {
		case m.acked[id]:
			t.Errorf("message %d delivered after its ack", id)
		case m.seen[id] > 0:
			t.Errorf("message %d delivered twice since the last crash (%d crashes so far)", id, m.crashes)
		}
		if k := m.key[id]; k != "" {
			for _, prev := range m.sent {
				if prev == id {
					break
				}
				if m.key[prev] == k && !m.acked[prev] && !here[prev] {
					_, held := m.inflight[prev]
					t.Errorf("message %d of key %s delivered while message %d of the key is not completed (held: %v)", id, k, prev, held)
				}
			}
		}
		here[id] = true
		m.seen[id]++
		m.inflight[id] = msg.Receipt
	}
	m.trace("receive %d: %v", n, got)
	return len(ms)
}

// ackSome acks a random subset of what is in flight, a key's messages in
// order, stopping at the first one not acked (what a consumer must do,
// docs/design.md, "Ordered keys": acking a later message of a key while
// an earlier one is held breaks the order itself).
func (m *crashModel) ackSome() {
	var rs []string
	var ids []int64
	stopped := map[string]bool{}
	for _, id := range slices.Sorted(maps.Keys(m.inflight)) {
		k := m.key[id]
		if k != "" && stopped[k] {
			continue
		}
		if m.rng.IntN(10) >= 6 {
			stopped[k] = k != ""
			continue
		}
		rs, ids = append(rs, m.inflight[id]), append(ids, id)
	}
	m.ack(rs, ids)
}

func (m *crashModel) ack(receipts []string, ids []int64) {
	if len(receipts) == 0 {
		return
	}
	m.trace("ack %v", ids)
	var n int
	if err := m.conn.QueryRow(m.b.ctx, "SELECT sluice.ack($1, 'default', $2)", m.queue, receipts).Scan(&n); err != nil {
		m.b.t.Fatalf("ack: %v", err)
	}
	if n != len(receipts) {
		m.b.t.Errorf("ack of %d receipts held since the last crash completed %d", len(receipts), n)
	}
	for _, id := range ids {
		m.acked[id] = true
		delete(m.inflight, id)
	}
}

// crash does to the queue what crash recovery does: the unlogged tables
// come back empty (and the session's idle note goes, as the session would).
func (m *crashModel) crash() {
	m.trace("crash")
	m.b.exec(fmt.Sprintf("TRUNCATE sluice_q%[1]d.group_states, sluice_q%[1]d.deliveries, sluice_q%[1]d.runs", m.qid))
	if _, err := m.conn.Exec(m.b.ctx, "SELECT set_config(sluice._idle_note_name($1), '', false)", m.qid); err != nil {
		m.b.t.Fatal(err)
	}
	m.inflight, m.seen = map[int64]string{}, map[int64]int{}
	m.crashes++
}

// drain, after a crash half of the time, receives (random sizes) and acks
// everything until three receives in a row find nothing, then checks that
// every message was acked.
func (m *crashModel) drain() {
	if m.rng.IntN(2) == 0 {
		m.crash()
	}
	empty := 0
	for i := 0; i < 1000 && empty < 3; i++ {
		if m.receive([]int{1, 2, 3, 5, 10, 40, 100}[m.rng.IntN(7)]) == 0 {
			empty++
			time.Sleep(30 * time.Millisecond) // past an idle note
		} else {
			empty = 0
		}
		ids := slices.Sorted(maps.Keys(m.inflight))
		rs := make([]string, len(ids))
		for i, id := range ids {
			rs[i] = m.inflight[id]
		}
		m.ack(rs, ids)
	}
	for _, id := range m.sent {
		if !m.acked[id] {
			m.b.t.Errorf("message %d (key %q) was never delivered again after %d crashes: stranded", id, m.key[id], m.crashes)
		}
	}
}
