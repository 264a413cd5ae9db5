package server_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluicemq/sluice/cmd/sluice/server"
)

// signIn opens the dashboard and signs in with token, waiting for the
// card of queue.
func (b *browser) signIn(t *testing.T, url, token, queue string) {
	t.Helper()
	b.run(t, chromedp.Navigate(url+"/"), chromedp.WaitVisible(`#login`, chromedp.ByQuery),
		chromedp.SendKeys(`#token`, token, chromedp.ByQuery), chromedp.Click(`#login-form button`, chromedp.ByQuery),
		chromedp.WaitVisible(fmt.Sprintf(`.card[data-queue=%q]`, queue), chromedp.ByQuery))
}

// eval evaluates js into out.
func (b *browser) eval(t *testing.T, js string, out any) {
	t.Helper()
	b.run(t, chromedp.Evaluate(js, out))
}

// Each queue has its own view with its own URL, at the top of the page and
// kept across a reload; the overview can be searched and filtered; a
// message is found by its id (stored, dead); dead letters are discarded
// (one, then all of a group's, each after a confirming second click); a
// queue is made from the page, and bad input is refused with the server's
// message.
func TestDashboardQueueView(t *testing.T) {
	ts := start(t)
	b := newBrowser(t)
	for i := range 16 {
		ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": fmt.Sprintf("q%02d", i)})
	}
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "zz_jobs", "options": map[string]any{"max_attempts": 1}})
	ids := ts.deadLetters("zz_jobs", 3)
	kept := ts.must(201, "POST", "/v1/queues/zz_jobs/messages", tokAdmin, map[string]any{"body": map[string]any{"kept": true}})["id"].(float64)
	b.signIn(t, ts.url, tokAdmin, "zz_jobs")

	// Search and filter.
	b.run(t, chromedp.SendKeys(`#search`, "jobs", chromedp.ByQuery))
	b.waitTrue(t, `document.querySelectorAll("#overview .card").length === 1`)
	b.eval(t, `(() => { const s = document.getElementById("search"); s.value = ""; s.dispatchEvent(new Event("input")); })()`, nil)
	b.waitTrue(t, `document.querySelectorAll("#overview .card").length === 17`)
	b.eval(t, `(() => { const s = document.getElementById("only"); s.value = "dead"; s.dispatchEvent(new Event("change")); })()`, nil)
	b.waitTrue(t, `document.querySelectorAll("#overview .card").length === 1`)
	b.waitText(t, `#shown`, "1 of 17 queues")
	// A reading keeps the card's title link (a click pressed before a
	// reading and released after it would otherwise be lost).
	b.eval(t, `(() => { window.kept = document.querySelector('.card[data-queue="zz_jobs"] a.title');
		window.keptAt = document.getElementById("updated").textContent; })()`, nil)
	b.waitTrue(t, `document.getElementById("updated").textContent !== window.keptAt`)
	var same bool
	b.eval(t, `document.querySelector('.card[data-queue="zz_jobs"] a.title') === window.kept && window.kept.isConnected`, &same)
	if !same {
		t.Fatal("a status reading replaced the card's title link")
	}

	// The last queue's view: its own URL, at the top, the overview gone.
	b.run(t, chromedp.Click(`.card[data-queue="zz_jobs"] .title`, chromedp.ByQuery),
		chromedp.WaitVisible(`#dead-letters tr.dead-letter`, chromedp.ByQuery))
	var hash string
	var top float64
	var overviewShown bool
	b.eval(t, `location.hash`, &hash)
	b.eval(t, `document.querySelector('#detail .card[data-queue="zz_jobs"]').getBoundingClientRect().top`, &top)
	b.eval(t, `!document.getElementById("overview-view").hidden`, &overviewShown)
	if hash != "#/queue/zz_jobs" || top > 200 || overviewShown {
		t.Fatalf("queue view: hash %q, card at %vpx, overview shown %v", hash, top, overviewShown)
	}
	b.waitText(t, `#dead-title`, "DEAD LETTERS (3)")
	// (chromedp's WaitVisible does not see the page after a reload at a
	// URL with a fragment: the page is asked instead)
	b.run(t, chromedp.Reload())
	b.waitTrue(t, `document.querySelectorAll("#dead-letters tr.dead-letter").length === 3`)
	b.waitText(t, `#dead-title`, "DEAD LETTERS (3)")

	// A message by id: a stored one, a dead one, one that is not there.
	b.run(t, chromedp.SendKeys(`#detail form.lookup input[name="id"]`, fmt.Sprint(int64(kept)), chromedp.ByQuery),
		chromedp.Click(`#detail form.lookup button`, chromedp.ByQuery), chromedp.WaitVisible(`#found-stored`, chromedp.ByQuery))
	var found string
	b.run(t, chromedp.Text(`#found-stored`, &found, chromedp.ByQuery))
	if !strings.Contains(found, `"kept":true`) {
		t.Fatalf("stored message found: %q", found)
	}
	b.eval(t, `location.hash`, &hash)
	if hash != fmt.Sprintf("#/queue/zz_jobs/message/%d", int64(kept)) {
		t.Fatalf("hash after a lookup: %q", hash)
	}
	// (a new fragment is a navigation within the page: no load event for
	// chromedp.Navigate to wait for)
	b.eval(t, fmt.Sprintf(`location.hash = "#/queue/zz_jobs/message/%d"`, int64(ids[1])), nil)
	b.waitTrue(t, `document.getElementById("found-dead") !== null`)
	b.run(t, chromedp.Text(`#found-dead`, &found, chromedp.ByQuery))
	if !strings.Contains(found, "Dead letter of default") || !strings.Contains(found, "poison") {
		t.Fatalf("dead letter found: %q", found)
	}
	b.eval(t, `location.hash = "#/queue/zz_jobs/message/999999"`, nil)
	b.waitTrue(t, `document.getElementById("not-found") !== null`)

	// Discard one dead letter: the first click arms, the second discards.
	row := fmt.Sprintf(`#dead-letters tr.dead-letter[data-id="%d"]`, int64(ids[0]))
	discard := row + ` td.buttons button:last-child`
	b.run(t, chromedp.WaitVisible(row, chromedp.ByQuery), chromedp.Click(discard, chromedp.ByQuery))
	b.waitText(t, discard, "Confirm: discard")
	if d, _ := ts.dead("zz_jobs"); d != 3 {
		t.Fatalf("dead %v after one click, want 3", d)
	}
	b.run(t, chromedp.Click(discard, chromedp.ByQuery))
	b.waitText(t, `#dead-title`, "DEAD LETTERS (2)")
	if d, total := ts.dead("zz_jobs"); d != 2 || total != 3 {
		t.Fatalf("dead %v, dead_lettered %v after the discard; want 2 and 3", d, total)
	}
	// All of the group's.
	bulk := `#dead .bulk button:last-child`
	b.waitText(t, bulk, "Discard default")
	b.run(t, chromedp.Click(bulk, chromedp.ByQuery))
	b.waitText(t, bulk, "Confirm: discard all 2 of default")
	b.run(t, chromedp.Click(bulk, chromedp.ByQuery))
	b.waitText(t, `#dead-title`, "DEAD LETTERS (0)")
	b.waitText(t, `.card[data-queue="zz_jobs"] tr[data-group="default"] td.dead`, "0")
	if d, _ := ts.dead("zz_jobs"); d != 0 {
		t.Fatalf("dead %v after discarding the group's, want 0", d)
	}

	// Back to the overview, then a new queue from the page.
	b.run(t, chromedp.Click(`#back`, chromedp.ByQuery), chromedp.WaitVisible(`#overview-view`, chromedp.ByQuery),
		chromedp.SendKeys(`form.new-queue input[name="name"]`, "fresh", chromedp.ByQuery),
		chromedp.SendKeys(`form.new-queue input[name="options"]`, `{"max_attempts": 7}`, chromedp.ByQuery),
		chromedp.Click(`form.new-queue button`, chromedp.ByQuery),
		chromedp.WaitVisible(`#detail .card[data-queue="fresh"]`, chromedp.ByQuery))
	if o := ts.must(200, "GET", "/v1/queues/fresh", tokAdmin, nil)["options"].(map[string]any); o["max_attempts"].(float64) != 7 {
		t.Fatalf("the new queue's options: %v", o)
	}
	var toast string
	b.run(t, chromedp.Click(`#back`, chromedp.ByQuery), chromedp.WaitVisible(`form.new-queue`, chromedp.ByQuery),
		chromedp.SendKeys(`form.new-queue input[name="name"]`, "bad name!", chromedp.ByQuery),
		chromedp.Click(`form.new-queue button`, chromedp.ByQuery),
		chromedp.WaitVisible(`#toast.bad`, chromedp.ByQuery), chromedp.Text(`#toast`, &toast, chromedp.ByQuery))
	if !strings.Contains(toast, "bad name!") {
		t.Fatalf("toast after a bad queue name: %q", toast)
	}
	if errs := b.consoleErrors("400", "401"); len(errs) > 0 { // the refusal the test provokes, the ask before the sign-in
		t.Fatalf("console errors:\n%s", strings.Join(errs, "\n"))
	}
}

