package sqlsrc_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// takeOneLease is what the comparison reads of a lane's newest state row:
// every column a take writes but its token and its times, and how its times
// relate (the lease's length, next_exp against the state before).
type takeOneLease struct {
	LeaseNo, FirstPos, LastPos, Cursor, ScanNo int64
	Kind                                       string
	N                                          int
	ScanT, OldDue                              string
	Length                                     time.Duration
	NextExpIsLeast, Held                       bool
}

// takeOneMsg is what the comparison reads of a message a take returned
// (compared without the receipt's token: same, the first four fields of
// the receipt).
type takeOneMsg struct {
	ID, Pos int64
	Attempt int
	Body    string
	Same    string
	Receipt string
}

// A receive of one message (or from a lane with one position left) takes
// the position after the cursor by a narrower statement of its own
// (e2_take_one__s, spliced into the copy as e2_take__s is) when that
// position is meant for the group, not keyed and stored in the current
// slot; otherwise it runs the general take. The general take is the
// definition: here each receive of one is compared with it, run first on
// the same state in a savepoint that is rolled back, through the parents'
// copy (e2_take). The lane holds plain positions, keyed ones (both takes
// decline those), retries meant for this group (taken) and for another
// (passed). Same lease row (but its token and times), same message, and in
// the end every message delivered to the group once.
func TestV2TakeOneWritesWhatTheTakeWrites(t *testing.T) {
	b := setup(t)
	b.createV2("one", `"lanes": 1`)
	b.exec("SELECT sluice.create_group('one', 'other')")
	qid := b.int64("SELECT id FROM sluice.queue WHERE name = 'one'")
	gid := b.int64("SELECT id FROM sluice.consumer_group WHERE queue_id = $1 AND name = 'default'", qid)
	sent := map[int64]bool{}
	keyed := map[int64]bool{}
	sendSome := func(from, to int) {
		for i := from; i < to; i++ {
			var key any
			if i%7 == 3 {
				key = "k"
			}
			id := b.int64("SELECT sluice.send('one', jsonb_build_object('n', $1::int), key => $2::text)", i, key)
			sent[id], keyed[id] = true, key != nil
		}
	}
	sendSome(0, 300)

	// (the state row that follows lease_no $3, if any)
	const leaseRow = `SELECT lease_no, first_pos, last_pos, cursor, scan_no, kind::text, n, scan_t::text, old_due::text,
	                         CASE WHEN isfinite(expires_at) THEN expires_at - delivered_at ELSE '0' END,
	                         next_exp = least($2::timestamptz, expires_at), held IS NOT NULL
	                  FROM lease WHERE group_id = $1 AND lane = 0 AND lease_no = $3 + 1`
	readLease := func(tx pgx.Tx, before string, no int64) (takeOneLease, bool) {
		var l takeOneLease
		err := tx.QueryRow(b.ctx, leaseRow, gid, before, no).Scan(&l.LeaseNo, &l.FirstPos, &l.LastPos, &l.Cursor,
			&l.ScanNo, &l.Kind, &l.N, &l.ScanT, &l.OldDue, &l.Length, &l.NextExpIsLeast, &l.Held)
		if errors.Is(err, pgx.ErrNoRows) {
			return l, false
		} else if err != nil {
			t.Fatal(err)
		}
		return l, true
	}
	readMsgs := func(tx pgx.Tx, sql string, args ...any) []takeOneMsg {
		rows, err := tx.Query(b.ctx, sql, args...)
		if err != nil {
			t.Fatal(err)
		}
		ms, err := pgx.CollectRows(rows, pgx.RowToStructByPos[takeOneMsg])
		if err != nil {
			t.Fatal(err)
		}
		return ms
	}
	const cols = `id, pos, attempt, body::text, array_to_string((string_to_array(receipt, '.'))[1:4], '.'), receipt`
	same := func(ms []takeOneMsg) string {
		s := ""
		for _, m := range ms {
			s += fmt.Sprintf("%d %d %d %s %s;", m.ID, m.Pos, m.Attempt, m.Body, m.Same)
		}
		return s
	}

	// compare runs the general take, rolls it back, then sluice.receive of
	// one; it returns the receive's messages, and whether the two were
	// compared (not when the receive numbered or looked past the take, or
	// the general take took nothing), and whether the general take passed
	// a position meant for another group.
	compare := func() (got []takeOneMsg, compared, passed bool) {
		tx, err := b.pool.Begin(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(b.ctx)
		mustExec(t, tx, "SELECT set_config('search_path', sluice._queue_path($1::int), true)", qid)
		var slot int16
		var cutBefore int64
		var st struct {
			no, cursor, scanNo int64
			kind               string
			scanT, oldDue, exp string
			open               bool
		}
		if err := tx.QueryRow(b.ctx, `
			SELECT (SELECT e.slot FROM sluice.epoch e WHERE e.queue_id = $1 ORDER BY e.epoch DESC LIMIT 1),
			       (SELECT max(c.cut_no) FROM cut c)`, qid).Scan(&slot, &cutBefore); err != nil {
			t.Fatal(err)
		}
		if err := tx.QueryRow(b.ctx, `
			SELECT lease_no, cursor, scan_no, kind::text, scan_t::text, old_due::text, next_exp::text,
			       kind IN ('r', 'c') AND old_due > clock_timestamp() AND next_exp > clock_timestamp()
			       AND held IS NULL AND waiting IS NULL
			FROM lease WHERE group_id = $1 AND lane = 0 ORDER BY lease_no DESC LIMIT 1`, gid).Scan(
			&st.no, &st.cursor, &st.scanNo, &st.kind, &st.scanT, &st.oldDue, &st.exp, &st.open); err != nil {
			t.Fatal(err)
		}
		mustExec(t, tx, "SAVEPOINT general")
		want := readMsgs(tx, `SELECT `+cols+` FROM e2_take($1::int, 0::smallint, $2, $3, $4::timestamptz, $5, $6::timestamptz, $7::timestamptz, false, 1,
			'1 hour', NULL, clock_timestamp(), $8::smallint)`, gid, st.no, st.cursor, st.scanT, st.scanNo, st.oldDue, st.exp, slot)
		wantLease, wrote := readLease(tx, st.exp, st.no)
		mustExec(t, tx, "ROLLBACK TO SAVEPOINT general")
		got = readMsgs(tx, `SELECT `+cols+` FROM sluice.receive('one', 'default', 1, '1 hour')`)
		gotLease, _ := readLease(tx, st.exp, st.no)
		var cutAfter int64
		if err := tx.QueryRow(b.ctx, "SELECT max(c.cut_no) FROM cut c").Scan(&cutAfter); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(b.ctx); err != nil {
			t.Fatal(err)
		}
		if cutAfter != cutBefore || !st.open {
			return got, false, false
		}
		if !wrote {
			// the general take declined (a keyed position next): what the
			// receive took, it took by the keyed take, which holds the key
			if len(got) > 0 && !gotLease.Held {
				t.Fatalf("from state %+v the general take declined, and the receive took %v without holding its key (lease %+v)",
					st, got, gotLease)
			}
			return got, false, false
		}
		// (the general take may have passed positions meant for another
		// group only: the receive's first state row is that one too, and it
		// looks again)
		if gotLease != wantLease || (len(want) > 0 && same(got) != same(want)) {
			t.Fatalf("from state %+v:\nreceive of one: %v, lease %+v\ngeneral take:   %v, lease %+v",
				st, got, gotLease, want, wantLease)
		}
		if len(want) == 0 {
			return got, true, true
		}
		return got, true, want[0].Pos > st.cursor+1
	}

	delivered := map[int64]int{}
	var compared, passed, retries int
	for round := 0; round < 500; round++ {
		if round%6 == 5 {
			// a retry meant for the other group, in the lane ahead of ours
			if ms := b.v2receive("one", "other", 1, "1 hour"); len(ms) > 0 && ms[0].Attempt == 1 {
				b.nack("one", "other", ms[0].Receipt, "0", "")
			} else if len(ms) > 0 {
				b.ack("one", "other", ms[0].Receipt)
			}
		}
		ms, ok, p := compare()
		if ok {
			compared++
		}
		if ok && p {
			passed++
		}
		if len(ms) == 0 {
			continue
		}
		m := ms[0]
		if ok && m.Attempt > 1 {
			retries++
		}
		if m.Attempt == 1 && m.ID%5 == 0 && !keyed[m.ID] {
			b.nack("one", "default", m.Receipt, "0", "") // a retry meant for this group
			continue
		}
		if b.ack("one", "default", m.Receipt) != 1 {
			t.Fatalf("ack of %s did not count", m.Receipt)
		}
		delivered[m.ID]++
	}
	for _, m := range b.v2drainAck("one", "default", 10) {
		delivered[m.ID]++
	}
	for id := range sent {
		if delivered[id] != 1 {
			t.Fatalf("message %d completed %d times in group default, want once", id, delivered[id])
		}
	}
	if compared < 200 || passed < 3 || retries < 3 {
		t.Fatalf("compared %d receives (want >= 200), %d passing another group's retry (>= 3), %d of a retry (>= 3)",
			compared, passed, retries)
	}
}

func mustExec(t *testing.T, tx pgx.Tx, sql string, args ...any) {
	t.Helper()
	if _, err := tx.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}
