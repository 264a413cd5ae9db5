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

// e2_dealt_pos places each message a cut deals where the full statement's
// window does (e2_cut_store: the dealt messages of each lane numbered in
// their order, after the lane's head): for every count, share and number of
// lanes tried, the place it gives is the message's rank among those
// e2_dealt_lane sends to its lane. The plain cut (e2_cut_plain) places a
// backlog with it instead of the window and its sort.
func TestV2DealtPosIsTheRankInTheLane(t *testing.T) {
	b := setup(t)
	var bad int64
	var example string
	if err := b.pool.QueryRow(b.ctx, `
		WITH p AS (
			SELECT nu, share0, share, lanes, rr, sluice_tmpl2.e2_deal_chunk(nu - share, lanes) AS chunk
			FROM generate_series(1, 300) nu, generate_series(0, 9) s(share0),
			     LATERAL (SELECT least(s.share0 * s.share0 * 3, nu) AS share) sh,
			     generate_series(1, 9) lanes, LATERAL (SELECT nu % lanes AS rr) r
		), d AS (
			SELECT p.*, j, sluice_tmpl2.e2_dealt_lane(j, nu, share, chunk, rr, lanes) AS lane,
			       sluice_tmpl2.e2_dealt_pos(j, share, chunk, lanes) AS pos
			FROM p, generate_series(0, p.nu - 1) j
		), w AS (
			SELECT d.*, row_number() OVER (PARTITION BY nu, share0, lanes, lane ORDER BY j) AS rank FROM d
		)
		SELECT count(*), coalesce(min(format('nu %s share %s lanes %s rr %s chunk %s: j %s in lane %s at %s, rank %s',
		                                     nu, share, lanes, rr, chunk, j, lane, pos, rank)), '')
		FROM w WHERE pos <> rank`).Scan(&bad, &example); err != nil {
		t.Fatal(err)
	}
	if bad > 0 {
		t.Fatalf("%d messages placed otherwise than their rank in the lane, e.g. %s", bad, example)
	}
}

// A backlog of unkeyed messages is numbered by the plain cut (a statement
// that places each message by arithmetic, e2_cut_plain) in partial cuts of
// 4,096: each lane's positions run from 1 without a gap or a repeat, each
// batch row holds its range's positions (64 a row at most, within a block
// of 64), every message is numbered once, and each lane holds its messages
// in (txid, id) order. The receives that cut want 1, 37 and 100: shares of
// several sizes.
func TestV2PlainCutPlacesEveryMessageOnce(t *testing.T) {
	b := setup(t)
	b.createV2("plain", `"lanes": 5`)
	b.exec(`SELECT count(*) FROM sluice.send_batch('plain', ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 9000) g))`)
	got := 0
	for _, n := range []int{1, 37, 100} {
		if k := len(b.v2receive("plain", "default", n, "1 hour")); k != n {
			t.Fatalf("receive of %d: %d messages", n, k)
		} else {
			got += k
		}
	}
	if got += len(b.v2drain("plain", "default", 100, "1 hour")); got != 9000 {
		t.Fatalf("received %d of 9,000", got)
	}
	qid := b.int64("SELECT id FROM sluice.queue WHERE name = 'plain'")
	check := func(what, sql string) {
		t.Helper()
		var n int64
		var example string
		if err := b.pool.QueryRow(b.ctx, fmt.Sprintf(sql, qid)).Scan(&n, &example); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			t.Errorf("%s: %d, e.g. %s", what, n, example)
		}
	}
	// every message numbered once (three cuts: 4,096, 4,096 and 808)
	check("messages not numbered exactly once", `
		SELECT count(*), coalesce(min(format('id %%s: %%s times', m.id, coalesce(x.k, 0))), '')
		FROM sluice_q%[1]d.msg m
		LEFT JOIN (SELECT u.id, count(*) AS k FROM sluice_q%[1]d.batch bt, unnest(bt.ids) u(id) GROUP BY u.id) x ON x.id = m.id
		WHERE coalesce(x.k, 0) <> 1`)
	check("batch rows not well formed", `
		SELECT count(*), coalesce(min(format('lane %%s %%s-%%s with %%s ids', bt.lane, bt.first_pos, bt.last_pos, cardinality(bt.ids))), '')
		FROM sluice_q%[1]d.batch bt
		WHERE cardinality(bt.ids) <> bt.last_pos - bt.first_pos + 1 OR (bt.first_pos - 1) / 64 <> (bt.last_pos - 1) / 64
		   OR cardinality(bt.txids) <> cardinality(bt.ids) OR cardinality(bt.mslots) <> cardinality(bt.ids)`)
	check("positions of a lane not 1, 2, 3, ...", `
		SELECT count(*), coalesce(min(format('lane %%s: position %%s is its %%s-th', x.lane, x.pos, x.rank)), '')
		FROM (SELECT bt.lane, bt.first_pos + u.o - 1 AS pos, row_number() OVER (PARTITION BY bt.lane ORDER BY bt.first_pos, u.o) AS rank
		      FROM sluice_q%[1]d.batch bt, unnest(bt.ids) WITH ORDINALITY u(id, o)) x
		WHERE x.pos <> x.rank`)
	check("lanes out of (txid, id) order", `
		SELECT count(*), coalesce(min(format('lane %%s position %%s: id %%s after %%s', x.lane, x.pos, x.id, x.prev)), '')
		FROM (SELECT bt.lane, bt.first_pos + u.o - 1 AS pos, u.id,
		             lag(u.id) OVER (PARTITION BY bt.lane ORDER BY bt.first_pos, u.o) AS prev
		      FROM sluice_q%[1]d.batch bt, unnest(bt.ids) WITH ORDINALITY u(id, o)) x
		WHERE x.id < x.prev`)
	var cuts, partial int64
	if err := b.pool.QueryRow(b.ctx, fmt.Sprintf(`SELECT count(*) FILTER (WHERE cut_no > 0), count(*) FILTER (WHERE work_snap IS NOT NULL)
		FROM sluice_q%d.cut`, qid)).Scan(&cuts, &partial); err != nil {
		t.Fatal(err)
	}
	if cuts != 3 || partial != 2 {
		t.Errorf("%d cuts, %d of them partial: want 3 and 2", cuts, partial)
	}
}