// A consumer token is offered only what its role may do: no purge,
// redrive, discard, seek, new group or new queue (the server says what the
// role may call); it still reads dead letters, leases and peek. The page
// says why the rest is missing.
func TestDashboardConsumerSeesNoAdminActions(t *testing.T) {
	ts := start(t)
	b := newBrowser(t)
	ts.must(201, "POST", "/v1/queues", tokAdmin, map[string]any{"name": "jobs", "options": map[string]any{"max_attempts": 1}})
	ts.deadLetters("jobs", 1)
	b.signIn(t, ts.url, tokConsumer, "jobs")
	b.waitText(t, `#who`, "consumer · consumer")
	var n int
	b.eval(t, `document.querySelectorAll("form.new-queue").length`, &n)
	if n != 0 {
		t.Fatal("a consumer is offered to create a queue")
	}
	b.run(t, chromedp.Click(`.card[data-queue="jobs"] .title`, chromedp.ByQuery),
		chromedp.WaitVisible(`#dead-letters tr.dead-letter`, chromedp.ByQuery),
		chromedp.WaitVisible(`#peeked tr.peeked`, chromedp.ByQuery))
	var buttons []string
	b.eval(t, `[...document.querySelectorAll("#detail button")].map((b) => b.textContent)`, &buttons)
	for _, label := range buttons {
		for _, admin := range []string{"Purge", "Redrive", "Discard", "Seek", "Create group"} {
			if strings.Contains(label, admin) {
				t.Fatalf("a consumer is offered %q (buttons %q)", label, buttons)
			}
		}
	}
	var forms int
	b.eval(t, `document.querySelectorAll("#detail form.seek, #detail form.replay").length`, &forms)
	if forms != 0 {
		t.Fatalf("a consumer is offered %d replay forms", forms)
	}
	var note string
	b.run(t, chromedp.Text(`#may`, &note, chromedp.ByQuery))
	if !strings.Contains(note, "may not purge queue, redrive, discard dead letters") {
		t.Fatalf("note: %q", note)
	}
	b.screenshot(t, "dashboard-consumer.png", "#detail")
	if errs := b.consoleErrors("401"); /* the page asks before the sign-in */ len(errs) > 0 {
		t.Fatalf("console errors:\n%s", strings.Join(errs, "\n"))
	}
}

