// The sluice dashboard: follows the HTTP API's event stream (GET
// /v1/events, Server-Sent Events read with fetch, since EventSource cannot
// send the bearer token), or polls /v1/status when the stream cannot be had,
// with the token kept in this tab (sessionStorage), and draws what it reads.
// At sign-in it asks who the token is (GET /v1/whoami: the page offers only
// what its role may do) and the last hour of status the server sampled (GET
// /v1/status/history: the charts survive a reload). Routes: #/ (the
// overview), #/queue/NAME (a queue's view), #/queue/NAME/message/ID (with a
// message looked up). No dependencies.

import { $, el, api, ApiError, state, hooks, record, seedHistory } from "./core.js";
import { renderOverview, renderToolbar } from "./overview.js";
import { openQueue, closeQueue, updateQueue, view } from "./queue.js";

const POLL_MS = 2000;         // polling, when the stream is not available
const RETRY_MS = [1000, 2000, 5000, 10000, 30000]; // before reopening the stream
const STALL_MS = 15000;       // a stream silent for this long is reopened

const feed = {
  transport: "",   // "stream" or "polling"
  stream: null,    // the AbortController of the open stream
  failures: 0,     // stream failures in a row
  pollTimer: null,
  retryTimer: null,
  ready: false,    // whoami and the history were asked for (once per sign-in)
};

function setConn(text, cls) {
  const c = $("conn");
  c.textContent = text;
  c.className = "pill " + (cls || "");
}

function showLogin(message) {
  stopFeeds();
  // Nothing of the queues stays on the page.
  state.rows = [];
  state.queues = [];
  state.history.clear();
  state.whoami = null;
  feed.ready = false;
  closeQueue();
  $("overview").replaceChildren();
  $("toolbar").replaceChildren();
  $("who").hidden = true;
  $("app").hidden = true;
  $("login").hidden = false;
  $("signout").hidden = true;
  $("login-error").textContent = message || "";
  setConn("signed out", "");
}

// route shows the view the location's hash names.
function route() {
  const m = /^#\/queue\/([^/]+)(?:\/message\/(\d+))?$/.exec(location.hash);
  if (m) {
    $("overview-view").hidden = true;
    $("overview").replaceChildren(); // (one card per queue in the page: the view's)
    const name = decodeURIComponent(m[1]);
    openQueue(name, m[2] ? Number(m[2]) : null);
    document.title = name + " · sluice";
  } else {
    closeQueue();
    $("overview-view").hidden = false;
    document.title = "sluice";
    renderOverview();
  }
  window.scrollTo(0, 0);
}

// prepare asks, once per sign-in, who the token is and the history of the
// status; the page is drawn meanwhile.
async function prepare(session) {
  feed.ready = true;
  const [who, hist] = await Promise.all([
    api("GET", "/v1/whoami").catch(() => null),
    api("GET", "/v1/status/history").catch(() => null),
  ]);
  if (session !== state.session) return;
  // (a server without /v1/whoami: every action is offered, the database
  // still refuses what the role may not)
  state.whoami = who || { subject: "", role: "", queues: [], functions: ["create_queue", "purge_queue", "redrive",
    "discard_dead_letters", "seek_group", "create_group", "peek", "leases", "dead_letters"] };
  if (hist) seedHistory(hist);
  const w = state.whoami;
  $("who").textContent = w.role ? w.subject + " · " + w.role.replace("sluice_", "") : "no authentication";
  $("who").title = "Functions this token may call: " + w.functions.join(", ");
  $("who").hidden = false;
  renderToolbar();
  route();
}

// show draws a status reading (GET /v1/status, or a "status" event).
function show(st) {
  state.rows = st.status;
  state.queues = [...new Set(st.status.map((r) => r.queue))];
  record(st.status, Date.now());
  $("login").hidden = true;
  $("app").hidden = false;
  $("signout").hidden = !state.token;
  setConn(feed.transport === "stream" ? "live" : "live (polling)", "ok");
  document.body.dataset.transport = feed.transport;
  $("updated").textContent = "updated " + new Date().toLocaleTimeString();
  if (!feed.ready) { prepare(state.session); return; }
  const names = $("queue-names");
  if (names && names.options.length !== state.queues.length) names.replaceChildren(...state.queues.map((q) => el("option", { value: q })));
  if (view.name) updateQueue();
  else if (state.whoami) renderOverview();
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
    $("overview-view").hidden = false;
    $("overview").replaceChildren(el("div", { class: "empty" }, "This token may not read the queues' status (" + e.message + ")."));
    return true;
  }
  return false;
}

// tick reads the status once (polling, and after an action).
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
  if (feed.stream) feed.stream.abort();
  feed.stream = null;
  clearInterval(feed.pollTimer);
  clearTimeout(feed.retryTimer);
  feed.pollTimer = feed.retryTimer = null;
}

function startPolling() {
  if (feed.pollTimer) return;
  feed.transport = "polling";
  feed.pollTimer = setInterval(tick, POLL_MS);
}

// readEvents hands each event of the stream to show, until it ends.
async function readEvents(res, session, alive) {
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done || session !== state.session) return;
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
        feed.failures = 0;
        show(JSON.parse(data));
      } else if (name === "problem") {
        setConn("database unreachable", "bad");
      }
    }
  }
}

// openStream follows GET /v1/events; when it cannot be opened or ends, the
// page polls meanwhile and opens it again after a pause.
async function openStream() {
  const session = state.session;
  const ctrl = new AbortController();
  feed.stream = ctrl;
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
    clearInterval(feed.pollTimer);
    feed.pollTimer = null;
    feed.transport = "stream";
    await readEvents(res, session, alive);
  } catch (e) {
    if (session !== state.session) return;
    if (e instanceof ApiError && refused(e)) return;
  } finally {
    clearTimeout(stall);
  }
  if (session !== state.session) return;
  // The stream ended or failed (a proxy that buffers, a restart, an
  // expired token): poll meanwhile, and try it again.
  feed.stream = null;
  setConn("reconnecting", "");
  await tick();
  if (session !== state.session) return;
  startPolling();
  const wait = RETRY_MS[Math.min(feed.failures, RETRY_MS.length - 1)];
  feed.failures++;
  feed.retryTimer = setTimeout(openStream, wait);
}

// follow starts following the status with the current token.
function follow() {
  stopFeeds();
  feed.failures = 0;
  feed.ready = false;
  openStream();
}

function start() {
  hooks.refresh = tick;
  hooks.signedOut = showLogin;
  $("login-form").addEventListener("submit", (ev) => {
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
  window.addEventListener("hashchange", () => { if (state.whoami) route(); });
  follow();
}

start();
