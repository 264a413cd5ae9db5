package sqlsrc_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// status adds up after every step of a random history: for each group,
// no count is below zero, ready + waiting + delayed + in_flight is the number of messages sent and
// not completed (acked, or dead-lettered by a nack past max_attempts),
// in_flight the deliveries held, dead the dead letters. On one to three
// lanes, the history mixes unkeyed, keyed (four keys), prioritized,
// delayed (an hour) and batched sends, receives of 1, 2 and 5 in two
// groups, acks of some of what is
// held, nacks due at once and nacks due in an hour; a nack of a keyed
// message releases the rest of its key's run in its lease (docs/sql.md,
// nack). Leases last an hour: nothing expires, so every count is known
// without a clock.
func TestStatusAddsUpAfterRandomSteps(t *testing.T) {
	t.Parallel()
	for _, seed := range []uint64{1, 2, 3, 4, 5, 6} {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			t.Parallel()
			statusAddsUp(t, seed)
		})
	}
}

// heldMsg is a delivery a group holds in statusAddsUp's model.
type heldMsg struct {
	id      int64
	attempt int
	receipt string
}

// lease is the lane and lease of an engine 2 receipt
// (slot.pos.lane.lease_no.token), and its position.
func (h heldMsg) lease(t *testing.T) (string, int64) {
	parts := strings.Split(h.receipt, ".")
	if len(parts) != 5 {
		t.Fatalf("receipt %q is not of engine 2", h.receipt)
	}
	pos, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return parts[2] + "." + parts[3], pos
}

func statusAddsUp(t *testing.T, seed uint64) {
	b := setup(t)
	const queue = "r"
	// (1 to 3 lanes: with one, every key and every unkeyed message share it)
	b.createV2(queue, fmt.Sprintf(`"lanes": %d, "max_attempts": 3, "lease": "1 hour"`, 1+seed%3))
	b.exec("SELECT sluice.create_group($1, 'other')", queue)
	groups := []string{"default", "other"}
	rng := rand.New(rand.NewPCG(seed, 0))
	outstanding := map[string]int64{}
	dead := map[string]int64{}
	held := map[string][]heldMsg{}
	keys := map[int64]string{} // the keyed messages' keys
	sent := func(n int64) {
		for _, g := range groups {
			outstanding[g] += n
		}
	}
	var history []string
	for step := 0; step < 250; step++ {
		g := groups[rng.IntN(len(groups))]
		var did string
		switch p := rng.IntN(100); {
		case p < 22:
			b.send(b.pool, queue, `{}`)
			sent(1)
			did = "send"
		case p < 40:
			key := fmt.Sprint("k", rng.IntN(4))
			keys[b.sendKeyed(queue, `{}`, key, 0)] = key
			sent(1)
			did = "send key " + key
		case p < 44:
			b.sendKeyed(queue, `{}`, "", 1+rng.IntN(3))
			sent(1)
			did = "send prioritized"
		case p < 48:
			b.exec(`SELECT sluice.send($1, '{}', delay => '1 hour')`, queue)
			sent(1)
			did = "send delayed"
		case p < 52:
			rows, err := b.pool.Query(b.ctx, `SELECT sluice.send_batch($1, ARRAY['{}', '{}', '{}']::jsonb[],
				keys => ARRAY['k1', NULL, 'k2'])`, queue)
			if err != nil {
				t.Fatal(err)
			}
			ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			if err != nil || len(ids) != 3 {
				t.Fatalf("send_batch: %v, %v", ids, err)
			}
			keys[ids[0]], keys[ids[2]] = "k1", "k2"
			sent(3)
			did = "send_batch 3"
		case p < 74:
			n := []int{1, 2, 5}[rng.IntN(3)]
			for _, m := range b.v2receive(queue, g, n, "") {
				held[g] = append(held[g], heldMsg{m.ID, m.Attempt, m.Receipt})
			}
			did = fmt.Sprintf("receive %d in %s", n, g)
		case p < 90:
			if len(held[g]) == 0 {
				continue
			}
			k := 1 + rng.IntN(len(held[g]))
			var receipts []string
			for _, h := range held[g][:k] {
				receipts = append(receipts, h.receipt)
			}
			if n := b.ack(queue, g, receipts...); n != k {
				t.Fatalf("seed %d step %d: ack of %d in %s counted %d\n%v", seed, step, k, g, n, history)
			}
			held[g] = held[g][k:]
			outstanding[g] -= int64(k)
			did = fmt.Sprintf("ack %d in %s", k, g)
		default:
			if len(held[g]) == 0 {
				continue
			}
			i := rng.IntN(len(held[g]))
			h := held[g][i]
			delay := "0 seconds"
			if p >= 96 {
				delay = "1 hour"
			}
			if !b.nack(queue, g, h.receipt, delay, "") {
				t.Fatalf("seed %d step %d: nack in %s refused\n%v", seed, step, g, history)
			}
			held[g] = slices.Delete(held[g], i, i+1)
			if key, ok := keys[h.id]; ok {
				// (the rest of the key's run in the lease is released)
				lease, pos := h.lease(t)
				held[g] = slices.DeleteFunc(held[g], func(x heldMsg) bool {
					l, p := x.lease(t)
					return keys[x.id] == key && l == lease && p > pos
				})
			}
			if h.attempt >= 3 {
				outstanding[g]--
				dead[g]++
			}
			did = fmt.Sprintf("nack (attempt %d, due in %s) in %s", h.attempt, delay, g)
		}
		history = append(history, did)
		for _, g := range groups {
			var ready, waiting, delayed, inFlight, deadN int64
			if err := b.pool.QueryRow(b.ctx, `SELECT ready, waiting, delayed, in_flight, dead
				FROM sluice.status($1) WHERE group_name = $2`, queue, g).Scan(
				&ready, &waiting, &delayed, &inFlight, &deadN); err != nil {
				t.Fatal(err)
			}
			if ready < 0 || waiting < 0 || delayed < 0 ||
				ready+waiting+delayed+inFlight != outstanding[g] || inFlight != int64(len(held[g])) || deadN != dead[g] {
				t.Fatalf("seed %d step %d (%s), group %s: ready %d + waiting %d + delayed %d + in flight %d = %d, "+
					"want %d outstanding, %d in flight; dead %d, want %d\nhistory: %v",
					seed, step, did, g, ready, waiting, delayed, inFlight, ready+waiting+delayed+inFlight,
					outstanding[g], len(held[g]), deadN, dead[g], history)
			}
		}
	}
}