// The charts start with what the server sampled before the page was
// opened, and keep it across a reload; they have a time axis and a tooltip
// that names each line's value.
func TestDashboardHistorySurvivesReload(t *testing.T) {
	ts := start(t, func(c *server.Config) {
		c.Auth = server.AuthConfig{Insecure: true}
		c.HistoryInterval = 200 * time.Millisecond
	})
	ts.must(201, "POST", "/v1/queues", "", map[string]any{"name": "web"})
	for i := range 10 {
		ts.must(201, "POST", "/v1/queues/web/messages", "", map[string]any{"body": i})
		time.Sleep(200 * time.Millisecond)
	}
	b := newBrowser(t)
	points := `(() => { const c = document.querySelector('#overview canvas[data-chart="web/lag"]');
		return c && c._draw ? c._draw.lines[0].points.length : 0; })()`
	b.run(t, chromedp.Navigate(ts.url+"/"), chromedp.WaitVisible(`.card[data-queue="web"]`, chromedp.ByQuery))
	// (the page's own readings come once a second: 8 points or more are
	// the server's)
	b.waitTrue(t, points+` >= 8`)
	var before int
	b.eval(t, points, &before)
	b.run(t, chromedp.Reload(), chromedp.WaitVisible(`.card[data-queue="web"]`, chromedp.ByQuery))
	b.waitTrue(t, fmt.Sprintf(`%s >= %d`, points, before))
	// The tooltip: the pointer over the lag chart's right end (now) shows
	// the group's lag.
	b.run(t, chromedp.Evaluate(`(() => { const c = document.querySelector('#overview canvas[data-chart="web/lag"]');
		const r = c.getBoundingClientRect();
		c.dispatchEvent(new MouseEvent("mousemove", { clientX: r.right - 8, clientY: r.top + r.height / 2, bubbles: true })); })()`, nil),
		chromedp.WaitVisible(`#chart-tip`, chromedp.ByQuery))
	var tip string
	b.run(t, chromedp.Text(`#chart-tip`, &tip, chromedp.ByQuery))
	if !strings.Contains(tip, "default") || !strings.Contains(tip, "10") {
		t.Fatalf("tooltip %q: want the default group's lag of 10", tip)
	}
	if errs := b.consoleErrors(); len(errs) > 0 {
		t.Fatalf("console errors:\n%s", strings.Join(errs, "\n"))
	}
}

