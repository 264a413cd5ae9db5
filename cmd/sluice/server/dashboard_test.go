package server_test

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/sluicemq/sluice/cmd/sluice/server"
)

// browser is a headless Chromium tab that records console errors.
type browser struct {
	ctx    context.Context
	mu     sync.Mutex
	errors []string
}

// newBrowser starts headless Chromium (Debian package chromium: "make
// browser" installs it); the tests skip without it unless
// SLUICE_REQUIRE_BROWSER is set.
func newBrowser(t *testing.T) *browser {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("SLUICE_REQUIRE_BROWSER") != "" {
			t.Fatal("chromium not found (make browser installs it)")
		}
		t.Skip("chromium not found: make browser installs it")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.WindowSize(1400, 900), chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	// The cdproto module may know fewer enum values than this Chromium
	// sends (such as network.IPAddressSpace "Loopback"): such events are
	// dropped quietly; other errors are logged.
	ctx, cancelCtx := chromedp.NewContext(actx, chromedp.WithErrorf(func(format string, args ...any) {
		if msg := fmt.Sprintf(format, args...); !strings.Contains(msg, "could not unmarshal event") {
			t.Logf("chromedp: %s", msg)
		}
	}))
	timeout := 90 * time.Second
	if os.Getenv("SLUICE_SCREENSHOTS") != "" {
		timeout = 5 * time.Minute // TestDashboardScreenshots runs traffic for a while
	}
	ctx, cancelTimeout := context.WithTimeout(ctx, timeout)
	t.Cleanup(func() { cancelTimeout(); cancelCtx(); cancelAlloc() })
	b := &browser{ctx: ctx}
	chromedp.ListenTarget(ctx, func(ev any) {
		b.mu.Lock()
		defer b.mu.Unlock()
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.APITypeError {
				var parts []string
				for _, a := range ev.Args {
					parts = append(parts, string(a.Value))
				}
				b.errors = append(b.errors, "console.error: "+strings.Join(parts, " "))
			}
		case *runtime.EventExceptionThrown:
			b.errors = append(b.errors, "exception: "+ev.ExceptionDetails.Error())
		case *log.EventEntryAdded:
			if ev.Entry.Level == log.LevelError {
				b.errors = append(b.errors, "log: "+ev.Entry.Text)
			}
		}
	})
	if err := chromedp.Run(ctx, log.Enable(), runtime.Enable()); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return b
}

func (b *browser) run(t *testing.T, actions ...chromedp.Action) {
	t.Helper()
	if err := chromedp.Run(b.ctx, actions...); err != nil {
		t.Fatalf("browser: %v", err)
	}
}

// consoleErrors returns the errors logged, except those matching allowed.
func (b *browser) consoleErrors(allowed ...string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
next:
	for _, e := range b.errors {
		for _, a := range allowed {
			if strings.Contains(e, a) {
				continue next
			}
		}
		out = append(out, e)
	}
	return out
}

// waitText waits until the text of the first element matching sel is want.
func (b *browser) waitText(t *testing.T, sel, want string) {
	t.Helper()
	b.waitTextThat(t, sel, 20*time.Second, func(got string) bool { return got == want }, fmt.Sprintf("%q", want))
}

