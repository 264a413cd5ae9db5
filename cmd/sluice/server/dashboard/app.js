// The sluice dashboard: follows the HTTP API's event stream (GET
// /v1/events, Server-Sent Events read with fetch, since EventSource cannot
// send the bearer token), or polls /v1/status when the stream cannot be had,
// with the token kept in this tab (sessionStorage), and draws what it reads.
// No dependencies.
"use strict";

const POLL_MS = 2000;         // polling, when the stream is not available
const RETRY_MS = [1000, 2000, 5000, 10000, 30000]; // before reopening the stream
const STALL_MS = 15000;       // a stream silent for this long is reopened
const HISTORY = 300;          // points kept per group (5 minutes at 1 s)

const state = {
  token: sessionStorage.getItem("sluice-token") || "",
  history: new Map(), // "queue/group" -> [{t, ready, lag, inFlight, dead, head, lwm}]
  selected: null,
  selectedDead: null, // the selected queue's dead letters at the last render
  peekAfter: null,    // the open queue's peek page: messages after this id (null: the first)
  peekLast: undefined, // the last id of a full peek page (the next page starts after it)
  expanded: new Set(), // ids of peeked messages whose whole body is shown
  inspecting: false,  // a read of leases and peek is in progress
  inspectedAt: 0,     // when the last one started
  queues: [],
  transport: "",   // "stream" or "polling"
  stream: null,    // the AbortController of the open stream
  failures: 0,     // stream failures in a row
  pollTimer: null,
  retryTimer: null,
  session: 0,      // incremented at each sign-in and sign-out
};

const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null && v !== false) e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

class ApiError extends Error {
  constructor(status, problem) {
    super((problem && (problem.detail || problem.title)) || "HTTP " + status);
    this.status = status;
    this.problem = problem;
  }
}

async function api(method, path, body) {
  const headers = {};
  if (state.token) headers["Authorization"] = "Bearer " + state.token;
  // (every request that changes something is JSON, even without a body:
  // the server refuses other types, which pages of other sites can send)
  if (body !== undefined || method !== "GET") headers["Content-Type"] = "application/json";
  const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  if (res.status === 204) return null;
  const text = await res.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (_) { data = null; }
  if (!res.ok) throw new ApiError(res.status, data);
  return data;
}

function fmt(n) {
  if (n === undefined || n === null || Number.isNaN(n)) return "–";
  if (Math.abs(n) >= 1e6) return (n / 1e6).toFixed(1) + "M";
  if (Math.abs(n) >= 1e4) return (n / 1e3).toFixed(1) + "k";
  return String(Math.round(n * 10) / 10);
}

function fmtAge(s) {
  if (!s) return "0s";
  if (s < 60) return s.toFixed(1) + "s";
  if (s < 3600) return (s / 60).toFixed(1) + "m";
  if (s < 86400) return (s / 3600).toFixed(1) + "h";
  return (s / 86400).toFixed(1) + "d";
}

function showToast(msg, bad) {
  const t = $("toast");
  t.textContent = msg;
  t.className = "toast" + (bad ? " bad" : "");
  t.hidden = false;
  clearTimeout(showToast.timer);
  showToast.timer = setTimeout(() => { t.hidden = true; }, 5000);
}

function showLogin(message) {
  stopFeeds();
  // Nothing of the queues stays on the page.
  state.queues = [];
  state.history.clear();
  state.selected = null;
  $("overview").replaceChildren();
  $("detail").replaceChildren();
  $("app").hidden = true;
  $("login").hidden = false;
  $("signout").hidden = true;
  $("login-error").textContent = message || "";
  setConn("signed out", "");
}

function setConn(text, cls) {
  const c = $("conn");
  c.textContent = text;
  c.className = "pill " + (cls || "");
}

const RATE_MS = 5000;       // the table's rates: growth over the last 5 seconds
const SERIES_MS = 2000;     // the charts' rates: growth over 2 seconds