// At phone width a queue's dead letters stay readable: each one a block of
// labelled lines, the error and body as wide as the screen (before, the
// table squeezed them to a letter a line), and nothing wider than the page.
func TestDashboardPhoneWidth(t *testing.T) {
	ts := start(t, func(c *server.Config) { c.Auth = server.AuthConfig{Insecure: true} })
	ts.must(201, "POST", "/v1/queues", "", map[string]any{"name": "webhooks", "options": map[string]any{"max_attempts": 1}})
	ts.must(201, "POST", "/v1/queues/webhooks/messages", "", map[string]any{"body": map[string]any{
		"event": "order.paid", "endpoint": "https://legacy.example.net/hook", "order": 10417}})
	m := ts.must(200, "POST", "/v1/queues/webhooks/groups/default/receive", "", map[string]any{})["messages"].([]any)[0].(map[string]any)
	ts.must(200, "POST", "/v1/queues/webhooks/groups/default/nack", "", map[string]any{"receipt": m["receipt"],
		"error": "POST https://legacy.example.net/hook: dial tcp 203.0.113.7:443: i/o timeout"})
	b := newBrowser(t)
	var overflow bool
	// The overview first: nothing wider than the screen either.
	b.run(t, chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2)),
		chromedp.Navigate(ts.url+"/"), chromedp.WaitVisible(`.card[data-queue="webhooks"]`, chromedp.ByQuery))
	b.eval(t, `document.documentElement.scrollWidth > window.innerWidth`, &overflow)
	if overflow {
		t.Fatal("the overview is wider than the phone's screen")
	}
	b.run(t, chromedp.Click(`.card[data-queue="webhooks"] .title`, chromedp.ByQuery),
		chromedp.WaitVisible(`#dead-letters tr.dead-letter`, chromedp.ByQuery))
	var widths []float64
	b.eval(t, `[...document.querySelectorAll("#dead-letters td.left pre")].map((e) => e.getBoundingClientRect().width)`, &widths)
	if len(widths) != 2 {
		t.Fatalf("error and body: %d pre elements", len(widths))
	}
	for _, w := range widths {
		if w < 300 {
			t.Fatalf("the dead letter's error and body are %v px wide at a 390 px screen, want the screen's width", widths)
		}
	}
	b.eval(t, `document.documentElement.scrollWidth > window.innerWidth`, &overflow)
	if overflow {
		t.Fatal("the queue's view is wider than the phone's screen")
	}
	b.screenshot(t, "dashboard-phone.png", "#dead-section")
	if errs := b.consoleErrors(); len(errs) > 0 {
		t.Fatalf("console errors:\n%s", strings.Join(errs, "\n"))
	}
}
