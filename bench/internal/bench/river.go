package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// riverSchema holds River's tables for the benchmark. Its name must not
// match "sluice%", the pattern the xmin scenario watches.
const riverSchema = "riverbench"

// riverModule is River's Go module, for its version in the report.
const riverModule = "github.com/riverqueue/river"

// riverFetchCooldown is the shortest pause River allows between two fetches
// of a queue (river.FetchCooldownMin; the default is 100 ms, which caps a
// client at MaxWorkers jobs per 100 ms).
const riverFetchCooldown = river.FetchCooldownMin

// riverArgs are the arguments of the benchmark's River job: the send time
// by the client's clock (Unix nanoseconds; not used for latency, which is
// by the server's clock, but it keeps the arguments the size of the other
// systems' bodies) and the padding.
type riverArgs struct {
	T int64  `json:"t"`
	P string `json:"p"`
}

func (riverArgs) Kind() string { return "bench" }

// InsertOpts puts the jobs in the queue "bench", the one the workers of
// runConsumers work.
func (riverArgs) InsertOpts() river.InsertOpts { return river.InsertOpts{Queue: benchQueue} }

// riverWorker works the benchmark's jobs: it does nothing but count the
// job (c) and record its end-to-end latency (lat, if not nil) by the
// server's clock, from River's own timestamps: attempted_at, now() of the
// fetch that handed the job to a worker, minus created_at, now() of the
// insert transaction.
type riverWorker struct {
	river.WorkerDefaults[riverArgs]
	c   *counters
	lat *recorder
}

func (w *riverWorker) Work(_ context.Context, job *river.Job[riverArgs]) error {
	if w.lat != nil && job.AttemptedAt != nil {
		w.lat.add(float64(job.AttemptedAt.Sub(job.CreatedAt)) / float64(time.Millisecond))
	}
	if w.c != nil {
		w.c.done.Add(1)
	}
	return nil
}

// riverSystem is River (github.com/riverqueue/river, driver riverpgxv5), a
// Go job queue, driven as its users run it: rivermigrate installs its
// tables in the schema riverbench (River's Schema option) and removes them
// again; producers insert through a river.Client (Insert for one job,
// InsertMany for a batch: one transaction each); consumers are the workers
// of a started river.Client (MaxWorkers = consumers x batch), whose no-op job
// counts itself and records its end-to-end latency. It is a clientSystem:
// the cell helpers call sendBatch and runConsumers, never sendSQL or
// consume.
//
// River gets a pool of its own for each install, configured as the
// benchmark's: its tables are made afresh for every cell, and connections
// that prepared statements on the previous tables would fail on the new
// ones ("cached plan must not change result type").
type riverSystem struct {
	// base is the benchmark's pool, whose configuration River's pools copy.
	base *pgxpool.Pool
	// poll is the client's FetchPollInterval (at least riverFetchCooldown).
	poll time.Duration
	// log receives River's warnings and errors.
	log *slog.Logger
	// pool and inserter (the insert-only client) are those of the current
	// install, made by setup and dropped by cleanup.
	pool     *pgxpool.Pool
	inserter *river.Client[pgx.Tx]
}

func newRiverSystem(base *pgxpool.Pool, poll time.Duration, out io.Writer) *riverSystem {
	return &riverSystem{
		base: base,
		poll: max(poll, riverFetchCooldown),
		log:  slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
}

func (*riverSystem) name() string    { return "River" }
func (*riverSystem) schemas() string { return riverSchema }

// config is the client configuration of the benchmark: workers run jobs
// when maxWorkers > 0 (one queue), else the client
// only inserts. Everything not set here is River's default (LISTEN/NOTIFY
// on, completed jobs kept 24 hours, ...).
func (s *riverSystem) config(workers *river.Workers, maxWorkers int) *river.Config {
	cfg := &river.Config{
		Schema:            riverSchema,
		FetchCooldown:     riverFetchCooldown,
		FetchPollInterval: s.poll,
		Logger:            s.log,
		Workers:           workers,
	}
	if maxWorkers > 0 {
		cfg.Queues = map[string]river.QueueConfig{benchQueue: {MaxWorkers: maxWorkers}}
	}
	return cfg
}

// settings describes config for the report.
func (s *riverSystem) settings() string {
	return fmt.Sprintf("Schema %q, FetchCooldown %s (River's minimum; default 100ms), FetchPollInterval %s (--poll; default 1s), LISTEN/NOTIFY on (the default), MaxWorkers = consumers x batch (as many jobs in flight as the others' consumers hold), every other option River's default",
		riverSchema, riverFetchCooldown, s.poll)
}

// migrator returns River's migrator for the schema riverbench.
func (s *riverSystem) migrator(pool *pgxpool.Pool) (*rivermigrate.Migrator[pgx.Tx], error) {
	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: riverSchema, Logger: s.log})
	if err != nil {
		return nil, fmt.Errorf("river: making the migrator: %w", err)
	}
	return m, nil
}

