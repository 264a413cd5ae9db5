// Package doctest extracts the code blocks of Markdown documents and splits
// their SQL into statements, so that a test can run every example of the
// README and docs/ against a real PostgreSQL (see doctest_test.go and
// docs/doctest.md).
//
// A fenced block's info string is its language and then annotations:
//
//	```sql             run it
//	```sql norun       show it, never run it (placeholders, other servers)
//	```sh fails        run it; it must fail
//	```sh fresh        run it, and the blocks after it, on a new database
//	```sql signature   a function's signature: checked against the installed one
//	```sh server       run it with a "sluice server" on the document's database,
//	                   its address in place of 127.0.0.1:7810
//
// A block inside an HTML comment (<!-- ... -->) is not rendered but runs
// like any other: that is how a document sets up what its examples need.
package doctest

import (
	"fmt"
	"slices"
	"strings"
)

// Annotations are the words a fence's info string may hold after the
// language.
var Annotations = []string{"norun", "fails", "fresh", "signature", "server"}

// Block is one fenced code block.
type Block struct {
	Line        int      // line of the opening fence, from 1
	Lang        string   // first word of the info string ("" for none)
	Annotations []string // the other words
	Text        string   // the content, with a final newline
}

// Has reports whether b carries annotation a.
func (b Block) Has(a string) bool { return slices.Contains(b.Annotations, a) }

// Extract returns the fenced code blocks of a Markdown document, in order,
// those inside HTML comments included. A fence is three or more backticks
// or tildes, indented by at most three spaces (or by any amount inside a
// list, as written in these docs); it closes with a fence of the same
// character, at least as long, without an info string. An unknown
// annotation on a sql or sh block is an error, so that a typo does not
// silently keep a block from running.
func Extract(markdown string) ([]Block, error) {
	var blocks []Block
	lines := strings.Split(markdown, "\n")
	for i := 0; i < len(lines); i++ {
		indent, fence, info, ok := openingFence(lines[i])
		if !ok {
			continue
		}
		words := strings.Fields(info)
		b := Block{Line: i + 1}
		if len(words) > 0 {
			b.Lang, b.Annotations = words[0], words[1:]
		}
		var body strings.Builder
		closed := false
		for i++; i < len(lines); i++ {
			l := lines[i]
			if t := strings.TrimSpace(l); strings.HasPrefix(t, fence[:1]) && strings.Trim(t, fence[:1]) == "" && len(t) >= len(fence) {
				closed = true
				break
			}
			// Drop the fence's own indentation from the content.
			for n := 0; n < indent && strings.HasPrefix(l, " "); n++ {
				l = l[1:]
			}
			body.WriteString(l)
			body.WriteByte('\n')
		}
		if !closed {
			return nil, fmt.Errorf("line %d: the code block is never closed", b.Line)
		}
		b.Text = body.String()
		if b.Lang == "sql" || b.Lang == "sh" {
			for _, a := range b.Annotations {
				if !slices.Contains(Annotations, a) {
					return nil, fmt.Errorf("line %d: unknown annotation %q on a %s block (known: %s)", b.Line, a, b.Lang, strings.Join(Annotations, ", "))
				}
			}
		}
		blocks = append(blocks, b)
	}
	return blocks, nil
}

// openingFence reads a line as an opening fence.
func openingFence(line string) (indent int, fence, info string, ok bool) {
	t := strings.TrimLeft(line, " ")
	indent = len(line) - len(t)
	if len(t) < 3 || (t[0] != '`' && t[0] != '~') {
		return 0, "", "", false
	}
	n := len(t) - len(strings.TrimLeft(t, t[:1]))
	if n < 3 {
		return 0, "", "", false
	}
	info = strings.TrimSpace(t[n:])
	if t[0] == '`' && strings.Contains(info, "`") {
		return 0, "", "", false
	}
	return indent, t[:n], info, true
}

// Statement is one SQL statement of a block.
type Statement struct {
	Line int    // line within the block, from 1
	SQL  string // without the final semicolon
	// Gset is true when the statement ended with psql's \gset: its one
	// row's columns become variables, used later as :'name'.
	Gset bool
}

