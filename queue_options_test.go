package sluice_test

import (
	"encoding/json"
	"errors"
	"maps"
	"math"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluicemq/sluice"
)

// The table of queue options (test/queue_options.json), from which every
// client's options are checked, is the engine's list: the names, kinds and
// defaults of sluice._options' defaults, and the ranges it enforces. And
// QueueOptions has one field of the option's kind per row, and no other:
// a row without a field fails here (and in the option's conformance
// vector), as does a field the engine does not know.
func TestQueueOptionTable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var data []byte
	if err := b.pool.QueryRow(b.ctx, `SELECT sluice._options(NULL)`).Scan(&data); err != nil {
		t.Fatal(err)
	}
	var engine map[string]any
	if err := json.Unmarshal(data, &engine); err != nil {
		t.Fatal(err)
	}
	table := map[string]bool{}
	for _, row := range optionTable.Options {
		table[row.Name] = true
		def, ok := engine[row.Name]
		if !ok {
			t.Errorf("option %s of the table is not the engine's (sluice._options)", row.Name)
			continue
		}
		var kind string
		switch def.(type) {
		case float64:
			kind = "integer"
		case bool:
			kind = "boolean"
		case string:
			kind = "duration"
			var s float64
			if err := b.pool.QueryRow(b.ctx, `SELECT extract(epoch FROM $1::interval)::float8`, def).Scan(&s); err != nil {
				t.Fatal(err)
			}
			def = s
		}
		if kind != row.Kind {
			t.Errorf("option %s: the table says %s, the engine's default %v is %s", row.Name, row.Kind, engine[row.Name], kind)
		}
		if !reflect.DeepEqual(def, normalize(row.Default)) {
			t.Errorf("option %s: the table's default is %v, the engine's %v", row.Name, row.Default, def)
		}
		if row.Kind != "boolean" {
			checkRange(t, b, row.Name, row.Kind, *row.Min, *row.Max, row.With)
		}
	}
	for name := range engine {
		if !table[name] {
			t.Errorf("the engine's option %s has no row in test/queue_options.json", name)
		}
	}

	kinds := map[reflect.Type]string{reflect.TypeOf(new(int)): "integer", reflect.TypeOf(new(time.Duration)): "duration",
		reflect.TypeOf(new(bool)): "boolean"}
	fields := map[string]bool{}
	typ := reflect.TypeOf(sluice.QueueOptions{})
	for i := range typ.NumField() {
		f := typ.Field(i)
		name := fieldOption(f.Name)
		fields[name] = true
		row, ok := tableOption(name)
		switch {
		case !ok:
			t.Errorf("QueueOptions.%s: the engine has no option %s", f.Name, name)
		case kinds[f.Type] != row.Kind:
			t.Errorf("QueueOptions.%s is %s, option %s is a %s", f.Name, f.Type, name, row.Kind)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(table)) {
		if !fields[name] {
			t.Errorf("QueueOptions has no field %s for the engine's option %s", optionField(name), name)
		}
	}
}

// normalize turns a JSON number into float64, as json.Unmarshal reads it.
func normalize(v any) any {
	if n, ok := v.(int); ok {
		return float64(n)
	}
	return v
}

// checkRange checks that the engine takes option name at min and max and
// refuses it (SL007) one step (1, or a microsecond) beyond either.
func checkRange(t *testing.T, b *bundle, name, kind string, lo, hi float64, with map[string]any) {
	t.Helper()
	render := func(x float64) any {
		if kind == "integer" {
			return int64(x)
		}
		return sluice.IntervalString(time.Duration(math.Round(x*1e6)) * time.Microsecond)
	}
	step := 1.0
	if kind == "duration" {
		step = 1e-6
	}
	for _, c := range []struct {
		v  float64
		ok bool
	}{{lo, true}, {hi, true}, {lo - step, false}, {hi + step, false}} {
		opts := map[string]any{}
		maps.Copy(opts, with)
		for k, v := range opts {
			if row, _ := tableOption(k); row.Kind == "duration" {
				opts[k] = render(v.(float64))
			}
		}
		opts[name] = render(c.v)
		_, err := b.pool.Exec(b.ctx, `SELECT sluice._options($1::jsonb)`, opts)
		var pgErr *pgconn.PgError
		switch {
		case c.ok && err != nil:
			t.Errorf("option %s: the engine refuses %v (the table's range): %v", name, opts[name], err)
		case !c.ok && (!errors.As(err, &pgErr) || pgErr.Code != "SL007"):
			t.Errorf("option %s: the engine takes %v, beyond the table's range, or fails otherwise: %v", name, opts[name], err)
		}
	}
}
