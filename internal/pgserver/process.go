package pgserver

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// runtimePrefix starts the name of each temporary server's directory under
// the system temporary directory; the owning process's PID follows, so that
// directories left by a killed process can be found and removed.
const runtimePrefix = "sluice-pgtest-"

// serverUser is who runs initdb and postgres: uid and gid -1 mean the
// current user.
type serverUser struct {
	name     string
	uid, gid int
}

// chooseUser returns the current user, unless that is root, which PostgreSQL
// refuses to run as: then name, else $SLUICE_PG_USER, else nobody.
func chooseUser(name string) (serverUser, error) {
	if os.Geteuid() != 0 {
		return serverUser{uid: -1, gid: -1}, nil
	}
	if name == "" {
		name = os.Getenv("SLUICE_PG_USER")
	}
	if name == "" {
		name = "nobody"
	}
	u, err := user.Lookup(name)
	if err != nil {
		return serverUser{}, fmt.Errorf("running as root, PostgreSQL must run as another user: looking up %q (set SLUICE_PG_USER to an unprivileged user): %w", name, err)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil || uid == 0 {
		return serverUser{}, fmt.Errorf("user %q (uid %s, gid %s) cannot run PostgreSQL: set SLUICE_PG_USER to an unprivileged user", name, u.Uid, u.Gid)
	}
	return serverUser{name: name, uid: uid, gid: gid}, nil
}

// process is a PostgreSQL server run as a child of this process.
type process struct {
	cmd     *exec.Cmd
	dataDir string        // the cluster
	logPath string        // postgres.log
	tempDir string        // removed by stop unless empty: holds data/, the socket, postgres.log
	done    chan struct{} // closed once postgres has exited and been reaped
}

// privateConfig is what startPrivate needs to know.
type privateConfig struct {
	binDir   string
	user     serverUser
	password string
	dataDir  string // persistent cluster directory; empty for a fresh temporary one
	port     int    // 0: a free port
}

// startPrivate starts postgres on a free loopback port: on a fresh cluster
// in a new temporary directory, or on cfg.dataDir, initializing it first if
// it holds no cluster yet. It returns the running process and the port.
func startPrivate(ctx context.Context, cfg privateConfig) (*process, int, error) {
	var layout process
	if cfg.dataDir == "" {
		sweepStale()
		dir, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", runtimePrefix, os.Getpid()))
		if err != nil {
			return nil, 0, fmt.Errorf("creating the runtime directory: %w", err)
		}
		layout = process{dataDir: filepath.Join(dir, "data"), logPath: filepath.Join(dir, "postgres.log"), tempDir: dir}
		if err := cfg.own(dir); err != nil {
			_ = os.RemoveAll(dir)
			return nil, 0, err
		}
	} else {
		layout = process{dataDir: cfg.dataDir, logPath: cfg.dataDir + ".log"}
	}
	ok := false
	defer func() {
		if !ok && layout.tempDir != "" {
			_ = os.RemoveAll(layout.tempDir)
		}
	}()
	if _, err := os.Stat(filepath.Join(layout.dataDir, "PG_VERSION")); err != nil {
		if err := initdb(ctx, cfg, layout.dataDir); err != nil {
			return nil, 0, err
		}
	}

	// A free port can be taken by someone else before postgres binds it:
	// try a few.
	var lastErr error
	for attempt := 0; attempt < 20; attempt++ {
		port := cfg.port
		if port == 0 {
			var err error
			if port, err = freePort(); err != nil {
				return nil, 0, err
			}
		}
		p, err := launch(cfg, layout, port)
		if err != nil {
			return nil, 0, err
		}
		err = p.waitReady(ctx, port, cfg.password)
		if err == nil {
			ok = true
			return p, port, nil
		}
		_ = p.stop()
		lastErr = err
		switch {
		case strings.Contains(err.Error(), "pre-existing shared memory block"):
			// Just after a crash (Kill) the old processes' shared memory can
			// stay attached a little longer than the processes: wait.
			time.Sleep(250 * time.Millisecond)
		case strings.Contains(err.Error(), "could not bind") || strings.Contains(err.Error(), "already in use"):
			if attempt >= 2 {
				return nil, 0, lastErr
			}
		default:
			return nil, 0, lastErr
		}
	}
	return nil, 0, lastErr
}

// own hands path to the server user.
func (cfg privateConfig) own(path string) error {
	if cfg.user.uid < 0 {
		return nil
	}
	if err := os.Chown(path, cfg.user.uid, cfg.user.gid); err != nil {
		return fmt.Errorf("handing %s to user %s: %w", path, cfg.user.name, err)
	}
	return nil
}

// command builds an exec.Cmd for one of the PostgreSQL binaries, run as the
// server user in directory dir, in its own process group, with a clean
// environment.
func (cfg privateConfig) command(dir, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(cfg.binDir, "bin", name), args...)
	cmd.Dir = dir
	env := []string{"HOME=" + dir, "LC_ALL=C", "TZ=UTC"}
	for _, kv := range os.Environ() {
		// PG* variables (PGDATA, PGPORT, ...) would change what the
		// binaries do.
		if strings.HasPrefix(kv, "PATH=") || strings.HasPrefix(kv, "LD_LIBRARY_PATH=") {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	cmd.SysProcAttr = sysProcAttr(cfg.user.uid, cfg.user.gid)
	return cmd
}

// initdb makes a cluster in dataDir, whose parent must exist.
func initdb(ctx context.Context, cfg privateConfig, dataDir string) error {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", dataDir, err)
	}
	if err := cfg.own(dataDir); err != nil {
		return err
	}
	// The password file sits in the data directory (readable by the server
	// user only) and is removed once initdb has read it.
	pwfile := filepath.Join(dataDir, "pwfile")
	if err := os.WriteFile(pwfile, []byte(cfg.password+"\n"), 0o600); err != nil {
		return fmt.Errorf("writing the password file: %w", err)
	}
	if err := cfg.own(pwfile); err != nil {
		_ = os.Remove(pwfile)
		return err
	}
	// initdb wants an empty directory: it gets a subdirectory, renamed into
	// place afterwards, so that an interrupted initdb leaves no half cluster.
	building := filepath.Join(dataDir, "initdb")
	_ = os.RemoveAll(building)
	cmd := cfg.command(dataDir, "initdb",
		"--pgdata", building,
		"--username", "postgres",
		"--auth", "scram-sha-256",
		"--pwfile", pwfile,
		"--encoding", "UTF8",
		"--locale", "C",
		"--no-sync",
	)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		_ = os.Remove(pwfile)
		return fmt.Errorf("running initdb: %w", err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	var err error
	select {
	case err = <-waited:
		if err != nil {
			err = fmt.Errorf("initdb: %w\n%s", err, out.String())
		}
	case <-ctx.Done():
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-waited
		err = fmt.Errorf("initdb: %w", ctx.Err())
	}
	_ = os.Remove(pwfile)
	if err != nil {
		_ = os.RemoveAll(building)
		return err
	}
	return moveUp(building, dataDir)
}

// moveUp moves the entries of dir into its parent, then removes dir.
func moveUp(dir, parent string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("reading %s: %w", dir, err)
	}
	// PG_VERSION last: its presence marks a complete cluster.
	sort.Slice(entries, func(i, j int) bool { return entries[j].Name() == "PG_VERSION" })
	for _, e := range entries {
		if err := os.Rename(filepath.Join(dir, e.Name()), filepath.Join(parent, e.Name())); err != nil {
			return fmt.Errorf("moving the new cluster into %s: %w", parent, err)
		}
	}
	if err := os.Remove(dir); err != nil {
		return fmt.Errorf("removing %s: %w", dir, err)
	}
	return nil
}

// launch starts postgres on port with the directories of layout. The
// process is started from a goroutine locked to its OS thread that stays
// alive until postgres exits, because the parent-death signal (see
// sysProcAttr) fires when the thread that started the child ends.
func launch(cfg privateConfig, layout process, port int) (*process, error) {
	logFile, err := os.OpenFile(layout.logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("creating %s: %w", layout.logPath, err)
	}
	socketDir := ""
	if layout.tempDir != "" {
		socketDir = layout.tempDir
	}
	cmd := cfg.command(filepath.Dir(layout.dataDir), "postgres",
		"-D", layout.dataDir,
		"-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories="+socketDir,
		"-c", "max_connections=250",
		"-c", "logging_collector=off",
		"-c", "log_min_messages=warning",
	)
	cmd.Stdout, cmd.Stderr = logFile, logFile

	p := &layout
	p.cmd = cmd
	p.done = make(chan struct{})
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// The thread is never unlocked: it ends with this goroutine, after
		// postgres has exited.
		err := cmd.Start()
		_ = logFile.Close()
		started <- err
		if err == nil {
			_ = cmd.Wait()
		}
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("starting postgres: %w", err)
	}
	return p, nil
}