// Split splits SQL text into statements at the semicolons outside quotes,
// dollar quotes and comments, as psql does. Of psql's meta-commands only
// \gset is known (it ends a statement); any other is an error.
func Split(text string) ([]Statement, error) {
	var out []Statement
	var cur strings.Builder
	line, start := 1, 0
	emit := func(gset bool) {
		s := strings.TrimSpace(cur.String())
		if s != "" && !onlyComments(s) {
			out = append(out, Statement{Line: start, SQL: s, Gset: gset})
		}
		cur.Reset()
		start = 0
	}
	for i := 0; i < len(text); {
		c := text[i]
		if start == 0 && c != ' ' && c != '\n' && c != '\t' {
			start = line
		}
		switch {
		case c == '\n':
			line++
			cur.WriteByte(c)
			i++
		case c == '-' && strings.HasPrefix(text[i:], "--"):
			end := strings.IndexByte(text[i:], '\n')
			if end < 0 {
				end = len(text) - i
			}
			cur.WriteString(text[i : i+end])
			i += end
		case c == '/' && strings.HasPrefix(text[i:], "/*"):
			end := strings.Index(text[i+2:], "*/")
			if end < 0 {
				return nil, fmt.Errorf("line %d: unterminated /* comment", line)
			}
			chunk := text[i : i+2+end+2]
			line += strings.Count(chunk, "\n")
			cur.WriteString(chunk)
			i += len(chunk)
		case c == '\'' || c == '"':
			end := closingQuote(text, i)
			if end < 0 {
				return nil, fmt.Errorf("line %d: unterminated quote %c", line, c)
			}
			chunk := text[i : end+1]
			line += strings.Count(chunk, "\n")
			cur.WriteString(chunk)
			i = end + 1
		case c == '$':
			tag, ok := dollarTag(text[i:])
			if !ok {
				cur.WriteByte(c)
				i++
				break
			}
			end := strings.Index(text[i+len(tag):], tag)
			if end < 0 {
				return nil, fmt.Errorf("line %d: unterminated %s quote", line, tag)
			}
			chunk := text[i : i+len(tag)+end+len(tag)]
			line += strings.Count(chunk, "\n")
			cur.WriteString(chunk)
			i += len(chunk)
		case c == ';':
			emit(false)
			i++
		case c == '\\':
			end := strings.IndexByte(text[i:], '\n')
			if end < 0 {
				end = len(text) - i
			}
			meta := strings.Fields(text[i+1 : i+end])
			if len(meta) != 1 || meta[0] != "gset" {
				return nil, fmt.Errorf("line %d: psql meta-command %q is not supported here (only \\gset)", line, strings.TrimSpace(text[i:i+end]))
			}
			emit(true)
			i += end
		default:
			cur.WriteByte(c)
			i++
		}
	}
	emit(false)
	return out, nil
}

// closingQuote returns the index of the quote that closes the one at
// text[i] (doubled quotes stay inside), or -1.
func closingQuote(text string, i int) int {
	q := text[i]
	for j := i + 1; j < len(text); j++ {
		if text[j] != q {
			continue
		}
		if j+1 < len(text) && text[j+1] == q {
			j++
			continue
		}
		return j
	}
	return -1
}

// dollarTag returns the dollar-quote tag ($$ or $name$) at the start of s.
func dollarTag(s string) (string, bool) {
	for j := 1; j < len(s); j++ {
		c := s[j]
		switch {
		case c == '$':
			return s[:j+1], true
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || (j > 1 && c >= '0' && c <= '9'):
		default:
			return "", false
		}
	}
	return "", false
}

// onlyComments reports whether s holds nothing but -- comments.
func onlyComments(s string) bool {
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "--") {
			return false
		}
	}
	return true
}

// Substitute replaces psql variable references :'name' (a literal) and
// :"name" (an identifier) in sql, outside string literals, with the values
// vars holds.
func Substitute(sql string, vars map[string]string) (string, error) {
	var out strings.Builder
	for i := 0; i < len(sql); i++ {
		c := sql[i]
		if c == '\'' {
			end := closingQuote(sql, i)
			if end < 0 {
				end = len(sql) - 1
			}
			out.WriteString(sql[i : end+1])
			i = end
			continue
		}
		if c != ':' || i+1 >= len(sql) || (sql[i+1] != '\'' && sql[i+1] != '"') || (i > 0 && sql[i-1] == ':') {
			out.WriteByte(c)
			continue
		}
		q := sql[i+1]
		end := strings.IndexByte(sql[i+2:], q)
		if end < 0 {
			out.WriteByte(c)
			continue
		}
		name := sql[i+2 : i+2+end]
		v, ok := vars[name]
		if !ok {
			return "", fmt.Errorf("variable %q is not set (set it with \\gset)", name)
		}
		out.WriteString(string(q) + strings.ReplaceAll(v, string(q), string(q)+string(q)) + string(q))
		i += 2 + end
	}
	return out.String(), nil
}
