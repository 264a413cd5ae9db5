package doctest_test

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
)

// The clients install and import under one name, sluicemq, the same in
// their metadata and in every document: "sluice" on PyPI is an unrelated
// ZFS tool. And npm test works on a fresh clone: it compiles first.
func TestPackageNames(t *testing.T) {
	read := func(path string) string {
		t.Helper()
		b, err := os.ReadFile("../../" + path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if py := read("clients/python/pyproject.toml"); !strings.Contains(py, `name = "sluicemq"`) ||
		!strings.Contains(py, `packages = ["src/sluicemq"]`) {
		t.Errorf("clients/python/pyproject.toml: the distribution and its package are not sluicemq")
	}
	if _, err := os.Stat("../../clients/python/src/sluicemq/__init__.py"); err != nil {
		t.Errorf("the Python import name is not sluicemq: %v", err)
	}
	var pkg struct {
		Name    string            `json:"name"`
		Scripts map[string]string `json:"scripts"`
	}
	if err := json.Unmarshal([]byte(read("clients/typescript/package.json")), &pkg); err != nil {
		t.Fatal(err)
	}
	if pkg.Name != "sluicemq" {
		t.Errorf("clients/typescript/package.json: name %q, want sluicemq", pkg.Name)
	}
	if !strings.Contains(pkg.Scripts["pretest"], "build") {
		t.Errorf("clients/typescript/package.json: npm test does not compile first (pretest %q)", pkg.Scripts["pretest"])
	}
	oldImport := regexp.MustCompile(`(?m)^import sluice$|from "sluice"|pip install sluice\b|npm install sluice\b|sluice-0\.1\.0\.tgz`)
	for _, doc := range []string{"README.md", "docs/python.md", "docs/typescript.md", "clients/python/README.md", "clients/typescript/README.md"} {
		if m := oldImport.FindString(read(doc)); m != "" {
			t.Errorf("%s: %q installs or imports the package under a name other than sluicemq", doc, m)
		}
	}
}

// The first Python example of docs/pgmq.md is the one that works against
// the layer: the pgmq client's default init_extension=True runs CREATE
// EXTENSION pgmq, which fails there.
func TestPGMQFirstExampleWorks(t *testing.T) {
	b, err := os.ReadFile("../../docs/pgmq.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "```python\n")
	if !ok {
		t.Fatal("docs/pgmq.md has no Python example")
	}
	block, _, _ := strings.Cut(rest, "```")
	if !strings.Contains(block, "PGMQueue(") || !strings.Contains(block, "init_extension=False") {
		t.Errorf("the first Python example of docs/pgmq.md does not turn init_extension off:\n%s", block)
	}
}
