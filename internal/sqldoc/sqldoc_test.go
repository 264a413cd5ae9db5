package sqldoc

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	sqlsrc "github.com/sluicemq/sluice/sql"
)

// knownGaps are the header gaps of the current SQL sources: the SQL owner
// should fix them. TestHeaderGaps requires this list to be exactly what the
// sources have, so a new gap fails the test, and so does a fixed one until
// it is removed from here.
var knownGaps = []string{}

// The committed docs/sql.md is what the SQL sources generate.
func TestDocIsCurrent(t *testing.T) {
	got, err := Generate(sqlsrc.FS)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join("..", "..", "docs", "sql.md"))
	if err != nil {
		t.Fatalf("%v; run make generate", err)
	}
	if !bytes.Equal(got, want) {
		g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
		i := 0
		for i < len(g) && i < len(w) && g[i] == w[i] {
			i++
		}
		line := func(l []string) string {
			if i < len(l) {
				return fmt.Sprintf("%q", l[i])
			}
			return "end of file"
		}
		t.Fatalf("docs/sql.md is out of date: run make generate\nfirst difference, line %d:\n  committed: %s\n  generated: %s",
			i+1, line(w), line(g))
	}
}

// Every public function of functions/*.sql, found with a plain search rather
// than the generator's parser, has a section, and every section is one.
func TestEveryPublicFunctionHasASection(t *testing.T) {
	create := regexp.MustCompile(`(?im)^\s*CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+sluice\.([a-z][a-z0-9_]*)\s*\(`)
	files, err := fs.Glob(sqlsrc.FS, "functions/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	var public []string
	for _, file := range files {
		src, err := fs.ReadFile(sqlsrc.FS, file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range create.FindAllStringSubmatch(string(src), -1) {
			public = append(public, m[1])
		}
	}
	doc, err := Generate(sqlsrc.FS)
	if err != nil {
		t.Fatal(err)
	}
	var sections []string
	for _, m := range regexp.MustCompile(`(?m)^### sluice\.(\S+)$`).FindAllStringSubmatch(string(doc), -1) {
		sections = append(sections, m[1])
	}
	slices.Sort(public)
	slices.Sort(sections)
	if len(public) == 0 || !slices.Equal(public, sections) {
		t.Fatalf("public functions %v\nhave sections %v\n(is a file missing from functions/manifest.txt?)", public, sections)
	}
}

// Every header has Parameters (if the function takes any), Returns and
// Errors, describes exactly the parameters of the signature, and names only
// known error codes; knownGaps lists the exceptions the sources have now.
func TestHeaderGaps(t *testing.T) {
	a, err := parse(sqlsrc.FS)
	if err != nil {
		t.Fatal(err)
	}
	got := headerGaps(a)
	for _, g := range got {
		t.Logf("header gap: %s", g)
		if !slices.Contains(knownGaps, g) {
			t.Errorf("header gap: %s: fix the header in sql/functions (or add it to knownGaps while it waits)", g)
		}
	}
	for _, g := range knownGaps {
		if !slices.Contains(got, g) {
			t.Errorf("fixed header gap %q: remove it from knownGaps", g)
		}
	}
}

// headerGaps lists what the headers of the public functions lack.
func headerGaps(a *api) []string {
	codes := map[string]bool{}
	for _, e := range a.errors {
		codes[e.code] = true
	}
	var gaps []string
	for _, g := range a.groups {
		for _, f := range g.funcs {
			gap := func(format string, args ...any) {
				gaps = append(gaps, fmt.Sprintf("sluice.%s: ", f.name)+fmt.Sprintf(format, args...))
			}
			h := f.header.sections
			in := f.inputs()
			if ps := h["Parameters"]; ps == nil && len(in) > 0 {
				gap("no Parameters line")
			} else if ps != nil {
				for _, p := range in {
					if ps.find(p.name) == nil {
						gap("parameter %s is not under Parameters", p.name)
					}
				}
				for _, e := range ps.entries {
					for _, n := range e.names {
						if !slices.ContainsFunc(in, func(p param) bool { return p.name == n }) {
							gap("Parameters describes %s, which is not a parameter", n)
						}
					}
				}
			}
			if h["Returns"] == nil {
				gap("no Returns line")
			} else if _, cols := a.resultColumns(f); cols != nil {
				for _, e := range h["Returns"].entries {
					for _, n := range e.names {
						if !slices.ContainsFunc(cols, func(c column) bool { return c.name == n }) {
							gap("Returns describes column %s, which the result does not have", n)
						}
					}
				}
			}
			if h["Errors"] == nil {
				gap("no Errors line")
			} else {
				for _, c := range regexp.MustCompile(`SL[0-9]{3}`).FindAllString(h["Errors"].text, -1) {
					if !codes[c] {
						gap("Errors names %s, which is not in the error table of internal.sql", c)
					}
				}
			}
		}
	}
	return gaps
}

// The parser reads signatures, headers and types as documented.
func TestGenerateSample(t *testing.T) {
	fsys := fstest.MapFS{
		"tables/0001_core.sql": {Data: []byte(`-- the row
CREATE TYPE sluice.thing AS (
    id   bigint,  -- the id
    tags numeric(10, 2)
);
`)},
		"functions/manifest.txt": {Data: []byte("# comment\ninternal.sql\nthings.sql\n")},
		"functions/internal.sql": {Data: []byte(`-- Group: internal
--
--   SL001 invalid_name  a bad name
--   SL002 other_thing   something else

-- _hidden: not documented.
CREATE OR REPLACE FUNCTION sluice._hidden() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$;
`)},
		"functions/things.sql": {Data: []byte(`-- Group: things
--
-- About things.

-- get_things: fetch <things>.
--
-- Second paragraph.
--
-- Parameters:
--   name     the name
--   opts     options:
--              depth  how deep (1)
--                     and more
--   rows     how many
-- Returns: SETOF sluice.thing:
--   id, tags  identity
-- Errors: SL001 invalid_name, SL009
CREATE OR REPLACE FUNCTION sluice.get_things(name text,
                                             opts jsonb DEFAULT '{"a": [1, 2]}',
                                             rows int = 3)
RETURNS SETOF sluice.thing
LANGUAGE sql
AS $$ SELECT NULL::sluice.thing $$;

-- pairs: pairs.
--
-- Returns: pairs
CREATE OR REPLACE FUNCTION sluice.pairs(VARIADIC xs int[]) RETURNS TABLE (a int,
    b text) LANGUAGE sql AS $$ SELECT 1, 'x' $$;
`)},
	}
	doc, err := Generate(fsys)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| `SL002` | `other_thing` | something else |",
		"## Things\n\nAbout things.\n\n### sluice.get_things\n",
		"```sql signature\nsluice.get_things(\n    name text,\n    opts jsonb DEFAULT '{\"a\": [1, 2]}',\n    rows int   DEFAULT 3\n) RETURNS SETOF sluice.thing\n```",
		"Fetch &lt;things&gt;.\n\nSecond paragraph.\n",
		"- `opts` `jsonb`, default `'{\"a\": [1, 2]}'`: options:\n  - `depth`: how deep (1) and more\n",
		"- `rows` `int`, default `3`: how many\n",
		"**Returns:** SETOF sluice.thing:\n\nColumns of `sluice.thing`:",
		"| `id`, `tags` | `bigint`, `numeric(10, 2)` | identity |",
		"**Errors:** SL001 invalid_name, SL009\n",
		"sluice.pairs(\n    VARIADIC xs int[]\n) RETURNS TABLE (a int, b text)",
		"| `a` | `int` |\n| `b` | `text` |\n",
	} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("the output lacks %q", want)
		}
	}
	if strings.Contains(string(doc), "_hidden") {
		t.Error("the output documents an internal function")
	}
	a, err := parse(fsys)
	if err != nil {
		t.Fatal(err)
	}
	wantGaps := []string{
		"sluice.get_things: Errors names SL009, which is not in the error table of internal.sql",
		"sluice.pairs: no Parameters line",
		"sluice.pairs: no Errors line",
	}
	if got := headerGaps(a); !slices.Equal(got, wantGaps) {
		t.Errorf("gaps = %q, want %q", got, wantGaps)
	}

	// ALTER TYPE ... ADD ATTRIBUTE in a later migration adds a column; other
	// ALTER TYPE forms are refused.
	fsys["tables/0002_more.sql"] = &fstest.MapFile{Data: []byte("ALTER TYPE sluice.thing ADD ATTRIBUTE extra bigint;\n")}
	doc, err = Generate(fsys)
	if err != nil || !strings.Contains(string(doc), "`extra`") {
		t.Errorf("ALTER TYPE ADD ATTRIBUTE: err %v, column extra not documented", err)
	}
	fsys["tables/0002_more.sql"] = &fstest.MapFile{Data: []byte("ALTER TYPE sluice.thing RENAME ATTRIBUTE id TO ident;\n")}
	if _, err := Generate(fsys); err == nil || !strings.Contains(err.Error(), "ADD ATTRIBUTE") {
		t.Errorf("ALTER TYPE RENAME ATTRIBUTE: err = %v, want it refused", err)
	}
	delete(fsys, "tables/0002_more.sql")

	// A public function needs a header.
	fsys["functions/things.sql"] = &fstest.MapFile{Data: []byte("-- Group: x\n\nCREATE OR REPLACE FUNCTION sluice.f() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$;\n")}
	if _, err := Generate(fsys); err == nil || !strings.Contains(err.Error(), "no header") {
		t.Errorf("Generate without a header: err = %v", err)
	}
}