// Colours: a group has the same one in both charts and by its name; the
// rate chart's area (messages in) is blue, a colour no group has.
const GROUP_COLORS = ["#4cd397", "#f2b84b", "#c792ea", "#ff8f6b", "#7fdbca"];
const IN_COLOR = "#4fb0ff";

// rate returns the per-second growth of field over the last RATE_MS.
function rate(points, field) {
  if (points.length < 2) return null;
  const b = points[points.length - 1];
  let i = points.length - 2;
  while (i > 0 && b.t - points[i - 1].t <= RATE_MS) i--;
  const a = points[i];
  const dt = (b.t - a.t) / 1000;
  return dt > 0 ? Math.max(0, (b[field] - a[field]) / dt) : null;
}

// record adds a point per group; the queues are those of the rows (a queue
// without groups has one row without a group).
function record(rows) {
  const now = Date.now();
  const seen = new Set();
  for (const r of rows) {
    const key = r.queue + "/" + r.group;
    seen.add(key);
    let h = state.history.get(key);
    if (!h) { h = []; state.history.set(key, h); }
    h.push({ t: now, ready: r.ready, lag: r.lag, inFlight: r.in_flight, dead: r.dead, head: r.head, lwm: r.lwm });
    if (h.length > HISTORY) h.shift();
  }
  for (const key of [...state.history.keys()]) if (!seen.has(key)) state.history.delete(key);
}

// rateSeries turns a group's history into per-second rates of field, each
// over the SERIES_MS before the point (the interval between readings if
// longer), so that the line does not depend on how often the status comes.
function rateSeries(h, field) {
  const out = [];
  let j = 0;
  for (let i = 1; i < h.length; i++) {
    while (j + 1 < i && h[i].t - h[j + 1].t >= SERIES_MS) j++;
    const dt = (h[i].t - h[j].t) / 1000;
    out.push(dt > 0 ? Math.max(0, (h[i][field] - h[j][field]) / dt) : 0);
  }
  return out;
}

// drawChart draws lines (an area under those with fill) on a common scale
// from 0, and returns the scale's top.
function drawChart(canvas, lines) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth || 300, hgt = canvas.clientHeight || 60;
  canvas.width = w * dpr;
  canvas.height = hgt * dpr;
  const ctx = canvas.getContext("2d");
  ctx.scale(dpr, dpr);
  ctx.clearRect(0, 0, w, hgt);
  let max = 1;
  for (const l of lines) for (const v of l.values) max = Math.max(max, v);
  for (const l of lines) {
    const n = l.values.length;
    if (n < 2) continue;
    ctx.beginPath();
    l.values.forEach((v, i) => {
      const x = (i / (HISTORY - 1)) * w + (w - ((n - 1) / (HISTORY - 1)) * w);
      const y = hgt - 2 - (v / max) * (hgt - 6);
      if (i === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
    });
    ctx.strokeStyle = l.color;
    ctx.lineWidth = 1.6;
    ctx.stroke();
    if (l.fill) {
      ctx.lineTo(w, hgt);
      ctx.lineTo(w - ((n - 1) / (HISTORY - 1)) * w, hgt);
      ctx.closePath();
      ctx.globalAlpha = 0.18;
      ctx.fillStyle = l.color;
      ctx.fill();
      ctx.globalAlpha = 1;
    }
  }
  return max;
}

function groupRow(r, i) {
  const h = state.history.get(r.queue + "/" + r.group) || [];
  return el("tr", { "data-group": r.group },
    el("td", {}, el("span", { class: "swatch c" + (i % GROUP_COLORS.length) }), r.group),
    el("td", { class: "ready" }, fmt(r.ready)),
    el("td", { class: "waiting" }, fmt(r.waiting)),
    el("td", {}, fmt(r.delayed)),
    el("td", { class: "inflight" }, fmt(r.in_flight)),
    el("td", { class: "dead" + (r.dead > 0 ? " nonzero" : "") }, fmt(r.dead)),
    el("td", { class: "lag" }, fmt(r.lag)),
    el("td", {}, fmtAge(r.oldest_pending_age_seconds)),
    el("td", { class: "in-rate" }, fmt(rate(h, "head"))),
    el("td", { class: "done-rate" }, fmt(rate(h, "lwm"))));
}

