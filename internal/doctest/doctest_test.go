package doctest_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicemq/sluice/internal/doctest"
	"github.com/sluicemq/sluice/internal/pgtest"
)

var server *pgtest.Server

func TestMain(m *testing.M) { pgtest.Main(m, &server) }

// documents are the Markdown files whose examples run: the README and
// every page of docs/, whoever adds it.
func documents(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"../../README.md"}, docs...)
}

// TestDocs runs every sql and sh block of the README and docs/*.md (see
// docs/doctest.md): each document on a fresh database of its own, its
// blocks in order, sh blocks through the sluice command built from this
// tree, with --database-url naming that database.
func TestDocs(t *testing.T) {
	bin := t.TempDir()
	// The command is a module of its own (cmd/sluice): build it there.
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "sluice-real"), ".")
	build.Dir = "../../cmd/sluice"
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, path := range documents(t) {
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(path, "../../")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			blocks, err := doctest.Extract(string(src))
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			runDocument(t, name, blocks, bin)
		})
	}
}

// runDocument runs the blocks of one document on a database of its own.
func runDocument(t *testing.T, name string, blocks []doctest.Block, bin string) {
	url := server.NewDatabase(t)
	wrapper := writeWrapper(t, bin, url)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var conn *pgx.Conn // opened by the first sql block
	vars := map[string]string{}
	var srv *sluiceServer // started by the first sh server block
	defer func() { srv.stop(t) }()
	for _, b := range blocks {
		if b.Has("norun") || (b.Lang != "sql" && b.Lang != "sh") {
			continue
		}
		if b.Has("fresh") {
			url = server.NewDatabase(t)
			wrapper = writeWrapper(t, bin, url)
			conn, vars = nil, map[string]string{}
			srv.stop(t)
			srv = nil
		}
		where := fmt.Sprintf("%s:%d", name, b.Line)
		var err error
		switch {
		case b.Lang == "sql" && b.Has("signature"):
			err = checkSignature(ctx, url, b.Text)
		case b.Lang == "sql":
			if conn == nil {
				conn = pgtest.Connect(t, url)
			}
			err = runSQL(ctx, conn, b.Text, vars)
		case b.Lang == "sh" && b.Has("server"):
			if srv == nil {
				srv, err = startServer(ctx, wrapper)
			}
			if err == nil {
				err = runShell(ctx, wrapper, url, strings.ReplaceAll(b.Text, "127.0.0.1:7810", srv.addr))
			}
		case b.Lang == "sh":
			err = runShell(ctx, wrapper, url, b.Text)
		}
		switch {
		case b.Has("fails") && err == nil:
			t.Errorf("%s: the %s block is marked fails but succeeded:\n%s", where, b.Lang, b.Text)
		case !b.Has("fails") && err != nil:
			t.Errorf("%s: the %s block fails (mark it \"%s norun\" only if it must not run; see docs/doctest.md):\n%s\n%v",
				where, b.Lang, b.Lang, indent(b.Text), err)
		}
	}
}

// runSQL runs the statements of a block on conn, with psql's \gset and
// :'variable' (see doctest.Split and doctest.Substitute).
func runSQL(ctx context.Context, conn *pgx.Conn, text string, vars map[string]string) error {
	stmts, err := doctest.Split(text)
	if err != nil {
		return err
	}
	for _, s := range stmts {
		sql, err := doctest.Substitute(s.SQL, vars)
		if err == nil {
			err = runStatement(ctx, conn, sql, s.Gset, vars)
		}
		if err != nil {
			if conn.PgConn().TxStatus() != 'I' {
				_, _ = conn.Exec(ctx, "ROLLBACK")
			}
			return fmt.Errorf("statement at line %d of the block: %w", s.Line, err)
		}
	}
	return nil
}

