package sqlsrc_test

import (
	"slices"
	"testing"
)

// An ack of receipts of several leases (a receive's batch that took two
// lanes, or the batches of several receives) completes each lease whole
// that it names whole, lease by lease (e2_ack_whole__s), and what is left
// position by position (e2_ack__s): what it counts and what it leaves in
// flight are what acks of one receipt at a time would give, whatever the
// receipts' order, with stale, repeated and partial leases among them.
func TestV2AckOfABatchLeaseByLease(t *testing.T) {
	b := setup(t)
	b.createV2("v2ab", `"lanes": 2`)
	// twoLeases: 8 messages leased in two leases of 4, their receipts by
	// lease, in the order received
	twoLeases := func() (a, c []string) {
		t.Helper()
		byLease, order := b.v2leasesOf8("v2ab")
		if len(order) != 2 || len(byLease[order[0]]) != 4 || len(byLease[order[1]]) != 4 {
			t.Fatalf("want two leases of 4, got %v", byLease)
		}
		return byLease[order[0]], byLease[order[1]]
	}
	cat := func(parts ...[]string) []string { return slices.Concat(parts...) }
	stale := func(rs []string) []string {
		out := make([]string, len(rs))
		for i, r := range rs {
			out[i] = r + "1" // (another token)
		}
		return out
	}
	for _, c := range []struct {
		name  string
		acks  func(a, c []string) [][]string // acks in turn
		wants []int
	}{
		{"both leases whole", func(a, c []string) [][]string { return [][]string{cat(a, c), cat(a, c)} }, []int{8, 0}},
		{"the second lease whole first", func(a, c []string) [][]string { return [][]string{cat(c, a)} }, []int{8}},
		{"interleaved", func(a, c []string) [][]string {
			return [][]string{{a[0], c[0], a[1], c[1], a[2], c[2], a[3], c[3]}}
		}, []int{8}},
		{"the second lease less one", func(a, c []string) [][]string {
			return [][]string{cat(a, c[:3]), c[3:], c}
		}, []int{7, 1, 0}},
		{"the first lease less one", func(a, c []string) [][]string {
			return [][]string{cat(a[1:], c), a[:1]}
		}, []int{7, 1}},
		{"a receipt twice", func(a, c []string) [][]string {
			return [][]string{cat(a, a[:1], c)}
		}, []int{8}},
		{"a lease in reverse", func(a, c []string) [][]string {
			r := slices.Clone(a)
			slices.Reverse(r)
			return [][]string{cat(r, c)}
		}, []int{8}},
		{"a stale lease", func(a, c []string) [][]string {
			return [][]string{cat(a, stale(c)), cat(stale(a), c)}
		}, []int{4, 4}},
		{"a receipt with another token beside its lease's", func(a, c []string) [][]string {
			// (the same lease and position, as a receipt of another group
			// or a forged one names them: it completes nothing)
			return [][]string{{a[0], stale(a[1:2])[0]}, a[1:], c}
		}, []int{1, 3, 4}},
		{"a position acked before", func(a, c []string) [][]string {
			return [][]string{c[1:2], cat(a, c)}
		}, []int{1, 7}},
	} {
		a, cc := twoLeases()
		for i, rs := range c.acks(a, cc) {
			if got := b.ack("v2ab", "default", rs...); got != c.wants[i] {
				t.Errorf("%s: ack %d of %d receipts completed %d, want %d", c.name, i+1, len(rs), got, c.wants[i])
			}
		}
		b.v2expectEmpty("v2ab", "default")
	}
	// Receipts of more leases than a batch is looked at for (eight): the
	// batches of nine receives of 2, in one ack; then of five.
	for _, leases := range []int{9, 5} {
		b.v2sendBatch("v2ab", 2*leases, "")
		var all []string
		for i := 0; i < leases; i++ {
			ms := b.v2receive("v2ab", "default", 2, "")
			if len(ms) != 2 {
				t.Fatalf("receive %d of 2: got %d", i, len(ms))
			}
			all = append(all, ms[0].Receipt, ms[1].Receipt)
		}
		if got := b.ack("v2ab", "default", all...); got != 2*leases {
			t.Errorf("ack of %d leases of 2: completed %d, want %d", leases, got, 2*leases)
		}
		b.v2expectEmpty("v2ab", "default")
	}
}

// An ack of a batch checks its receipts itself (e2_ack): what its whole
// leases' path completes it compares with the receipts it makes, and a
// malformed receipt anywhere, before, inside or after a lease's run, raises
// SL008 and completes nothing, not even the whole leases before it.
func TestV2AckOfABatchWithAMalformedReceiptChangesNothing(t *testing.T) {
	b := setup(t)
	b.createV2("v2abm", `"lanes": 2`)
	byLease, order := b.v2leasesOf8("v2abm")
	a, c := byLease[order[0]], byLease[order[1]]
	all := slices.Concat(a, c)
	for _, bad := range []struct {
		name string
		rs   []string
	}{
		{"after both leases", append(slices.Clone(all), "x.y")},
		{"first", append([]string{"not-a-receipt"}, all...)},
		{"inside the second lease's run", slices.Concat(a, c[:2], []string{v2forge(c[2], 1, "abc")}, c[3:])},
		{"a position past bigint", slices.Concat(a, c[:3], []string{v2forge(c[3], 1, "99999999999999999999")})},
		{"a slot past int", slices.Concat(a, []string{v2forge(c[0], 0, "99999999999")}, c[1:])},
		{"SQL in one", slices.Concat(a, []string{c[0] + "; DROP TABLE x"}, c[1:])},
	} {
		b.v2expectState("SL008", "SELECT sluice.ack('v2abm', 'default', $1)", bad.rs)
		if st := b.v2status("v2abm", "default"); st.InFlight != 8 {
			t.Errorf("%s: in flight %d after the failed ack, want 8", bad.name, st.InFlight)
		}
	}
	b.v2expectState("SL008", "SELECT sluice.ack('v2abm', 'default', array_append($1::text[], NULL))", all)
	// Well-formed receipts that no lease of this engine made (four parts,
	// another slot) are stale, and the rest is completed.
	if got := b.ack("v2abm", "default", slices.Concat([]string{"0.1.1.1", "7.1.1.1.1"}, all)...); got != 8 {
		t.Errorf("ack with two stale receipts first: completed %d, want 8", got)
	}
	b.v2expectEmpty("v2abm", "default")
}
