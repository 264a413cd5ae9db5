package server

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
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
// wrong (400, or 413 for the size).
func decode(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if _, terr := dec.Token(); terr != io.EOF {
			return fieldProblem("", "the request body must hold one JSON value, and has more after it")
		}
		return nil
	}
	var maxErr *http.MaxBytesError
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &maxErr):
		return problemf(http.StatusRequestEntityTooLarge, "request_too_large",
			"the request body is larger than the server's limit of %d bytes (--max-body)", maxErr.Limit)
	case errors.Is(err, io.EOF):
		return fieldProblem("", "the request body is empty: a JSON object is needed")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fieldProblem("", "the request body is not valid JSON: it ends too early")
	case errors.As(err, &syn):
		return fieldProblem("", "the request body is not valid JSON at byte %d: %v", syn.Offset, syn)
	case errors.As(err, &typ):
		field := typ.Field
		want := typ.Type.String()
		if typ.Type == nil {
			want = "another type"
		}
		switch {
		case strings.HasPrefix(want, "int"):
			want = "an integer"
		case want == "string":
			want = "a string"
		case strings.HasPrefix(want, "[]"):
			want = "an array"
		case strings.HasPrefix(want, "server.") || strings.HasPrefix(want, "struct"):
			want = "an object"
		}
		if field == "" {
			return fieldProblem("", "the request body must be %s, not a JSON %s", want, typ.Value)
		}
		return fieldProblem(field, "%s must be %s, not a JSON %s", field, want, typ.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name, _ := strconv.Unquote(strings.TrimPrefix(err.Error(), "json: unknown field "))
		return fieldProblem(name, "unknown member %q in the request body", name)
	}
	return fieldProblem("", "the request body is not valid: %v", err)
}
