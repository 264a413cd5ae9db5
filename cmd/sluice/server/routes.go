package server

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicemq/sluice/docs"
)

// route is one endpoint. Its pattern is a net/http.ServeMux pattern
// ("POST /v1/queues/{queue}/messages"); the OpenAPI document must list
// exactly these (TestOpenAPIMatchesRoutes).
type route struct {
	method, path string
	// public routes need no token.
	public bool
	// admin routes need role sluice_admin (when auth is on).
	admin bool
	// use says how the route uses the database pool (connGated if unset).
	use    connUse
	handle func(w http.ResponseWriter, r *http.Request) error
}

// connUse is how a route uses the database pool.
type connUse int

const (
	// connGated routes hold a connection for work whose cost grows with
	// what the database holds (status, lists, peek, administration): they
	// share the pool less its reserve (Config.ReservedConns), waiting for
	// a place (gate).
	connGated connUse = iota
	// connMessage routes are the message endpoints, a few statements each:
	// they alone may use the reserve, so that one token's administration
	// or status calls cannot make other tokens' sends and receives wait.
	connMessage
	// connNone routes hold no connection of their own: the event stream
	// reads from a shared feed, and GET /v1/status from shared readings
	// that pass the gate themselves (statusshare.go).
	connNone
)

func (s *Server) routeTable() []route {
	return []route{
		{method: "GET", path: "/healthz", public: true, handle: s.healthz},
		{method: "GET", path: "/readyz", public: true, handle: s.readyz},
		{method: "GET", path: "/metrics", admin: true, handle: s.serveMetrics},
		{method: "GET", path: "/v1/openapi.json", public: true, handle: serveOpenAPI},

		{method: "GET", path: "/v1/queues", handle: s.listQueues},
		{method: "POST", path: "/v1/queues", handle: s.createQueue},
		{method: "GET", path: "/v1/queues/{queue}", handle: s.getQueue},
		{method: "PATCH", path: "/v1/queues/{queue}", handle: s.alterQueue},
		{method: "DELETE", path: "/v1/queues/{queue}", handle: s.dropQueue},
		{method: "POST", path: "/v1/queues/{queue}/purge", handle: s.purgeQueue},
		{method: "POST", path: "/v1/queues/{queue}/upgrade", handle: s.upgradeQueue},
		{method: "GET", path: "/v1/status", use: connNone, handle: s.status},
		{method: "GET", path: "/v1/status/history", handle: s.statusHistoryHandler},
		{method: "GET", path: "/v1/whoami", handle: s.whoAmI},
		{method: "GET", path: "/v1/events", use: connNone, handle: s.serveEvents},

		{method: "POST", path: "/v1/queues/{queue}/groups", handle: s.createGroup},
		{method: "DELETE", path: "/v1/queues/{queue}/groups/{group}", handle: s.dropGroup},
		{method: "POST", path: "/v1/queues/{queue}/groups/{group}/seek", handle: s.seekGroup},

		{method: "POST", path: "/v1/queues/{queue}/messages", use: connMessage, handle: s.send},
		{method: "POST", path: "/v1/queues/{queue}/messages/batch", use: connMessage, handle: s.sendBatch},
		{method: "POST", path: "/v1/queues/{queue}/groups/{group}/receive", use: connMessage, handle: s.receive},
		{method: "POST", path: "/v1/queues/{queue}/groups/{group}/ack", use: connMessage, handle: s.ack},
		{method: "POST", path: "/v1/queues/{queue}/groups/{group}/nack", use: connMessage, handle: s.nack},
		{method: "POST", path: "/v1/queues/{queue}/groups/{group}/extend", use: connMessage, handle: s.extend},
		{method: "POST", path: "/v1/transaction", use: connMessage, handle: s.transaction},

		{method: "GET", path: "/v1/queues/{queue}/messages", handle: s.peek},
		{method: "GET", path: "/v1/queues/{queue}/leases", handle: s.leases},
		{method: "GET", path: "/v1/queues/{queue}/dead-letters", handle: s.deadLetters},
		{method: "POST", path: "/v1/queues/{queue}/dead-letters/redrive", handle: s.redrive},
		{method: "POST", path: "/v1/queues/{queue}/dead-letters/discard", handle: s.discardDeadLetters},
	}
}

