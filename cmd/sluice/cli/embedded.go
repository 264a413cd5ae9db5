package cli

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicemq/sluice/internal/pgserver"
	"github.com/sluicemq/sluice/migrate"
	sqlsrc "github.com/sluicemq/sluice/sql"
)

// The files of the embedded server's base directory:
//
//	pgNN/         the cluster of PostgreSQL major version NN
//	pgNN.log      its server log
//	pgNN.schema   digest of the SQL sources last installed in it
//	password      the password of user postgres (mode 0600)
//	lock          held (flock) by the sluice process that runs the server
//	port          the port of the running server, while it runs
const (
	fileLock     = "lock"
	filePort     = "port"
	filePassword = "password"
)

// dataHome returns the embedded server's base directory: $SLUICE_DATA_DIR,
// else $XDG_DATA_HOME/sluice, else $HOME/.local/share/sluice, else (when
// those are unusable, or private while the server runs as another user) a
// directory under the temporary directory.
func (e *env) dataHome() (string, error) {
	serverUser, err := pgserver.ServerUser()
	if err != nil {
		return "", err
	}
	usable := func(dir string) error {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		probe, err := os.CreateTemp(dir, ".probe-*")
		if err != nil {
			return err
		}
		probe.Close()
		_ = os.Remove(probe.Name())
		if serverUser != "" && !pgserver.Reachable(dir) {
			return fmt.Errorf("PostgreSQL runs as user %s (sluice runs as root), who cannot reach %s", serverUser, dir)
		}
		return nil
	}
	if d := e.getenv("SLUICE_DATA_DIR"); d != "" {
		abs, err := filepath.Abs(d)
		if err == nil {
			err = usable(abs)
		}
		if err != nil {
			return "", fmt.Errorf("SLUICE_DATA_DIR: %w", err)
		}
		return abs, nil
	}
	var candidates []string
	if d := e.getenv("XDG_DATA_HOME"); d != "" && filepath.IsAbs(d) {
		candidates = append(candidates, filepath.Join(d, "sluice"))
	}
	if home := e.getenv("HOME"); home != "" && filepath.IsAbs(home) {
		if fi, err := os.Stat(home); err == nil && fi.IsDir() {
			candidates = append(candidates, filepath.Join(home, ".local", "share", "sluice"))
		}
	}
	for _, d := range candidates {
		if usable(d) == nil {
			return d, nil
		}
	}
	d := filepath.Join(os.TempDir(), fmt.Sprintf("sluice-data-%d", os.Geteuid()))
	if err := pgserver.OwnDir(d, 0o755); err != nil {
		return "", err
	}
	return d, nil
}

// startEmbedded starts the embedded server (or joins the one another sluice
// process runs on the same data), makes sure the sluice schema is installed
// and returns its URL and the function that stops it.
func (e *env) startEmbedded(ctx context.Context) (string, func(), error) {
	base, err := e.dataHome()
	if err != nil {
		return "", nil, err
	}
	password, err := readOrCreatePassword(filepath.Join(base, filePassword))
	if err != nil {
		return "", nil, err
	}
	release, err := pgserver.Lock(filepath.Join(base, fileLock))
	if errors.Is(err, pgserver.ErrLocked) {
		return e.joinEmbedded(ctx, base, password)
	}
	if err != nil {
		return "", nil, err
	}
	version, err := pgserver.ResolveVersion(e.getenv("SLUICE_PG_VERSION"))
	if err != nil {
		release()
		return "", nil, err
	}
	portFile := filepath.Join(base, filePort)
	_ = os.Remove(portFile) // left by a process that was killed
	major, _, _ := strings.Cut(string(version), ".")
	cluster := filepath.Join(base, "pg"+major)
	fmt.Fprintf(e.stderr, "sluice: no database configured (--database-url, DATABASE_URL, PG* variables):\n"+
		"sluice: using the embedded PostgreSQL %s in %s (fetched on first use), stopped on exit\n", version, cluster)
	srv, err := pgserver.Start(ctx, pgserver.Config{Version: string(version), DataDir: cluster, Password: password})
	if err != nil {
		release()
		return "", nil, err
	}
	stop := func() {
		_ = os.Remove(portFile)
		if err := srv.Stop(); err != nil {
			fmt.Fprintf(e.stderr, "sluice: stopping the embedded PostgreSQL: %v\n", err)
		}
		release()
	}
	dbURL := srv.URL("postgres")
	if err := ensureSchema(ctx, dbURL, cluster+".schema"); err != nil {
		stop()
		return "", nil, err
	}
	if err := os.WriteFile(portFile, []byte(strconv.Itoa(srv.Port())+"\n"), 0o644); err != nil {
		stop()
		return "", nil, fmt.Errorf("writing %s: %w", portFile, err)
	}
	return dbURL, stop, nil
}

// joinEmbedded connects to the embedded server another sluice process runs,
// waiting up to a minute for it to be ready.
func (e *env) joinEmbedded(ctx context.Context, base, password string) (string, func(), error) {
	deadline := time.Now().Add(time.Minute)
	for {
		b, err := os.ReadFile(filepath.Join(base, filePort))
		if port, perr := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && perr == nil {
			u := embeddedURL(password, port)
			fmt.Fprintf(e.stderr, "sluice: no database configured: using the embedded PostgreSQL that another sluice process runs from %s (it stops when that process exits)\n", base)
			return u, func() {}, nil
		}
		if time.Now().After(deadline) {
			return "", nil, fmt.Errorf("another sluice process holds %s but its server did not become ready", filepath.Join(base, fileLock))
		}
		select {
		case <-ctx.Done():
			return "", nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// embeddedURL is the connection string of the embedded server on port.
func embeddedURL(password string, port int) string {
	return fmt.Sprintf("postgres://postgres:%s@127.0.0.1:%d/postgres?sslmode=disable", url.QueryEscape(password), port)
}

// readOrCreatePassword returns the password stored in path, making a random
// one first if there is none.
func readOrCreatePassword(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return strings.TrimSpace(string(b)), nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("reading %s: %w", path, err)
	}
	r := make([]byte, 16)
	if _, err := rand.Read(r); err != nil {
		return "", err
	}
	pw := hex.EncodeToString(r)
	if err := os.WriteFile(path, []byte(pw+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	return pw, nil
}

// ensureSchema installs or upgrades the sluice schema unless the digest in
// stamp says these SQL sources are already installed.
func ensureSchema(ctx context.Context, dbURL, stamp string) error {
	digest, err := sourcesDigest()
	if err != nil {
		return err
	}
	if b, err := os.ReadFile(stamp); err == nil && strings.TrimSpace(string(b)) == digest {
		return nil
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("connecting to the embedded PostgreSQL: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := migrate.Apply(ctx, conn, sqlsrc.FS); err != nil {
		return fmt.Errorf("installing the sluice schema in the embedded PostgreSQL: %w", err)
	}
	if err := os.WriteFile(stamp, []byte(digest+"\n"), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", stamp, err)
	}
	return nil
}

// sourcesDigest hashes the embedded SQL sources.
func sourcesDigest() (string, error) {
	h := sha256.New()
	err := fs.WalkDir(sqlsrc.FS, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(sqlsrc.FS, p)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", p, len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("reading the SQL sources: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
