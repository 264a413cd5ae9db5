package sluice_test

import (
	"bufio"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// libraryModules are the modules the library may require (go.mod, direct
// or indirect): pgx and what pgx requires, goleak for the leak check of
// these tests, and testify, which go mod tidy records for pgx's own tests.
// The command, the benchmark and the private PostgreSQL of the tests are
// modules of their own (README.md, "Layout") so that a program that uses
// the library does not get River, chromedp, embedded-postgres, Prometheus
// and the rest with it.
var libraryModules = []string{
	"github.com/jackc/pgx/v5",
	"github.com/jackc/pgpassfile",
	"github.com/jackc/pgservicefile",
	"github.com/jackc/puddle/v2",
	"golang.org/x/crypto",
	"golang.org/x/sync",
	"golang.org/x/text",
	"go.uber.org/goleak",
	"github.com/stretchr/testify",
}

// heavyModules are what the other modules require: named in the failure,
// should one of them come back into the library's go.mod.
var heavyModules = []string{
	"github.com/riverqueue/", "github.com/chromedp/", "github.com/fergusstrange/embedded-postgres",
	"github.com/prometheus/", "github.com/golang-jwt/", "github.com/go-json-experiment/",
}

// The library module requires pgx and little else, and the packages a
// program imports (the library, migrate, sql) link pgx's modules only.
func TestLibraryModuleRequirements(t *testing.T) {
	reqs := goModRequirements(t, "go.mod")
	if len(reqs) == 0 {
		t.Fatal("go.mod: no requirements found (is the parser out of date?)")
	}
	for _, r := range reqs {
		for _, h := range heavyModules {
			if strings.HasPrefix(r, h) {
				t.Errorf("go.mod requires %s: that belongs in the module that uses it (cmd/sluice, bench, internal/pgserver), not the library's", r)
			}
		}
		if !slices.Contains(libraryModules, r) {
			t.Errorf("go.mod requires %s, which is not among the library's allowed requirements (module_test.go): a program that uses the library would get it too", r)
		}
	}
	if !slices.Contains(reqs, "github.com/jackc/pgx/v5") {
		t.Errorf("go.mod does not require pgx: %q", reqs)
	}

	cmd := exec.Command("go", "list", "-deps", "-f", "{{if .Module}}{{.Module.Path}}{{end}}", ".", "./migrate", "./sql", "./sql/pgmq")
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, m := range strings.Fields(string(out)) {
		if m != "github.com/sluicemq/sluice" && !slices.Contains(libraryModules, m) {
			t.Errorf("the library's packages link %s", m)
		}
	}
}

// Every module of the repository is in go.work and in the Makefile's
// MODULES, which make build, vet, staticcheck and test-go go through: a
// module left out of MODULES would not be built or tested by CI.
func TestModulesListed(t *testing.T) {
	var dirs []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && d.Name() == "go.mod" {
			dirs = append(dirs, filepath.ToSlash(filepath.Dir(path)))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(dirs)

	work, err := os.ReadFile("go.work")
	if err != nil {
		t.Fatal(err)
	}
	var used []string
	inUse := false
	for _, line := range strings.Split(string(work), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "use ("):
			inUse = true
		case inUse && line == ")":
			inUse = false
		case inUse && line != "" && !strings.HasPrefix(line, "//"):
			used = append(used, strings.TrimPrefix(line, "./"))
		}
	}
	slices.Sort(used)
	if !slices.Equal(used, dirs) {
		t.Errorf("go.work uses %q, the modules are %q", used, dirs)
	}

	makefile, err := os.ReadFile("Makefile")
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, line := range strings.Split(string(makefile), "\n") {
		if v, ok := strings.CutPrefix(line, "MODULES"); ok {
			_, v, _ = strings.Cut(v, "=")
			listed = strings.Fields(v)
		}
	}
	slices.Sort(listed)
	if !slices.Equal(listed, dirs) {
		t.Errorf("the Makefile's MODULES are %q, the modules are %q", listed, dirs)
	}
}

// goModRequirements returns the module paths path's require directives
// name, in one-line and block form.
func goModRequirements(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var reqs []string
	block := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "//")
		fields := strings.Fields(line)
		switch {
		case len(fields) == 0:
		case block && fields[0] == ")":
			block = false
		case block:
			reqs = append(reqs, fields[0])
		case fields[0] == "require" && len(fields) > 1 && fields[1] == "(":
			block = true
		case fields[0] == "require" && len(fields) > 2:
			reqs = append(reqs, fields[1])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return reqs
}
