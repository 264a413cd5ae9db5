package server

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// duration parses the duration member field of a request ("" or absent:
// zero), in Go's syntax ("500ms", "30s", "5m"), refusing negative ones.
func duration(field, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fieldProblem(field, "%s: %q is not a duration such as \"500ms\", \"30s\" or \"5m\"", field, s)
	}
	if d < 0 {
		return 0, fieldProblem(field, "%s must not be negative, got %s", field, s)
	}
	return d, nil
}

// decode reads the JSON request body into v: unknown members, trailing data,
// a wrong type or a body over the size limit are problems naming what is
// wrong (400, or 413 for the size). Names are matched exactly (case and
// all), and a member given twice is refused.
//
// It decodes with encoding/json's v2 candidate (go-json-experiment/json) in
// one pass over the body: encoding/json's Decoder scans a value twice
// before decoding it (three times for a json.RawMessage member such as a
// message's body), and took half of the server's CPU time for a batch of
// 100 messages (BenchmarkSendBatch100, pprof: 2.56 of 5.11 s).
func decode(r *http.Request, v any) error {
	var d decoder
	return d.decode(r, v, nil)
}

// decoder holds what decode needs for one request: the body's bytes and a
// JSON decoder reading them. A batch send keeps one in its pooled
// batchScratch, so that both keep their capacity from one request to the
// next instead of being allocated again (the body buffer was 8 KB of the
// 119 KB a batch of 100 allocated).
type decoder struct {
	body bytes.Buffer
	dec  jsontext.Decoder
}

// decode is decode, into d's buffers; more, if not nil, adds to the
// decoding options.
func (d *decoder) decode(r *http.Request, v any, more jsonv2.Options) error {
	if err := d.read(r); err != nil {
		return err
	}
	if len(bytes.TrimSpace(d.body.Bytes())) == 0 {
		return fieldProblem("", "the request body is empty: a JSON object is needed")
	}
	// (a *bytes.Buffer: the decoder parses its bytes where they are, and
	// does not write to them)
	d.dec.Reset(&d.body)
	opts := []jsonv2.Options{jsonv2.RejectUnknownMembers(true), more}
	if more == nil {
		opts = opts[:1]
	}
	if err := jsonv2.UnmarshalDecode(&d.dec, v, opts...); err != nil {
		return decodeProblem(err)
	}
	if _, err := d.dec.ReadToken(); err != io.EOF {
		return fieldProblem("", "the request body must hold one JSON value, and has more after it")
	}
	return nil
}

// read reads the request body into d.body, replacing what it held.
func (d *decoder) read(r *http.Request) error {
	d.body.Reset()
	// (room for Content-Length, up to 1 MiB: a client's claim, and the
	// body limit is enforced while reading)
	d.body.Grow(int(min(max(r.ContentLength, 512), 1<<20)))
	if _, err := d.body.ReadFrom(r.Body); err != nil {
		var maxErr *http.MaxBytesError
		if errors.As(err, &maxErr) {
			return problemf(http.StatusRequestEntityTooLarge, "request_too_large",
				"the request body is larger than the server's limit of %d bytes (--max-body)", maxErr.Limit)
		}
		return fieldProblem("", "the request body could not be read: %v", err)
	}
	return nil
}

// release drops what the decoder refers to of the last body, for a pooled
// decoder whose body buffer is being replaced (it would pin the old one).
func (d *decoder) release() {
	d.body = bytes.Buffer{}
	d.dec.Reset(&d.body)
}

// decodeProblem says what is wrong with a request body that decode could
// not decode, naming the member (memberPath) where it can.
func decodeProblem(err error) *Problem {
	var sem *jsonv2.SemanticError
	var syn *jsontext.SyntacticError
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fieldProblem("", "the request body is not valid JSON: it ends too early")
	case errors.As(err, &syn):
		return fieldProblem(memberPath(syn.JSONPointer), "the request body is not valid JSON at byte %d: %v",
			syn.ByteOffset, syn.Err)
	case errors.As(err, &sem) && sem.Err == jsonv2.ErrUnknownName:
		name := sem.JSONPointer.LastToken()
		return fieldProblem(memberPath(sem.JSONPointer), "unknown member %q in the request body", name)
	case errors.As(err, &sem) && sem.GoType != nil:
		want := "another type"
		switch sem.GoType.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			want = "an integer"
		case reflect.String:
			want = "a string"
		case reflect.Slice, reflect.Array:
			want = "an array"
		case reflect.Struct, reflect.Map:
			want = "an object"
		case reflect.Bool:
			want = "true or false"
		}
		got := "value"
		switch sem.JSONKind {
		case '0':
			got = strings.TrimSpace("number " + string(sem.JSONValue))
		case '"':
			got = "string"
		case '{':
			got = "object"
		case '[':
			got = "array"
		case 't', 'f':
			got = "boolean"
		}
		field := memberPath(sem.JSONPointer)
		if field == "" {
			return fieldProblem("", "the request body must be %s, not a JSON %s", want, got)
		}
		return fieldProblem(field, "%s must be %s, not a JSON %s", field, want, got)
	}
	return fieldProblem("", "the request body is not valid: %v", err)
}

// memberPath writes a JSON pointer as the problems name members:
// /messages/3/body as messages[3].body.
func memberPath(p jsontext.Pointer) string {
	var b strings.Builder
	for tok := range p.Tokens() {
		if _, err := strconv.Atoi(tok); err == nil && b.Len() > 0 {
			b.WriteString("[" + tok + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(tok)
	}
	return b.String()
}
