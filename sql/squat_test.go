package sqlsrc_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// A role with CREATE on the database and no sluice role creates schemas of
// the names sluice uses (squatting): sluice_dropped_q999, and
// sluice_q<id>/sluice_dropped_q<id> of the next queue ids. create_queue,
// drop_queue and maintain go on (they failed with "permission denied for
// schema" until someone dropped the schema, and each squatted id made a
// create fail once), skipping the squatted names, and leave those schemas
// alone.
func TestSquattedSchemasAreSkipped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	name, password := b.createLogin("squatter", "")
	var db string
	if err := b.pool.QueryRow(b.ctx, "SELECT current_database()").Scan(&db); err != nil {
		t.Fatal(err)
	}
	b.exec(fmt.Sprintf("GRANT CREATE ON DATABASE %s TO %s", pgx.Identifier{db}.Sanitize(), pgx.Identifier{name}.Sanitize()))
	t.Cleanup(func() { // (before the role is dropped: it owns the schemas)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := b.pool.Exec(ctx, "DROP OWNED BY "+pgx.Identifier{name}.Sanitize()); err != nil {
			t.Errorf("DROP OWNED BY %s: %v", name, err)
		}
	})
	b.createQueue("first", "")
	next := b.int64(`SELECT max(id) + 1 FROM sluice.queue`)
	squatter := connectAs(t, b.ctx, b.pool.Config().ConnString(), name, password)
	squats := []string{"sluice_dropped_q999"}
	for id := next; id < next+3; id++ {
		squats = append(squats, fmt.Sprintf("sluice_q%d", id), fmt.Sprintf("sluice_dropped_q%d", id+3))
	}
	for _, s := range squats {
		if _, err := squatter.Exec(b.ctx, "CREATE SCHEMA "+s); err != nil {
			t.Fatalf("CREATE SCHEMA %s as %s: %v", s, name, err)
		}
	}
	b.createQueue("second", "")
	if id := b.int64(`SELECT id FROM sluice.queue WHERE name = 'second'`); id >= next && id < next+6 {
		t.Fatalf("queue second has id %d, whose schema names were squatted", id)
	}
	b.send(b.pool, "second", `{"n": 1}`)
	if got := b.receive("second", "default", 1, ""); len(got) != 1 {
		t.Fatalf("received %v", got)
	}
	b.exec(`SELECT * FROM sluice.maintain()`)
	for _, q := range []string{"first", "second"} {
		var existed bool
		if err := b.pool.QueryRow(b.ctx, `SELECT sluice.drop_queue($1)`, q).Scan(&existed); err != nil || !existed {
			t.Fatalf("drop_queue(%s): %v, %v", q, existed, err)
		}
	}
	b.createQueue("third", "")
	if n := b.int64(`SELECT count(*) FROM pg_namespace WHERE nspname = ANY($1)`, squats); n != int64(len(squats)) {
		t.Fatalf("%d of the %d squatted schemas are left", n, len(squats))
	}
	if id := b.int64(`SELECT id FROM sluice.queue WHERE name = 'third'`); id >= next && id < next+6 {
		t.Fatalf("queue third has id %d, whose schema names were squatted", id)
	}
}