func runStatement(ctx context.Context, conn *pgx.Conn, sql string, gset bool, vars map[string]string) error {
	rows, err := conn.Query(ctx, sql, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		return err
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		n++
		if gset && n == 1 {
			for i, f := range rows.FieldDescriptions() {
				vars[f.Name] = string(rows.RawValues()[i])
			}
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if gset && n != 1 {
		return fmt.Errorf("\\gset wants one row, the statement returned %d", n)
	}
	return nil
}

// signatureName reads the function name of a signature block.
var signatureName = regexp.MustCompile(`^\s*sluice\.([a-z_]+)\(`)

// checkSignature checks that the function a signature block shows exists
// with the parameters it lists, in that order.
func checkSignature(ctx context.Context, url, text string) error {
	m := signatureName.FindStringSubmatch(text)
	if m == nil {
		return fmt.Errorf("a signature block that does not start with sluice.name(")
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var args []string
	err = conn.QueryRow(ctx, `SELECT coalesce(array_agg(pg_get_function_arguments(p.oid)), '{}') FROM pg_proc p
WHERE p.pronamespace = 'sluice'::regnamespace AND p.proname = $1`, m[1]).Scan(&args)
	if err != nil {
		return err
	}
	if len(args) == 0 {
		return fmt.Errorf("there is no function sluice.%s", m[1])
	}
	for _, a := range args {
		if sameParameters(text, a) {
			return nil
		}
	}
	return fmt.Errorf("sluice.%s has the parameters %q, not those shown", m[1], args)
}

// sameParameters reports whether the parameter names of pg_get_function_
// arguments output args appear in the signature text, in order.
func sameParameters(text, args string) bool {
	pos := 0
	for _, p := range strings.Split(args, ", ") {
		name := strings.Fields(p)
		if len(name) == 0 {
			continue
		}
		i := strings.Index(text[pos:], name[0]+" ")
		if i < 0 {
			return false
		}
		pos += i + len(name[0])
	}
	return true
}

// writeWrapper writes the "sluice" that sh blocks run: the command built
// for the test, with --database-url naming the document's database.
func writeWrapper(t *testing.T, bin, url string) string {
	dir := t.TempDir()
	script := fmt.Sprintf("#!/bin/sh\nexec %q --database-url %q \"$@\"\n", filepath.Join(bin, "sluice-real"), url)
	if err := os.WriteFile(filepath.Join(dir, "sluice"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// runShell runs a sh block with the wrapper first in PATH, in a scratch
// directory, each command checked (sh -e).
func runShell(ctx context.Context, wrapperDir, url, text string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	work, err := os.MkdirTemp("", "sluice-doctest-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	cmd := exec.CommandContext(ctx, "sh", "-e", "-c", text)
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "PATH="+wrapperDir+string(os.PathListSeparator)+os.Getenv("PATH"), "DATABASE_URL="+url)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%w\n%s", err, indent(out.String()))
	}
	return nil
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}

// sluiceServer is a "sluice server" that sh server blocks talk to.
type sluiceServer struct {
	cmd  *exec.Cmd
	addr string // host:port
	log  *bytes.Buffer
}

// startServer runs "sluice server --insecure-no-auth" through the wrapper
// on a free port of 127.0.0.1 and waits until it listens.
func startServer(ctx context.Context, wrapperDir string) (*sluiceServer, error) {
	cmd := exec.Command(filepath.Join(wrapperDir, "sluice"), "server", "--insecure-no-auth", "--listen", "127.0.0.1:0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	s := &sluiceServer{cmd: cmd, log: &bytes.Buffer{}}
	cmd.Stderr = s.log
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		re := regexp.MustCompile(`listening on http://(\S+)`)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
		close(found)
	}()
	select {
	case addr, ok := <-found:
		if ok {
			s.addr = addr
			return s, nil
		}
	case <-time.After(time.Minute):
	case <-ctx.Done():
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	return nil, fmt.Errorf("sluice server did not start:\n%s", indent(s.log.String()))
}

// stop ends the server with SIGTERM, as an operator would, and checks that
// it stops cleanly.
func (s *sluiceServer) stop(t *testing.T) {
	if s == nil || s.cmd == nil {
		return
	}
	cmd := s.cmd
	s.cmd = nil
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("sluice server exited with %v:\n%s", err, indent(s.log.String()))
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Errorf("sluice server did not stop within 30s of SIGTERM")
	}
}
