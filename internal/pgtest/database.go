package pgtest

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicemq/sluice/migrate"
	sqlsrc "github.com/sluicemq/sluice/sql"
)

// templateFormat bumps every template name when the way templates are made
// changes, so stale templates on a DATABASE_URL server are not reused.
const templateFormat = "1"

// NewDatabase creates a database with the sluice schema (the embedded SQL
// sources, as migrate.Apply installs them) and returns its connection
// string. The database is dropped when the test ends.
func (s *Server) NewDatabase(t testing.TB) string {
	t.Helper()
	return s.NewDatabaseFrom(t, sqlsrc.FS)
}

// NewDatabaseFrom creates a database with schema applied by migrate.Apply,
// or an empty database when schema is nil, and returns its connection
// string. The database is dropped when the test ends.
func (s *Server) NewDatabaseFrom(t testing.TB, schema fs.FS) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	connString, drop, err := s.CreateDatabase(ctx, schema)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
		defer ccancel()
		if err := drop(cctx); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	return connString
}

// NewOwnedDatabase creates a login role named prefix plus a random suffix,
// with the role attributes attrs (such as "NOSUPERUSER NOCREATEDB"), and an
// empty database owned by it, and returns the database's connection string
// as that role. The database is dropped when the test ends, then the role.
func (s *Server) NewOwnedDatabase(t testing.TB, prefix, attrs string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	suffix := randomHex(6)
	role, password := prefix+suffix, suffix+"x"
	if _, err := s.admin.Exec(ctx, fmt.Sprintf("CREATE ROLE %s LOGIN %s PASSWORD '%s'", role, attrs, password)); err != nil {
		t.Fatalf("pgtest: creating role %s: %v", role, err)
	}
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
		defer ccancel()
		if _, err := s.admin.Exec(cctx, "DROP ROLE IF EXISTS "+role); err != nil {
			t.Errorf("pgtest: dropping role %s: %v", role, err)
		}
	})
	connString := s.NewDatabaseFrom(t, nil) // made after the role: dropped before it
	cfg, err := pgx.ParseConfig(connString)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	db := cfg.Database
	if _, err := s.admin.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s OWNER TO %s", pgx.Identifier{db}.Sanitize(), role)); err != nil {
		t.Fatalf("pgtest: giving database %s to %s: %v", db, role, err)
	}
	asRole, err := withUser(connString, role, password)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return asRole
}

// CreateDatabase is NewDatabaseFrom for code that has no testing.TB, such
// as TestMain preparing a database for runnable examples: it returns the
// database's connection string and a function that drops it.
func (s *Server) CreateDatabase(ctx context.Context, schema fs.FS) (connString string, drop func(context.Context) error, err error) {
	template := "template0"
	if schema != nil {
		if template, err = s.template(ctx, schema); err != nil {
			return "", nil, err
		}
	}
	name := "sluice_test_" + randomHex(6)
	if _, err := s.admin.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", name, template)); err != nil {
		return "", nil, fmt.Errorf("creating database %s from %s: %w", name, template, err)
	}
	drop = func(ctx context.Context) error {
		if _, err := s.admin.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", name)); err != nil {
			return fmt.Errorf("dropping database %s: %w", name, err)
		}
		return nil
	}
	connString, err = withDatabase(s.adminURL, name)
	if err != nil {
		return "", nil, errors.Join(err, drop(ctx))
	}
	return connString, drop, nil
}

// template returns the name of a template database holding schema, making
// it if needed. Its name is derived from the schema's contents, so that a
// DATABASE_URL server keeps one template per schema version across runs; an
// advisory lock in the maintenance database keeps concurrent test processes
// from building the same template twice, and a template is renamed into
// place only once complete.
func (s *Server) template(ctx context.Context, schema fs.FS) (string, error) {
	sum, err := hashFS(schema)
	if err != nil {
		return "", err
	}
	name := "sluice_tmpl_" + hex.EncodeToString(sum[:8])

	// Holding s.mu serializes template building within the process;
	// creating databases from a finished template does not wait for it.
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.templates[name] {
		return name, nil
	}

	conn, err := s.admin.Acquire(ctx)
	if err != nil {
		return "", fmt.Errorf("connecting to the maintenance database: %w", err)
	}
	defer conn.Release()
	key := int64(binary.BigEndian.Uint64(sum[8:16]))
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", key); err != nil {
		return "", fmt.Errorf("locking template %s: %w", name, err)
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, "SELECT pg_advisory_unlock($1)", key); err != nil {
			// Do not hand back a connection that may still hold the lock.
			_ = conn.Conn().Close(uctx)
		}
	}()

	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return "", fmt.Errorf("looking for template %s: %w", name, err)
	}
	if !exists {
		if err := s.buildTemplate(ctx, conn.Conn(), name, schema); err != nil {
			return "", err
		}
	}
	s.templates[name] = true
	return name, nil
}

// buildTemplate creates database name with schema applied, under a
// temporary name that is renamed once the schema is in.
func (s *Server) buildTemplate(ctx context.Context, admin *pgx.Conn, name string, schema fs.FS) error {
	building := name + "_building"
	for _, stmt := range []string{
		fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", building),
		fmt.Sprintf("CREATE DATABASE %s TEMPLATE template0", building),
	} {
		if _, err := admin.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("making template %s: %w", name, err)
		}
	}
	connString, err := withDatabase(s.adminURL, building)
	if err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, connString)
	if err != nil {
		return fmt.Errorf("connecting to template %s: %w", building, err)
	}
	_, err = migrate.Apply(ctx, conn, schema)
	if cerr := conn.Close(ctx); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("migrating template %s: %w", building, err)
	}
	// RENAME waits (up to 5 s) for the closed session to go away.
	for _, stmt := range []string{
		fmt.Sprintf("ALTER DATABASE %s RENAME TO %s", building, name),
		fmt.Sprintf("ALTER DATABASE %s WITH IS_TEMPLATE true ALLOW_CONNECTIONS false", name),
	} {
		if _, err := admin.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("making template %s: %w", name, err)
		}
	}
	return nil
}

// hashFS hashes the names and contents of all files in fsys (and the
// template format).
func hashFS(fsys fs.FS) ([32]byte, error) {
	h := sha256.New()
	fmt.Fprintf(h, "pgtest template format %s\n", templateFormat)
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", p, len(b))
		h.Write(b)
		return nil
	})
	var sum [32]byte
	if err != nil {
		return sum, fmt.Errorf("reading the schema files: %w", err)
	}
	copy(sum[:], h.Sum(nil))
	return sum, nil
}
