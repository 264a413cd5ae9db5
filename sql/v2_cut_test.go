package sqlsrc_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
)

// A backlog is numbered at most 4,096 messages a cut, the rest of the same
// snapshot by the next cuts before anything newer; a transaction in
// progress at the first of them, older than the backlog's, is numbered once
// it commits. Every message is delivered once.
func TestV2BacklogNumberedInSteps(t *testing.T) {
	b := setup(t)
	b.createV2("v2big", `"lanes": 4`)
	old, err := b.pool.Begin(b.ctx) // in progress across the partial cuts
	if err != nil {
		t.Fatal(err)
	}
	defer old.Rollback(b.ctx) //nolint:errcheck
	held := b.send(old, "v2big", `{"held": 1}`)
	b.exec(`SELECT count(*) FROM sluice.send_batch('v2big', ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 10000) g))`)
	first := b.v2receive("v2big", "default", 1, "")
	if len(first) != 1 {
		t.Fatalf("first receive: %+v", first)
	}
	var heads int64
	qid := b.int64("SELECT id FROM sluice.queue WHERE name = 'v2big'")
	if err := b.pool.QueryRow(b.ctx, fmt.Sprintf(`SELECT (SELECT sum(h) FROM unnest(c.heads) h)
		FROM sluice_q%d.cut c ORDER BY c.cut_no DESC LIMIT 1`, qid)).Scan(&heads); err != nil {
		t.Fatal(err)
	}
	if heads != 4096 {
		t.Errorf("positions numbered by the first receive: %d, want 4096", heads)
	}
	if err := old.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	seen := map[int64]int{first[0].ID: 1}
	b.ack("v2big", "default", first[0].Receipt)
	for _, m := range b.v2drain("v2big", "default", 500, "") {
		seen[m.ID]++
		b.ack("v2big", "default", m.Receipt)
	}
	if len(seen) != 10001 || seen[held] != 1 {
		t.Fatalf("received %d distinct messages (held message %d: %d times), want 10001", len(seen), held, seen[held])
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("message %d received %d times", id, n)
		}
	}
	if s := b.status("v2big")["default"]; s.Ready != 0 || s.InFlight != 0 {
		t.Errorf("status after the drain: %+v", s)
	}
}

