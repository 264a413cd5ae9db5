package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluicemq/sluice/cmd/sluice/server"
)

// TestDashboardScreenshots makes the pictures of the dashboard in docs/
// (dashboard.png, dashboard-queue.png, dashboard-inflight.png) when
// SLUICE_SCREENSHOTS names the directory to write them to:
//
//	SLUICE_SCREENSHOTS=$PWD/docs go test ./cmd/sluice/server/ -run TestDashboardScreenshots -count=1
//
// It runs a real server and PostgreSQL with the traffic of a small shop for
// about two and a half minutes: four queues of different depths (one with
// a growing backlog that a second worker then drains, one read in bursts by
// a batch job), several groups, workers holding leases, retries, delayed
// messages and a few dead letters with their errors, so that the charts
// have a shape. The page is opened only after a minute: its charts start
// with the server's samples of the status (every second here,
// --history-interval), and go on with the page's own readings (every 250
// ms, --events-interval). Without SLUICE_SCREENSHOTS it is skipped: the
// other dashboard tests check the behaviour (and write dashboard-held.png,
// dashboard-consumer.png and dashboard-phone.png).
func TestDashboardScreenshots(t *testing.T) {
	if os.Getenv("SLUICE_SCREENSHOTS") == "" {
		t.Skip("SLUICE_SCREENSHOTS is not set")
	}
	ts := start(t, func(c *server.Config) {
		c.EventsInterval = 250 * time.Millisecond
		c.HistoryInterval = time.Second
	})
	b := newBrowser(t)
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "orders", "options": map[string]any{"default_group": false}})
	for _, g := range []string{"fulfillment", "billing", "analytics"} {
		ts.must(201, "POST", "/v1/queues/orders/groups", tokAdmin, map[string]any{"name": g})
	}
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "emails"})
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "webhooks", "options": map[string]any{"max_attempts": 3}})
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "thumbnails"})

	sim := &shop{ts: ts, t: t, start: time.Now()}
	runCtx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { stop(); wg.Wait() })
	for _, f := range sim.actors() {
		wg.Add(1)
		go func() { defer wg.Done(); f(runCtx) }()
	}

	// The page opens after a minute: the server's history fills its charts.
	time.Sleep(60 * time.Second)
	b.signIn(t, ts.url, tokAdmin, "thumbnails")
	time.Sleep(90 * time.Second)
	b.waitNonzero(t, `.card[data-queue="webhooks"] tr[data-group="default"] td.dead`)
	b.screenshot(t, "dashboard.png", "body")

	// A queue's own view: charts (the pointer over one), a dead letter
	// looked up by id, the dead letters with their errors, redrive and
	// discard.
	var deadID float64
	dls := ts.must(200, "GET", "/v1/queues/webhooks/dead-letters", tokAdmin, nil)["dead_letters"].([]any)
	deadID = dls[len(dls)-1].(map[string]any)["id"].(float64)
	b.run(t, chromedp.Click(`.card[data-queue="webhooks"] .title`, chromedp.ByQuery),
		chromedp.WaitVisible(`#dead-letters tr.dead-letter`, chromedp.ByQuery),
		chromedp.SendKeys(`#detail form.lookup input[name="id"]`, fmt.Sprint(int64(deadID)), chromedp.ByQuery),
		chromedp.Click(`#detail form.lookup button`, chromedp.ByQuery))
	b.waitTrue(t, `document.getElementById("found-dead") !== null`)
	b.hoverChart(t, `#detail canvas[data-chart="webhooks/rates"]`, 0.8)
	b.screenshot(t, "dashboard-queue.png", "#detail")

	// The orders: the billing workers' leases, and a long body expanded.
	b.run(t, chromedp.Click(`#back`, chromedp.ByQuery), chromedp.WaitVisible(`.card[data-queue="orders"] .title`, chromedp.ByQuery),
		chromedp.Click(`.card[data-queue="orders"] .title`, chromedp.ByQuery),
		chromedp.WaitVisible(`#leases tr.lease`, chromedp.ByQuery))
	// (both billing workers' leases)
	b.waitTrue(t, `new Set([...document.querySelectorAll("#leases td:nth-child(5)")].map((e) => e.textContent)).size >= 2`)
	b.run(t,
		chromedp.WaitVisible(`#peeked details summary`, chromedp.ByQuery),
		chromedp.Click(`#peeked details summary`, chromedp.ByQuery),
		chromedp.WaitVisible(`#peeked details[open] pre.body`, chromedp.ByQuery))
	b.hoverChart(t, `#detail canvas[data-chart="orders/lag"]`, 0.6)
	b.screenshot(t, "dashboard-inflight.png", "#detail")
	stop()
	wg.Wait()
	if errs := b.consoleErrors("401"); /* the page asks before the sign-in */ len(errs) > 0 {
		t.Fatalf("console errors:\n%s", strings.Join(errs, "\n"))
	}
}

