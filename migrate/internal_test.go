package migrate

import "testing"

func TestLineAt(t *testing.T) {
	s := "ab\nçd\n\nx"
	for pos, want := range map[int]int{1: 1, 3: 1, 4: 2, 5: 2, 7: 3, 8: 4, 9: 0} {
		if got := lineAt(s, pos); got != want {
			t.Errorf("lineAt(%q, %d) = %d, want %d", s, pos, got, want)
		}
	}
}

func TestDollarTag(t *testing.T) {
	if got := dollarTag("t", "no tags"); got != "$t$" {
		t.Errorf("dollarTag = %s", got)
	}
	if got := dollarTag("t", "has $t$ and $t_1$"); got != "$t_2$" {
		t.Errorf("dollarTag = %s, want $t_2$", got)
	}
}
