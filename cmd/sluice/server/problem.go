package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluicemq/sluice"
	"github.com/sluicemq/sluice/internal/sqlstate"
)

// Problem is an error response, an RFC 9457 problem details object
// (application/problem+json). Code carries the engine's SQLSTATE (SL001 to
// SL011, or PostgreSQL's own such as 42501) when the database raised the
// error; Field names the member of the request that is wrong.
type Problem struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail,omitempty"`
	Instance string `json:"instance,omitempty"`
	Code     string `json:"code,omitempty"`
	Field    string `json:"field,omitempty"`
	// RequestID is the request's X-Request-Id, to find its log lines.
	RequestID string `json:"request_id,omitempty"`

	// cause is the error the problem was made from, for the log (not for
	// the client: a 500's or a 503's detail says nothing of it).
	cause error
}

func (p *Problem) Error() string { return p.Detail }

// problemf makes a problem of the server's own (not raised by the database).
func problemf(status int, name, format string, args ...any) *Problem {
	return &Problem{Type: "urn:sluice:problem:" + name, Title: http.StatusText(status), Status: status,
		Detail: fmt.Sprintf(format, args...)}
}

// fieldProblem is a 400 naming the member of the request body that is wrong.
func fieldProblem(field, format string, args ...any) *Problem {
	p := problemf(http.StatusBadRequest, "invalid_request", format, args...)
	p.Field = field
	return p
}

// engineStatus maps the engine's error codes to HTTP statuses.
var engineStatus = map[string]struct {
	status int
	name   string
}{
	"SL001": {http.StatusBadRequest, "invalid_name"},
	"SL002": {http.StatusNotFound, "undefined_queue"},
	"SL003": {http.StatusNotFound, "undefined_group"},
	"SL004": {http.StatusConflict, "duplicate_queue"},
	"SL005": {http.StatusConflict, "duplicate_group"},
	"SL006": {http.StatusUnprocessableEntity, "invalid_argument"},
	"SL007": {http.StatusUnprocessableEntity, "invalid_option"},
	"SL008": {http.StatusUnprocessableEntity, "invalid_receipt"},
	"SL009": {http.StatusRequestEntityTooLarge, "payload_too_large"},
	"SL010": {http.StatusInternalServerError, "invalid_isolation"},
	"SL011": {http.StatusUnprocessableEntity, "not_supported"},
	"SL012": {http.StatusUnprocessableEntity, "json_too_deep"},
}

// toProblem turns any error of a handler into a problem: the engine's errors
// keep their code and message, a missing privilege is 403, a lock another
// transaction holds (55P03) or a deadlock (40P01) is 409 (nothing changed:
// retry), data PostgreSQL refuses (class 22: a NUL, a number out of range)
// is 422, a database that cannot be reached, refuses the connection or
// loses it, or a schema that is missing (also for SQL the library did not
// run), is 503. Other errors are 500. What the client is told of a 500 or
// a 503 is generic: the error itself (SQL, addresses, role names) is the
// problem's cause, for the log.
func toProblem(err error) *Problem {
	var p *Problem
	if errors.As(err, &p) {
		return p
	}
	var se *sluice.Error
	if errors.As(err, &se) {
		if m, ok := engineStatus[se.Code]; ok {
			return &Problem{Type: "urn:sluice:problem:" + m.name, Title: http.StatusText(m.status), Status: m.status,
				Detail: se.Error(), Code: se.Code}
		}
		if errors.Is(err, sluice.ErrSchemaMissing) {
			return schemaMissingProblem(se.Error(), se.Code)
		}
	}
	var pg *pgconn.PgError
	if isConnectError(err) {
		// Checked before the PgError that a refused connection carries (a
		// database dropped or not accepting connections, a password
		// refused): whatever PostgreSQL said, the server has no database to
		// work on.
		p := unavailable(err)
		if errors.As(err, &pg) {
			p.Code = pg.Code
		}
		return p
	}
	if errors.As(err, &pg) {
		if m, ok := engineStatus[pg.Code]; ok {
			return &Problem{Type: "urn:sluice:problem:" + m.name, Title: http.StatusText(m.status), Status: m.status,
				Detail: pg.Message, Code: pg.Code}
		}
		switch {
		case sqlstate.SchemaMissing(pg):
			// An error the library did not translate: the server's own SQL
			// (create, alter, peek, leases), or a statement of s.one's
			// pipeline that failed as it was prepared, before the
			// set_config ahead of it ran (s.one returns it as the role's).
			return schemaMissingProblem(pg.Message+" ("+sqlstate.SchemaMissingHint+")", pg.Code)
		case pg.Code == "55P03": // lock_not_available: a transaction left open holds what the call needs (drop, purge, upgrade; nothing changed)
			return &Problem{Type: "urn:sluice:problem:lock_not_available", Title: http.StatusText(http.StatusConflict),
				Status: http.StatusConflict, Detail: pg.Message, Code: pg.Code}
		case pg.Code == "40P01": // deadlock_detected: the call's transaction was rolled back (nothing changed: retry)
			return &Problem{Type: "urn:sluice:problem:deadlock_detected", Title: http.StatusText(http.StatusConflict),
				Status: http.StatusConflict, Detail: pg.Message, Code: pg.Code}
		case pg.Code == "42501": // insufficient_privilege
			return &Problem{Type: "urn:sluice:problem:forbidden", Title: http.StatusText(http.StatusForbidden),
				Status: http.StatusForbidden, Detail: pg.Message, Code: pg.Code}
		case pg.Code[:2] == "22": // data exception: what the client sent (a NUL, 1e999999, a bad time)
			return &Problem{Type: "urn:sluice:problem:invalid_argument", Title: http.StatusText(http.StatusUnprocessableEntity),
				Status: http.StatusUnprocessableEntity, Detail: pg.Message, Code: pg.Code}
		case pg.Code == "57014" || pg.Code[:2] == "08" || pg.Code[:2] == "53" || pg.Code[:2] == "57": // canceled, connection, resources, operator intervention
			p := unavailable(err)
			p.Code = pg.Code
			return p
		}
		return &Problem{Type: "urn:sluice:problem:database_error", Title: http.StatusText(http.StatusInternalServerError),
			Status: http.StatusInternalServerError, Detail: "the database failed the request", Code: pg.Code, cause: err}
	}
	if lostConnection(err) {
		return unavailable(err)
	}
	p = problemf(http.StatusInternalServerError, "internal", "internal server error")
	p.cause = err
	return p
}

