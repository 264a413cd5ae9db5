package sluice_test

// The Go library's runner of the shared conformance vectors
// (test/conformance/*.json, format in test/conformance/README.md): each
// vector's steps go through the library's public API, one sub-test per file.
//
// Calls the library cannot express go through the pool as raw SQL (the
// format's escape hatch), and are marked "raw SQL" below:
//   - create_queue with an option the engine does not know, or a value of
//     the wrong kind (QueueOptions is typed: it cannot say either);
//   - send_batch with per-message arrays of a length other than bodies'
//     (BatchMessage pairs them up, so the library cannot send a mismatch);
//   - peek and leases with max_messages 0 (PeekOptions and LeasesOptions
//     read Max 0 as "the default").

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluicemq/sluice"
	"github.com/sluicemq/sluice/internal/optvec"
)

// vector is one file of test/conformance.
type vector struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Steps       []step `json:"steps"`
}

type step struct {
	Call        string         `json:"call"`
	Args        map[string]any `json:"args"`
	Save        string         `json:"save"`
	Expect      *expectation   `json:"expect"`
	ExpectError string         `json:"expect_error"`
}

type expectation struct {
	Result   json.RawMessage `json:"result"` // raw, so that null is told from absent
	Count    *int            `json:"count"`
	Match    []any           `json:"match"`
	Contains any             `json:"contains"`
}

func TestConformance(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("test", "conformance", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no vectors in test/conformance: %v", err)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var v vector
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields() // a misspelt key would check nothing
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if stem := strings.TrimSuffix(filepath.Base(file), ".json"); v.Name != stem {
			t.Fatalf("%s: name %q differs from the file's stem", file, v.Name)
		}
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			r := &runner{b: setup(t), queue: fmt.Sprintf("conf_%d", time.Now().UnixNano()%1e12), saved: map[string]any{}}
			defer r.dropQueues()
			for i, s := range v.Steps {
				if err := r.step(s); err != nil {
					t.Fatalf("step %d (%s %v): %v", i, s.Call, s.Args, err)
				}
			}
		})
	}
}

type runner struct {
	b       *bundle
	queue   string
	saved   map[string]any
	created []string
}

func (r *runner) dropQueues() {
	for _, q := range r.created {
		_, _ = r.b.client.DropQueue(r.b.ctx, q)
	}
}

// step runs one step and checks its expectations.
func (r *runner) step(s step) error {
	args, ok := r.subst(s.Args).(map[string]any)
	if !ok && s.Args != nil {
		return fmt.Errorf("args is not an object")
	}
	if args == nil {
		args = map[string]any{}
	}
	res, err := r.call(s.Call, args)
	if s.ExpectError != "" {
		var serr *sluice.Error
		switch {
		case err == nil:
			return fmt.Errorf("succeeded with %v, want error %s", res, s.ExpectError)
		case !errors.As(err, &serr):
			return fmt.Errorf("failed with %v, want an *sluice.Error with code %s", err, s.ExpectError)
		case serr.Code != s.ExpectError:
			return fmt.Errorf("failed with code %s (%v), want %s", serr.Code, err, s.ExpectError)
		}
		return nil
	}
	if err != nil {
		return err
	}
	// Normalise to JSON values: numbers become float64.
	data, err := json.Marshal(res)
	if err != nil {
		return err
	}
	var norm any
	if err := json.Unmarshal(data, &norm); err != nil {
		return err
	}
	if s.Save != "" {
		r.saved[s.Save] = norm
	}
	if s.Expect != nil {
		return r.check(*s.Expect, norm)
	}
	return nil
}

// check tests the expectations of a step against its normalised result.
func (r *runner) check(e expectation, got any) error {
	if len(e.Result) > 0 {
		var result any
		if err := json.Unmarshal(e.Result, &result); err != nil {
			return err
		}
		if want := r.subst(result); !deepEqual(want, got) {
			return fmt.Errorf("result %s, want %s", js(got), js(want))
		}
	}
	arr, isArr := got.([]any)
	if e.Count != nil && (!isArr || len(arr) != *e.Count) {
		return fmt.Errorf("result %s, want %d elements", js(got), *e.Count)
	}
	if e.Match != nil {
		want := r.subst(e.Match).([]any)
		if !isArr || len(arr) < len(want) {
			return fmt.Errorf("result %s, want at least %d elements matching %s", js(got), len(want), js(want))
		}
		for i := range want {
			if !partial(want[i], arr[i]) {
				return fmt.Errorf("element %d is %s, want it to contain %s (result %s)", i, js(arr[i]), js(want[i]), js(got))
			}
		}
	}
	if e.Contains != nil {
		want := r.subst(e.Contains)
		found := partial(want, got)
		for _, el := range arr {
			found = found || partial(want, el)
		}
		if !found {
			return fmt.Errorf("result %s does not contain %s", js(got), js(want))
		}
	}
	return nil
}