// heldNote says that an open transaction holds the queue's numbering (a
// receive that numbered new messages and has not committed: they reach no
// group until it does), from status's held_by_pid and held_for_seconds.
function heldNote(rows) {
  const r = rows.find((x) => x.held_by_pid);
  if (!r) return null;
  const age = r.held_for_seconds ? " for " + fmtAge(r.held_for_seconds) : "";
  return el("span", { class: "held", title: "A receive that numbered new messages has not committed: they reach no group until it does." },
    "numbering held by pid " + r.held_by_pid + age);
}

function queueCard(name, rows) {
  const groups = rows.filter((r) => r.group);
  const card = el("div", { class: "card" + (state.selected === name ? " selected" : ""), "data-queue": name },
    el("div", { class: "title", onclick: () => select(name) },
      el("h2", {}, name), el("span", { class: "muted" }, groups.length + " group" + (groups.length === 1 ? "" : "s")),
      heldNote(rows)),
    el("table", {},
      el("thead", {}, el("tr", {}, ["group", "ready", "waiting", "delayed", "in flight", "dead", "lag", "oldest", "in/s", "done/s"].map((h) => el("th", {}, h)))),
      el("tbody", {}, groups.map(groupRow))));
  const lagCanvas = el("canvas", {}), rateCanvas = el("canvas", {});
  const lagMax = el("span", { class: "scale" }), rateMax = el("span", { class: "scale" });
  // The groups' colours are by their names in the table.
  card.append(el("div", { class: "charts" },
    el("div", { class: "chart" }, el("div", { class: "label" }, el("span", {}, "lag per group"), lagMax), lagCanvas),
    el("div", { class: "chart" }, el("div", { class: "label" },
      el("span", {}, el("span", { class: "in" }, "in/s"), " · done/s per group"), rateMax), rateCanvas)));
  requestAnimationFrame(() => {
    const lag = [], rates = [];
    groups.forEach((g, i) => {
      const h = state.history.get(name + "/" + g.group) || [];
      const color = GROUP_COLORS[i % GROUP_COLORS.length];
      lag.push({ color, values: h.map((p) => p.lag) });
      if (i === 0) rates.push({ color: IN_COLOR, fill: true, values: rateSeries(h, "head") });
      rates.push({ color, values: rateSeries(h, "lwm") });
    });
    lagMax.textContent = "max " + fmt(drawChart(lagCanvas, lag));
    rateMax.textContent = "max " + fmt(drawChart(rateCanvas, rates));
  });
  return card;
}

function renderOverview(rows) {
  const byQueue = new Map();
  for (const q of state.queues) byQueue.set(q, []);
  for (const r of rows) {
    if (!byQueue.has(r.queue)) byQueue.set(r.queue, []);
    byQueue.get(r.queue).push(r);
  }
  const ov = $("overview");
  if (byQueue.size === 0) {
    ov.replaceChildren(el("div", { class: "empty" }, "No queues yet. Create one: POST /v1/queues {\"name\": \"orders\"}"));
    return;
  }
  ov.replaceChildren(el("div", { class: "grid" }, [...byQueue.keys()].sort().map((q) => queueCard(q, byQueue.get(q)))));
}

// armed makes a button that acts on the second click (a confirmation that
// needs no dialog).
function armed(label, action) {
  const b = el("button", { class: "danger" }, label);
  b.addEventListener("click", async () => {
    if (!b.classList.contains("armed")) {
      b.classList.add("armed");
      b.textContent = "Confirm: " + label.toLowerCase();
      setTimeout(() => { b.classList.remove("armed"); b.textContent = label; }, 4000);
      return;
    }
    b.disabled = true;
    try { await action(); } finally { b.disabled = false; b.classList.remove("armed"); b.textContent = label; }
  });
  return b;
}

async function select(name) {
  state.selected = state.selected === name ? null : name;
  state.peekAfter = null;
  state.expanded.clear();
  await renderDetail();
  await tick();
}

