// Package optvec reads the table of queue options (test/queue_options.json)
// and renders from it one conformance vector per option
// (test/conformance/option_<name>.json): create a queue with the option,
// read it back, alter it where the engine allows, and, for a duration that
// may be zero, create one with zero (which a client must tell from "unset").
//
// The table is the one list of options every client is checked against:
// the root package's TestQueueOptionTable compares it with the engine's
// (sluice._options), and each client's tests compare it with the client's
// typed options. `make generate` rewrites the vectors; this package's test
// fails when the committed ones differ.
package optvec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Table is test/queue_options.json.
type Table struct {
	Description string   `json:"description"`
	Options     []Option `json:"options"`
}

// Option is one row of the table. Durations are seconds.
type Option struct {
	Name string `json:"name"`
	// Kind is "integer", "boolean" or "duration".
	Kind    string `json:"kind"`
	Default any    `json:"default"`
	// Min and Max bound integers and durations (absent for booleans).
	Min *float64 `json:"min,omitempty"`
	Max *float64 `json:"max,omitempty"`
	// Alter is "yes", "fixed" (set at creation) or "create_only".
	Alter   string `json:"alter"`
	Value   any    `json:"value"`
	Altered any    `json:"altered,omitempty"`
	// With are other options a range check or the zero vector needs.
	With map[string]any `json:"with,omitempty"`
	Doc  string         `json:"doc"`
}

// Load reads and checks the table at path.
func Load(path string) (*Table, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var t Table
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	seen := map[string]bool{}
	for _, o := range t.Options {
		switch {
		case o.Name == "" || seen[o.Name]:
			return nil, fmt.Errorf("%s: option name %q empty or repeated", path, o.Name)
		case !slices.Contains([]string{"integer", "boolean", "duration"}, o.Kind):
			return nil, fmt.Errorf("%s: option %s: unknown kind %q", path, o.Name, o.Kind)
		case !slices.Contains([]string{"yes", "fixed", "create_only"}, o.Alter):
			return nil, fmt.Errorf("%s: option %s: unknown alter %q", path, o.Name, o.Alter)
		case o.Alter != "create_only" && o.Altered == nil:
			return nil, fmt.Errorf("%s: option %s: no altered value", path, o.Name)
		case o.Kind != "boolean" && (o.Min == nil || o.Max == nil):
			return nil, fmt.Errorf("%s: option %s: no min or max", path, o.Name)
		}
		seen[o.Name] = true
	}
	return &t, nil
}

// Defaults returns every option at its default.
func (t *Table) Defaults() map[string]any {
	m := map[string]any{}
	for _, o := range t.Options {
		m[o.Name] = o.Default
	}
	return m
}

// step is one step of a vector (test/conformance/README.md).
type step struct {
	Call        string         `json:"call"`
	Args        map[string]any `json:"args"`
	Expect      map[string]any `json:"expect,omitempty"`
	ExpectError string         `json:"expect_error,omitempty"`
}

// with returns the defaults overlaid with each of sets in turn.
func with(base map[string]any, sets ...map[string]any) map[string]any {
	out := map[string]any{}
	maps.Copy(out, base)
	for _, s := range sets {
		maps.Copy(out, s)
	}
	return out
}

