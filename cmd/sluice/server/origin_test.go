package server_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/sluicemq/sluice/cmd/sluice/server"
)

// raw sends a request with the given headers and no token, and returns its
// status.
func (ts *testServer) raw(method, path, body string, header map[string]string) int {
	ts.t.Helper()
	req, err := http.NewRequest(method, ts.url+path, strings.NewReader(body))
	if err != nil {
		ts.t.Fatal(err)
	}
	for k, v := range header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		ts.t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

// With authentication off, what a web page of another site can make a
// browser send is refused: another Host (DNS rebinding), another Origin, a
// body that is not JSON (fetch "no-cors", forms). Nothing changes.
func TestBrowserGuard(t *testing.T) {
	ts := start(t, func(c *server.Config) {
		c.Auth = server.AuthConfig{Insecure: true}
		c.Hosts = []string{"queue.example.com"}
	})
	ts.must(201, "POST", "/v1/queues", "", map[string]any{"name": "web"})
	ts.must(201, "POST", "/v1/queues/web/messages", "", map[string]any{"body": 1})
	same := strings.TrimPrefix(ts.url, "http://")
	for _, c := range []struct {
		name, method, path, body string
		header                   map[string]string
		want                     int
	}{
		{"rebound host", "GET", "/v1/queues", "", map[string]string{"Host": "attacker.example"}, 421},
		{"rebound host, port", "POST", "/v1/queues", `{"name": "evil1"}`,
			map[string]string{"Host": "attacker.example:" + strings.Split(same, ":")[1], "Content-Type": "application/json"}, 421},
		{"foreign origin", "POST", "/v1/queues", `{"name": "evil2"}`,
			map[string]string{"Origin": "http://attacker.example", "Content-Type": "application/json"}, 403},
		{"other port", "POST", "/v1/queues/web/purge", "",
			map[string]string{"Origin": "http://127.0.0.1:1", "Content-Type": "application/json"}, 403},
		{"null origin", "DELETE", "/v1/queues/web", "", map[string]string{"Origin": "null"}, 403},
		{"text/plain", "POST", "/v1/queues", `{"name": "evil3"}`, map[string]string{"Content-Type": "text/plain"}, 415},
		{"form", "POST", "/v1/queues/web/purge", "", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 415},
		{"no type", "POST", "/v1/queues/web/messages", `{"body": 2}`, nil, 415},
		{"no type, patch", "PATCH", "/v1/queues/web", `{"options": {"max_attempts": 2}}`, nil, 415},

		{"same origin", "GET", "/v1/queues/web", "", map[string]string{"Origin": ts.url}, 200},
		{"configured name", "GET", "/v1/queues/web", "", map[string]string{"Host": "Queue.Example.com:443", "Origin": "https://queue.example.com"}, 200},
		{"localhost", "GET", "/v1/queues/web", "", map[string]string{"Host": "localhost:7810"}, 200},
		{"health of any name", "GET", "/healthz", "", map[string]string{"Host": "10.0.0.7:7810"}, 200},
		{"json with charset", "POST", "/v1/queues", `{"name": "fine"}`, map[string]string{"Content-Type": "application/json; charset=utf-8"}, 201},
	} {
		if got := ts.raw(c.method, c.path, c.body, c.header); got != c.want {
			t.Errorf("%s: %s %s: %d, want %d", c.name, c.method, c.path, got, c.want)
		}
	}
	names := []string{}
	for _, q := range ts.must(200, "GET", "/v1/queues", "", nil)["queues"].([]any) {
		names = append(names, q.(map[string]any)["name"].(string))
	}
	if strings.Join(names, ",") != "fine,web" {
		t.Errorf("queues %v, want fine,web", names)
	}
	if n := len(ts.must(200, "GET", "/v1/queues/web/messages", "", nil)["messages"].([]any)); n != 1 {
		t.Errorf("web holds %d messages, want 1", n)
	}
}

// A page on another origin, in Chromium, fires no-cors requests at a
// server without authentication: none of them creates, sends or purges.
func TestBrowserCrossSiteRequestsRefused(t *testing.T) {
	ts := start(t, func(c *server.Config) { c.Auth = server.AuthConfig{Insecure: true} })
	ts.must(201, "POST", "/v1/queues", "", map[string]any{"name": "web"})
	ts.must(201, "POST", "/v1/queues/web/messages", "", map[string]any{"body": 1})
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte("<!doctype html><title>evil</title>"))
	}))
	t.Cleanup(evil.Close)
	b := newBrowser(t)
	var done string
	script := `(async () => {
	  const base = ` + "`" + ts.url + "`" + `;
	  const opts = (body, type) => ({method: "POST", mode: "no-cors", body, headers: type ? {"Content-Type": type} : {}});
	  const tries = [
	    fetch(base + "/v1/queues", opts('{"name": "evil"}', "text/plain")),
	    fetch(base + "/v1/queues", opts('{"name": "evil2"}')),
	    fetch(base + "/v1/queues/web/messages", opts('{"body": 2}', "text/plain")),
	    fetch(base + "/v1/queues/web/purge", opts("", "application/x-www-form-urlencoded")),
	    fetch(base + "/v1/queues/web/purge", opts(new Blob(["{}"], {type: "application/json"}))),
	  ];
	  await Promise.allSettled(tries);
	  return "done";
	})()`
	b.run(t, chromedp.Navigate(evil.URL+"/"), chromedp.Evaluate(script, &done, func(p *runtime.EvaluateParams) *runtime.EvaluateParams {
		return p.WithAwaitPromise(true)
	}))
	if done != "done" {
		t.Fatalf("the page's script: %q", done)
	}
	if qs := ts.must(200, "GET", "/v1/queues", "", nil)["queues"].([]any); len(qs) != 1 {
		t.Errorf("queues after the page's requests: %v", qs)
	}
	if n := len(ts.must(200, "GET", "/v1/queues/web/messages", "", nil)["messages"].([]any)); n != 1 {
		t.Errorf("web holds %d messages after the page's requests, want 1", n)
	}
}