// hoverChart puts the pointer over the chart sel at fraction x of its
// width, and waits for the tooltip.
func (b *browser) hoverChart(t *testing.T, sel string, x float64) {
	t.Helper()
	b.run(t, chromedp.Evaluate(fmt.Sprintf(`(() => { window.scrollTo(0, 0); const c = document.querySelector(%q); const r = c.getBoundingClientRect();
		c.dispatchEvent(new MouseEvent("mousemove", { clientX: r.left + r.width * %v, clientY: r.top + r.height / 2, bubbles: true })); })()`, sel, x), nil))
	b.waitTrue(t, `!document.getElementById("chart-tip").hidden`)
}

// waitTrue waits until the expression js is true.
func (b *browser) waitTrue(t *testing.T, js string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var ok bool
		if err := chromedp.Run(b.ctx, chromedp.Evaluate(js, &ok)); err == nil && ok {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("still false after 30 s: %s", js)
}

// waitNonzero waits until the text of sel is a number other than 0.
func (b *browser) waitNonzero(t *testing.T, sel string) {
	t.Helper()
	b.waitTextThat(t, sel, 30*time.Second, func(got string) bool { return got != "" && got != "0" && got != "–" },
		"a number above 0")
}

// shop is the screenshots' traffic: producers and workers that use the
// HTTP API as applications would.
type shop struct {
	ts    *testServer
	t     *testing.T
	start time.Time
	mu    sync.Mutex
	order int
}

// call sends a request with the admin token; a failure is reported (not
// fatal: it runs in the actors' goroutines) unless ctx has ended.
func (s *shop) call(ctx context.Context, path string, body any) map[string]any {
	j, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, "POST", s.ts.url+path, bytes.NewReader(j))
	if err != nil {
		s.t.Error(err)
		return nil
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tokAdmin)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			s.t.Errorf("POST %s: %v", path, err)
		}
		return nil
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(res.Body)
	if res.StatusCode >= 300 {
		if ctx.Err() == nil {
			s.t.Errorf("POST %s: %d %s", path, res.StatusCode, data)
		}
		return nil
	}
	var m map[string]any
	_ = json.Unmarshal(data, &m)
	return m
}

type msg struct {
	receipt string
	body    map[string]any
	attempt int
}

func (s *shop) receive(ctx context.Context, queue, group, consumer string, max int, lease string) []msg {
	r := s.call(ctx, "/v1/queues/"+queue+"/groups/"+group+"/receive", map[string]any{
		"max": max, "wait": "1s", "consumer": consumer, "lease": lease})
	var out []msg
	for _, m := range asList(r["messages"]) {
		m := m.(map[string]any)
		body, _ := m["body"].(map[string]any)
		out = append(out, msg{receipt: m["receipt"].(string), body: body, attempt: int(m["attempt"].(float64))})
	}
	return out
}

func asList(v any) []any { l, _ := v.([]any); return l }

func (s *shop) ack(ctx context.Context, queue, group string, ms []msg) {
	if len(ms) == 0 {
		return
	}
	var receipts []string
	for _, m := range ms {
		receipts = append(receipts, m.receipt)
	}
	s.call(ctx, "/v1/queues/"+queue+"/groups/"+group+"/ack", map[string]any{"receipts": receipts})
}

