package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"time"
)

// helperDir is where the command that runs a private server lives,
// relative to the repository's root: a module of its own, so that this
// package does not require embedded-postgres.
const helperDir = "internal/pgserver/cmd/pgserver"

// helper is a running internal/pgserver/cmd/pgserver: it stops its server
// when its standard input closes.
type helper struct {
	cmd   *exec.Cmd
	stdin interface{ Close() error }
	done  chan struct{} // closed when the process has been waited for
	err   error         // its exit error, valid after done
}

// findHelper returns the directory of the helper's source: above this
// package's source file (the checkout the test binary was built from),
// else above the working directory.
func findHelper() (string, error) {
	var starts []string
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		starts = append(starts, filepath.Dir(file))
	}
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	for _, d := range starts {
		for {
			dir := filepath.Join(d, filepath.FromSlash(helperDir))
			if _, err := os.Stat(filepath.Join(dir, "main.go")); err == nil {
				return dir, nil
			}
			parent := filepath.Dir(d)
			if parent == d {
				break
			}
			d = parent
		}
	}
	return "", fmt.Errorf("DATABASE_URL is not set, and %s, which starts a private PostgreSQL, is not found (it is in a checkout of sluice's repository): set DATABASE_URL to a server whose user has CREATEDB", helperDir)
}

// startHelper builds the helper with the go command, starts it, and returns
// it with the connection URL of its server's maintenance database.
func startHelper(ctx context.Context) (*helper, string, error) {
	dir, err := findHelper()
	if err != nil {
		return nil, "", err
	}
	tmp, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, "", fmt.Errorf("creating a directory for %s: %w", helperDir, err)
	}
	defer os.RemoveAll(tmp) // the running program keeps its file
	bin := filepath.Join(tmp, "pgserver")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		return nil, "", fmt.Errorf("building %s: %w\n%s", helperDir, err, out)
	}

	h := &helper{cmd: exec.Command(bin), done: make(chan struct{})}
	line := &firstLine{ch: make(chan string, 1)}
	h.cmd.Stdout, h.cmd.Stderr = line, os.Stderr
	h.cmd.SysProcAttr = helperProcAttr()
	stdin, err := h.cmd.StdinPipe()
	if err != nil {
		return nil, "", fmt.Errorf("starting %s: %w", helperDir, err)
	}
	h.stdin = stdin
	if err := h.cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("starting %s: %w", helperDir, err)
	}
	go func() {
		h.err = h.cmd.Wait()
		close(h.done)
	}()
	select {
	case url := <-line.ch:
		return h, url, nil
	case <-h.done:
		return nil, "", fmt.Errorf("%s ended without starting PostgreSQL (%v): see its messages above", helperDir, h.err)
	case <-ctx.Done():
		return nil, "", errors.Join(fmt.Errorf("waiting for PostgreSQL: %w", ctx.Err()), h.stop())
	}
}

// stop closes the helper's standard input, which makes it stop its server
// and exit, and waits for that (two minutes at most, then it is killed).
func (h *helper) stop() error {
	_ = h.stdin.Close()
	select {
	case <-h.done:
	case <-time.After(2 * time.Minute):
		_ = h.cmd.Process.Kill()
		<-h.done
		return fmt.Errorf("%s did not stop its server within 2 minutes and was killed", helperDir)
	}
	if h.err != nil {
		return fmt.Errorf("%s: %w", helperDir, h.err)
	}
	return nil
}

// firstLine is the helper's standard output: it sends the first line on
// ch and drops the rest.
type firstLine struct {
	mu   sync.Mutex
	buf  []byte
	sent bool
	ch   chan string
}

func (w *firstLine) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.sent {
		w.buf = append(w.buf, p...)
		if i := bytes.IndexByte(w.buf, '\n'); i >= 0 {
			w.ch <- string(w.buf[:i])
			w.sent, w.buf = true, nil
		}
	}
	return len(p), nil
}