// subst replaces "$queue", "$queue_..." and "$name.path" strings anywhere
// in v.
func (r *runner) subst(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[k] = r.subst(x)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = r.subst(x)
		}
		return out
	case string:
		switch {
		case v == "$queue":
			return r.queue
		case strings.HasPrefix(v, "$queue_"):
			return r.queue + strings.TrimPrefix(v, "$queue")
		case strings.HasPrefix(v, "$"):
			path := strings.Split(v[1:], ".")
			cur, ok := r.saved[path[0]]
			if !ok {
				panic(fmt.Sprintf("no saved result %q", path[0]))
			}
			for _, p := range path[1:] {
				switch c := cur.(type) {
				case []any:
					i, err := strconv.Atoi(p)
					if err != nil || i < 0 || i >= len(c) {
						panic(fmt.Sprintf("bad index %q in %q", p, v))
					}
					cur = c[i]
				case map[string]any:
					cur = c[p]
				default:
					panic(fmt.Sprintf("cannot follow %q in %q", p, v))
				}
			}
			return cur
		}
	}
	return v
}

// partial reports whether got matches want: objects partially and
// recursively, arrays element-wise with equal length, scalars equal.
func partial(want, got any) bool {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return false
		}
		for k, x := range w {
			y, present := g[k]
			if !present || !partial(x, y) {
				return false
			}
		}
		return true
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for i := range w {
			if !partial(w[i], g[i]) {
				return false
			}
		}
		return true
	}
	return deepEqual(want, got)
}

func deepEqual(a, b any) bool {
	fa, aok := a.(float64)
	fb, bok := b.(float64)
	if aok && bok {
		return fa == fb
	}
	return reflect.DeepEqual(a, b)
}

func js(v any) string {
	data, _ := json.Marshal(v)
	return string(data)
}

// Argument readers: JSON numbers are float64.

func str(args map[string]any, name string) string {
	s, _ := args[name].(string)
	return s
}

func num(args map[string]any, name string) (float64, bool) {
	f, ok := args[name].(float64)
	return f, ok
}

func seconds(f float64) time.Duration {
	return time.Duration(math.Round(f * float64(time.Second)))
}

func raw(v any) json.RawMessage {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return data
}

func rawOrNil(args map[string]any, name string) json.RawMessage {
	if v, ok := args[name]; ok && v != nil {
		return raw(v)
	}
	return nil
}

func strs(args map[string]any, name string) []string {
	a, _ := args[name].([]any)
	out := make([]string, len(a))
	for i, x := range a {
		out[i], _ = x.(string)
	}
	return out
}

func group(args map[string]any) string {
	if g, ok := args["group_name"].(string); ok {
		return g
	}
	return "default"
}

// optionTable is test/queue_options.json, the engine's queue options.
var optionTable = func() *optvec.Table {
	t, err := optvec.Load(filepath.Join("test", "queue_options.json"))
	if err != nil {
		panic(err)
	}
	return t
}()

// tableOption returns the row of the table named name.
func tableOption(name string) (optvec.Option, bool) {
	for _, o := range optionTable.Options {
		if o.Name == name {
			return o, true
		}
	}
	return optvec.Option{}, false
}