// every runs f every period until ctx ends; f gets the seconds since the
// start of the run.
func every(ctx context.Context, period time.Duration, start time.Time, f func(sec float64)) {
	tk := time.NewTicker(period)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
			f(time.Since(start).Seconds())
		}
	}
}

// worker receives and handles batches until ctx ends; handle returns the
// messages to ack.
func (s *shop) worker(ctx context.Context, queue, group, consumer string, max int, lease string, pause time.Duration, handle func([]msg) []msg) {
	for ctx.Err() == nil {
		ms := s.receive(ctx, queue, group, consumer, max, lease)
		if pause > 0 && len(ms) > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(pause):
			}
		}
		if handle != nil {
			ms = handle(ms)
		}
		s.ack(ctx, queue, group, ms)
	}
}

var (
	customers = []string{"c-1042", "c-2177", "c-0311", "c-4580", "c-0099", "c-3301", "c-7712"}
	products  = []string{"BEANS", "KETTLE", "GRINDER", "FILTERS", "DRIPPER", "FROTHER", "MUG"}
	emails    = []string{"order-confirmation", "shipping-update", "password-reset", "weekly-digest"}
)

func (s *shop) newOrder(r *rand.Rand) map[string]any {
	s.mu.Lock()
	s.order++
	n := 10000 + s.order
	s.mu.Unlock()
	items := []map[string]any{}
	count := 1 + r.IntN(2)
	if n%13 == 0 {
		count = 4 // a big order: a long body, cut in peek
	}
	total := 0.0
	for range count {
		price := float64(5+r.IntN(120)) - 0.01
		total += price
		items = append(items, map[string]any{"sku": products[r.IntN(len(products))], "qty": 1 + r.IntN(2)})
	}
	return map[string]any{"order": n, "customer": customers[r.IntN(len(customers))], "items": items,
		"total": math.Round(total*100) / 100}
}

// charge is the billing workers' handling: one order in 29 fails its
// first attempt (a payment provider's timeout) and is retried.
func (s *shop) charge(ctx context.Context) func([]msg) []msg {
	return func(ms []msg) []msg {
		var ok []msg
		for _, m := range ms {
			if n, _ := m.body["order"].(float64); int(n)%29 == 0 && m.attempt == 1 {
				s.call(ctx, "/v1/queues/orders/groups/billing/nack", map[string]any{
					"receipt": m.receipt, "error": "payments: POST /v1/charges: context deadline exceeded", "delay": "3s"})
				continue
			}
			ok = append(ok, m)
		}
		return ok
	}
}

