package optvec_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluicemq/sluice/internal/optvec"
)

// The committed vectors of the queue options are the ones the table gives:
// a row added to test/queue_options.json without `make generate` fails here.
func TestVectorsCurrent(t *testing.T) {
	root := filepath.Join("..", "..", "test")
	tab, err := optvec.Load(filepath.Join(root, "queue_options.json"))
	if err != nil {
		t.Fatal(err)
	}
	want := tab.Vectors()
	if len(want) != len(tab.Options) || len(want) == 0 {
		t.Fatalf("%d vectors for %d options", len(want), len(tab.Options))
	}
	files, err := filepath.Glob(filepath.Join(root, "conformance", "option_*.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if _, ok := want[filepath.Base(f)]; !ok {
			t.Errorf("%s: no option of the table has it (run make generate)", f)
		}
	}
	for name, data := range want {
		got, err := os.ReadFile(filepath.Join(root, "conformance", name))
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("test/conformance/%s is not what test/queue_options.json gives (run make generate): %v", name, err)
		}
	}
}
