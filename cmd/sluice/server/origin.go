package server

import (
	"mime"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// guardBrowser refuses what a web page of another site could make a browser
// send to the server, in every mode (with no auth, such a request would run
// with the server's own rights; with tokens, it costs nothing to refuse):
//
//   - a Host that is not the listen address nor a configured name (DNS
//     rebinding: a name of the attacker's that resolves to this server);
//   - an Origin (sent by browsers with every POST and every cross-origin
//     fetch) that is not this server;
//   - a POST, PUT or PATCH whose Content-Type is not application/json: a
//     page can send text/plain, forms and multipart to another origin
//     without asking (fetch with mode "no-cors", a form), but not JSON. A
//     DELETE cannot be sent to another origin without a CORS preflight,
//     which the server never approves.
//
// /healthz and /readyz are exempt from the Host check, for probes that
// name the server by an address of a load balancer's choosing.
func (s *Server) guardBrowser(r *http.Request) *Problem {
	if r.URL.Path != "/healthz" && r.URL.Path != "/readyz" && !s.hostAllowed(r.Host) {
		return problemf(http.StatusMisdirectedRequest, "misdirected_request",
			"this server does not answer to the host name %q (it answers to its listen address and the names of --allowed-host)", r.Host)
	}
	if o := r.Header.Get("Origin"); o != "" && !s.originAllowed(o, r.Host) {
		return problemf(http.StatusForbidden, "cross_origin",
			"requests from origin %q are refused: this server is not that origin", o)
	}
	switch r.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch:
		mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if err != nil || mt != "application/json" {
			return problemf(http.StatusUnsupportedMediaType, "unsupported_media_type",
				"%s needs \"Content-Type: application/json\" (even without a body), not %q", r.Method, r.Header.Get("Content-Type"))
		}
	}
	return nil
}

// hostAllowed reports whether a request's Host names this server: a name of
// cfg.Hosts, or an IP address the server listens on ("localhost" and any
// loopback address when it listens on a loopback address, any address when
// it listens on all of them). Before Serve (the handler used on its own),
// the loopback names only.
func (s *Server) hostAllowed(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	if host == "" {
		return false
	}
	if slices.Contains(s.hosts, host) {
		return true
	}
	ip := net.ParseIP(host)
	ln := s.listenIP.Load()
	switch {
	case ln == nil || ln.IsLoopback():
		return host == "localhost" || ip != nil && ip.IsLoopback()
	case ln.IsUnspecified():
		return host == "localhost" || ip != nil
	}
	return ip != nil && ip.Equal(*ln)
}

// originAllowed reports whether origin (scheme://host[:port]) is the server
// the request was sent to, or one of the configured names.
func (s *Server) originAllowed(origin, host string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return false // "null" among others (a sandboxed frame, a file)
	}
	return strings.EqualFold(u.Host, host) || slices.Contains(s.hosts, strings.ToLower(u.Hostname()))
}
