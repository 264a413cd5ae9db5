package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicemq/sluice/internal/pgmqcompat"
	"github.com/sluicemq/sluice/migrate"
	sqlsrc "github.com/sluicemq/sluice/sql"
)

// compatDBComment marks a database made by the bench for pgmq-compat, so
// that a run may drop one a killed run left behind, and no other.
const compatDBComment = "made by sluice-bench for the pgmq-compat system; dropped after the run"

// pooledSystem is implemented by a system that lives in a database of its
// own on the server: its cells, its xid holder and its table statistics use
// that database's pool.
type pooledSystem interface {
	system
	// pool is the system's own pool, nil until setup made its database.
	pool() *pgxpool.Pool
	// close drops the system's database.
	close(ctx context.Context) error
}

// poolOf returns the pool that s's connections come from.
func (r *runner) poolOf(s system) *pgxpool.Pool {
	if ps, ok := s.(pooledSystem); ok && ps.pool() != nil {
		return ps.pool()
	}
	return r.o.Pool
}

// pgmqCompatSystem is sluice's PGMQ compatibility layer (schema pgmq on
// top of schema sluice) driven with exactly pgmqSystem's statements. PGMQ
// and the layer both need schema pgmq, so the layer lives in a second
// database on the same server, <database>_pgmqcompat, made (sluice's
// migrations, then the layer) by the first setup and dropped by close.
type pgmqCompatSystem struct {
	pgmqSystem
	main   *pgxpool.Pool // the bench's pool, in the database the run was given
	out    io.Writer
	dbName string        // of the second database, once made
	db     *pgxpool.Pool // connected to it
	// reclaim rotates the layer's queue every 10 s, as sluiceSystem's
	// reclaim does (its retention is 0 already: pgmq.create gives it), so
	// that a size shows the backlog, not what waits for the next rotation.
	reclaim bool
}

func (*pgmqCompatSystem) name() string          { return "pgmq-compat" }
func (*pgmqCompatSystem) schemas() string       { return "sluice%,pgmq" }
func (s *pgmqCompatSystem) pool() *pgxpool.Pool { return s.db }

// setup makes the database on first use, then the queue (pool is not
// used: the queue is made in the system's own database).
func (s *pgmqCompatSystem) setup(ctx context.Context, _ *pgxpool.Pool) error {
	if err := s.open(ctx); err != nil {
		return err
	}
	if err := s.pgmqSystem.setup(ctx, s.db); err != nil {
		return fmt.Errorf("pgmq-compat: %w", err)
	}
	if s.reclaim {
		if _, err := s.db.Exec(ctx, `SELECT sluice.alter_queue($1, jsonb_build_object('rotate_interval', $2::text))`,
			benchQueue, reclaimRotation); err != nil {
			return fmt.Errorf("pgmq-compat: setting the rotation of queue %s: %w", benchQueue, err)
		}
	}
	return nil
}

func (s *pgmqCompatSystem) cleanup(ctx context.Context, _ *pgxpool.Pool) error {
	if s.db == nil {
		return nil
	}
	if err := s.pgmqSystem.cleanup(ctx, s.db); err != nil {
		return fmt.Errorf("pgmq-compat: %w", err)
	}
	return nil
}