// actors are the run's producers and workers.
func (s *shop) actors() []func(context.Context) {
	r := rand.New(rand.NewPCG(7, 11))
	var rmu sync.Mutex
	rnd := func(f func(r *rand.Rand)) { rmu.Lock(); defer rmu.Unlock(); f(r) }
	return []func(context.Context){
		// orders: about 15 a second, in waves of 40 s.
		func(ctx context.Context) {
			every(ctx, 200*time.Millisecond, s.start, func(sec float64) {
				var batch []map[string]any
				rnd(func(r *rand.Rand) {
					n := int(math.Round(3+2*math.Sin(2*math.Pi*sec/40))) + r.IntN(2)
					for range n {
						o := s.newOrder(r)
						batch = append(batch, map[string]any{"body": o, "key": o["customer"]})
					}
				})
				if len(batch) > 0 {
					s.call(ctx, "/v1/queues/orders/messages/batch", map[string]any{"messages": batch})
				}
			})
		},
		// fulfillment keeps up.
		func(ctx context.Context) {
			s.worker(ctx, "orders", "fulfillment", "fulfillment-1", 20, "30s", 0, nil)
		},
		// billing: two workers that take their time (their leases show in
		// flight) and fall behind at the peaks.
		func(ctx context.Context) {
			s.worker(ctx, "orders", "billing", "billing-worker-1", 4, "1m", 500*time.Millisecond, s.charge(ctx))
		},
		func(ctx context.Context) {
			s.worker(ctx, "orders", "billing", "billing-worker-2", 4, "1m", 500*time.Millisecond, s.charge(ctx))
		},
		// analytics: a batch job that drains the group every 20 s.
		func(ctx context.Context) {
			every(ctx, 20*time.Second, s.start, func(float64) {
				for ctx.Err() == nil {
					ms := s.receive(ctx, "orders", "analytics", "analytics-etl", 100, "5m")
					s.ack(ctx, "orders", "analytics", ms)
					if len(ms) < 100 {
						return
					}
				}
			})
		},
		// emails: a steady trickle, some of them for later (delayed).
		func(ctx context.Context) {
			every(ctx, 250*time.Millisecond, s.start, func(sec float64) {
				var body map[string]any
				delay := ""
				rnd(func(r *rand.Rand) {
					kind := emails[r.IntN(len(emails))]
					body = map[string]any{"template": kind, "to": customers[r.IntN(len(customers))] + "@example.com"}
					if kind == "weekly-digest" {
						delay = "10m"
					}
				})
				s.call(ctx, "/v1/queues/emails/messages", map[string]any{"body": body, "delay": delay})
			})
		},
		func(ctx context.Context) {
			s.worker(ctx, "emails", "default", "mailer-1", 10, "30s", 300*time.Millisecond, nil)
		},
		// webhooks: some endpoints fail once and then answer; a few never
		// do (dead letters after 3 attempts).
		func(ctx context.Context) {
			i := 0
			every(ctx, 300*time.Millisecond, s.start, func(sec float64) {
				i++
				endpoint := "https://hooks.acme.example/sluice"
				switch {
				case i%90 == 0:
					endpoint = "https://legacy.example.net/hook"
				case i%140 == 0:
					endpoint = "https://shop.example.org/webhooks/v1"
				case i%7 == 0:
					endpoint = "https://flaky.example.com/events"
				}
				event := []string{"order.created", "order.paid", "order.shipped"}[i%3]
				s.call(ctx, "/v1/queues/webhooks/messages", map[string]any{"body": map[string]any{
					"event": event, "endpoint": endpoint, "order": 10000 + i}})
			})
		},
		func(ctx context.Context) {
			s.worker(ctx, "webhooks", "default", "hook-sender-1", 5, "30s", 200*time.Millisecond, func(ms []msg) []msg {
				var ok []msg
				for _, m := range ms {
					fail := ""
					switch ep, _ := m.body["endpoint"].(string); {
					case strings.HasPrefix(ep, "https://legacy."):
						fail = "POST " + ep + ": dial tcp 203.0.113.7:443: i/o timeout"
					case strings.HasPrefix(ep, "https://shop."):
						fail = "POST " + ep + ": 410 Gone: endpoint removed"
					case strings.HasPrefix(ep, "https://flaky.") && m.attempt == 1:
						fail = "POST " + ep + ": 503 Service Unavailable"
					}
					if fail == "" {
						ok = append(ok, m)
						continue
					}
					s.call(ctx, "/v1/queues/webhooks/groups/default/nack", map[string]any{
						"receipt": m.receipt, "error": fail, "delay": "2s"})
				}
				return ok
			})
		},
		// thumbnails: uploads outrun one resizer; a second one starts at
		// 45 s and the backlog drains.
		func(ctx context.Context) {
			i := 0
			every(ctx, 150*time.Millisecond, s.start, func(sec float64) {
				i++
				s.call(ctx, "/v1/queues/thumbnails/messages", map[string]any{"body": map[string]any{
					"image": fmt.Sprintf("uploads/2026/11/IMG_%04d.jpg", 4000+i), "sizes": []int{128, 512, 1024}}})
			})
		},
		func(ctx context.Context) {
			s.worker(ctx, "thumbnails", "default", "resizer-1", 1, "30s", 400*time.Millisecond, nil)
		},
		func(ctx context.Context) {
			select {
			case <-ctx.Done():
				return
			case <-time.After(45 * time.Second):
			}
			s.worker(ctx, "thumbnails", "default", "resizer-2", 6, "30s", 400*time.Millisecond, nil)
		},
	}
}
