// Package sqlstate interprets PostgreSQL's errors where the library (package
// sluice) and the HTTP server (cmd/sluice/server) must agree: the library
// turns such an error of its calls into sluice.ErrSchemaMissing, and the
// server answers 503 schema_missing for it, also for the SQL it runs itself.
package sqlstate

import (
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// SchemaMissingHint says what to do about an error SchemaMissing reports.
const SchemaMissingHint = "install or upgrade the sluice schema with: sluice migrate"

// SchemaMissing reports whether a server error says that schema sluice, one
// of its tables or one of its functions does not exist: the database was not
// migrated, or not to this version.
func SchemaMissing(e *pgconn.PgError) bool {
	switch e.Code {
	case "3F000", "42883", "42P01", "42704": // invalid_schema_name, undefined_function, undefined_table, undefined_object
		return strings.Contains(e.Message, "sluice")
	}
	return false
}
