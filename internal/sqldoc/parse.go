package sqldoc

import (
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strings"
)

// api is everything docs/sql.md is made of, as read from the SQL sources.
type api struct {
	errors []errorCode
	types  map[string][]column // composite types by qualified name
	groups []*group            // files with public functions, in manifest order
}

// errorCode is one row of the error table in functions/internal.sql.
type errorCode struct{ code, name, meaning string }

// column is a column of a composite type or of a RETURNS TABLE clause.
type column struct{ name, typ string }

// group is one functions/*.sql file: its "-- Group:" heading, the text
// below that heading and the file's public functions.
type group struct {
	file  string
	title string
	text  []string // paragraphs
	funcs []*function
}

// function is a public function: its signature and header comment.
type function struct {
	file    string
	line    int
	name    string // without the schema
	params  []param
	returns string // the RETURNS clause, without the keyword
	header  header
}

// param is one parameter of a signature.
type param struct{ mode, name, typ, def string }

// header is the comment block above a CREATE FUNCTION.
type header struct {
	purpose  []string            // paragraphs
	sections map[string]*section // by label: Parameters, Returns, ...
}

// section is a labelled part of a header ("Returns: ..."): its prose and the
// "name  description" entries it lists (parameters, columns).
type section struct {
	text    string
	entries []entry
}

// entry is one "name  description" line of a header with its continuation
// lines; names has several elements for "a, b, c  description".
type entry struct {
	names []string
	text  string
	sub   []entry // nested entries (the keys of a jsonb option object)
}

// labels are the section labels a header may have, in rendering order.
var labels = []string{"Parameters", "Returns", "Errors", "Tables", "Notifies"}

var (
	createFuncRE = regexp.MustCompile(`(?i)^CREATE\s+OR\s+REPLACE\s+FUNCTION\s+([a-z_][a-z0-9_]*)\.([a-z_][a-z0-9_]*)\s*\(`)
	sigEndRE     = regexp.MustCompile(`(?i)^\s*(LANGUAGE|AS|SET|IMMUTABLE|STABLE|VOLATILE|STRICT|CALLED|SECURITY|PARALLEL|COST|ROWS|WINDOW|LEAKPROOF)\b`)
	labelRE      = regexp.MustCompile(`^(` + strings.Join(labels, "|") + `):\s*(.*)$`)
	entryRE      = regexp.MustCompile(`^([a-z_][a-z0-9_]*(?:, [a-z_][a-z0-9_]*)*)\s{2,}(\S.*)$`)
	errorRowRE   = regexp.MustCompile(`^(SL[0-9]{3})\s+([a-z_]+)\s+(\S.*)$`)
	createTypeRE = regexp.MustCompile(`(?is)CREATE\s+TYPE\s+([a-z_][a-z0-9_.]*)\s+AS\s*\(`)
	alterTypeRE  = regexp.MustCompile(`(?is)ALTER\s+TYPE\s+([a-z_][a-z0-9_.]*)[^;]*;`)
	// addAttributeRE reads one ALTER TYPE statement that adds one attribute.
	addAttributeRE = regexp.MustCompile(`(?is)^ALTER\s+TYPE\s+[a-z_][a-z0-9_.]*\s+ADD\s+ATTRIBUTE\s+([a-z_][a-z0-9_]*)\s+([^;,]+);$`)
)

// parse reads the SQL sources: tables/*.sql for the composite types and the
// files of functions/manifest.txt for the functions.
func parse(fsys fs.FS) (*api, error) {
	a := &api{types: map[string][]column{}}
	if err := a.parseTypes(fsys); err != nil {
		return nil, err
	}
	manifest, err := fs.ReadFile(fsys, "functions/manifest.txt")
	if err != nil {
		return nil, err
	}
	seen := map[string]string{}
	for _, name := range strings.Split(string(manifest), "\n") {
		name = strings.TrimSpace(name)
		if name == "" || strings.HasPrefix(name, "#") {
			continue
		}
		file := path.Join("functions", name)
		src, err := fs.ReadFile(fsys, file)
		if err != nil {
			return nil, err
		}
		lines := strings.Split(strings.ReplaceAll(string(src), "\r\n", "\n"), "\n")
		if name == "internal.sql" {
			a.errors = parseErrorCodes(lines)
		}
		g, err := parseFile(file, lines)
		if err != nil {
			return nil, err
		}
		for _, f := range g.funcs {
			if prev, ok := seen[f.name]; ok {
				return nil, fmt.Errorf("%s:%d: sluice.%s is also defined in %s; overloads are not supported", f.file, f.line, f.name, prev)
			}
			seen[f.name] = fmt.Sprintf("%s:%d", f.file, f.line)
		}
		if len(g.funcs) > 0 {
			a.groups = append(a.groups, g)
		}
	}
	if len(a.errors) == 0 {
		return nil, fmt.Errorf("functions/internal.sql: no error codes (lines like \"--   SL001 invalid_name  meaning\") in its header")
	}
	return a, nil
}