// waitReady waits until postgres accepts connections, exits, or a minute has
// passed.
func (p *process) waitReady(ctx context.Context, port int, password string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	url := connURL(port, password, "postgres")
	for {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		conn, err := pgx.Connect(cctx, url)
		ccancel()
		if err == nil {
			_ = conn.Close(ctx)
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("postgres exited during startup:\n%s", p.logTail())
		case <-ctx.Done():
			return fmt.Errorf("waiting for postgres to accept connections: %w (last: %v)\n%s", ctx.Err(), err, p.logTail())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stop shuts postgres down (fast shutdown, then SIGKILL to its process group
// after 30 seconds) and removes its temporary directory, if any.
func (p *process) stop() error {
	var errs []error
	pid := p.cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGINT); err != nil && !errors.Is(err, syscall.ESRCH) {
		errs = append(errs, fmt.Errorf("signalling postgres (pid %d): %w", pid, err))
	}
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		// The group still exists: its leader has not been reaped yet.
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-p.done
		errs = append(errs, fmt.Errorf("postgres (pid %d) did not shut down in 30s and was killed:\n%s", pid, p.logTail()))
	}
	if p.tempDir != "" {
		if err := os.RemoveAll(p.tempDir); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", p.tempDir, err))
		}
	}
	return errors.Join(errs...)
}

// kill sends SIGKILL to the postmaster, its process group and each of its
// children (which lead process groups of their own), and waits until they
// are all gone.
func (p *process) kill() error {
	pid := p.cmd.Process.Pid
	kids := children(pid) // before the postmaster dies: then they are reparented
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("killing postgres (pid %d): %w", pid, err)
	}
	for _, k := range kids {
		_ = syscall.Kill(k, syscall.SIGKILL)
	}
	<-p.done
	deadline := time.Now().Add(30 * time.Second)
	alive := func() bool {
		if syscall.Kill(-pid, 0) == nil {
			return true
		}
		for _, k := range kids {
			if syscall.Kill(k, 0) == nil {
				return true
			}
		}
		return false
	}
	for alive() {
		if time.Now().After(deadline) {
			return fmt.Errorf("processes of postgres (pid %d) still alive 30s after SIGKILL", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if p.tempDir != "" {
		if err := os.RemoveAll(p.tempDir); err != nil {
			return fmt.Errorf("removing %s: %w", p.tempDir, err)
		}
	}
	return nil
}

// logTail returns the end of postgres.log.
func (p *process) logTail() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	const max = 4000
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}

// sweepStale removes the directories of private servers whose test process
// is gone (killed before it could clean up); their postgres was stopped by
// the parent-death signal.
func sweepStale() {
	matches, _ := filepath.Glob(filepath.Join(os.TempDir(), runtimePrefix+"*-*"))
	for _, dir := range matches {
		pidText, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(dir), runtimePrefix), "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_ = os.RemoveAll(dir)
		}
	}
}

// freePort asks the kernel for a free TCP port on 127.0.0.1.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// connURL is the URL of database db on the private server.
func connURL(port int, password, db string) string {
	return fmt.Sprintf("postgres://postgres:%s@127.0.0.1:%d/%s?sslmode=disable", password, port, db)
}

// randomHex returns n random bytes as hex.
func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand failed: %v", err))
	}
	return hex.EncodeToString(b)
}
