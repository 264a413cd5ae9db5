package sqlsrc_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/pgtest"
	"github.com/sluicemq/sluice/migrate"
	sqlsrc "github.com/sluicemq/sluice/sql"
)

// A migrate with nothing to do changes nothing: no function is created
// again (their catalog rows keep their xmin).
func TestMigrateUpToDateLoadsNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := server.NewDatabaseFrom(t, nil)
	conn := pgtest.Connect(t, url)
	if _, err := migrate.Apply(ctx, conn, sqlsrc.FS); err != nil {
		t.Fatal(err)
	}
	b := &bundle{t: t, ctx: ctx, pool: pgtest.NewPool(t, url)}
	b.createQueue("one", "")
	b.createQueue("two", `{"engine": 2}`)
	xmins := func() string {
		var s string
		if err := conn.QueryRow(ctx, `SELECT string_agg(p.oid || ':' || p.xmin, ',' ORDER BY p.oid) FROM pg_proc p
			JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname LIKE 'sluice%'`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := xmins()
	res, err := migrate.Apply(ctx, conn, sqlsrc.FS)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Applied) != 0 || len(res.Functions) != 0 {
		t.Errorf("migrate of an up-to-date database: applied %d, reloaded %d function files; want nothing",
			len(res.Applied), len(res.Functions))
	}
	if after := xmins(); after != before {
		t.Errorf("migrate of an up-to-date database rewrote functions")
	}
}

// An upgrade that loads the functions again (forced here by forgetting
// the loaded digest) replaces every queue's function copies in place:
// consumers of both engines receiving and acking meanwhile see no error,
// and nothing is lost or delivered twice.
func TestMigrateUnderLoadFailsNoCall(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	url := server.NewDatabaseFrom(t, nil)
	conn := pgtest.Connect(t, url)
	if _, err := migrate.Apply(ctx, conn, sqlsrc.FS); err != nil {
		t.Fatal(err)
	}
	b := &bundle{t: t, ctx: ctx, pool: pgtest.NewPool(t, url)}
	queues := []string{"load1", "load2"}
	b.createQueue("load1", "")
	b.createQueue("load2", `{"engine": 2}`)
	const perQueue = 600
	for _, q := range queues {
		b.exec(`SELECT count(*) FROM sluice.send_batch($1, ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, $2::int) g))`,
			q, perQueue)
	}
	var failures atomic.Int64
	var mu sync.Mutex
	seen := map[string]map[int64]int{"load1": {}, "load2": {}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, q := range queues {
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					rows, err := b.pool.Query(ctx, `SELECT id, receipt FROM sluice.receive($1, 'default', 5)`, q)
					var ids []int64
					var rcpts []string
					if err == nil {
						for rows.Next() {
							var id int64
							var r string
							if err = rows.Scan(&id, &r); err != nil {
								break
							}
							ids, rcpts = append(ids, id), append(rcpts, r)
						}
						rows.Close()
						if err == nil {
							err = rows.Err()
						}
					}
					if err == nil && len(rcpts) > 0 {
						_, err = b.pool.Exec(ctx, `SELECT sluice.ack($1, 'default', $2)`, q, rcpts)
					}
					if err != nil {
						failures.Add(1)
						t.Errorf("a call on %s during the migrations: %v", q, err)
						return
					}
					mu.Lock()
					for _, id := range ids {
						seen[q][id]++
					}
					mu.Unlock()
					if len(ids) == 0 {
						time.Sleep(5 * time.Millisecond)
					}
				}
			}()
		}
	}
	for i := range 20 {
		if _, err := conn.Exec(ctx, `DELETE FROM sluice.function_load`); err != nil {
			t.Fatal(err)
		}
		res, err := migrate.Apply(ctx, conn, sqlsrc.FS)
		if err != nil {
			t.Fatalf("migrate %d: %v", i+1, err)
		}
		if len(res.Functions) == 0 {
			t.Fatalf("migrate %d reloaded nothing; the test needs it to", i+1)
		}
	}
	deadline := time.Now().Add(time.Minute)
	for {
		mu.Lock()
		done := len(seen["load1"]) == perQueue && len(seen["load2"]) == perQueue
		mu.Unlock()
		if done || time.Now().After(deadline) || failures.Load() > 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	for _, q := range queues {
		if len(seen[q]) != perQueue {
			t.Errorf("%s: %d distinct messages received, want %d", q, len(seen[q]), perQueue)
		}
		for id, n := range seen[q] {
			if n != 1 {
				t.Errorf("%s: message %d received %d times", q, id, n)
			}
		}
	}
}
