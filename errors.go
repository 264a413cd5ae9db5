package sluice

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluicemq/sluice/internal/sqlstate"
)

// Errors raised by the sluice engine, one per SQLSTATE of class SL. Every
// error a Client method returns for such a failure is an *Error that
// errors.Is matches against one of these, so callers can write
//
//	if errors.Is(err, sluice.ErrQueueNotFound) { ... }
var (
	// ErrInvalidName (SL001) is a queue or group name that is empty or
	// malformed: names have 1 to 64 ASCII letters, digits, "_", "." or "-",
	// starting with a letter or digit.
	ErrInvalidName = errors.New("sluice: invalid name")
	// ErrQueueNotFound (SL002) names a queue that does not exist.
	ErrQueueNotFound = errors.New("sluice: queue not found")
	// ErrGroupNotFound (SL003) names a consumer group that does not exist in
	// the queue.
	ErrGroupNotFound = errors.New("sluice: group not found")
	// ErrQueueExists (SL004) is CreateQueue of a name already taken.
	ErrQueueExists = errors.New("sluice: queue already exists")
	// ErrGroupExists (SL005) is CreateGroup of a name already taken in the
	// queue.
	ErrGroupExists = errors.New("sluice: group already exists")
	// ErrInvalidArgument (SL006) is an argument out of range (a lease, a
	// delay, a batch size, a body that is not JSON, ...).
	ErrInvalidArgument = errors.New("sluice: invalid argument")
	// ErrInvalidOption (SL007) is a queue option that is unknown or out of
	// range.
	ErrInvalidOption = errors.New("sluice: invalid queue option")
	// ErrInvalidReceipt (SL008) is a receipt that is not of sluice's form at
	// all. A well-formed receipt whose lease is gone is not an error: Ack,
	// Nack and Extend report it by not counting it.
	ErrInvalidReceipt = errors.New("sluice: invalid receipt")
	// ErrPayloadTooLarge (SL009) is a message whose body and headers exceed
	// the queue's max_payload.
	ErrPayloadTooLarge = errors.New("sluice: payload too large")
	// ErrInvalidIsolation (SL010) is a receive, or a send with a
	// deduplication key, in a transaction that is not READ COMMITTED.
	ErrInvalidIsolation = errors.New("sluice: READ COMMITTED isolation needed")
	// ErrNotSupported (SL011) is a call that the queue does not support
	// (yet): SeekGroup while the queue is being upgraded to engine 2, or
	// UpgradeQueue of a queue still draining an earlier upgrade.
	ErrNotSupported = errors.New("sluice: not supported by the queue")
	// ErrJSONTooDeep (SL012) is a message whose body or headers are nested
	// deeper than 512 levels (arrays and objects), more than every client
	// can read back.
	ErrJSONTooDeep = errors.New("sluice: JSON nested too deep")
	// ErrSchemaMissing means the database has no sluice schema, or an older
	// one without the function called: install or upgrade it with
	// "sluice migrate" (or package migrate).
	ErrSchemaMissing = errors.New("sluice: schema not installed or out of date (run sluice migrate)")
)

// sentinels maps the engine's SQLSTATEs to the errors above.
var sentinels = map[string]error{
	"SL001": ErrInvalidName,
	"SL002": ErrQueueNotFound,
	"SL003": ErrGroupNotFound,
	"SL004": ErrQueueExists,
	"SL005": ErrGroupExists,
	"SL006": ErrInvalidArgument,
	"SL007": ErrInvalidOption,
	"SL008": ErrInvalidReceipt,
	"SL009": ErrPayloadTooLarge,
	"SL010": ErrInvalidIsolation,
	"SL011": ErrNotSupported,
	"SL012": ErrJSONTooDeep,
}

// Error is a failure reported by the sluice engine or a missing schema. It
// matches its sentinel (ErrQueueNotFound, ...) with errors.Is and unwraps to
// the driver's *pgconn.PgError.
type Error struct {
	// Code is the SQLSTATE, such as "SL002".
	Code string
	// Message is the server's message, such as "queue 'orders' does not
	// exist".
	Message string
	// Hint is the server's hint, if any.
	Hint string

	kind error
	pg   *pgconn.PgError
}

// Error returns the server's message and hint.
func (e *Error) Error() string {
	s := e.Message
	if e.Hint != "" {
		s += " (" + strings.TrimSuffix(e.Hint, ".") + ")"
	}
	return s
}

// Unwrap returns the sentinel the error matches and the driver's error.
func (e *Error) Unwrap() []error {
	if e.pg == nil {
		return []error{e.kind}
	}
	return []error{e.kind, e.pg}
}

// translate turns a driver error into an *Error when it is one of sluice's
// (class SL, or the sluice schema missing) and wraps it with what was being
// done. Other errors (connection failures, cancellations) are only wrapped.
// It is the one place where the library interprets driver errors (the test
// of a missing schema is internal/sqlstate's, which the HTTP server shares).
func translate(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		if kind, ok := sentinels[pgErr.Code]; ok {
			err = &Error{Code: pgErr.Code, Message: pgErr.Message, Hint: pgErr.Hint, kind: kind, pg: pgErr}
		} else if sqlstate.SchemaMissing(pgErr) {
			err = &Error{Code: pgErr.Code, Message: pgErr.Message,
				Hint: sqlstate.SchemaMissingHint, kind: ErrSchemaMissing, pg: pgErr}
		}
	}
	return fmt.Errorf(format+": %w", append(args, err)...)
}
