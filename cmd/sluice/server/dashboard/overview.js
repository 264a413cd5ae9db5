// The overview (#/): a toolbar (search, filter, the charts' span, a new
// queue, a message by id) and a card per queue with its groups' counts and
// charts; a card's title opens the queue's own view (#/queue/NAME).

import { $, el, api, act, may, fmt, fmtAge, rate, state, GROUP_COLORS, IN_COLOR, HOUR_MS } from "./core.js";
import { chart, drawChart, rateSeries, series } from "./charts.js";

export const queueHash = (name) => "#/queue/" + encodeURIComponent(name);

const COLUMNS = ["group", "ready", "waiting", "delayed", "in flight", "dead", "lag", "oldest", "in/s", "done/s"];

function groupRow(r, i) {
  const h = state.history.get(r.queue + "/" + r.group) || [];
  const td = (label, cls, v) => el("td", { class: cls, "data-label": label }, v);
  return el("tr", { "data-group": r.group },
    el("td", { "data-label": "group" }, el("span", { class: "swatch c" + (i % GROUP_COLORS.length) }), r.group),
    td("ready", "ready", fmt(r.ready)),
    td("waiting", "waiting", fmt(r.waiting)),
    td("delayed", "delayed", fmt(r.delayed)),
    td("in flight", "inflight", fmt(r.in_flight)),
    td("dead", "dead" + (r.dead > 0 ? " nonzero" : ""), fmt(r.dead)),
    td("lag", "lag", fmt(r.lag)),
    td("oldest", "oldest", fmtAge(r.oldest_pending_age_seconds)),
    td("in/s", "in-rate", fmt(rate(h, "head"))),
    td("done/s", "done-rate", fmt(rate(h, "lwm"))));
}

// groupTable is the table of a queue's groups (rows of its status).
export function groupTable(groups) {
  return el("div", { class: "scroll" }, el("table", { class: "groups" },
    el("thead", {}, el("tr", {}, COLUMNS.map((h) => el("th", {}, h)))),
    el("tbody", {}, groups.map(groupRow))));
}

// heldNote says that an open transaction holds the queue's numbering (a
// receive that numbered new messages and has not committed: they reach no
// group until it does), from status's held_by_pid and held_for_seconds.
export function heldNote(rows) {
  const r = rows.find((x) => x.held_by_pid);
  if (!r) return null;
  const age = r.held_for_seconds ? " for " + fmtAge(r.held_for_seconds) : "";
  return el("span", { class: "held", title: "A receive that numbered new messages has not committed: they reach no group until it does." },
    "numbering held by pid " + r.held_by_pid + age);
}

// queueCharts makes a queue's two charts (lag per group; messages in and
// done per second) and draws them once they are in the page.
export function queueCharts(name, groups, cls) {
  const lag = chart(name + "/lag", "lag per group");
  const rates = chart(name + "/rates", [el("span", { class: "in" }, "in/s"), " · done/s per group"]);
  const box = el("div", { class: "charts " + (cls || "") }, lag.root, rates.root);
  requestAnimationFrame(() => {
    const lagLines = [], rateLines = [];
    groups.forEach((g, i) => {
      const h = state.history.get(name + "/" + g.group) || [];
      const color = GROUP_COLORS[i % GROUP_COLORS.length];
      lagLines.push({ name: g.group, color, points: series(h, "lag") });
      if (i === 0) rateLines.push({ name: "in/s", color: IN_COLOR, fill: true, points: rateSeries(h, "head") });
      rateLines.push({ name: g.group + " done/s", color, points: rateSeries(h, "lwm") });
    });
    drawChart(lag.canvas, lagLines, state.range);
    drawChart(rates.canvas, rateLines, state.range);
  });
  return box;
}

// cardTitle is the children of a card's title link: its name, how many
// groups, and whether its numbering is held.
function cardTitle(name, rows, groups) {
  return [el("h2", {}, name), el("span", { class: "muted" }, groups.length + " group" + (groups.length === 1 ? "" : "s")),
    heldNote(rows)].filter(Boolean);
}

// fillCard draws a queue's card anew inside card, keeping its title link
// (and what it holds) when the title reads the same: a reading that comes
// between a click's press and release must not take the link away, or
// the click is lost.
function fillCard(card, name, rows) {
  const groups = rows.filter((r) => r.group);
  const parts = cardTitle(name, rows, groups);
  let title = card.querySelector(":scope > a.title");
  const text = parts.map((p) => p.textContent).join("");
  if (!title) {
    title = el("a", { class: "title", href: queueHash(name) }, parts);
    card.replaceChildren(title);
  } else if (title.textContent !== text) title.replaceChildren(...parts);
  while (title.nextSibling) title.nextSibling.remove();
  card.append(groupTable(groups), queueCharts(name, groups));
  return card;
}

// placeChildren makes nodes the children of parent in order, moving only
// the nodes that are not in place already (a node moved loses a click in
// progress on it).
function placeChildren(parent, nodes) {
  nodes.forEach((n, i) => {
    if (parent.children[i] !== n) parent.insertBefore(n, parent.children[i] || null);
  });
  while (parent.children.length > nodes.length) parent.lastElementChild.remove();
}

