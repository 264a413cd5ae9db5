package migrate

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Directory and file names inside the schema file system.
const (
	tablesDir    = "tables"
	functionsDir = "functions"
	manifestPath = "functions/manifest.txt"
)

// migrationName matches tables/NNNN_name.sql (at least one digit, then an
// underscore and a non-empty name).
var migrationName = regexp.MustCompile(`^([0-9]+)_([A-Za-z0-9_.-]+)\.sql$`)

// Migration is one numbered forward migration, tables/NNNN_name.sql.
type Migration struct {
	// Version is the number NNNN; migrations run in increasing version order.
	Version int
	// Name is the file's base name, for example "0001_queue.sql"; it is what
	// sluice.schema_migration records.
	Name string
	// Path is the file's path in the schema file system, for example
	// "tables/0001_queue.sql".
	Path string
}

// Migrations lists the migrations in fsys's tables directory in version
// order. A .sql file there whose name is not NNNN_name.sql, or two files with
// the same version, is an error. A missing tables directory means no
// migrations.
func Migrations(fsys fs.FS) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, tablesDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", tablesDir, err)
	}
	var out []Migration
	seen := make(map[int]string)
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		p := path.Join(tablesDir, e.Name())
		m := migrationName.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("%s: migration file name must look like NNNN_name.sql", p)
		}
		v, err := strconv.Atoi(m[1])
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("%s: migration version must be a positive number that fits an int", p)
		}
		if other, dup := seen[v]; dup {
			return nil, fmt.Errorf("%s: version %d is also used by %s", p, v, other)
		}
		seen[v] = p
		out = append(out, Migration{Version: v, Name: e.Name(), Path: p})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// Functions lists the function files named by functions/manifest.txt, as
// paths in fsys ("functions/x.sql"), in manifest order. The manifest holds one
// file name per line; blank lines and lines starting with # are ignored. A
// listed file that does not exist, a file listed twice, and a functions/*.sql
// file the manifest does not list are errors, so that a forgotten line cannot
// silently drop a function. No manifest and no functions/*.sql means no
// functions.
func Functions(fsys fs.FS) ([]string, error) {
	onDisk := make(map[string]bool)
	entries, err := fs.ReadDir(fsys, functionsDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("listing %s: %w", functionsDir, err)
	}
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".sql") {
			onDisk[path.Join(functionsDir, e.Name())] = true
		}
	}

	manifest, err := fs.ReadFile(fsys, manifestPath)
	if errors.Is(err, fs.ErrNotExist) {
		if len(onDisk) > 0 {
			return nil, fmt.Errorf("%s is missing but %s holds .sql files", manifestPath, functionsDir)
		}
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", manifestPath, err)
	}

	var out []string
	listed := make(map[string]int)
	sc := bufio.NewScanner(strings.NewReader(string(manifest)))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.Contains(line, "/") || !strings.HasSuffix(line, ".sql") {
			return nil, fmt.Errorf("%s:%d: %q must be a .sql file name in %s/", manifestPath, n, line, functionsDir)
		}
		p := path.Join(functionsDir, line)
		if prev, dup := listed[p]; dup {
			return nil, fmt.Errorf("%s:%d: %s is already listed on line %d", manifestPath, n, line, prev)
		}
		if !onDisk[p] {
			return nil, fmt.Errorf("%s:%d: %s does not exist", manifestPath, n, p)
		}
		listed[p] = n
		out = append(out, p)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", manifestPath, err)
	}
	var unlisted []string
	for p := range onDisk {
		if _, ok := listed[p]; !ok {
			unlisted = append(unlisted, p)
		}
	}
	if len(unlisted) > 0 {
		sort.Strings(unlisted)
		return nil, fmt.Errorf("%s does not list %s", manifestPath, strings.Join(unlisted, ", "))
	}
	return out, nil
}

// source is the parsed schema file system: migrations and function files
// with their contents.
type source struct {
	migrations []Migration
	migrSQL    map[string]string // path -> contents
	functions  []string
	funcSQL    map[string]string
}

// functionsDigest is the SHA-256 of the function files, their paths and
// contents in manifest order: what sluice.function_load records.
func (s *source) functionsDigest() string {
	h := sha256.New()
	for _, p := range s.functions {
		fmt.Fprintf(h, "%s\x00%d\x00%s\x00", p, len(s.funcSQL[p]), s.funcSQL[p])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// latest returns the highest migration version, or 0 when there is none.
func (s *source) latest() int {
	if len(s.migrations) == 0 {
		return 0
	}
	return s.migrations[len(s.migrations)-1].Version
}

func load(fsys fs.FS) (*source, error) {
	if fsys == nil {
		return nil, errors.New("schema file system is nil")
	}
	s := &source{migrSQL: make(map[string]string), funcSQL: make(map[string]string)}
	var err error
	if s.migrations, err = Migrations(fsys); err != nil {
		return nil, err
	}
	if s.functions, err = Functions(fsys); err != nil {
		return nil, err
	}
	for _, m := range s.migrations {
		b, err := fs.ReadFile(fsys, m.Path)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", m.Path, err)
		}
		s.migrSQL[m.Path] = string(b)
	}
	for _, p := range s.functions {
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", p, err)
		}
		s.funcSQL[p] = string(b)
	}
	return s, nil
}