// waitTextThat waits up to timeout until the trimmed text of the first
// visible element matching sel satisfies ok; want says what ok accepts,
// for the failure.
func (b *browser) waitTextThat(t *testing.T, sel string, timeout time.Duration, ok func(string) bool, want string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var got string
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(b.ctx, 2*time.Second)
		err := chromedp.Run(ctx, chromedp.Text(sel, &got, chromedp.ByQuery, chromedp.NodeVisible))
		cancel()
		if got = strings.TrimSpace(got); err == nil && ok(got) {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s shows %q, want %s", sel, got, want)
}

// transport returns how the page follows the status: "stream" or
// "polling".
func (b *browser) transport(t *testing.T) string {
	t.Helper()
	var tr string
	b.run(t, chromedp.Evaluate(`document.body.dataset.transport || ""`, &tr))
	return tr
}

// screenshot writes a picture of the element sel (with a margin of the
// page around it) to the directory SLUICE_SCREENSHOTS names, if set.
func (b *browser) screenshot(t *testing.T, name, sel string) {
	t.Helper()
	dir := os.Getenv("SLUICE_SCREENSHOTS")
	if dir == "" {
		return
	}
	// Scrolled to the top (the sticky header stays above the page), a
	// moment for the charts to draw, then the element's box in the page.
	var box []float64
	var ignored any
	b.run(t, chromedp.Evaluate(`window.scrollTo(0, 0)`, &ignored), chromedp.Sleep(2500*time.Millisecond),
		chromedp.Evaluate(fmt.Sprintf(`(() => { const r = document.querySelector(%q).getBoundingClientRect();
			return [r.left + scrollX, r.top + scrollY, r.width, r.height]; })()`, sel), &box))
	const margin = 12
	x, y := max(0, box[0]-margin), max(0, box[1]-margin)
	clip := &page.Viewport{X: x, Y: y, Width: box[0] + box[2] + margin - x, Height: box[1] + box[3] + margin - y, Scale: 1}
	var png []byte
	b.run(t, chromedp.ActionFunc(func(ctx context.Context) (err error) {
		png, err = page.CaptureScreenshot().WithFormat(page.CaptureScreenshotFormatPng).
			WithClip(clip).WithCaptureBeyondViewport(true).Do(ctx)
		return err
	}))
	if err := os.WriteFile(filepath.Join(dir, name), indexed(t, png), 0o644); err != nil {
		t.Fatal(err)
	}
}

// indexed returns the picture with a palette of 256 of its colours, the
// others (a few percent of the pixels, at the edges of text and lines)
// taking the nearest of those: about a third of the size of the true
// colour, and the same to the eye. The palette takes the most frequent
// colour of each region of the colour space first, so that a rare colour
// (a red count) keeps its own hue, then the next most frequent.
func indexed(t *testing.T, b []byte) []byte {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	bounds := img.Bounds()
	count := map[color.RGBA]int{}
	for y := bounds.Min.Y; y < bounds.Max.Y; y++ {
		for x := bounds.Min.X; x < bounds.Max.X; x++ {
			count[color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)]++
		}
	}
	colors := slices.Collect(maps.Keys(count))
	slices.SortFunc(colors, func(a, b color.RGBA) int { // the most frequent first; ties in a fixed order
		if c := cmp.Compare(count[b], count[a]); c != 0 {
			return c
		}
		return cmp.Compare(uint32(a.R)<<24|uint32(a.G)<<16|uint32(a.B)<<8|uint32(a.A), uint32(b.R)<<24|uint32(b.G)<<16|uint32(b.B)<<8|uint32(b.A))
	})
	dist := func(a, b color.RGBA) int {
		dr, dg, db := int(a.R)-int(b.R), int(a.G)-int(b.G), int(a.B)-int(b.B)
		return dr*dr + dg*dg + db*db
	}
	pal := color.Palette{}
	in := map[color.RGBA]bool{}
	for _, apart := range []int{48 * 48, 24 * 24, 12 * 12, 0} { // squared distances
		for _, c := range colors {
			if len(pal) == 256 {
				break
			}
			if in[c] || slices.ContainsFunc(pal, func(p color.Color) bool { return dist(c, p.(color.RGBA)) <= apart }) {
				continue
			}
			pal = append(pal, c)
			in[c] = true
		}
	}
	index := map[color.RGBA]uint8{}
	for _, c := range colors {
		index[c] = uint8(pal.Index(c))
	}
	out := image.NewPaletted(bounds, pal)
	for y := bounds.Min.Y; y < bounds.Max.Y; y++ {
		for x := bounds.Min.X; x < bounds.Max.X; x++ {
			out.SetColorIndex(x, y, index[color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)])
		}
	}
	var buf bytes.Buffer
	if err := (&png.Encoder{CompressionLevel: png.BestCompression}).Encode(&buf, out); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// The dashboard shows live numbers that change as messages flow, without