// byQueue groups the status rows by queue, in name order.
export function byQueue(rows) {
  const m = new Map();
  for (const q of state.queues) m.set(q, []);
  for (const r of rows) {
    if (!m.has(r.queue)) m.set(r.queue, []);
    m.get(r.queue).push(r);
  }
  return new Map([...m.entries()].sort((a, b) => (a[0] < b[0] ? -1 : 1)));
}

function matches(name, rows) {
  const f = state.filter;
  if (f.text && !name.toLowerCase().includes(f.text.toLowerCase())) return false;
  if (f.only === "dead") return rows.some((r) => r.dead > 0);
  if (f.only === "lag") return rows.some((r) => r.lag > 0);
  if (f.only === "held") return rows.some((r) => r.held_by_pid);
  return true;
}

export function renderOverview() {
  const all = byQueue(state.rows);
  const ov = $("overview");
  if (all.size === 0) {
    ov.replaceChildren(el("div", { class: "empty" }, may("create_queue")
      ? "No queues yet: make one with New queue above." : "No queues yet (or none this token may see)."));
    return;
  }
  const shown = [...all.entries()].filter(([q, rows]) => matches(q, rows));
  $("shown").textContent = shown.length === all.size ? plural(all.size) : shown.length + " of " + plural(all.size);
  if (shown.length === 0) {
    ov.replaceChildren(el("div", { class: "empty" }, "No queue matches."));
    return;
  }
  // The cards stay from one reading to the next (each drawn anew inside).
  let grid = ov.querySelector(":scope > .grid");
  if (!grid) {
    grid = el("div", { class: "grid" });
    ov.replaceChildren(grid);
  }
  const old = new Map([...grid.children].map((c) => [c.dataset.queue, c]));
  placeChildren(grid, shown.map(([q, rows]) =>
    fillCard(old.get(q) || el("div", { class: "card", "data-queue": q }), q, rows)));
}

const plural = (n) => n + " queue" + (n === 1 ? "" : "s");

// rangeSelect chooses the charts' span, for every chart of the page.
export function rangeSelect(onChange) {
  const s = el("select", { class: "range", "aria-label": "charts' span" },
    [[5, "5 min"], [15, "15 min"], [60, "1 hour"]].map(([m, label]) =>
      el("option", { value: String(m * 60000), selected: state.range === m * 60000 }, label)));
  s.addEventListener("change", () => {
    state.range = Math.min(HOUR_MS, Number(s.value));
    localStorage.setItem("sluice-range", String(state.range));
    onChange();
  });
  return s;
}

// renderToolbar builds the overview's toolbar once per sign-in.
export function renderToolbar() {
  const search = el("input", { id: "search", type: "search", placeholder: "search queues", "aria-label": "search queues", class: "short", value: state.filter.text });
  search.addEventListener("input", () => { state.filter.text = search.value.trim(); renderOverview(); });
  const only = el("select", { id: "only", "aria-label": "filter queues" },
    [["", "all queues"], ["dead", "with dead letters"], ["lag", "with lag"], ["held", "numbering held"]].map(([v, label]) =>
      el("option", { value: v, selected: state.filter.only === v }, label)));
  only.addEventListener("change", () => { state.filter.only = only.value; renderOverview(); });
  const bar = el("div", { class: "toolbar row" }, search, only, el("span", { id: "shown", class: "muted" }),
    el("span", { class: "spacer" }), lookupForm(), rangeSelect(renderOverview));
  const parts = [bar];
  if (may("create_queue")) parts.push(newQueueForm());
  $("toolbar").replaceChildren(...parts);
}

// lookupForm opens a queue's view with a message looked up by its id.
function lookupForm() {
  const queue = el("input", { name: "queue", placeholder: "queue", "aria-label": "queue of the message", class: "tiny", list: "queue-names" });
  const id = el("input", { name: "id", placeholder: "message id", "aria-label": "message id", class: "tiny", inputmode: "numeric" });
  const names = el("datalist", { id: "queue-names" }, state.queues.map((q) => el("option", { value: q })));
  const form = el("form", { class: "row lookup" }, names, queue, id, el("button", { type: "submit" }, "Find message"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    if (queue.value.trim() && /^\d+$/.test(id.value.trim())) {
      location.hash = queueHash(queue.value.trim()) + "/message/" + id.value.trim();
    }
  });
  return form;
}

// newQueueForm creates a queue (name and options as JSON), then opens it.
function newQueueForm() {
  const name = el("input", { name: "name", placeholder: "new queue name", "aria-label": "new queue name", class: "short" });
  const options = el("input", { name: "options", placeholder: "options, JSON: {\"max_attempts\": 5}", "aria-label": "queue options (JSON)" });
  const go = el("button", { type: "submit" }, "Create queue");
  const form = el("form", { class: "row new-queue" }, name, options, go);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const body = { name: name.value.trim() };
    if (options.value.trim()) {
      try { body.options = JSON.parse(options.value); } catch (e) {
        return act(async () => { throw new Error("The options are not JSON: " + e.message); });
      }
    }
    go.disabled = true;
    let made = false;
    await act(async () => { await api("POST", "/v1/queues", body); made = true; }, () => "Created queue " + body.name);
    go.disabled = false;
    if (made) { name.value = ""; options.value = ""; location.hash = queueHash(body.name); }
  });
  return form;
}