// unavailable is the 503 of a database the server cannot use now.
func unavailable(cause error) *Problem {
	p := problemf(http.StatusServiceUnavailable, "unavailable", "the database is unavailable: try again later")
	p.cause = cause
	return p
}

// lostConnection reports whether err is the loss of a database connection
// (or of the request: canceled, timed out) rather than a failed statement.
func lostConnection(err error) bool {
	var ne net.Error
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || pgconn.SafeToRetry(err) ||
		pgconn.Timeout(err) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, net.ErrClosed) || errors.As(err, &ne)
}

// schemaMissingProblem is the 503 of a database without the sluice schema,
// or with an older one: the server needs migrating, not the request
// changing.
func schemaMissingProblem(detail, code string) *Problem {
	return &Problem{Type: "urn:sluice:problem:schema_missing", Title: http.StatusText(http.StatusServiceUnavailable),
		Status: http.StatusServiceUnavailable, Detail: detail + " (start the server with --migrate)", Code: code}
}

// restateHint rewrites a problem whose detail is an engine error with a
// hint that names SQL functions ("Create it with sluice.create_queue()")
// into the API's words (sqlstate.Hint).
func restateHint(p *Problem) {
	var se *sluice.Error
	if p.cause == nil || !errors.As(p.cause, &se) || se.Hint == "" || p.Detail != se.Error() {
		return
	}
	p.Detail = se.Message
	if h := sqlstate.Hint(se.Hint, sqlstate.HTTP); h != "" {
		p.Detail += " (" + strings.TrimSuffix(h, ".") + ")"
	}
}

func isConnectError(err error) bool {
	var ce *pgconn.ConnectError
	return errors.As(err, &ce)
}

// writeProblem writes p as application/problem+json, with the request's
// id; a 5xx is logged with its cause (logProblem).
func writeProblem(w http.ResponseWriter, r *http.Request, p *Problem) {
	if p.Instance == "" {
		p.Instance = r.URL.Path
	}
	p.RequestID = requestID(r.Context())
	restateHint(p)
	logProblem(r, p)
	if p.Status == http.StatusTooManyRequests || p.Status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	if p.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="sluice"`)
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

// writeJSON writes v as a JSON response with status. It encodes v before
// writing anything: a value it cannot encode (a message nested deeper than
// encoding/json's 10,000 levels, stored before the engine refused such
// messages) is a 500 problem, logged by wrap with the request id, never a
// 200 with an empty body (as receive, peek and dead letters answered).
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		p := problemf(http.StatusInternalServerError, "unwritable_response", "the answer could not be written as JSON")
		if f, ok := w.(interface{ fail(error) string }); ok {
			p.RequestID = f.fail(err)
		}
		w.Header().Set("Content-Type", "application/problem+json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(p.Status)
		_ = json.NewEncoder(w).Encode(p)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// wrapSQL adds what was being done to an error of a statement.
func wrapSQL(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf(format+": %w", append(args, err)...)
}