// buildMux registers the routes, each wrapped in the middleware: request
// metrics, authentication, the per-token concurrency limit, the body limit;
// every request passes guardBrowser first.
func (s *Server) buildMux() http.Handler {
	mux := http.NewServeMux()
	for _, rt := range s.routes {
		mux.Handle(rt.method+" "+rt.path, s.wrap(rt))
	}
	s.registerDashboard(mux)
	return s.withRequestLog(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := s.guardBrowser(r); p != nil {
			writeProblem(w, r, p)
			return
		}
		h, pattern := mux.Handler(r)
		if pattern != "" {
			mux.ServeHTTP(w, r) // sets the path values
			return
		}
		// No route: the mux answers 404, or 405 with Allow; say it as a
		// problem.
		rec := &headerOnly{header: http.Header{}}
		h.ServeHTTP(rec, r)
		if allow := rec.header.Get("Allow"); allow != "" {
			w.Header().Set("Allow", allow)
			writeProblem(w, r, problemf(http.StatusMethodNotAllowed, "method_not_allowed", "%s allows %s, not %s", r.URL.Path, allow, r.Method))
			return
		}
		writeProblem(w, r, problemf(http.StatusNotFound, "not_found", "no endpoint %s %s (see /v1/openapi.json)", r.Method, r.URL.Path))
	}))
}

// headerOnly is a ResponseWriter that keeps the headers and drops the rest.
type headerOnly struct{ header http.Header }

func (h *headerOnly) Header() http.Header         { return h.header }
func (h *headerOnly) Write(b []byte) (int, error) { return len(b), nil }
func (h *headerOnly) WriteHeader(int)             {}

func (s *Server) wrap(rt route) http.Handler {
	name := rt.method + " " + rt.path
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := requestID(r.Context())
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK, id: id}
		defer func() { s.metrics.observe(name, sw.status, time.Since(start)) }()
		defer func() {
			if sw.failure != nil {
				requestLogger(r.Context()).Error("sluice server: the answer could not be written", "request_id", id,
					"method", r.Method, "path", r.URL.Path, "error", sw.failure.Error())
			}
		}()
		if err := s.serve(rt, sw, r); err != nil {
			p := toProblem(err)
			if p.cause == nil {
				p.cause = err
			}
			writeProblem(sw, r, p)
		}
	})
}

func (s *Server) serve(rt route, w http.ResponseWriter, r *http.Request) error {
	if rt.public {
		return rt.handle(w, r)
	}
	p, err := s.auth.authenticate(r)
	if err != nil {
		return s.unread(w, err)
	}
	if rt.admin && p.Role != "" && (p.Role != RoleAdmin || len(p.Queues) > 0) {
		return s.unread(w, problemf(http.StatusForbidden, "forbidden", "%s needs role %s for every queue (a token without queue patterns)", rt.path, RoleAdmin))
	}
	if !s.limiter.acquire(p.key) {
		return s.unread(w, problemf(http.StatusTooManyRequests, "too_many_requests",
			"this token has %d requests in progress, the server's limit (--max-concurrent)", s.cfg.MaxConcurrent))
	}
	defer s.limiter.release(p.key)
	r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBody)
	if q := r.PathValue("queue"); q != "" && !p.Allows(q) {
		return s.unread(w, forbidQueue(q))
	}
	if rt.use == connGated {
		if err := s.gate.enter(r.Context()); err != nil {
			return err
		}
		defer s.gate.leave()
	}
	return rt.handle(w, r.WithContext(withPrincipal(r.Context(), p)))
}

// unread answers a request refused before its body was read without
// reading it: net/http would read what is left of it after the answer (up
// to 256 KiB, to reuse the connection), for as long as the read timeout
// allows, and a client without a token could dribble it for 70s per
// connection. The connection closes after the answer instead.
func (s *Server) unread(w http.ResponseWriter, err error) error {
	w.Header().Set("Connection", "close")
	_ = http.NewResponseController(w).SetReadDeadline(time.Now())
	return err
}

// statusWriter records the status of a response, and a failure to encode
// it (writeJSON), which wrap logs under the request id.
type statusWriter struct {
	http.ResponseWriter
	status  int
	id      string
	failure error
}

// fail records err, and returns the request id.
func (w *statusWriter) fail(err error) string {
	w.failure = err
	return w.id
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) error {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	return nil
}

// readyz reports ready when the database answers, the schema is there and
// the server is not shutting down.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) error {
	select {
	case <-s.draining:
		return problemf(http.StatusServiceUnavailable, "shutting_down", "the server is shutting down")
	default:
	}
	var version string
	if err := s.pool.QueryRow(r.Context(), "SELECT sluice.version()").Scan(&version); err != nil {
		p := toProblem(err)
		p.Status, p.Title = http.StatusServiceUnavailable, http.StatusText(http.StatusServiceUnavailable)
		return p
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": "ready", "engine_version": version, "listener": s.notify.up.Load()})
	return nil
}

func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) error {
	promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}).ServeHTTP(w, r)
	return nil
}

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) error {
	w.Header().Set("Content-Type", "application/json")
	_, err := w.Write(docs.OpenAPI)
	return err
}

// Routes returns the endpoints the server registers, as "METHOD /path"
// (ServeMux patterns).
func (s *Server) Routes() []string {
	out := make([]string, len(s.routes))
	for i, rt := range s.routes {
		out[i] = rt.method + " " + rt.path
	}
	return out
}
