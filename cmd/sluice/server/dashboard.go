package server

import (
	"embed"
	"io/fs"
	"net/http"
)

// The dashboard: a static page (dashboard/) that polls the /v1 API with the
// user's token. It needs no token to load: it shows nothing until the API
// accepts the token.
//
//go:embed dashboard
var dashboardFS embed.FS

// dashboardCSP allows the page its own scripts, styles and API only.
const dashboardCSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

func (s *Server) registerDashboard(mux *http.ServeMux) {
	sub, _ := fs.Sub(dashboardFS, "dashboard")
	files := http.FileServerFS(sub)
	secure := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Security-Policy", dashboardCSP)
			w.Header().Set("X-Content-Type-Options", "nosniff")
			w.Header().Set("Referrer-Policy", "no-referrer")
			w.Header().Set("Cache-Control", "no-cache")
			h.ServeHTTP(w, r)
		})
	}
	mux.Handle("GET /{$}", secure(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeFileFS(w, r, sub, "index.html")
	})))
	mux.Handle("GET /assets/", secure(http.StripPrefix("/assets/", files)))
}