// setup installs River's tables afresh (rivermigrate up, in the schema
// riverbench) and makes River's pool and the insert-only client.
func (s *riverSystem) setup(ctx context.Context, pool *pgxpool.Pool) error {
	if err := s.cleanup(ctx, pool); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, `CREATE SCHEMA `+riverSchema); err != nil {
		return fmt.Errorf("river: creating schema %s: %w", riverSchema, err)
	}
	var err error
	if s.pool, err = pgxpool.NewWithConfig(ctx, pool.Config()); err != nil {
		return fmt.Errorf("river: connecting: %w", err)
	}
	m, err := s.migrator(s.pool)
	if err != nil {
		return err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("river: migrating up: %w", err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &riverWorker{})
	if s.inserter, err = river.NewClient(riverpgxv5.New(s.pool), s.config(workers, 0)); err != nil {
		return fmt.Errorf("river: making the client: %w", err)
	}
	return nil
}

// cleanup removes River's tables (rivermigrate down to nothing) and the
// schema riverbench, and closes River's pool.
func (s *riverSystem) cleanup(ctx context.Context, pool *pgxpool.Pool) error {
	s.inserter = nil
	if s.pool != nil {
		s.pool.Close()
		s.pool = nil
	}
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, riverSchema+".river_migration").Scan(&exists); err != nil {
		return fmt.Errorf("river: looking for its tables: %w", err)
	}
	var errs []error
	if exists {
		m, err := s.migrator(pool)
		if err == nil {
			_, err = m.Migrate(ctx, rivermigrate.DirectionDown, &rivermigrate.MigrateOpts{TargetVersion: -1})
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("river: migrating down: %w", err))
		}
	}
	if _, err := pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+riverSchema+` CASCADE`); err != nil {
		errs = append(errs, fmt.Errorf("river: dropping schema %s: %w", riverSchema, err))
	}
	return errors.Join(errs...)
}

// sendBatch inserts batch jobs in one transaction: Insert for one,
// InsertMany otherwise.
func (s *riverSystem) sendBatch(ctx context.Context, batch int, pad string) error {
	if s.inserter == nil {
		return errors.New("river: not set up")
	}
	if batch == 1 {
		_, err := s.inserter.Insert(ctx, riverArgs{T: time.Now().UnixNano(), P: pad}, nil)
		return err
	}
	params := make([]river.InsertManyParams, batch)
	t := time.Now().UnixNano()
	for i := range params {
		params[i] = river.InsertManyParams{Args: riverArgs{T: t, P: pad}}
	}
	_, err := s.inserter.InsertMany(ctx, params)
	return err
}

// runConsumers starts a client whose queue has MaxWorkers = consumers x
// batch and stops it (gracefully: running jobs finish, completions are
// written) at deadline or once enough returns true. River has no batch size:
// a fetch takes as many jobs as there are idle workers, so MaxWorkers gives
// it as many jobs in flight as the other systems' consumers hold.
func (s *riverSystem) runConsumers(ctx context.Context, consumers, batch int, deadline time.Time, enough func() bool, c *counters, lat *recorder) error {
	if s.pool == nil {
		return errors.New("river: not set up")
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &riverWorker{c: c, lat: lat})
	client, err := river.NewClient(riverpgxv5.New(s.pool), s.config(workers, consumers*max(batch, 1)))
	if err != nil {
		return fmt.Errorf("river: making the client: %w", err)
	}
	if err := client.Start(ctx); err != nil {
		return fmt.Errorf("river: starting the client: %w", err)
	}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	var runErr error
wait:
	for time.Now().Before(deadline) && (enough == nil || !enough()) {
		select {
		case <-ctx.Done():
			runErr = ctx.Err()
			break wait
		case <-client.Stopped():
			runErr = errors.New("river: the client stopped by itself")
			break wait
		case <-tick.C:
		}
	}
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := client.Stop(stopCtx); err != nil {
		runErr = errors.Join(runErr, fmt.Errorf("river: stopping the client: %w", err))
	}
	return runErr
}

// sendSQL is never called: riverSystem is a clientSystem, sent through
// sendBatch.
func (*riverSystem) sendSQL(int) string { return "" }

// consume is never called by the cell helpers, which run River's own
// workers (runConsumers); there is no receive call of River to time.
func (*riverSystem) consume(context.Context, *pgxpool.Conn, int) (int, []float64, time.Duration, error) {
	return 0, nil, 0, errors.New("river: consumed only by its client's workers, not by a receive call")
}

// version is River's module version in this binary, with its newest
// migration.
func (s *riverSystem) version() string {
	v := "(version unknown: no build information)"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == riverModule {
				v = d.Version
				if d.Replace != nil {
					v += " (replaced by " + d.Replace.Path + " " + d.Replace.Version + ")"
				}
			}
		}
	}
	if m, err := s.migrator(s.base); err == nil {
		if all := m.AllVersions(); len(all) > 0 {
			v += fmt.Sprintf(", schema migration %d", all[len(all)-1].Version)
		}
	}
	return v
}