// The short path of a cut (e2_cut_now_<slot>: a few new messages, none delayed or
// prioritized) numbers exactly as the full statement does. Two queues of 3
// lanes get the same messages in the same transactions (so the same txids):
// keyed ones of four keys and unkeyed ones, and each round the unkeyed
// messages nacked in the round before come back as retry copies (a target
// group); queue b also gets a prioritized message each round, which makes
// every one of its cuts take the full statement, and goes to the priority
// lane, apart from the others. Round after round, across the 64-position
// batch rows, both queues' lanes hold the same messages at the same
// positions in the same batch rows, and their last cuts the same heads and
// dealing point.
func TestV2ShortCutNumbersAsTheFullStatement(t *testing.T) {
	b := setup(t)
	b.createV2("cfa", `"lanes": 3`)
	b.createV2("cfb", `"lanes": 3`)
	rng := rand.New(rand.NewPCG(7, 37))
	n, copies := 0, 0
	for round := 0; round < 60; round++ {
		tx, err := b.pool.Begin(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		for range 1 + rng.IntN(16-copies) { // (with the copies: at most 16 a cut)
			n++
			key := any(nil)
			if rng.IntN(10) < 4 {
				key = fmt.Sprintf("k%d", rng.IntN(4))
			}
			for _, q := range []string{"cfa", "cfb"} {
				if _, err := tx.Exec(b.ctx, `SELECT sluice.send($1, jsonb_build_object('n', $2::int), key => $3)`, q, n, key); err != nil {
					t.Fatal(err)
				}
			}
		}
		if _, err := tx.Exec(b.ctx, `SELECT sluice.send('cfb', '{"n": 0}', priority => 5)`); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(b.ctx); err != nil {
			t.Fatal(err)
		}
		// every message ready in each queue, by body; nack the unkeyed
		// first deliveries of every third body (their copies come in the
		// next cut), ack the rest, in body order in both queues and in one
		// transaction (so that the copies' ids and txid agree)
		got := map[string]map[int]msg{"cfa": {}, "cfb": {}}
		for q := range got {
			for ms := b.receive(q, "default", 100, ""); len(ms) > 0; ms = b.receive(q, "default", 100, "") {
				for _, m := range ms {
					var body struct{ N int }
					if err := json.Unmarshal([]byte(m.Body), &body); err != nil {
						t.Fatal(err)
					}
					got[q][body.N] = m // (N 0: the prioritized one)
				}
			}
		}
		ns := make([]int, 0, len(got["cfb"]))
		for k := range got["cfb"] {
			ns = append(ns, k)
		}
		sort.Ints(ns)
		tx, err = b.pool.Begin(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		copies = 0
		for _, k := range ns {
			retry := k > 0 && k%3 == 0 && got["cfb"][k].Key == nil && got["cfb"][k].Attempt == 1 && copies < 6
			if retry {
				copies++
			}
			for _, q := range []string{"cfa", "cfb"} {
				m, ok := got[q][k]
				if !ok {
					if k == 0 && q == "cfa" {
						continue
					}
					t.Fatalf("round %d: body %d received from cfb but not from %s", round, k, q)
				}
				if retry {
					_, err = tx.Exec(b.ctx, `SELECT sluice.nack($1, 'default', $2, '0 seconds', 'again')`, q, m.Receipt)
				} else {
					_, err = tx.Exec(b.ctx, `SELECT sluice.ack($1, 'default', ARRAY[$2])`, q, m.Receipt)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
		}
		if len(got["cfa"]) != len(ns)-1 {
			t.Fatalf("round %d: %d messages from cfa, %d from cfb (one prioritized)", round, len(got["cfa"]), len(ns))
		}
		if err := tx.Commit(b.ctx); err != nil {
			t.Fatal(err)
		}
	}
	lanes := func(q string) string {
		qid := b.int64("SELECT id FROM sluice.queue WHERE name = $1", q)
		var out string
		if err := b.pool.QueryRow(b.ctx, fmt.Sprintf(`
			SELECT string_agg(format('%%s:%%s-%%s [%%s]', x.lane, x.first_pos, x.last_pos, x.msgs), ' ' ORDER BY x.lane, x.first_pos)
			FROM (SELECT bt.lane, bt.first_pos, bt.last_pos,
			             (SELECT string_agg(concat(m.body->>'n', CASE WHEN u.tg IS NOT NULL THEN 'r' END,
			                                       CASE WHEN u.kh IS NOT NULL THEN 'k' END), ',' ORDER BY u.o)
			              FROM unnest(bt.ids, bt.txids, bt.mslots, bt.targets, bt.khashes) WITH ORDINALITY AS u(id, txid, mslot, tg, kh, o)
			              JOIN sluice_q%[1]d.msg m ON m.slot = u.mslot AND m.txid = u.txid AND m.id = u.id) AS msgs
			      FROM sluice_q%[1]d.batch bt WHERE bt.lane < 3) x`, qid)).Scan(&out); err != nil {
			t.Fatal(err)
		}
		var heads, rr string
		if err := b.pool.QueryRow(b.ctx, fmt.Sprintf(`SELECT c.heads[1:3]::text, c.rr::text FROM sluice_q%d.cut c
			ORDER BY c.cut_no DESC LIMIT 1`, qid)).Scan(&heads, &rr); err != nil {
			t.Fatal(err)
		}
		return out + " heads " + heads + " rr " + rr
	}
	a, bb := lanes("cfa"), lanes("cfb")
	if a != bb {
		t.Fatalf("the short path numbered otherwise than the full statement:\nshort: %s\nfull:  %s", a, bb)
	}
	if !strings.Contains(a, "r") || !strings.Contains(a, "k") || !strings.Contains(a, ":65-") {
		t.Fatalf("the rounds did not cover retry copies, keyed messages and a second batch row of a lane: %s", a)
	}
}

// A cut reads what is new since the last cut's snapshot, not the slot's
// messages from the start: the buffers a steady receive (one message sent,
// then received, which numbers it) reads do not grow with what the slot
// holds. The cut's read of the messages at or after the last snapshot's
// xmax once started its index scan at the slot's first message (a row
// comparison with ('0', 0), the bound of a partial cut that had not
// started, was taken as the scan's start): 20,000 numbered messages made
// each steady receive read ~60 more buffers.
func TestV2SteadyCutDoesNotReadTheSlot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createV2("v2steady", `"rotate_interval": "1 day"`)
	steady := func() int64 {
		var reads []int64
		for i := 0; i < 5; i++ {
			b.exec(`SELECT sluice.send('v2steady', '{"steady": true}')`)
			rows, buffers := explainBuffers(t, b.ctx, b.pool, `SELECT * FROM sluice.receive('v2steady', 'default', 1, lease => '1 hour')`)
			if rows != 1 {
				t.Fatalf("a steady receive returned %v messages, want 1", rows)
			}
			reads = append(reads, buffers)
		}
		sort.Slice(reads, func(i, j int) bool { return reads[i] < reads[j] })
		return reads[2]
	}
	b.v2drainAck("v2steady", "default", 100)
	small := steady()
	b.exec(`SELECT count(*) FROM sluice.send_batch('v2steady', ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 20000) g))`)
	if got := len(b.v2drainAck("v2steady", "default", 1000)); got != 20000 {
		t.Fatalf("drained %d, want 20,000", got)
	}
	if big := steady(); big > small+15 {
		t.Errorf("a steady receive read %d buffers (median of 5) with 20,000 numbered messages in its slot, %d with a few: it reads the slot", big, small)
	}
}