// console errors.
func TestDashboardLive(t *testing.T) {
	ts := start(t, func(c *server.Config) { c.Auth = server.AuthConfig{Insecure: true} })
	b := newBrowser(t)
	ts.must(201, "POST", "/v1/queues", "", map[string]any{"name": "web"})
	ts.must(201, "POST", "/v1/queues/web/groups", "", map[string]any{"name": "audit"})
	b.run(t, chromedp.Navigate(ts.url+"/"), chromedp.WaitVisible(`.card[data-queue="web"]`, chromedp.ByQuery))
	lag := `.card[data-queue="web"] tr[data-group="default"] td.lag`
	b.waitText(t, lag, "0")
	for i := range 5 {
		ts.must(201, "POST", "/v1/queues/web/messages", "", map[string]any{"body": map[string]any{"n": i}})
	}
	b.waitText(t, lag, "5")
	msgs := ts.must(200, "POST", "/v1/queues/web/groups/default/receive", "", map[string]any{"max": 2})["messages"].([]any)
	b.waitText(t, `.card[data-queue="web"] tr[data-group="default"] td.inflight`, "2")
	ts.must(200, "POST", "/v1/queues/web/groups/default/ack", "", map[string]any{"receipts": []string{
		msgs[0].(map[string]any)["receipt"].(string), msgs[1].(map[string]any)["receipt"].(string)}})
	b.waitText(t, lag, "3")
	b.waitText(t, `.card[data-queue="web"] tr[data-group="audit"] td.lag`, "5")
	b.waitText(t, `#conn`, "live")
	if tr := b.transport(t); tr != "stream" {
		t.Fatalf("the page follows the status by %q, want the event stream", tr)
	}

	// The queue's detail: a leased message is in flight, sent messages are
	// in peek, a body is text (never HTML), a long one is cut and expands.
	ts.must(201, "POST", "/v1/queues/web/messages", "", map[string]any{"body": map[string]any{
		"html": `<img id="injected" src="x">`, "note": strings.Repeat("a long body ", 30)}, "key": "customer-7"})
	leased := ts.must(200, "POST", "/v1/queues/web/groups/default/receive", "", map[string]any{
		"max": 2, "consumer": "worker-7", "lease": "5m"})["messages"].([]any)
	if len(leased) != 2 {
		t.Fatalf("received %v", leased)
	}
	b.run(t, chromedp.Click(`.card[data-queue="web"] .title`, chromedp.ByQuery))
	for _, m := range leased {
		id := int64(m.(map[string]any)["id"].(float64))
		b.waitText(t, fmt.Sprintf(`#leases tr.lease[data-id="%d"] td:nth-child(5)`, id), "worker-7")
	}
	// peek shows what is stored: the 3 messages left of the first 5 and
	// the new one (acked ones too, until their storage is reclaimed).
	var rows int
	b.waitText(t, `#peeked tr.peeked:last-child td:nth-child(2)`, "customer-7")
	b.run(t, chromedp.Evaluate(`document.querySelectorAll("#peeked tr.peeked").length`, &rows))
	if rows != 6 {
		t.Fatalf("peek shows %d messages, want the 6 stored", rows)
	}
	var injected bool
	var summary string
	b.run(t, chromedp.Evaluate(`document.getElementById("injected") !== null`, &injected),
		chromedp.Text(`#peeked tr.peeked:last-child summary`, &summary, chromedp.ByQuery))
	if injected || !strings.Contains(summary, `"html":"<img id=\"injected\"`) || !strings.HasSuffix(summary, "…") {
		t.Fatalf("a body with HTML: element made %v, summary %q", injected, summary)
	}
	b.run(t, chromedp.Click(`#peeked tr.peeked:last-child summary`, chromedp.ByQuery),
		chromedp.WaitVisible(`#peeked tr.peeked:last-child details[open] pre.body`, chromedp.ByQuery))
	// Still open after the next refresh, and gone from in flight once acked.
	ts.must(200, "POST", "/v1/queues/web/groups/default/ack", "", map[string]any{"receipts": []string{
		leased[0].(map[string]any)["receipt"].(string), leased[1].(map[string]any)["receipt"].(string)}})
	b.waitText(t, `#inflight p`, "Nothing in flight.")
	b.run(t, chromedp.WaitVisible(`#peeked tr.peeked:last-child details[open] pre.body`, chromedp.ByQuery))
	if errs := b.consoleErrors(); len(errs) > 0 {
		t.Fatalf("console errors:\n%s", strings.Join(errs, "\n"))
	}
}