async function renderDetail() {
  const d = $("detail");
  const name = state.selected;
  if (!name) { state.selectedDead = null; d.hidden = true; d.replaceChildren(); return; }
  let q, dls;
  try {
    [q, dls] = await Promise.all([
      api("GET", "/v1/queues/" + encodeURIComponent(name)),
      api("GET", "/v1/queues/" + encodeURIComponent(name) + "/dead-letters?max=100"),
    ]);
  } catch (e) {
    if (e.status === 401) return showLogin("Your token was refused: " + e.message);
    d.hidden = false;
    d.replaceChildren(el("div", { class: "card" }, el("h2", {}, name), el("p", { class: "error" }, e.message)));
    return;
  }
  if (name !== state.selected) return; // closed meanwhile
  state.selectedDead = (q.status || []).reduce((n, r) => n + r.dead, 0);
  const opts = el("div", { class: "options" }, Object.entries(q.options || {}).map(([k, v]) => el("div", {}, el("span", {}, k + " "), String(v))));
  const groups = q.groups || [];
  const redriveButtons = groups.map((g) => armed("Redrive " + g, async () => {
    try {
      const r = await api("POST", "/v1/queues/" + encodeURIComponent(name) + "/dead-letters/redrive", { group: g });
      showToast("Redrove " + r.redriven + " dead letter(s) of " + name + "/" + g);
    } catch (e) { showToast(e.message, true); }
    await renderDetail(); await tick();
  }));
  const purge = armed("Purge queue", async () => {
    try {
      const r = await api("POST", "/v1/queues/" + encodeURIComponent(name) + "/purge");
      showToast("Purged " + r.purged + " message(s) from " + name);
    } catch (e) { showToast(e.message, true); }
    await renderDetail(); await tick();
  });
  const dlRows = dls.dead_letters.map((x) => el("tr", { class: "dead-letter" },
    el("td", {}, String(x.id)), el("td", {}, x.group), el("td", {}, String(x.attempts)),
    el("td", { class: "left" }, el("pre", {}, x.error || "(lease expired)")),
    el("td", { class: "left" }, el("pre", {}, JSON.stringify(x.body, null, 1))),
    el("td", {}, new Date(x.died_at).toLocaleString()),
    el("td", {}, armed("Redrive", async () => {
      try {
        await api("POST", "/v1/queues/" + encodeURIComponent(name) + "/dead-letters/redrive", { group: x.group, ids: [x.id] });
        showToast("Redrove message " + x.id);
      } catch (e) { showToast(e.message, true); }
      await renderDetail(); await tick();
    }))));
  d.hidden = false;
  d.replaceChildren(el("div", { class: "card" },
    el("div", { class: "row" }, el("h2", {}, name), el("span", { class: "muted" }, "created " + new Date(q.created_at).toLocaleString()),
      el("span", { class: "spacer" }), ...redriveButtons, purge,
      el("button", { onclick: () => select(name) }, "Close")),
    el("h3", {}, "Options"), opts,
    el("h3", {}, "Dead letters (" + dls.dead_letters.length + ")"),
    dlRows.length === 0 ? el("p", { class: "muted" }, "None.") :
      el("table", { id: "dead-letters" },
        el("thead", {}, el("tr", {}, ["id", "group", "attempts", "error", "body", "died", ""].map((h) => el("th", { class: h === "error" || h === "body" ? "left" : null }, h)))),
        el("tbody", {}, dlRows)),
    el("h3", {}, "In flight"), el("div", { id: "inflight" }, el("p", { class: "muted" }, "Loading…")),
    el("div", { class: "row" }, el("h3", {}, "Peek"), el("span", { class: "spacer" }),
      el("button", { id: "peek-first", onclick: () => { state.peekAfter = null; inspect(true); } }, "First page"),
      el("button", { id: "peek-next", onclick: () => { if (state.peekLast !== undefined) { state.peekAfter = state.peekLast; inspect(true); } } }, "Next page")),
    el("div", { id: "peek" }, el("p", { class: "muted" }, "Loading…")),
    el("h3", {}, "Replay"), groups.length > 0 ? seekForm(name, groups) : null, replayForm(name),
    el("p", { class: "muted" }, "Redrive, purge, seek and new groups need an admin token; in flight and peek need a consumer or admin token. Peek shows the messages the queue stores (completed ones too, until their storage is reclaimed) without receiving them. Seek moves a group: it receives again what it completed since then (or skips ahead), keeps its name and dead letters, and the leases it holds go stale.")));
  inspect(true);
}