// parseTypes reads the composite types of tables/*.sql.
func (a *api) parseTypes(fsys fs.FS) error {
	files, err := fs.Glob(fsys, "tables/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(files)
	for _, file := range files {
		src, err := fs.ReadFile(fsys, file)
		if err != nil {
			return err
		}
		text := stripLineComments(string(src))
		for _, loc := range createTypeRE.FindAllStringSubmatchIndex(text, -1) {
			name := text[loc[2]:loc[3]]
			body, _, ok := balanced(text[loc[1]-1:])
			if !ok {
				return fmt.Errorf("%s: CREATE TYPE %s: unbalanced parentheses", file, name)
			}
			var cols []column
			for _, c := range splitTopLevel(body) {
				f := strings.Fields(c)
				if len(f) < 2 {
					return fmt.Errorf("%s: CREATE TYPE %s: cannot read column %q", file, name, c)
				}
				cols = append(cols, column{name: f[0], typ: strings.Join(f[1:], " ")})
			}
			a.types[name] = cols
		}
		// ALTER TYPE ... ADD ATTRIBUTE appends a column; other forms are not read.
		for _, m := range alterTypeRE.FindAllStringSubmatch(text, -1) {
			add := addAttributeRE.FindStringSubmatch(m[0])
			if add == nil {
				return fmt.Errorf("%s: ALTER TYPE %s: sqldoc reads only CREATE TYPE and ALTER TYPE ... ADD ATTRIBUTE", file, m[1])
			}
			if _, ok := a.types[m[1]]; !ok {
				return fmt.Errorf("%s: ALTER TYPE %s: no CREATE TYPE before it", file, m[1])
			}
			a.types[m[1]] = append(a.types[m[1]], column{name: add[1], typ: strings.TrimSpace(add[2])})
		}
	}
	return nil
}

// parseErrorCodes reads the error table from the first comment block of
// internal.sql: lines "SLnnn name  meaning".
func parseErrorCodes(lines []string) []errorCode {
	var codes []errorCode
	for _, l := range lines {
		if !strings.HasPrefix(l, "--") {
			break
		}
		if m := errorRowRE.FindStringSubmatch(strings.TrimSpace(strings.TrimPrefix(l, "--"))); m != nil {
			codes = append(codes, errorCode{m[1], m[2], m[3]})
		}
	}
	return codes
}

// parseFile reads one functions/*.sql file.
func parseFile(file string, lines []string) (*group, error) {
	g := &group{file: file}
	for i, l := range lines {
		if title, ok := strings.CutPrefix(l, "-- Group:"); ok && g.title == "" {
			g.title = strings.TrimSpace(title)
			var body []commentLine
			for _, l := range lines[i+1:] {
				c, ok := comment(l)
				if !ok {
					break
				}
				body = append(body, c)
			}
			g.text, _ = paragraphs(body)
			continue
		}
		m := createFuncRE.FindStringSubmatch(l)
		if m == nil || m[1] != "sluice" || strings.HasPrefix(m[2], "_") {
			continue
		}
		f, err := parseFunction(file, lines, i, m[2])
		if err != nil {
			return nil, err
		}
		g.funcs = append(g.funcs, f)
	}
	if len(g.funcs) > 0 && g.title == "" {
		return nil, fmt.Errorf("%s: no \"-- Group:\" heading", file)
	}
	return g, nil
}

// parseFunction reads the signature starting at lines[i] and the header
// comment right above it.
func parseFunction(file string, lines []string, i int, name string) (*function, error) {
	f := &function{file: file, line: i + 1, name: name}
	errorf := func(format string, args ...any) error {
		return fmt.Errorf("%s:%d: sluice.%s: %s", file, i+1, name, fmt.Sprintf(format, args...))
	}

	// Signature: from CREATE to the first line of function options.
	// A line of options ends it once the parameters and RETURNS are complete.
	var s, params, rest string
	ok := false
	for j, l := range lines[i:] {
		if j > 0 && ok && sigEndRE.MatchString(l) && strings.Contains(strings.ToUpper(rest), "RETURNS") {
			break
		}
		s += strings.TrimSpace(l) + " "
		params, rest, ok = balanced(s[strings.Index(s, "("):])
	}
	if !ok {
		return nil, errorf("unbalanced parentheses in the signature")
	}
	for _, p := range splitTopLevel(params) {
		pp, err := parseParam(p)
		if err != nil {
			return nil, errorf("%v", err)
		}
		f.params = append(f.params, pp)
	}
	ret, ok := cutPrefixFold(strings.TrimSpace(rest), "RETURNS ")
	if !ok {
		return nil, errorf("no RETURNS clause")
	}
	if f.returns = returnsClause(ret); f.returns == "" {
		return nil, errorf("cannot read the RETURNS clause")
	}

	// Header: the comment lines right above, up to a blank line or a Group heading.
	start := i
	for start > 0 && strings.HasPrefix(lines[start-1], "--") && !strings.HasPrefix(lines[start-1], "-- Group:") {
		start--
	}
	if start == i {
		return nil, errorf("no header comment above CREATE FUNCTION")
	}
	var body []commentLine
	for _, l := range lines[start:i] {
		c, _ := comment(l)
		body = append(body, c)
	}
	if t, ok := strings.CutPrefix(body[0].text, name+":"); ok && body[0].indent == 0 {
		body[0].text = strings.TrimSpace(t)
	} else {
		return nil, errorf("the header must start with %q", name+": ")
	}
	f.header = parseHeader(body)
	return f, nil
}

// returnsClause returns the type of a RETURNS clause, without the function
// options that may follow it on the same line.
func returnsClause(s string) string {
	if t, ok := cutPrefixFold(strings.TrimSpace(s), "TABLE"); ok {
		inside, _, ok := balanced(strings.TrimSpace(t))
		if !ok {
			return ""
		}
		return "TABLE (" + strings.Join(splitTopLevel(inside), ", ") + ")"
	}
	var words []string
	for _, w := range strings.Fields(s) {
		if sigEndRE.MatchString(w) {
			break
		}
		words = append(words, w)
	}
	return strings.Join(words, " ")
}

// parseParam reads "[mode] name type [DEFAULT expr | = expr]".
func parseParam(p string) (param, error) {
	var pp param
	if before, after, ok := cutFold(p, " DEFAULT "); ok {
		p, pp.def = before, strings.TrimSpace(after)
	} else if before, after, ok := strings.Cut(p, " = "); ok {
		p, pp.def = before, strings.TrimSpace(after)
	}
	f := strings.Fields(p)
	if len(f) > 0 {
		switch strings.ToUpper(f[0]) {
		case "IN", "OUT", "INOUT", "VARIADIC":
			pp.mode, f = strings.ToUpper(f[0]), f[1:]
		}
	}
	if len(f) < 2 {
		return pp, fmt.Errorf("parameter %q: want a name and a type", p)
	}
	pp.name, pp.typ = f[0], strings.Join(f[1:], " ")
	return pp, nil
}

// commentLine is the text of a "--" line; indent counts the spaces after the
// first one. A "--" line alone has empty text.
type commentLine struct {
	indent int
	text   string
}

func comment(l string) (commentLine, bool) {
	t, ok := strings.CutPrefix(l, "--")
	if !ok {
		return commentLine{}, false
	}
	t = strings.TrimPrefix(strings.TrimRight(t, " \t"), " ")
	trimmed := strings.TrimLeft(t, " ")
	return commentLine{indent: len(t) - len(trimmed), text: trimmed}, true
}

// paragraphs joins comment lines into paragraphs (split at "--" lines) until
// the first line that starts a labelled section; it returns the paragraphs
// and the remaining lines.
func paragraphs(lines []commentLine) ([]string, []commentLine) {
	var paras []string
	var cur []string
	flush := func() {
		if len(cur) > 0 {
			paras = append(paras, strings.Join(cur, " "))
			cur = nil
		}
	}
	for i, l := range lines {
		if l.indent == 0 && labelRE.MatchString(l.text) {
			flush()
			return paras, lines[i:]
		}
		if l.text == "" {
			flush()
			continue
		}
		cur = append(cur, l.text)
	}
	flush()
	return paras, nil
}

// parseHeader splits a header into its purpose and labelled sections.
func parseHeader(lines []commentLine) header {
	h := header{sections: map[string]*section{}}
	h.purpose, lines = paragraphs(lines)
	for len(lines) > 0 {
		m := labelRE.FindStringSubmatch(lines[0].text)
		if m == nil || lines[0].indent != 0 { // text after the sections: more purpose
			var more []string
			more, lines = paragraphs(lines)
			h.purpose = append(h.purpose, more...)
			continue
		}
		n := 1
		for n < len(lines) && lines[n].indent > 0 {
			n++
		}
		prose, entries := parseBlock(lines[1:n])
		h.sections[m[1]] = &section{text: joinText(m[2], prose), entries: entries}
		lines = lines[n:]
		for len(lines) > 0 && lines[0].text == "" {
			lines = lines[1:]
		}
	}
	return h
}

// parseBlock reads indented header lines: "name  description" entries (with
// their more deeply indented continuation lines, which may hold nested
// entries) and the prose lines that are not part of an entry.
func parseBlock(lines []commentLine) (prose string, entries []entry) {
	for i := 0; i < len(lines); {
		l := lines[i]
		m := entryRE.FindStringSubmatch(l.text)
		if m == nil {
			prose = joinText(prose, l.text)
			i++
			continue
		}
		j := i + 1
		for j < len(lines) && lines[j].indent > l.indent {
			j++
		}
		more, sub := parseBlock(lines[i+1 : j])
		entries = append(entries, entry{names: strings.Split(m[1], ", "), text: joinText(m[2], more), sub: sub})
		i = j
	}
	return prose, entries
}

func joinText(a, b string) string {
	if a == "" || b == "" {
		return a + b
	}
	return a + " " + b
}

// balanced takes s starting with "(" and returns what is inside the matching
// ")" and what follows it. Quotes are respected.
func balanced(s string) (inside, rest string, ok bool) {
	depth := 0
	quote := byte(0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '(':
			depth++
		case c == ')':
			depth--
			if depth == 0 {
				return s[1:i], s[i+1:], true
			}
		}
	}
	return "", "", false
}