// An admin signs in, opens a queue, sees its dead letters with body and
// error, and redrives them; a user without a token sees nothing of the
// queues, and a producer token only a refusal.
func TestDashboardAuthAndRedrive(t *testing.T) {
	ts := start(t)
	b := newBrowser(t)
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "billing", "options": map[string]any{"max_attempts": 1}})
	ts.must(201, "POST", "/v1/queues/billing/messages", tokAdmin, map[string]any{"body": map[string]any{"invoice": 77}})
	m := ts.must(200, "POST", "/v1/queues/billing/groups/default/receive", tokAdmin, map[string]any{})["messages"].([]any)[0].(map[string]any)
	ts.must(200, "POST", "/v1/queues/billing/groups/default/nack", tokAdmin, map[string]any{"receipt": m["receipt"], "error": "card declined"})

	// No token: the sign-in form, and no queue name anywhere.
	var body string
	b.run(t, chromedp.Navigate(ts.url+"/"), chromedp.WaitVisible(`#login`, chromedp.ByQuery),
		chromedp.Sleep(500*time.Millisecond), chromedp.OuterHTML("html", &body, chromedp.ByQuery))
	if strings.Contains(body, "billing") {
		t.Fatal("the page shows a queue name without a token")
	}
	// A wrong token is refused.
	b.run(t, chromedp.SendKeys(`#token`, "wrong-token-wrong-token", chromedp.ByQuery), chromedp.Click(`#login-form button`, chromedp.ByQuery))
	b.waitText(t, `#login-error`, "Your token was refused: the bearer token is not valid")
	// A producer may not read the status.
	b.run(t, chromedp.SendKeys(`#token`, tokProducer, chromedp.ByQuery), chromedp.Click(`#login-form button`, chromedp.ByQuery),
		chromedp.WaitVisible(`#overview .empty`, chromedp.ByQuery), chromedp.OuterHTML("#overview", &body, chromedp.ByQuery))
	if strings.Contains(body, "billing") || !strings.Contains(body, "may not read") {
		t.Fatalf("producer sees: %s", body)
	}
	b.run(t, chromedp.Click(`#signout`, chromedp.ByQuery), chromedp.WaitVisible(`#login`, chromedp.ByQuery))

	// The admin.
	b.run(t, chromedp.SendKeys(`#token`, tokAdmin, chromedp.ByQuery), chromedp.Click(`#login-form button`, chromedp.ByQuery),
		chromedp.WaitVisible(`.card[data-queue="billing"]`, chromedp.ByQuery))
	b.waitText(t, `.card[data-queue="billing"] tr[data-group="default"] td.dead`, "1")
	b.run(t, chromedp.Click(`.card[data-queue="billing"] .title`, chromedp.ByQuery),
		chromedp.WaitVisible(`#dead-letters tr.dead-letter`, chromedp.ByQuery), chromedp.OuterHTML("#dead-letters", &body, chromedp.ByQuery))
	if !strings.Contains(body, "card declined") || !strings.Contains(body, "77") {
		t.Fatalf("dead letters table: %s", body)
	}
	// A message that dies while the queue is open shows without a click.
	ts.must(201, "POST", "/v1/queues/billing/messages", tokAdmin, map[string]any{"body": map[string]any{"invoice": 78}})
	m = ts.must(200, "POST", "/v1/queues/billing/groups/default/receive", tokAdmin, map[string]any{})["messages"].([]any)[0].(map[string]any)
	ts.must(200, "POST", "/v1/queues/billing/groups/default/nack", tokAdmin, map[string]any{"receipt": m["receipt"], "error": "expired card"})
	b.waitText(t, `#dead-title`, "DEAD LETTERS (2)") // upper case by the style
	btn := `#dead-letters tr.dead-letter:last-child button`
	b.run(t, chromedp.Click(btn, chromedp.ByQuery), chromedp.Click(btn, chromedp.ByQuery))
	b.waitText(t, `.card[data-queue="billing"] tr[data-group="default"] td.dead`, "1")
	st := ts.must(200, "GET", "/v1/queues/billing", tokAdmin, nil)["status"].([]any)[0].(map[string]any)
	if st["dead"].(float64) != 1 || st["ready"].(float64) != 1 {
		t.Fatalf("after the redrive: %v", st)
	}

	// Replay: a new group from the earliest message sees both messages.
	b.run(t, chromedp.SendKeys(`form.replay input[name="group"]`, "replay", chromedp.ByQuery),
		chromedp.Click(`form.replay button`, chromedp.ByQuery))
	b.waitText(t, `.card[data-queue="billing"] tr[data-group="replay"] td.lag`, "2")
	// A bad group name is refused with the engine's message, and nothing
	// is made.
	var toast string
	b.run(t, chromedp.SendKeys(`form.replay input[name="group"]`, "bad name!", chromedp.ByQuery),
		chromedp.Click(`form.replay button`, chromedp.ByQuery),
		chromedp.WaitVisible(`#toast.bad`, chromedp.ByQuery), chromedp.Text(`#toast`, &toast, chromedp.ByQuery))
	if !strings.Contains(toast, "bad name!") {
		t.Fatalf("toast after a bad group name: %q", toast)
	}
	groups := ts.must(200, "GET", "/v1/queues/billing", tokAdmin, nil)["groups"].([]any)
	if len(groups) != 2 {
		t.Fatalf("groups after the replay: %v", groups)
	}

	// Seek: the default group moves back to the earliest message (the
	// button acts on its second click) and has both messages to read
	// again, keeping its dead letter.
	for _, r := range ts.must(200, "GET", "/v1/queues/billing", tokAdmin, nil)["status"].([]any) {
		if r := r.(map[string]any); r["group"] == "default" && r["lag"].(float64) == 2 {
			t.Fatalf("the default group before the seek already has lag 2: %v", r)
		}
	}
	b.run(t, chromedp.SetValue(`form.seek select`, "default", chromedp.ByQuery),
		chromedp.Click(`form.seek button`, chromedp.ByQuery), chromedp.Click(`form.seek button`, chromedp.ByQuery))
	b.waitText(t, `.card[data-queue="billing"] tr[data-group="default"] td.lag`, "2")
	for _, r := range ts.must(200, "GET", "/v1/queues/billing", tokAdmin, nil)["status"].([]any) {
		if r := r.(map[string]any); r["group"] == "default" && (r["dead"].(float64) != 1 || r["in_flight"].(float64) != 0) {
			t.Fatalf("the default group after the seek: %v", r)
		}
	}
	if errs := b.consoleErrors("401", "403", "400"); len(errs) > 0 { // the refusals the test provokes
		t.Fatalf("console errors:\n%s", strings.Join(errs, "\n"))
	}
}