// open makes the second database (dropping one an earlier run of the bench
// left behind), installs sluice's schema and the pgmq layer in it and
// connects to it with a pool like the bench's.
func (s *pgmqCompatSystem) open(ctx context.Context) error {
	if s.db != nil {
		return nil
	}
	var current string
	if err := s.main.QueryRow(ctx, `SELECT current_database()`).Scan(&current); err != nil {
		return fmt.Errorf("pgmq-compat: %w", err)
	}
	name := current + "_pgmqcompat"
	if len(name) > 63 {
		name = current[:63-len("_pgmqcompat")] + "_pgmqcompat"
	}
	var comment *string
	err := s.main.QueryRow(ctx, `SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = $1`, name).Scan(&comment)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return fmt.Errorf("pgmq-compat: looking for database %s: %w", name, err)
	case comment != nil && *comment == compatDBComment:
		fmt.Fprintf(s.out, "pgmq-compat: dropping database %s, left behind by an earlier run\n", name)
		if err := dropDatabase(ctx, s.main, name); err != nil {
			return err
		}
	default:
		return fmt.Errorf("pgmq-compat: database %s exists and was not made by the bench: drop or rename it", name)
	}
	if _, err := s.main.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{name}.Sanitize()); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42501" {
			return fmt.Errorf("pgmq-compat needs a second database and the bench's user may not create one (grant it CREATEDB): %w", err)
		}
		return fmt.Errorf("pgmq-compat: creating database %s: %w", name, err)
	}
	s.dbName = name
	if _, err := s.main.Exec(ctx, `COMMENT ON DATABASE `+pgx.Identifier{name}.Sanitize()+` IS '`+compatDBComment+`'`); err != nil {
		return errors.Join(fmt.Errorf("pgmq-compat: marking database %s: %w", name, err), s.close(ctx))
	}
	cfg := s.main.Config()
	cfg.ConnConfig.Database = name
	db, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return errors.Join(fmt.Errorf("pgmq-compat: connecting to database %s: %w", name, err), s.close(ctx))
	}
	s.db = db
	if err := s.install(ctx); err != nil {
		return errors.Join(err, s.close(ctx))
	}
	return nil
}

// install runs what "sluice migrate --pgmq" runs in the system's database.
func (s *pgmqCompatSystem) install(ctx context.Context) error {
	conn, err := s.db.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("pgmq-compat: connecting to database %s: %w", s.dbName, err)
	}
	defer conn.Release()
	if _, err := migrate.Apply(ctx, conn.Conn(), sqlsrc.FS); err != nil {
		return fmt.Errorf("pgmq-compat: migrating database %s: %w", s.dbName, err)
	}
	if _, err := pgmqcompat.Install(ctx, conn.Conn()); err != nil {
		return fmt.Errorf("pgmq-compat: installing the pgmq layer in database %s: %w", s.dbName, err)
	}
	return nil
}

// close closes the pool and drops the database, if setup made one.
func (s *pgmqCompatSystem) close(ctx context.Context) error {
	if s.db != nil {
		s.db.Close()
		s.db = nil
	}
	if s.dbName == "" {
		return nil
	}
	name := s.dbName
	s.dbName = ""
	return dropDatabase(ctx, s.main, name)
}

// dropDatabase drops database name, closing the connections still in it.
func dropDatabase(ctx context.Context, pool *pgxpool.Pool, name string) error {
	if _, err := pool.Exec(ctx, `DROP DATABASE IF EXISTS `+pgx.Identifier{name}.Sanitize()+` WITH (FORCE)`); err != nil {
		return fmt.Errorf("pgmq-compat: dropping database %s: %w", name, err)
	}
	return nil
}

// compatNote says how the pgmq-compat system runs, for a scenario's notes.
const compatNote = "pgmq-compat: sluice's pgmq schema (what `sluice migrate --pgmq` installs) driven with PGMQ's statements, in a database of its own on the same server (<database>_pgmqcompat, made for the run and dropped afterwards): PGMQ and the layer both need schema pgmq."

// prepare readies the systems of a scenario that compares PGMQ or
// pgmq-compat: PGMQ installed for the run (withPGMQ) and the database of
// each pooledSystem made (openPooled). A system that cannot be readied (no
// pip, no network, no CREATEDB) is left out with a note, not the scenario.
// remove uninstalls PGMQ: defer it before cleanupAll, which closes the
// pooled systems.
func (r *runner) prepare(ctx context.Context, systems []system) (kept []system, notes []string, remove func()) {
	remove = func() {}
	if i := slices.IndexFunc(systems, func(s system) bool { _, ok := s.(pgmqSystem); return ok }); i >= 0 {
		note, rm, err := r.withPGMQ(ctx)
		if err != nil {
			notes = append(notes, r.skipped(systems[i], err))
			systems = slices.Delete(slices.Clone(systems), i, i+1)
		} else {
			remove = rm
			notes = append(notes, note)
		}
	}
	kept, more := r.openPooled(ctx, systems)
	return kept, append(notes, more...), remove
}

// skipped reports that s is left out of the scenario, and why: it prints
// it and returns the note for the report.
func (r *runner) skipped(s system, err error) string {
	fmt.Fprintf(r.o.Out, "%s skipped: %v\n", s.name(), err)
	return fmt.Sprintf("%s skipped: %v", s.name(), err)
}