// splitTopLevel splits s at the commas outside parentheses, brackets and
// quotes, and trims the parts; it returns nil for a blank s.
func splitTopLevel(s string) []string {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	var parts []string
	depth, start := 0, 0
	quote := byte(0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '(' || c == '[':
			depth++
		case c == ')' || c == ']':
			depth--
		case c == ',' && depth == 0:
			parts = append(parts, strings.Join(strings.Fields(s[start:i]), " "))
			start = i + 1
		}
	}
	return append(parts, strings.Join(strings.Fields(s[start:]), " "))
}

// stripLineComments removes "--" comments (outside quotes) from SQL.
func stripLineComments(s string) string {
	lines := strings.Split(s, "\n")
	for n, l := range lines {
		quote := false
		for i := 0; i < len(l); i++ {
			if l[i] == '\'' {
				quote = !quote
			} else if !quote && strings.HasPrefix(l[i:], "--") {
				lines[n] = l[:i]
				break
			}
		}
	}
	return strings.Join(lines, "\n")
}

// cutFold is strings.Cut with an ASCII case-insensitive separator.
func cutFold(s, sep string) (before, after string, ok bool) {
	if i := strings.Index(strings.ToUpper(s), strings.ToUpper(sep)); i >= 0 {
		return s[:i], s[i+len(sep):], true
	}
	return s, "", false
}

// cutPrefixFold is strings.CutPrefix with an ASCII case-insensitive prefix.
func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix) {
		return s[len(prefix):], true
	}
	return s, false
}
