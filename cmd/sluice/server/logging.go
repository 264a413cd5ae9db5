package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"time"
)

// RequestIDHeader carries a request's id: the server takes the caller's
// when it is a plausible id (1 to 128 letters, digits and ._:-), so that a
// proxy's id follows the request, and makes one otherwise. Responses carry
// it, problem+json bodies name it (request_id), and every log line about the
// request has it.
const RequestIDHeader = "X-Request-Id"

type requestKey struct{}

// requestInfo is what the logging middleware puts in a request's context.
type requestInfo struct {
	id     string
	logger *slog.Logger
}

// requestID returns the id of the request of ctx ("" outside the server's
// handler).
func requestID(ctx context.Context) string {
	if ri, ok := ctx.Value(requestKey{}).(*requestInfo); ok {
		return ri.id
	}
	return ""
}

// requestLogger returns the server's logger for the request of ctx, or
// slog.Default().
func requestLogger(ctx context.Context) *slog.Logger {
	if ri, ok := ctx.Value(requestKey{}).(*requestInfo); ok {
		return ri.logger
	}
	return slog.Default()
}

// validRequestID reports whether a caller's X-Request-Id may be kept: short,
// and nothing that could forge a log line.
func validRequestID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for _, c := range id {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}

func newRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// withRequestLog is the outermost middleware: it gives each request an id
// (header X-Request-Id, in the context for writeProblem), turns a handler's
// panic into a logged 500, and writes the access log line when
// Config.AccessLog is set. It never logs a header's value (a token) nor a
// body: the method, the path, the status, the size and the duration.
func (s *Server) withRequestLog(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := r.Header.Get(RequestIDHeader)
		if !validRequestID(id) {
			id = newRequestID()
		}
		w.Header().Set(RequestIDHeader, id)
		ri := &requestInfo{id: id, logger: s.cfg.Logger}
		r = r.WithContext(context.WithValue(r.Context(), requestKey{}, ri))
		aw := &accessWriter{ResponseWriter: w}
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.cfg.Logger.Error("sluice server: handler panicked", "request_id", id, "method", r.Method,
					"path", r.URL.Path, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
				if aw.status == 0 {
					writeProblem(aw, r, problemf(http.StatusInternalServerError, "internal", "internal error (request %s)", id))
				}
			}
			if s.cfg.AccessLog {
				status := aw.status
				if status == 0 {
					status = http.StatusOK
				}
				s.cfg.Logger.Info("http request", "request_id", id, "method", r.Method, "path", r.URL.Path,
					"status", status, "bytes", aw.bytes, "duration_ms", float64(time.Since(start).Microseconds())/1000,
					"remote", r.RemoteAddr)
			}
		}()
		next.ServeHTTP(aw, r)
	})
}

// logProblem logs a problem of status 5xx about to be written, with its
// cause: what the server could not do is in the log, with the id the
// caller got.
func logProblem(r *http.Request, p *Problem) {
	// (not for a client that went away, such as from a long poll: nobody
	// reads the answer, and it is no failure of the server)
	if p.Status < 500 || r.Context().Err() != nil {
		return
	}
	cause := p.Detail
	if p.cause != nil {
		cause = p.cause.Error()
	}
	attrs := []any{"request_id", p.RequestID, "method", r.Method, "path", r.URL.Path, "status", p.Status,
		"type", p.Type, "error", cause}
	if p.Code != "" {
		attrs = append(attrs, "code", p.Code)
	}
	level := slog.LevelError
	var pe *Problem
	if p.Status == http.StatusServiceUnavailable && (p.cause == nil || errors.As(p.cause, &pe)) {
		// The server's own 503s (shutting down, readiness): expected.
		level = slog.LevelWarn
	}
	requestLogger(r.Context()).Log(r.Context(), level, "sluice server: request failed", attrs...)
}

// accessWriter records the status and size of a response.
type accessWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *accessWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *accessWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

func (w *accessWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