const PEEK_PAGE = 20;   // messages per peek page
const BODY_CHARS = 120; // a peeked body longer than this is shown cut, expandable

// inspect reads the open queue's leases and a page of its messages and
// draws them in place (the rest of the detail, and a form being filled, is
// left alone). It runs with each status reading, at most every POLL_MS, one
// at a time: peek reads every message the queue stores.
async function inspect(now) {
  const name = state.selected;
  if (!name || state.inspecting || (!now && Date.now() - state.inspectedAt < POLL_MS)) return;
  state.inspecting = true;
  state.inspectedAt = Date.now();
  const q = "/v1/queues/" + encodeURIComponent(name);
  const peekPath = q + "/messages?max=" + PEEK_PAGE + (state.peekAfter === null ? "" : "&after_id=" + state.peekAfter);
  const read = (path) => api("GET", path).then((v) => ({ v }), (e) => ({ e }));
  try {
    const [ls, pk] = await Promise.all([read(q + "/leases?max=100"), read(peekPath)]);
    if (name !== state.selected) return; // closed meanwhile
    if ((ls.e && ls.e.status === 401) || (pk.e && pk.e.status === 401)) return showLogin("Your token was refused: " + (ls.e || pk.e).message);
    const inflight = $("inflight"), peek = $("peek");
    if (inflight) inflight.replaceChildren(ls.e ? el("p", { class: "error" }, ls.e.message) : leasesTable(ls.v.leases));
    if (peek) peek.replaceChildren(pk.e ? el("p", { class: "error" }, pk.e.message) : peekTable(pk.v.messages));
    if (!pk.e) {
      const msgs = pk.v.messages;
      state.peekLast = msgs.length === PEEK_PAGE ? msgs[msgs.length - 1].id : undefined;
      const next = $("peek-next");
      if (next) next.disabled = state.peekLast === undefined;
    }
  } finally {
    state.inspecting = false;
  }
}

function leasesTable(leases) {
  if (leases.length === 0) return el("p", { class: "muted" }, "Nothing in flight.");
  const now = Date.now();
  return el("table", { id: "leases" },
    el("thead", {}, el("tr", {}, ["group", "id", "position", "attempt", "consumer", "delivered", "lease expires"].map((h) => el("th", {}, h)))),
    el("tbody", {}, leases.map((l) => el("tr", { class: "lease", "data-id": String(l.id) },
      el("td", {}, l.group), el("td", {}, String(l.id)), el("td", {}, String(l.pos)), el("td", {}, String(l.attempt)),
      el("td", {}, l.consumer || "–"),
      el("td", {}, new Date(l.delivered_at).toLocaleTimeString()),
      el("td", {}, new Date(l.lease_expires_at).toLocaleTimeString() + " (in " + fmtAge(Math.max(0, (new Date(l.lease_expires_at) - now) / 1000)) + ")")))));
}

// bodyCell shows a peeked body: whole if short, else cut, with the whole
// of it a click away (kept open across refreshes). Text only: a body is
// never parsed as HTML.
function bodyCell(m) {
  const line = JSON.stringify(m.body);
  if (line.length <= BODY_CHARS) return el("td", { class: "left" }, el("pre", { class: "body" }, line));
  const d = el("details", { open: state.expanded.has(m.id) },
    el("summary", {}, line.slice(0, BODY_CHARS) + "…"),
    el("pre", { class: "body" }, JSON.stringify(m.body, null, 1)));
  d.addEventListener("toggle", () => { if (d.open) state.expanded.add(m.id); else state.expanded.delete(m.id); });
  return el("td", { class: "left" }, d);
}

