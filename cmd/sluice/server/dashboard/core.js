// The dashboard's shared state and helpers: the API, elements, numbers,
// the toast, two-click confirmations, what the token may do, and the
// history of status readings the charts draw. No dependencies.

export const HOUR_MS = 3600 * 1000;
export const RATE_MS = 5000; // the tables' rates: growth over the last 5 seconds

// Colours: a group has the same one in every chart and by its name; the
// rate chart's area (messages in) is blue, a colour no group has.
export const GROUP_COLORS = ["#4cd397", "#f2b84b", "#c792ea", "#ff8f6b", "#7fdbca"];
export const IN_COLOR = "#4fb0ff";

export const state = {
  token: sessionStorage.getItem("sluice-token") || "",
  // "queue/group" -> [{t, ready, waiting, delayed, inFlight, dead, lag, head, lwm}],
  // the last hour: the server's samples first (GET /v1/status/history),
  // then the readings of this tab.
  history: new Map(),
  rows: [],           // the last status reading
  queues: [],         // the queues of the last reading
  whoami: null,       // GET /v1/whoami: subject, role, queues, functions
  range: Number(localStorage.getItem("sluice-range")) || 5 * 60 * 1000, // the charts' span (up to the hour the server keeps)
  filter: { text: "", only: "" }, // the overview's search and filter
  session: 0,         // incremented at each sign-in and sign-out
};

// hooks are set by app.js: refresh reads the status again (after an
// action), signedOut shows the sign-in form with a message.
export const hooks = { refresh: async () => {}, signedOut: (_msg) => {} };

export const $ = (id) => document.getElementById(id);

// el makes an element; text children are text nodes (never parsed as HTML).
export function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") { if (v) e.className = v; }
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null && v !== false) e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

export class ApiError extends Error {
  constructor(status, problem) {
    super((problem && (problem.detail || problem.title)) || "HTTP " + status);
    this.status = status;
    this.problem = problem;
  }
}

export async function api(method, path, body) {
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

export const qpath = (name) => "/v1/queues/" + encodeURIComponent(name);

export function fmt(n) {
  if (n === undefined || n === null || Number.isNaN(n)) return "–";
  if (Math.abs(n) >= 1e6) return (n / 1e6).toFixed(1) + "M";
  if (Math.abs(n) >= 1e4) return (n / 1e3).toFixed(1) + "k";
  return String(Math.round(n * 10) / 10);
}

export function fmtAge(s) {
  if (!s) return "0s";
  if (s < 60) return s.toFixed(1) + "s";
  if (s < 3600) return (s / 60).toFixed(1) + "m";
  if (s < 86400) return (s / 3600).toFixed(1) + "h";
  return (s / 86400).toFixed(1) + "d";
}

export const plural = (n, one, many) => n + " " + (n === 1 ? one : many);

export function showToast(msg, bad) {
  const t = $("toast");
  t.textContent = msg;
  t.className = "toast" + (bad ? " bad" : "");
  t.hidden = false;
  clearTimeout(showToast.timer);
  showToast.timer = setTimeout(() => { t.hidden = true; }, 6000);
}

// may reports whether the token may call the public SQL function fn (the
// server's GET /v1/whoami, from the database's grants). Before it is
// known, nothing is offered.
export function may(fn) {
  return !!state.whoami && state.whoami.functions.includes(fn);
}

// armed makes a button that acts on the second click (a confirmation that
// needs no dialog); confirmText is what the armed button says.
export function armed(label, action, confirmText) {
  const b = el("button", { class: "danger" }, label);
  b.addEventListener("click", async () => {
    if (!b.classList.contains("armed")) {
      b.classList.add("armed");
      b.textContent = confirmText || "Confirm: " + label.toLowerCase();
      setTimeout(() => { b.classList.remove("armed"); b.textContent = label; }, 4000);
      return;
    }
    b.disabled = true;
    try { await action(); } finally { b.disabled = false; b.classList.remove("armed"); b.textContent = label; }
  });
  return b;
}

// act runs an action that changes something: a toast with its outcome (the
// server's message when it is refused), then after (the view drawn again,
// before the new status shows: a test or a user that sees the new numbers
// finds the view's forms already new), then the status again.
export async function act(fn, done, after) {
  try {
    const r = await fn();
    if (done) showToast(done(r));
  } catch (e) {
    if (e.status === 401) return hooks.signedOut("Your token was refused: " + e.message);
    showToast(e.message, true);
  }
  if (after) await after();
  await hooks.refresh();
}

// point is a status row as the history keeps it.
const point = (t, r) => ({ t, ready: r.ready, waiting: r.waiting, delayed: r.delayed, inFlight: r.in_flight,
  dead: r.dead, lag: r.lag, head: r.head, lwm: r.lwm });

// record adds a reading to the history, a point per group, and forgets
// what is older than an hour and the groups that are gone.
export function record(rows, t) {
  const seen = new Set();
  for (const r of rows) {
    if (!r.group) continue;
    const key = r.queue + "/" + r.group;
    seen.add(key);
    let h = state.history.get(key);
    if (!h) { h = []; state.history.set(key, h); }
    h.push(point(t, r));
    let cut = 0;
    while (cut < h.length && h[cut].t < t - HOUR_MS) cut++;
    if (cut > 0) h.splice(0, cut);
  }
  for (const key of [...state.history.keys()]) if (!seen.has(key)) state.history.delete(key);
}

// seedHistory puts the server's samples (GET /v1/status/history) before the
// tab's own readings.
export function seedHistory(h) {
  for (const s of h.series) {
    const key = s.queue + "/" + s.group;
    const mine = state.history.get(key) || [];
    const first = mine.length ? mine[0].t : Infinity;
    const pts = [];
    h.times.forEach((t, i) => {
      if (t >= first || s.lag[i] === null) return;
      pts.push(point(t, { ready: s.ready[i], waiting: s.waiting[i], delayed: s.delayed[i], in_flight: s.in_flight[i],
        dead: s.dead[i], lag: s.lag[i], head: s.head[i], lwm: s.lwm[i] }));
    });
    state.history.set(key, pts.concat(mine));
  }
}

// rate returns the per-second growth of field over the last RATE_MS.
export function rate(points, field) {
  if (points.length < 2) return null;
  const b = points[points.length - 1];
  let i = points.length - 2;
  while (i > 0 && b.t - points[i - 1].t <= RATE_MS) i--;
  const a = points[i];
  const dt = (b.t - a.t) / 1000;
  return dt > 0 ? Math.max(0, (b[field] - a[field]) / dt) : null;
}
