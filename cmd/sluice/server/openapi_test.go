package server_test

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicemq/sluice/cmd/sluice/server"
	"github.com/sluicemq/sluice/internal/optvec"
)

// The OpenAPI document (docs/openapi.json, served at /v1/openapi.json) lists
// exactly the routes the server registers, and its references resolve.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	ts := start(t)
	r := ts.do("GET", "/v1/openapi.json", "", nil)
	onDisk, err := os.ReadFile("../../../docs/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	if string(r.body) != string(onDisk) {
		t.Fatal("/v1/openapi.json differs from docs/openapi.json")
	}
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(r.body, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.OpenAPI != "3.1.0" {
		t.Fatalf("openapi %q", doc.OpenAPI)
	}
	var documented []string
	for path, ops := range doc.Paths {
		for method, op := range ops {
			if method == "parameters" {
				continue
			}
			documented = append(documented, strings.ToUpper(method)+" "+path)
			var o struct {
				Summary   string                     `json:"summary"`
				Responses map[string]json.RawMessage `json:"responses"`
			}
			if err := json.Unmarshal(op, &o); err != nil || o.Summary == "" || len(o.Responses) == 0 {
				t.Errorf("%s %s: no summary or responses (%v)", method, path, err)
			}
		}
	}
	routes := ts.srv.Routes()
	slices.Sort(documented)
	slices.Sort(routes)
	for _, r := range routes {
		if !slices.Contains(documented, r) {
			t.Errorf("route %s is not in docs/openapi.json", r)
		}
	}
	for _, d := range documented {
		if !slices.Contains(routes, d) {
			t.Errorf("docs/openapi.json has %s, which the server does not serve", d)
		}
	}
	var all map[string]any
	_ = json.Unmarshal(r.body, &all)
	schemas := all["components"].(map[string]any)["schemas"].(map[string]any)
	for _, m := range regexp.MustCompile(`"\$ref": ?"#/components/schemas/([^"]+)"`).FindAllStringSubmatch(string(r.body), -1) {
		if _, ok := schemas[m[1]]; !ok {
			t.Errorf("$ref to missing schema %s", m[1])
		}
	}
}

// requestBody is what a handler decodes an operation's request body into.
type requestBody struct {
	// v is a zero value of the handler's request type, whose fields' json
	// tags name the members it accepts; or an engineOptions.
	v any
	// options names the members the handler takes as raw JSON and hands to
	// the engine as queue options, with the options they take.
	options map[string]engineOptions
}

// engineOptions is a JSON object of queue options that the handler hands to
// the engine as it is: the names it takes are those of sluice._options'
// defaults (every option the engine knows), less except.
type engineOptions struct{ except []string }

// requestBodies maps every operation of docs/openapi.json with a JSON
// request body to what its handler decodes (export_test.go names the
// handlers' unexported types). TestOpenAPIRequestBodies fails on an
// operation with a request body and no entry, and on an entry without one.
var requestBodies = map[string]requestBody{
	"POST /v1/queues":                                {v: server.CreateQueueRequest{}, options: map[string]engineOptions{"options": {}}},
	"PATCH /v1/queues/{queue}":                       {v: engineOptions{except: []string{"default_group"}}},
	"POST /v1/queues/{queue}/groups":                 {v: server.CreateGroupRequest{}},
	"POST /v1/queues/{queue}/groups/{group}/seek":    {v: server.SeekGroupRequest{}},
	"POST /v1/queues/{queue}/messages":               {v: server.SendRequest{}},
	"POST /v1/queues/{queue}/messages/batch":         {v: server.SendBatchRequest{}},
	"POST /v1/queues/{queue}/groups/{group}/receive": {v: server.ReceiveRequest{}},
	"POST /v1/queues/{queue}/groups/{group}/ack":     {v: server.AckRequest{}},
	"POST /v1/queues/{queue}/groups/{group}/nack":    {v: server.NackRequest{}},
	"POST /v1/queues/{queue}/groups/{group}/extend":  {v: server.ExtendRequest{}},
	"POST /v1/transaction":                           {v: server.TransactionRequest{}},
	"POST /v1/queues/{queue}/dead-letters/redrive":   {v: server.RedriveRequest{}},
	"POST /v1/queues/{queue}/dead-letters/discard":   {v: server.DiscardRequest{}},
}