// optionField is the QueueOptions field of an engine option: max_attempts
// is MaxAttempts.
func optionField(name string) string {
	var b strings.Builder
	for _, part := range strings.Split(name, "_") {
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	return b.String()
}

// fieldOption is the engine name of a QueueOptions field.
func fieldOption(field string) string {
	var b strings.Builder
	for i, r := range field {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return strings.ToLower(b.String())
}

// queueOptions maps the options of a vector (engine names, durations in
// seconds) to QueueOptions, each through the field the table's row names.
// ok is false for what the typed form cannot carry on purpose: a name the
// table does not have, or a value not of its option's kind (bad-input
// vectors, sent as raw SQL). An option of the table without its field is
// an error: the library misses an option.
func queueOptions(opts map[string]any) (o *sluice.QueueOptions, ok bool, err error) {
	o = &sluice.QueueOptions{}
	v := reflect.ValueOf(o).Elem()
	for k, val := range opts {
		row, known := tableOption(k)
		if !known {
			return nil, false, nil
		}
		f := v.FieldByName(optionField(k))
		if !f.IsValid() {
			return nil, false, fmt.Errorf("sluice.QueueOptions has no field %s for queue option %s", optionField(k), k)
		}
		num, isNum := val.(float64)
		b, isBool := val.(bool)
		switch {
		case row.Kind == "integer" && isNum && num == math.Trunc(num):
			f.Set(reflect.ValueOf(sluice.Ptr(int(num))))
		case row.Kind == "duration" && isNum:
			f.Set(reflect.ValueOf(sluice.Ptr(seconds(num))))
		case row.Kind == "boolean" && isBool:
			f.Set(reflect.ValueOf(sluice.Ptr(b)))
		default:
			return nil, false, nil
		}
	}
	return o, true, nil
}

// optionsJSON renders typed options as the vectors hold them: the set
// fields under the engine's names, durations in seconds.
func optionsJSON(o sluice.QueueOptions) map[string]any {
	out := map[string]any{}
	v := reflect.ValueOf(o)
	for i := range v.NumField() {
		f := v.Field(i)
		if f.IsNil() {
			continue
		}
		switch x := f.Interface().(type) {
		case *time.Duration:
			out[fieldOption(v.Type().Field(i).Name)] = x.Seconds()
		default:
			out[fieldOption(v.Type().Field(i).Name)] = f.Elem().Interface()
		}
	}
	return out
}

// call runs one call of the format through the library.
func (r *runner) call(name string, args map[string]any) (any, error) {
	c, ctx, q := r.b.client, r.b.ctx, str(args, "queue")
	switch name {
	case "sleep":
		f, _ := num(args, "seconds")
		time.Sleep(seconds(f))
		return nil, nil
	case "create_queue":
		r.created = append(r.created, q)
		opts, _ := args["options"].(map[string]any)
		o, ok, err := queueOptions(opts)
		switch {
		case err != nil:
			return nil, err
		case ok:
			return nil, c.CreateQueue(ctx, q, o)
		}
		// Raw SQL: an option the engine does not know, or a value of the
		// wrong kind (bad input that the typed form cannot carry).
		return nil, r.rawExec(`SELECT sluice.create_queue($1, $2::jsonb)`, q, raw(opts))
	case "drop_queue":
		return c.DropQueue(ctx, q)
	case "purge_queue":
		return c.PurgeQueue(ctx, q)
	case "upgrade_queue":
		return c.UpgradeQueue(ctx, q)
	case "alter_queue":
		opts, _ := args["options"].(map[string]any)
		o, ok, err := queueOptions(opts)
		if err != nil || !ok {
			return nil, fmt.Errorf("options %v: not expressible as QueueOptions (%v)", opts, err)
		}
		out, err := c.AlterQueue(ctx, q, o)
		if err != nil {
			return nil, err
		}
		return optionsJSON(out), nil
	case "queue_options":
		qs, err := c.ListQueues(ctx)
		if err != nil {
			return nil, err
		}
		for _, info := range qs {
			if info.Name == q {
				return optionsJSON(info.Options), nil
			}
		}
		return nil, fmt.Errorf("no queue %s in ListQueues", q)
	case "create_group":
		return nil, c.CreateGroup(ctx, q, group(args), &sluice.GroupOptions{StartFrom: str(args, "start_from")})
	case "drop_group":
		return c.DropGroup(ctx, q, group(args))
	case "seek_group":
		return nil, c.SeekGroup(ctx, q, group(args), str(args, "to_position"))
	case "send":
		return r.send(q, args)
	case "send_batch":
		return r.sendBatch(q, args)
	case "receive":
		return r.receive(q, args)
	case "ack":
		return c.Ack(ctx, q, group(args), strs(args, "receipts")...)
	case "nack":
		o := &sluice.NackOptions{Error: str(args, "error")}
		if d, ok := num(args, "delay"); ok {
			o.Delay, o.Now = seconds(d), d == 0
		}
		return c.Nack(ctx, q, group(args), str(args, "receipt"), o)
	case "extend":
		f, _ := num(args, "lease")
		return c.Extend(ctx, q, group(args), seconds(f), strs(args, "receipts")...)
	case "status":
		return r.status(q)
	case "dead_letters":
		return r.deadLetters(q, args)
	case "redrive":
		var ids []int64
		list, _ := args["ids"].([]any)
		for _, x := range list {
			f, _ := x.(float64)
			ids = append(ids, int64(f))
		}
		return c.Redrive(ctx, q, str(args, "group_name"), ids...)
	case "discard_dead_letters":
		var ids []int64 // (nil when absent or null: all of the group's)
		if list, ok := args["ids"].([]any); ok {
			ids = make([]int64, 0, len(list))
			for _, x := range list {
				f, _ := x.(float64)
				ids = append(ids, int64(f))
			}
		}
		return c.DiscardDeadLetters(ctx, q, str(args, "group_name"), ids)
	case "peek":
		return r.peek(q, args)
	case "leases":
		return r.leases(q, args)
	}
	return nil, fmt.Errorf("unknown call %q", name)
}

// rawExec runs a statement on the pool (the format's raw-SQL escape hatch)
// and turns an error of the engine into an *sluice.Error, as the library
// would.
func (r *runner) rawExec(sql string, args ...any) error {
	_, err := r.b.pool.Exec(r.b.ctx, sql, args...)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "SL") {
		return &sluice.Error{Code: pgErr.Code, Message: pgErr.Message, Hint: pgErr.Hint}
	}
	return err
}

func (r *runner) send(q string, args map[string]any) (any, error) {
	o := &sluice.SendOptions{Headers: rawOrNil(args, "headers"), Key: str(args, "key"), DedupKey: str(args, "dedup_key")}
	if d, ok := num(args, "delay"); ok {
		o.Delay = seconds(d)
	}
	if p, ok := num(args, "priority"); ok {
		o.Priority = int(p)
	}
	return r.b.client.Send(r.b.ctx, q, raw(args["body"]), o)
}

func (r *runner) sendBatch(q string, args map[string]any) (any, error) {
	bodies, _ := args["bodies"].([]any)
	lists := map[string][]any{}
	for _, name := range []string{"headers", "keys", "priorities", "dedup_keys"} {
		if l, ok := args[name].([]any); ok {
			if len(l) != len(bodies) {
				// Raw SQL: BatchMessage cannot carry arrays of other lengths.
				return nil, r.rawExec(`SELECT sluice.send_batch($1, $2::jsonb[], $3::jsonb[], $4::text[], NULL, $5::int[], $6::text[])`,
					q, jsonArray(bodies), jsonArray(args["headers"]), args["keys"], args["priorities"], args["dedup_keys"])
			}
			lists[name] = l
		}
	}
	msgs := make([]sluice.BatchMessage, len(bodies))
	for i, b := range bodies {
		m := &msgs[i]
		m.Body = raw(b)
		if l := lists["headers"]; l != nil && l[i] != nil {
			m.Headers = raw(l[i])
		}
		if l := lists["keys"]; l != nil {
			m.Key, _ = l[i].(string)
		}
		if l := lists["priorities"]; l != nil {
			f, _ := l[i].(float64)
			m.Priority = int(f)
		}
		if l := lists["dedup_keys"]; l != nil {
			m.DedupKey, _ = l[i].(string)
		}
	}
	o := &sluice.SendBatchOptions{}
	if d, ok := num(args, "delay"); ok {
		o.Delay = seconds(d)
	}
	return r.b.client.SendBatch(r.b.ctx, q, msgs, o)
}

// jsonArray renders a JSON array as a []string of JSON texts (nil elements
// stay SQL NULL), or nil.
func jsonArray(v any) []*string {
	l, ok := v.([]any)
	if !ok {
		return nil
	}
	out := make([]*string, len(l))
	for i, x := range l {
		if x != nil {
			s := string(raw(x))
			out[i] = &s
		}
	}
	return out
}

// nullable maps "" to nil (SQL NULL), and a JSON text to its value.
func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func jsonValue(m json.RawMessage) any {
	if m == nil {
		return nil
	}
	var v any
	if err := json.Unmarshal(m, &v); err != nil {
		panic(err)
	}
	return v
}

func (r *runner) receive(q string, args map[string]any) (any, error) {
	o := &sluice.ReceiveOptions{Consumer: str(args, "consumer")}
	if m, ok := num(args, "max_messages"); ok {
		o.Max = int(m)
	}
	if l, ok := num(args, "lease"); ok {
		o.Lease = seconds(l)
	}
	if _, ok := args["ack"]; ok {
		o.Ack = strs(args, "ack")
	}
	msgs, err := r.b.client.Receive(r.b.ctx, q, group(args), o)
	if err != nil {
		return nil, err
	}
	out := make([]map[string]any, len(msgs))
	for i, m := range msgs {
		out[i] = map[string]any{"id": m.ID, "body": jsonValue(m.Body), "headers": jsonValue(m.Headers),
			"key": nullable(m.Key), "priority": m.Priority, "attempt": m.Attempt, "sent_at": m.SentAt,
			"receipt": m.Receipt, "lease_expires_at": m.LeaseExpiresAt, "pos": m.Pos}
	}
	return out, nil
}

func (r *runner) status(q string) (any, error) {
	st, err := r.b.client.Status(r.b.ctx, q)
	if err != nil {
		return nil, err
	}
	out := make([]map[string]any, len(st))
	for i, s := range st {
		out[i] = map[string]any{"queue": s.Queue, "group_name": nullable(s.Group), "ready": s.Ready,
			"delayed": s.Delayed, "in_flight": s.InFlight, "dead": s.Dead,
			"oldest_pending_age": s.OldestPendingAge.Seconds(), "lag": s.Lag, "cursor": s.Cursor,
			"lwm": s.LWM, "head": s.Head, "live_epochs": s.LiveEpochs, "holds_reclaim": s.HoldsReclaim,
			"waiting": s.Waiting, "estimated": s.Estimated, "dead_lettered": s.DeadLettered}
	}
	return out, nil
}

func (r *runner) deadLetters(q string, args map[string]any) (any, error) {
	o := &sluice.DeadLetterOptions{Group: str(args, "group_name")}
	if m, ok := num(args, "max_rows"); ok {
		o.Max = int(m)
	}
	dls, err := r.b.client.DeadLetters(r.b.ctx, q, o)
	if err != nil {
		return nil, err
	}
	out := make([]map[string]any, len(dls))
	for i, d := range dls {
		out[i] = map[string]any{"id": d.ID, "group_name": d.Group, "body": jsonValue(d.Body),
			"headers": jsonValue(d.Headers), "key": nullable(d.Key), "attempts": d.Attempts,
			"error": nullable(d.Error), "died_at": d.DiedAt, "sent_at": d.SentAt, "dead_letter_id": d.DeadLetterID}
	}
	return out, nil
}

// maxZero reports whether args has max_messages 0, which the options
// structs cannot carry (their Max 0 is the default).
func maxZero(args map[string]any) bool {
	m, ok := num(args, "max_messages")
	return ok && m == 0
}

func (r *runner) peek(q string, args map[string]any) (any, error) {
	if maxZero(args) {
		// Raw SQL: PeekOptions reads Max 0 as "the default". The engine
		// rejects 0, so no rows come back to compare.
		return nil, r.rawExec(`SELECT * FROM sluice.peek($1, 0, $2::bigint)`, q, args["after_id"])
	}
	o := &sluice.PeekOptions{}
	if m, ok := num(args, "max_messages"); ok {
		o.Max = int(m)
	}
	if a, ok := num(args, "after_id"); ok {
		o.AfterID = int64(a)
	}
	msgs, err := r.b.client.Peek(r.b.ctx, q, o)
	if err != nil {
		return nil, err
	}
	out := make([]map[string]any, len(msgs))
	for i, m := range msgs {
		var deliverAt any
		if !m.DeliverAt.IsZero() {
			deliverAt = m.DeliverAt
		}
		var resentTo any
		if m.ResentTo != nil {
			resentTo = m.ResentTo
		}
		out[i] = map[string]any{"id": m.ID, "body": jsonValue(m.Body), "headers": jsonValue(m.Headers),
			"key": nullable(m.Key), "priority": m.Priority, "sent_at": m.SentAt, "deliver_at": deliverAt,
			"resent_to": resentTo}
	}
	return out, nil
}

func (r *runner) leases(q string, args map[string]any) (any, error) {
	if maxZero(args) {
		// Raw SQL: LeasesOptions reads Max 0 as "the default". The engine
		// rejects 0, so no rows come back to compare.
		return nil, r.rawExec(`SELECT * FROM sluice.leases($1, $2::text, 0)`, q, args["group_name"])
	}
	o := &sluice.LeasesOptions{Group: str(args, "group_name")}
	if m, ok := num(args, "max_messages"); ok {
		o.Max = int(m)
	}
	ls, err := r.b.client.Leases(r.b.ctx, q, o)
	if err != nil {
		return nil, err
	}
	out := make([]map[string]any, len(ls))
	for i, l := range ls {
		out[i] = map[string]any{"group_name": l.Group, "id": l.ID, "pos": l.Pos, "attempt": l.Attempt,
			"consumer": nullable(l.Consumer), "delivered_at": l.DeliveredAt, "lease_expires_at": l.LeaseExpiresAt}
	}
	return out, nil
}
