package server

import (
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestToProblemMapsSQLStates checks the HTTP status and problem type of
// database errors by SQLSTATE: the engine's own, a missing privilege, a
// lock held by another transaction (retryable), bad data, anything else.
func TestToProblemMapsSQLStates(t *testing.T) {
	for _, c := range []struct {
		code, typ string
		status    int
	}{
		{"SL002", "urn:sluice:problem:undefined_queue", http.StatusNotFound},
		{"42501", "urn:sluice:problem:forbidden", http.StatusForbidden},
		{"55P03", "urn:sluice:problem:lock_not_available", http.StatusConflict},
		{"40P01", "urn:sluice:problem:deadlock_detected", http.StatusConflict},
		{"22P02", "urn:sluice:problem:invalid_argument", http.StatusUnprocessableEntity},
		{"XX000", "urn:sluice:problem:database_error", http.StatusInternalServerError},
	} {
		p := toProblem(&pgconn.PgError{Code: c.code, Message: "m"})
		if p.Status != c.status || p.Type != c.typ || p.Code != c.code {
			t.Errorf("%s: got %d %s (code %s), want %d %s", c.code, p.Status, p.Type, p.Code, c.status, c.typ)
		}
	}
}