// openPooled makes the database of every pooledSystem of systems and
// returns the systems that can run, with a note for each skipped one.
func (r *runner) openPooled(ctx context.Context, systems []system) ([]system, []string) {
	var kept []system
	var notes []string
	opened := false
	for _, s := range systems {
		if ps, ok := s.(pooledSystem); ok {
			if err := r.openOne(ctx, ps); err != nil {
				notes = append(notes, r.skipped(s, err))
				continue
			}
			opened = true
		}
		kept = append(kept, s)
	}
	if opened {
		notes = append(notes, compatNote)
	}
	return kept, notes
}

// openOne makes the database of s with a trial setup, so that a server
// where it cannot be made (no CREATEDB, ...) skips s, not the scenario.
func (r *runner) openOne(ctx context.Context, s pooledSystem) error {
	err := s.setup(ctx, r.o.Pool)
	if cerr := s.cleanup(context.WithoutCancel(ctx), r.o.Pool); err == nil {
		err = cerr
	}
	if err != nil {
		if cerr := s.close(context.WithoutCancel(ctx)); cerr != nil {
			err = errors.Join(err, cerr)
		}
		return err
	}
	return nil
}

// compatTargets are issue 13's bench targets for pgmq-compat / PGMQ.
const compatTargets = "Targets (issue 13): pgmq-compat / PGMQ at least 0.90 on send, above 1.00 on drain and under a held xid."

// compatShootoutTable compares pgmq-compat with PGMQ on the shootout's
// send and drain workloads (rates[i][j]: workload i, system j), if both ran.
func compatShootoutTable(systems []system, workloads []string, rates [][]float64) (Table, bool) {
	pi := slices.IndexFunc(systems, func(s system) bool { _, ok := s.(pgmqSystem); return ok })
	ci := slices.IndexFunc(systems, func(s system) bool { _, ok := s.(*pgmqCompatSystem); return ok })
	if pi < 0 || ci < 0 {
		return Table{}, false
	}
	t := Table{Title: "shootout: pgmq-compat against PGMQ (the same statements), messages/s",
		Columns: []string{"workload", "PGMQ msg/s", "pgmq-compat msg/s", "pgmq-compat / PGMQ", "target", "met"}}
	for i, w := range workloads {
		p, c := rates[i][pi], rates[i][ci]
		target, met := "> 1.00", c > p
		if strings.HasPrefix(w, "send") {
			target, met = ">= 0.90", p > 0 && c/p >= 0.9
		}
		t.Rows = append(t.Rows, []string{w, fmtRate(p), fmtRate(c), fmtRatio(c, p), target, yesNo(met)})
	}
	return t, true
}

// compatXminTable compares pgmq-compat with PGMQ at the end of their xmin
// runs, if both ran.
func compatXminTable(sums map[string]xminSummary) (Table, bool) {
	p, okp := sums["PGMQ"]
	c, okc := sums["pgmq-compat"]
	if !okp || !okc {
		return Table{}, false
	}
	t := Table{Title: "xmin: pgmq-compat against PGMQ, at the end of the run (an xid held throughout)",
		Columns: []string{"system", "consumed/s last interval", "last / first interval", "backlog", "e2e p99 ms last interval", "max dead tuples", "size at end MB"}}
	row := func(name string, s xminSummary) []string {
		return []string{name, fmtRate(s.last), fmtRatio(s.last, s.first), fmt.Sprint(s.backlog), fmtMS(s.p99), fmt.Sprint(s.maxDead), fmt.Sprintf("%.1f", float64(s.sizeEnd)/(1<<20))}
	}
	ratio := func(a, b int64) string {
		if b == 0 {
			return "-"
		}
		return fmtRatio(float64(a), float64(b))
	}
	t.Rows = append(t.Rows, row("PGMQ", p), row("pgmq-compat", c),
		[]string{"pgmq-compat / PGMQ", fmtRatio(c.last, p.last), "", ratio(c.backlog, p.backlog), fmtRatio(c.p99, p.p99), ratio(c.maxDead, p.maxDead), ratio(c.sizeEnd, p.sizeEnd)})
	return t, true
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
