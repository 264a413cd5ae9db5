package sqlstate_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/internal/sqlstate"
)

// Every hint the engine raises that names SQL is restated for the sluice
// command and the HTTP API, which show no SQL.
func TestHintsNameNoSQL(t *testing.T) {
	hint := regexp.MustCompile(`HINT = '((?:[^']|'')*)'`)
	files, err := os.ReadDir("../../sql/functions")
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, f := range files {
		if !strings.HasSuffix(f.Name(), ".sql") {
			continue
		}
		b, err := os.ReadFile("../../sql/functions/" + f.Name())
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range hint.FindAllStringSubmatch(string(b), -1) {
			h := strings.ReplaceAll(m[1], "''", "'")
			seen++
			for _, s := range []sqlstate.Surface{sqlstate.CLI, sqlstate.HTTP} {
				got := sqlstate.Hint(h, s)
				if strings.Contains(got, "sluice.") || strings.Contains(got, "::") || strings.Contains(got, "NULL") {
					t.Errorf("%s: hint %q shown as %q on surface %d", f.Name(), h, got, s)
				}
			}
		}
	}
	if seen < 10 {
		t.Fatalf("found %d hints in sql/functions", seen)
	}
}