function peekTable(msgs) {
  if (msgs.length === 0) return el("p", { class: "muted" }, state.peekAfter === null ? "The queue stores no message." : "No message after id " + state.peekAfter + ".");
  return el("table", { id: "peeked" },
    el("thead", {}, el("tr", {}, ["id", "key", "priority", "sent", "due", "resent to", "body"].map((h) => el("th", { class: h === "body" ? "left" : null }, h)))),
    el("tbody", {}, msgs.map((m) => el("tr", { class: "peeked", "data-id": String(m.id) },
      el("td", {}, String(m.id)), el("td", {}, m.key || "–"), el("td", {}, String(m.priority)),
      el("td", {}, new Date(m.sent_at).toLocaleString()),
      el("td", {}, m.deliver_at ? new Date(m.deliver_at).toLocaleString() : "–"),
      el("td", {}, (m.resent_to || []).join(", ") || "–"),
      bodyCell(m)))));
}

// show draws a status reading (GET /v1/status, or a "status" event).
function show(st) {
  const rows = st.status;
  state.queues = [...new Set(rows.map((r) => r.queue))];
  record(rows);
  $("login").hidden = true;
  $("app").hidden = false;
  $("signout").hidden = !state.token;
  setConn(state.transport === "stream" ? "live" : "live (polling)", "ok");
  document.body.dataset.transport = state.transport;
  $("updated").textContent = "updated " + new Date().toLocaleTimeString();
  renderOverview(rows);
  // New dead letters of the open queue appear without a click.
  if (state.selected) {
    const dead = rows.filter((r) => r.queue === state.selected).reduce((n, r) => n + r.dead, 0);
    if (state.selectedDead !== null && dead !== state.selectedDead) renderDetail();
    else inspect(false);
  }
}

// refused handles a 401 or 403; it returns false for other errors.
function refused(e) {
  if (e.status === 401) {
    showLogin(state.token ? "Your token was refused: " + e.message : "");
    return true;
  }
  if (e.status === 403) {
    stopFeeds();
    setConn("forbidden", "bad");
    $("signout").hidden = !state.token;
    $("login").hidden = true;
    $("app").hidden = false;
    $("overview").replaceChildren(el("div", { class: "empty" }, "This token may not read the queues' status (" + e.message + ")."));
    return true;
  }
  return false;
}

// tick reads the status once (polling, and after an action).
// seekForm moves a group of the queue to a time (or to the earliest
// retained message) with sluice.seek_group; its button acts on the second
// click, as the other actions that change what consumers get.
function seekForm(name, groups) {
  const group = el("select", { name: "group", "aria-label": "group to seek" },
    groups.map((g) => el("option", { value: g }, g)));
  const to = el("input", { name: "to", type: "datetime-local", step: "1", "aria-label": "seek to" });
  const go = armed("Seek group", async () => {
    const body = { to_position: to.value ? new Date(to.value).toISOString() : "earliest" };
    try {
      await api("POST", "/v1/queues/" + encodeURIComponent(name) + "/groups/" + encodeURIComponent(group.value) + "/seek", body);
      showToast("Group " + group.value + " of " + name + " now reads from " + (to.value ? new Date(to.value).toLocaleString() : "the earliest message"));
    } catch (e) { showToast(e.message, true); }
    await renderDetail(); await tick();
  });
  return el("form", { class: "row seek", onsubmit: (ev) => ev.preventDefault() }, group,
    el("span", { class: "muted" }, "to"), to,
    el("span", { class: "muted" }, "(empty: the earliest retained message)"), go);
}

