package sqlsrc_test

import (
	"fmt"
	"testing"
)

// A receive of more than 4,000 messages over a backlog not yet numbered
// returns as many as it asks for: it cuts as many times as that needs (a cut
// numbers at most 1,000), where it stopped at four cuts and returned 4,000.
// Each message once, in commit order per lane.
func TestLargeReceiveNumbersWhatItNeeds(t *testing.T) {
	t.Parallel()
	for _, lanes := range []int{1, 8} {
		t.Run(fmt.Sprintf("lanes=%d", lanes), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.createQueue("q", fmt.Sprintf(`{"lanes": %d}`, lanes))
			b.exec(`SELECT sluice.send_batch('q', array(SELECT jsonb_build_object('n', g) FROM generate_series(1, 7000) g))`)
			b.exec(`SELECT sluice.send_batch('q', array(SELECT jsonb_build_object('n', g) FROM generate_series(7001, 12000) g))`)
			got := b.receive("q", "default", 9000, "")
			if len(got) != 9000 {
				t.Fatalf("receive of 9000 over 12,000 unnumbered got %d", len(got))
			}
			seen := map[int64]bool{}
			for _, m := range got {
				if seen[m.ID] {
					t.Fatalf("message %d twice", m.ID)
				}
				seen[m.ID] = true
			}
			if lanes == 1 {
				for i := 1; i < len(got); i++ {
					if got[i].Pos <= got[i-1].Pos {
						t.Fatalf("positions out of order at %d: %d after %d", i, got[i].Pos, got[i-1].Pos)
					}
				}
			}
			rest := b.receive("q", "default", 9000, "")
			if len(rest) != 3000 {
				t.Fatalf("the next receive got %d, want the 3,000 left", len(rest))
			}
			for _, m := range rest {
				if seen[m.ID] {
					t.Fatalf("message %d again", m.ID)
				}
			}
		})
	}
}