// Where the event stream cannot be had (a proxy that refuses or buffers
// it), the page polls /v1/status and stays live.
func TestDashboardFallsBackToPolling(t *testing.T) {
	ts := start(t, func(c *server.Config) { c.Auth = server.AuthConfig{Insecure: true} })
	var refused atomic.Int64
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/events" {
			refused.Add(1)
			http.Error(w, "no streams here", http.StatusBadGateway)
			return
		}
		ts.srv.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	b := newBrowser(t)
	ts.must(201, "POST", "/v1/queues", "", map[string]any{"name": "web"})
	b.run(t, chromedp.Navigate(proxy.URL+"/"), chromedp.WaitVisible(`.card[data-queue="web"]`, chromedp.ByQuery))
	lag := `.card[data-queue="web"] tr[data-group="default"] td.lag`
	b.waitText(t, lag, "0")
	ts.must(201, "POST", "/v1/queues/web/messages", "", map[string]any{"body": 1})
	b.waitText(t, lag, "1")
	b.waitText(t, `#conn`, "live (polling)")
	if tr := b.transport(t); tr != "polling" || refused.Load() == 0 {
		t.Fatalf("transport %q after %d refused streams", tr, refused.Load())
	}
	if errs := b.consoleErrors("502"); len(errs) > 0 {
		t.Fatalf("console errors:\n%s", strings.Join(errs, "\n"))
	}
}