// Vector renders the vector of option o: its file name and contents.
func (t *Table) Vector(o Option) (string, []byte) {
	defs := t.Defaults()
	set := map[string]any{o.Name: o.Value}
	readBack := func(queue string, want map[string]any) step {
		return step{Call: "queue_options", Args: map[string]any{"queue": queue}, Expect: map[string]any{"result": want}}
	}
	alter := func(v any) map[string]any {
		return map[string]any{"queue": "$queue", "options": map[string]any{o.Name: v}}
	}
	steps := []step{
		{Call: "create_queue", Args: map[string]any{"queue": "$queue", "options": set}},
		readBack("$queue", with(defs, set)),
		{Call: "alter_queue", Args: map[string]any{"queue": "$queue", "options": map[string]any{}},
			Expect: map[string]any{"result": with(defs, set)}},
	}
	var what string
	switch o.Alter {
	case "yes":
		after := with(defs, map[string]any{o.Name: o.Altered})
		steps = append(steps,
			step{Call: "alter_queue", Args: alter(o.Altered), Expect: map[string]any{"result": after}},
			readBack("$queue", after))
		what = fmt.Sprintf("alter_queue changes it to %v and only it", jsonText(o.Altered))
	case "fixed":
		steps = append(steps,
			step{Call: "alter_queue", Args: alter(o.Value), Expect: map[string]any{"result": with(defs, set)}},
			step{Call: "alter_queue", Args: alter(o.Altered), ExpectError: "SL007"},
			readBack("$queue", with(defs, set)))
		what = fmt.Sprintf("it is fixed at creation: alter_queue takes the queue's own value and refuses %v (SL007)", jsonText(o.Altered))
	case "create_only":
		steps = append(steps,
			step{Call: "alter_queue", Args: alter(o.Value), ExpectError: "SL007"},
			readBack("$queue", with(defs, set)))
		what = "alter_queue refuses it (SL007)"
	}
	if o.Kind == "duration" && *o.Min == 0 {
		zero := with(o.With, map[string]any{o.Name: 0})
		steps = append(steps,
			step{Call: "create_queue", Args: map[string]any{"queue": "$queue_zero", "options": zero}},
			readBack("$queue_zero", with(defs, zero)))
		what += "; a queue created with 0 keeps 0, which is not the default"
	}
	desc := fmt.Sprintf("Generated from test/queue_options.json by internal/optvec (make generate); do not edit. "+
		"Queue option %s (%s, default %v): create_queue with %v reads back as %v beside every other option at its default; "+
		"an empty alter_queue changes nothing; %s.", o.Name, o.Kind, jsonText(o.Default), jsonText(o.Value),
		jsonText(o.Value), what)
	var b strings.Builder
	name := "option_" + o.Name
	fmt.Fprintf(&b, "{\n  \"name\": %s,\n  \"description\": %s,\n  \"steps\": [\n", jsonText(name), jsonText(desc))
	for i, s := range steps {
		sep := ","
		if i == len(steps)-1 {
			sep = ""
		}
		fmt.Fprintf(&b, "    %s%s\n", jsonText(s), sep)
	}
	b.WriteString("  ]\n}\n")
	return name + ".json", []byte(b.String())
}

// Vectors renders every option's vector, by file name.
func (t *Table) Vectors() map[string][]byte {
	out := map[string][]byte{}
	for _, o := range t.Options {
		name, data := t.Vector(o)
		out[name] = data
	}
	return out
}

// Write writes every vector into dir and removes option_*.json files of
// options the table no longer has.
func (t *Table) Write(dir string) error {
	vs := t.Vectors()
	old, err := filepath.Glob(filepath.Join(dir, "option_*.json"))
	if err != nil {
		return err
	}
	for _, f := range old {
		if _, ok := vs[filepath.Base(f)]; !ok {
			if err := os.Remove(f); err != nil {
				return err
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(vs)) {
		if err := os.WriteFile(filepath.Join(dir, name), vs[name], 0o644); err != nil {
			return err
		}
	}
	return nil
}

// jsonText is v as compact JSON (keys sorted), without HTML escaping.
func jsonText(v any) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err)
	}
	return spaced(strings.TrimSuffix(b.String(), "\n"))
}

// spaced puts a space after each comma and colon of compact JSON that is
// not inside a string, as the hand-written vectors do.
func spaced(s string) string {
	var b strings.Builder
	inString, escaped := false, false
	for _, r := range s {
		b.WriteRune(r)
		switch {
		case escaped:
			escaped = false
		case inString && r == '\\':
			escaped = true
		case r == '"':
			inString = !inString
		case !inString && (r == ',' || r == ':'):
			b.WriteByte(' ')
		}
	}
	return b.String()
}