// replayForm makes a new group of the queue that starts at a time (or at
// the earliest retained message).
function replayForm(name) {
  const group = el("input", { name: "group", placeholder: "new group", "aria-label": "new group", class: "short" });
  const from = el("input", { name: "from", type: "datetime-local", step: "1", "aria-label": "start from" });
  const go = el("button", { type: "submit" }, "Create group");
  const form = el("form", { class: "row replay" }, group,
    el("span", { class: "muted" }, "from"), from,
    el("span", { class: "muted" }, "(empty: the earliest retained message)"), go);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const body = { name: group.value.trim(), start_from: "earliest" };
    if (from.value) body.start_from = new Date(from.value).toISOString();
    go.disabled = true;
    try {
      await api("POST", "/v1/queues/" + encodeURIComponent(name) + "/groups", body);
      showToast("Group " + body.name + " of " + name + " replays from " + (from.value ? new Date(from.value).toLocaleString() : "the earliest message"));
      await renderDetail(); await tick();
    } catch (e) { showToast(e.message, true); } finally { go.disabled = false; }
  });
  return form;
}

async function tick() {
  const session = state.session;
  try {
    const st = await api("GET", "/v1/status");
    if (session === state.session) show(st);
  } catch (e) {
    if (session !== state.session) return;
    if (!refused(e)) setConn("unreachable", "bad");
  }
}

function stopFeeds() {
  state.session++;
  if (state.stream) state.stream.abort();
  state.stream = null;
  clearInterval(state.pollTimer);
  clearTimeout(state.retryTimer);
  state.pollTimer = state.retryTimer = null;
}

function startPolling() {
  if (state.pollTimer) return;
  state.transport = "polling";
  state.pollTimer = setInterval(tick, POLL_MS);
}

// openStream follows GET /v1/events; when it cannot be opened or ends, the
// page polls meanwhile and opens it again after a pause.
async function openStream() {
  const session = state.session;
  const ctrl = new AbortController();
  state.stream = ctrl;
  let stall = null;
  const alive = () => {
    clearTimeout(stall);
    stall = setTimeout(() => ctrl.abort(), STALL_MS);
  };
  try {
    const headers = { Accept: "text/event-stream" };
    if (state.token) headers["Authorization"] = "Bearer " + state.token;
    alive();
    const res = await fetch("/v1/events", { headers, signal: ctrl.signal, cache: "no-store" });
    if (!res.ok) {
      let problem = null;
      try { problem = await res.json(); } catch (_) { problem = null; }
      throw new ApiError(res.status, problem);
    }
    clearInterval(state.pollTimer);
    state.pollTimer = null;
    state.transport = "stream";
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done || session !== state.session) break;
      alive();
      buf += value;
      let end;
      while ((end = buf.indexOf("\n\n")) >= 0) {
        const block = buf.slice(0, end);
        buf = buf.slice(end + 2);
        let name = "message", data = "";
        for (const line of block.split("\n")) {
          if (line.startsWith("event:")) name = line.slice(6).trim();
          else if (line.startsWith("data:")) data += line.slice(5).trim();
        }
        if (!data) continue;
        if (name === "status") {
          state.failures = 0;
          show(JSON.parse(data));
        } else if (name === "problem") {
          setConn("database unreachable", "bad");
        }
      }
    }
  } catch (e) {
    if (session !== state.session) return;
    if (e instanceof ApiError && refused(e)) return;
  } finally {
    clearTimeout(stall);
  }
  if (session !== state.session) return;
  // The stream ended or failed (a proxy that buffers, a restart, an
  // expired token): poll meanwhile, and try it again.
  state.stream = null;
  setConn("reconnecting", "");
  await tick();
  if (session !== state.session) return;
  startPolling();
  const wait = RETRY_MS[Math.min(state.failures, RETRY_MS.length - 1)];
  state.failures++;
  state.retryTimer = setTimeout(openStream, wait);
}

// follow starts following the status with the current token.
function follow() {
  stopFeeds();
  state.failures = 0;
  openStream();
}

function start() {
  $("login-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    state.token = $("token").value.trim();
    sessionStorage.setItem("sluice-token", state.token);
    $("token").value = "";
    follow();
  });
  $("signout").addEventListener("click", () => {
    state.token = "";
    sessionStorage.removeItem("sluice-token");
    showLogin();
  });
  follow();
}

start();