// A group's row shows the keyed messages waiting behind an earlier one of
// their key in a column of their own, apart from ready.
func TestDashboardShowsWaiting(t *testing.T) {
	ts := start(t, func(c *server.Config) { c.Auth = server.AuthConfig{Insecure: true} })
	b := newBrowser(t)
	ts.must(201, "POST", "/v1/queues", "", map[string]any{"name": "keyed"})
	ts.must(201, "POST", "/v1/queues/keyed/messages/batch", "", map[string]any{"messages": []any{
		map[string]any{"body": 1, "key": "hot"}, map[string]any{"body": 2, "key": "hot"}, map[string]any{"body": 3, "key": "hot"}}})
	ts.must(200, "POST", "/v1/queues/keyed/groups/default/receive", "", map[string]any{"max": 1})
	b.run(t, chromedp.Navigate(ts.url+"/"), chromedp.WaitVisible(`.card[data-queue="keyed"]`, chromedp.ByQuery))
	row := `.card[data-queue="keyed"] tr[data-group="default"] `
	b.waitText(t, row+"td.waiting", "2")
	b.waitText(t, row+"td.ready", "0")
	b.waitText(t, row+"td.inflight", "1")
	var head string
	b.run(t, chromedp.Text(`.card[data-queue="keyed"] thead`, &head, chromedp.ByQuery))
	if !strings.Contains(head, "ready") || !strings.Contains(head, "waiting") {
		t.Errorf("table head %q: want a waiting column after ready", head)
	}
	if errs := b.consoleErrors(); len(errs) > 0 {
		t.Fatalf("console errors:\n%s", strings.Join(errs, "\n"))
	}
}

// A receive that numbered new messages inside a transaction it keeps open
// holds them back from every group: the queue's card says so, with the
// holder's pid.
func TestDashboardShowsNumberingHeld(t *testing.T) {
	ts := start(t, func(c *server.Config) { c.Auth = server.AuthConfig{Insecure: true} })
	b := newBrowser(t)
	ts.must(201, "POST", "/v1/queues", "", map[string]any{"name": "held"})
	ts.must(201, "POST", "/v1/queues/held/messages", "", map[string]any{"body": 1})
	ctx := context.Background()
	tx, err := ts.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	var pid int
	if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT * FROM sluice.receive('held', 'default', 1)"); err != nil {
		t.Fatal(err)
	}
	b.run(t, chromedp.Navigate(ts.url+"/"), chromedp.WaitVisible(`.card[data-queue="held"] .held`, chromedp.ByQuery))
	var note string
	b.run(t, chromedp.Text(`.card[data-queue="held"] .held`, &note, chromedp.ByQuery))
	if !strings.Contains(note, fmt.Sprintf("pid %d", pid)) {
		t.Errorf("held note %q: want pid %d", note, pid)
	}
	b.screenshot(t, "dashboard-held.png", `.card[data-queue="held"]`)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if errs := b.consoleErrors(); len(errs) > 0 {
		t.Fatalf("console errors:\n%s", strings.Join(errs, "\n"))
	}
}
