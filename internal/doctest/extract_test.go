package doctest_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/internal/doctest"
)

func TestExtract(t *testing.T) {
	doc := "# T\n\n```sql\nSELECT 1;\n```\n\n<!--\n```sh\nsluice queue create x\n```\n-->\n\n" +
		"- item:\n\n  ```sql norun\n  SELECT broken\n  ```\n\n````markdown\n```sql\nnot a block\n```\n````\n\n```\nplain\n```\n"
	blocks, err := doctest.Extract(doc)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, b := range blocks {
		got = append(got, b.Lang+"|"+strings.Join(b.Annotations, ",")+"|"+b.Text)
	}
	want := []string{"sql||SELECT 1;\n", "sh||sluice queue create x\n", "sql|norun|SELECT broken\n",
		"markdown||```sql\nnot a block\n```\n", "||plain\n"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Extract:\n got %q\nwant %q", got, want)
	}
	if _, err := doctest.Extract("```sql no-run\nSELECT 1;\n```\n"); err == nil || !strings.Contains(err.Error(), `unknown annotation "no-run"`) {
		t.Errorf("a misspelt annotation: %v", err)
	}
	if _, err := doctest.Extract("```sql\nSELECT 1;\n"); err == nil {
		t.Error("an unclosed block: no error")
	}
}

func TestSplit(t *testing.T) {
	text := "SELECT 'a;b', \"c;d\"; -- x;y\nSELECT $f$ ; $f$, $$;$$ /* ; */;\n" +
		"SELECT receipt FROM t \\gset\nSELECT 1\n-- only a comment;\n"
	stmts, err := doctest.Split(text)
	if err != nil {
		t.Fatal(err)
	}
	want := []doctest.Statement{
		{Line: 1, SQL: `SELECT 'a;b', "c;d"`},
		{Line: 1, SQL: "-- x;y\nSELECT $f$ ; $f$, $$;$$ /* ; */"},
		{Line: 3, SQL: "SELECT receipt FROM t", Gset: true},
		{Line: 4, SQL: "SELECT 1\n-- only a comment;"},
	}
	if !reflect.DeepEqual(stmts, want) {
		t.Errorf("Split:\n got %+v\nwant %+v", stmts, want)
	}
	if _, err := doctest.Split("SELECT 1 \\x\n"); err == nil {
		t.Error("an unknown meta-command: no error")
	}
	if _, err := doctest.Split("SELECT 'open\n"); err == nil {
		t.Error("an unterminated quote: no error")
	}
}

func TestSubstitute(t *testing.T) {
	got, err := doctest.Substitute(`SELECT :'r', :"n", 'a:''b', x::text`, map[string]string{"r": "it's", "n": "col"})
	if err != nil || got != `SELECT 'it''s', "col", 'a:''b', x::text` {
		t.Errorf("Substitute: %q, %v", got, err)
	}
	if _, err := doctest.Substitute(`SELECT :'missing'`, nil); err == nil {
		t.Error("an unset variable: no error")
	}
}