// The request bodies docs/openapi.json documents are the ones the handlers
// decode: the same member names (after $ref and allOf) as the json tags of
// the Go types, nested objects and arrays of objects included, and the
// engine's queue option names where a body carries queue options.
func TestOpenAPIRequestBodies(t *testing.T) {
	ts := start(t)
	r := ts.do("GET", "/v1/openapi.json", "", nil)
	var doc struct {
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			Schemas map[string]any `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(r.body, &doc); err != nil {
		t.Fatalf("/v1/openapi.json: %v", err)
	}
	c := &bodyCheck{t: t, schemas: doc.Components.Schemas, engine: engineOptionNames(t, ts)}
	documented := map[string]bool{}
	for _, path := range slices.Sorted(maps.Keys(doc.Paths)) {
		for _, method := range slices.Sorted(maps.Keys(doc.Paths[path])) {
			raw := doc.Paths[path][method]
			var op struct {
				RequestBody *struct {
					Content map[string]struct {
						Schema map[string]any `json:"schema"`
					} `json:"content"`
				} `json:"requestBody"`
			}
			if method == "parameters" {
				continue
			}
			name := strings.ToUpper(method) + " " + path
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			if op.RequestBody == nil {
				continue
			}
			documented[name] = true
			schema := op.RequestBody.Content["application/json"].Schema
			if schema == nil || len(op.RequestBody.Content) != 1 {
				t.Errorf("%s: the request body is not documented as an application/json schema alone", name)
				continue
			}
			body, ok := requestBodies[name]
			if !ok {
				t.Errorf("%s has a request body and no entry in requestBodies: add the type its handler decodes", name)
				continue
			}
			if opts, ok := body.v.(engineOptions); ok {
				c.options(name, schema, opts)
				continue
			}
			c.object(name, schema, reflect.TypeOf(body.v), body.options)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(requestBodies)) {
		if !documented[name] {
			t.Errorf("requestBodies has %s, which docs/openapi.json documents without a request body (or not at all)", name)
		}
	}
}

// engineOptionNames returns the queue options the engine knows: the keys of
// sluice._options' defaults.
func engineOptionNames(t *testing.T, ts *testServer) map[string]bool {
	t.Helper()
	rows, err := ts.pool.Query(context.Background(), "SELECT jsonb_object_keys(sluice._options(NULL))")
	if err != nil {
		t.Fatalf("reading the engine's queue options: %v", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(names) == 0 {
		t.Fatalf("reading the engine's queue options: %v (%d)", err, len(names))
	}
	out := map[string]bool{}
	for _, n := range names {
		out[n] = true
	}
	return out
}

// bodyCheck compares the request bodies of docs/openapi.json with what the
// handlers decode.
type bodyCheck struct {
	t       *testing.T
	schemas map[string]any  // components/schemas
	engine  map[string]bool // the engine's queue options
}

// object compares an object schema's properties with the JSON members of
// typ, then the members that are objects, or arrays of objects, in turn;
// options are members taken as queue options (engineOptions).
func (c *bodyCheck) object(where string, schema map[string]any, typ reflect.Type, options map[string]engineOptions) {
	c.t.Helper()
	props := c.properties(where, schema)
	members := jsonMembers(typ)
	c.sameNames(where, props, members, typ.String())
	for name, opts := range options {
		if members[name] != reflect.TypeOf(json.RawMessage(nil)) {
			c.t.Errorf("%s: member %s of %s is not raw JSON handed to the engine as queue options", where, name, typ)
			continue
		}
		if p, ok := props[name]; ok {
			c.options(where+"."+name, p, opts)
		}
	}
	for name, mt := range members {
		p, ok := props[name]
		if !ok {
			continue
		}
		array := false
		for mt.Kind() == reflect.Pointer || mt.Kind() == reflect.Slice {
			array = array || mt.Kind() == reflect.Slice
			mt = mt.Elem()
		}
		if mt.Kind() != reflect.Struct || mt == reflect.TypeOf(time.Time{}) {
			continue
		}
		p = c.resolve(where+"."+name, p)
		if array {
			items, ok := p["items"].(map[string]any)
			if !ok {
				c.t.Errorf("%s.%s: %s decodes an array of objects, the schema has no items", where, name, typ)
				continue
			}
			c.object(where+"."+name+"[]", items, mt, nil)
			continue
		}
		c.object(where+"."+name, p, mt, nil)
	}
}

// options compares an object schema's properties with the engine's queue
// options less opts.except.
func (c *bodyCheck) options(where string, schema map[string]any, opts engineOptions) {
	c.t.Helper()
	want := map[string]reflect.Type{}
	for name := range c.engine {
		if !slices.Contains(opts.except, name) {
			want[name] = nil
		}
	}
	props := c.properties(where, schema)
	c.sameNames(where, props, want, "the engine's queue options (sluice._options)")
	// Each documented option has its kind and range in the table of
	// options (test/queue_options.json), which is checked against the engine.
	tab, err := optvec.Load("../../../test/queue_options.json")
	if err != nil {
		c.t.Fatal(err)
	}
	types := map[string]string{"integer": "integer", "duration": "string", "boolean": "boolean"}
	for _, o := range tab.Options {
		p, ok := props[o.Name]
		if !ok {
			continue
		}
		if p["type"] != types[o.Kind] {
			c.t.Errorf("%s: option %s is documented as %v, a %s is a JSON %s", where, o.Name, p["type"], o.Kind, types[o.Kind])
		}
		if o.Kind == "integer" && (p["minimum"] != *o.Min || p["maximum"] != *o.Max) {
			c.t.Errorf("%s: option %s is documented from %v to %v, the engine takes %v to %v", where, o.Name,
				p["minimum"], p["maximum"], *o.Min, *o.Max)
		}
	}
}

// sameNames reports the names documented and not decoded, and the other
// way round.
func (c *bodyCheck) sameNames(where string, documented map[string]map[string]any, decoded map[string]reflect.Type, decoder string) {
	c.t.Helper()
	for _, name := range slices.Sorted(maps.Keys(documented)) {
		if _, ok := decoded[name]; !ok {
			c.t.Errorf("%s: docs/openapi.json documents member %q, which %s does not take", where, name, decoder)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(decoded)) {
		if _, ok := documented[name]; !ok {
			c.t.Errorf("%s: %s takes member %q, which docs/openapi.json does not document", where, decoder, name)
		}
	}
}

// properties returns an object schema's properties by name: its own and
// those of the schemas of its allOf, with $ref followed into
// components/schemas. Its required members must be among them.
func (c *bodyCheck) properties(where string, schema map[string]any) map[string]map[string]any {
	c.t.Helper()
	schema = c.resolve(where, schema)
	out := map[string]map[string]any{}
	props, _ := schema["properties"].(map[string]any)
	for name, p := range props {
		ps, ok := p.(map[string]any)
		if !ok {
			c.t.Errorf("%s: property %s is not a schema: %v", where, name, p)
			continue
		}
		out[name] = ps
	}
	all, _ := schema["allOf"].([]any)
	for _, sub := range all {
		s, ok := sub.(map[string]any)
		if !ok {
			c.t.Errorf("%s: allOf holds %v, not a schema", where, sub)
			continue
		}
		maps.Copy(out, c.properties(where, s))
	}
	req, _ := schema["required"].([]any)
	for _, name := range req {
		if _, ok := out[name.(string)]; !ok {
			c.t.Errorf("%s: required member %v is not a property", where, name)
		}
	}
	return out
}

// resolve follows a $ref into components/schemas.
func (c *bodyCheck) resolve(where string, schema map[string]any) map[string]any {
	c.t.Helper()
	ref, ok := schema["$ref"].(string)
	if !ok {
		return schema
	}
	s, ok := c.schemas[strings.TrimPrefix(ref, "#/components/schemas/")].(map[string]any)
	if !ok {
		c.t.Fatalf("%s: $ref %s does not resolve", where, ref)
	}
	return c.resolve(where, s)
}

// jsonMembers returns the JSON members a struct type decodes, as
// encoding/json and the server's decoder (json v2) name them: by json tag,
// or the field's name without one; not fields tagged "-" or unexported
// ones; the fields of an embedded struct without a tag name, or of a field
// tagged inline, inlined.
func jsonMembers(typ reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range typ.NumField() {
		f := typ.Field(i)
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if tag == "-" {
			continue
		}
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct && (f.Anonymous && name == "" || slices.Contains(strings.Split(opts, ","), "inline")) {
			maps.Copy(out, jsonMembers(ft))
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}
