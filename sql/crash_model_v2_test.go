package sqlsrc_test

import (
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The crash model of TestRandomCrashesLoseNothing (crash_model_test.go) on
// queues of engine 2, with the same random histories and checks. Engine 2
// has no unlogged table: a crash loses
//   - what was not committed: a receive whose connection is killed during
//     the call or before its commit (killedReceive, on a connection of its
//     own, terminated after a random 0-4 ms), and
//   - the newest asynchronous commits: a receive commits asynchronously (its
//     leases, the lanes' states, a cut, a rotation), and so does an ack with
//     durable => false. A synchronous commit (a send, a nack, a durable
//     ack) flushes the log up to itself, so the loss is a suffix of the
//     commits after the last synchronous one, of any length.
//
// The model runs that suffix as one transaction, the window, with a
// savepoint before each operation in it (one session: nothing else sees its
// writes before they commit, as nothing sees an asynchronous commit's
// effects survive or not until the crash). A synchronous operation commits
// the window first. A crash rolls the window back to a random savepoint
// (the operations before it survive), commits it, and ends the session; the
// model goes back to its state at that savepoint. Then what the lost
// operations handed out must be worthless: each receipt of a lost receive
// acks 0 (its lease is gone; a new lease of the lane, numbered alike, has
// another token), and its messages come again. Unlike engine 1's crash,
// leases given by receives that survived stay valid: their messages may not
// be delivered again within them, and their receipts still ack.
func TestRandomCrashesLoseNothingEngine2(t *testing.T) {
	t.Parallel()
	runCrashModel(t, 2)
}

// modelState is what the model holds that a crash may take back.
type modelState struct {
	acked    map[int64]bool
	inflight map[int64]held
	attempt  map[int64]int
	released map[int64]bool
}

// givenReceipt is a receipt a receive of the window handed out, with the
// savepoint before that receive.
type givenReceipt struct {
	save    int
	id      int64
	receipt string
}

// window is the transaction of engine 2's operations a crash may lose.
type window struct {
	open  bool
	saves []modelState   // the model's state at each savepoint
	given []givenReceipt // receipts handed out in the window
}

func (m *crashModel) state() modelState {
	return modelState{maps.Clone(m.acked), maps.Clone(m.inflight), maps.Clone(m.attempt), maps.Clone(m.released)}
}

func (m *crashModel) exec(sql string) {
	if _, err := m.conn.Exec(m.b.ctx, sql); err != nil {
		m.b.t.Fatalf("%s: %v", sql, err)
	}
}

// begin puts the next operation in the window (engine 2): it opens the
// window if it is not open, and sets a savepoint before the operation.
func (m *crashModel) begin() {
	if m.engine != 2 {
		return
	}
	if !m.open {
		m.exec("BEGIN")
		m.open = true
	}
	m.exec(fmt.Sprintf("SAVEPOINT s%d", len(m.saves)))
	m.saves = append(m.saves, m.state())
}

// handOut records a receipt a receive of the window handed out.
func (m *crashModel) handOut(ms msg) {
	if m.open {
		m.window.given = append(m.window.given, givenReceipt{len(m.saves) - 1, ms.ID, ms.Receipt})
	}
}

// commit ends the window: what is in it survives any crash from now on.
func (m *crashModel) commit() {
	if !m.open {
		return
	}
	m.exec("COMMIT")
	m.window = window{}
}

// lose is engine 2's crash: the window's operations from a random one on
// are lost, the session ends, and the receipts the lost receives handed out
// must complete nothing.
func (m *crashModel) lose() {
	keep := len(m.saves)
	if m.open {
		keep = m.rng.IntN(len(m.saves) + 1)
	}
	var stale []givenReceipt
	if keep < len(m.saves) {
		m.exec(fmt.Sprintf("ROLLBACK TO SAVEPOINT s%d", keep))
		st := m.saves[keep]
		m.acked, m.inflight, m.attempt, m.released = st.acked, st.inflight, st.attempt, st.released
		for _, g := range m.window.given {
			if g.save >= keep {
				stale = append(stale, g)
			}
		}
		m.lostOps += len(m.saves) - keep
	}
	m.trace("crash: %d of %d operations of the window kept", keep, len(m.saves))
	m.commit()
	// The session ends, with all it kept (its idle notes).
	if err := m.conn.Hijack().Close(m.b.ctx); err != nil {
		m.b.t.Fatal(err)
	}
	conn, err := m.b.pool.Acquire(m.b.ctx)
	if err != nil {
		m.b.t.Fatal(err)
	}
	m.conn = conn
	m.ackStale("a receive the crash undid", stale)
}

// ackStale acks receipts whose receive did not commit, one call each: each
// must complete nothing. (Were one to complete a message, it would be
// another's position or a lease no receive has: the model counts it acked,
// so that the drain's checks show what followed.)
func (m *crashModel) ackStale(what string, stale []givenReceipt) {
	for _, g := range stale {
		var n int
		if err := m.conn.QueryRow(m.b.ctx, "SELECT sluice.ack($1, 'default', ARRAY[$2])", m.queue, g.receipt).Scan(&n); err != nil {
			m.b.t.Fatalf("ack: %v", err)
		}
		if n != 0 {
			m.b.t.Errorf("the receipt %s of message %d, handed out by %s, completed %d", g.receipt, g.id, what, n)
			m.acked[g.id] = true
			delete(m.inflight, g.id)
		}
	}
}

// killedReceive receives n on a connection of its own, in a transaction
// that never commits: the connection is killed a random 0-4 ms after the
// call starts, during the call or after it returned. What it returned is
// checked as any receive's, then forgotten: its receipts must complete
// nothing, its messages come again.
func (m *crashModel) killedReceive(n int) {
	m.commit()
	t := m.b.t
	c, err := pgx.Connect(m.b.ctx, m.b.pool.Config().ConnConfig.ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(m.b.ctx) //nolint:errcheck
	var pid int
	if err := c.QueryRow(m.b.ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(m.b.ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	type result struct {
		ms  []msg
		err error
	}
	done := make(chan result, 1)
	go func() {
		ms, err := receiveOn(m.b.ctx, c, m.queue, "default", n, "")
		done <- result{ms, err}
	}()
	time.Sleep(time.Duration(m.rng.IntN(4000)) * time.Microsecond)
	var gone bool
	if err := m.b.pool.QueryRow(m.b.ctx, "SELECT pg_terminate_backend($1, 10000)", pid).Scan(&gone); err != nil || !gone {
		t.Fatalf("pg_terminate_backend(%d): %v %v", pid, gone, err)
	}
	r := <-done
	m.kills++
	var stale []givenReceipt
	if r.err == nil { // it returned before the kill
		m.trace("killed receive %d: %v", n, m.check(r.ms))
		for _, msg := range r.ms {
			stale = append(stale, givenReceipt{id: msg.ID, receipt: msg.Receipt})
		}
	} else {
		m.trace("receive %d killed during the call: %v", n, r.err)
	}
	m.ackStale("a receive whose connection was killed", stale)
}
