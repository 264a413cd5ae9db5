// A queue's own view (#/queue/NAME, #/queue/NAME/message/ID): its groups
// and charts, what the token may do with it (purge, redrive, discard, seek,
// new groups: shown only when the token's role may call them), its options,
// a message looked up by id, its dead letters, its deliveries in flight and
// a page of its stored messages.

import { $, el, api, act, armed, may, fmtAge, plural, qpath, showToast, state, hooks } from "./core.js";
import { groupTable, heldNote, queueCharts, rangeSelect } from "./overview.js";

const POLL_MS = 2000;   // leases and peek: read again at most this often
const PEEK_PAGE = 20;   // messages per peek page
const BODY_CHARS = 120; // a body longer than this is shown cut, expandable
const DEAD_MAX = 100;   // dead letters listed

export const view = {
  name: null,         // the open queue
  lookup: null,       // the message id looked up, or null
  dead: null,         // its dead letters at the last render (sum of the groups' dead)
  peekAfter: null,    // peek's page: messages after this id (null: the first)
  peekLast: undefined, // the last id of a full page (the next page starts after it)
  expanded: new Set(), // ids of messages whose whole body is shown
  inspecting: false,
  inspectedAt: 0,
};

const rowsOf = (name) => state.rows.filter((r) => r.queue === name);
const deadOf = (name) => rowsOf(name).reduce((n, r) => n + (r.dead || 0), 0);

// openQueue shows the queue's view (from the route).
export async function openQueue(name, lookup) {
  if (view.name !== name) {
    view.peekAfter = null;
    view.expanded.clear();
  }
  view.name = name;
  view.lookup = lookup;
  await renderQueue();
}

export function closeQueue() {
  view.name = null;
  view.dead = null;
  $("detail").hidden = true;
  $("detail").replaceChildren();
}

// summary is the queue's card: its groups and charts, drawn anew with each
// reading.
function summary(name) {
  const rows = rowsOf(name);
  const groups = rows.filter((r) => r.group);
  return el("div", { class: "card selected", "data-queue": name },
    el("div", { class: "title" }, el("h2", {}, name),
      el("span", { class: "muted" }, plural(groups.length, "group", "groups")), heldNote(rows)),
    groups.length ? groupTable(groups) : el("p", { class: "muted" }, "No groups: make one below to read the queue."),
    queueCharts(name, groups, "big"));
}

// updateQueue follows a status reading: the summary, the dead letters when
// their number changed (new ones appear without a click), in flight and
// peek at most every POLL_MS.
export function updateQueue() {
  const name = view.name;
  if (!name || !$("summary")) return;
  $("summary").replaceChildren(summary(name));
  if (view.dead !== null && deadOf(name) !== view.dead) renderDead();
  else inspect(false);
}

// renderQueue draws the whole view (on opening, and after an action).
export async function renderQueue() {
  const d = $("detail");
  const name = view.name;
  if (!name) return;
  let q;
  try {
    q = await api("GET", qpath(name));
  } catch (e) {
    if (e.status === 401) return hooks.signedOut("Your token was refused: " + e.message);
    d.hidden = false;
    d.replaceChildren(el("a", { href: "#/", id: "back" }, "← all queues"), el("div", { class: "card" }, el("h2", {}, name), el("p", { class: "error" }, e.message)));
    return;
  }
  if (name !== view.name) return; // closed meanwhile
  const groups = q.groups || [];
  const opts = el("div", { class: "options" }, Object.entries(q.options || {}).map(([k, v]) => el("div", {}, el("span", {}, k + " "), String(v))));
  d.hidden = false;
  d.replaceChildren(
    el("div", { class: "row nav" }, el("a", { href: "#/", id: "back" }, "← all queues"), el("span", { class: "spacer" }),
      el("span", { class: "muted" }, "created " + new Date(q.created_at).toLocaleString()), rangeSelect(updateQueue)),
    el("div", { id: "summary" }, summary(name)),
    el("div", { class: "card" },
      actions(name),
      el("h3", {}, "Options"), opts,
      el("h3", {}, "Message by id"), lookupForm(name), el("div", { id: "lookup-result" }),
      el("section", { id: "dead-section" }, el("h3", { id: "dead-title" }, "Dead letters"),
        el("div", { id: "dead" }, el("p", { class: "muted" }, "Loading…"))),
      may("leases") ? [el("h3", {}, "In flight"), el("div", { id: "inflight" }, el("p", { class: "muted" }, "Loading…"))] : null,
      may("peek") ? [el("div", { class: "row" }, el("h3", {}, "Peek"), el("span", { class: "spacer" }),
        el("button", { id: "peek-first", onclick: () => { view.peekAfter = null; inspect(true); } }, "First page"),
        el("button", { id: "peek-next", onclick: () => { if (view.peekLast !== undefined) { view.peekAfter = view.peekLast; inspect(true); } } }, "Next page")),
      el("div", { id: "peek" }, el("p", { class: "muted" }, "Loading…"))] : null,
      replay(name, groups),
      el("p", { class: "muted", id: "may" }, mayNote())));
  renderDead();
  if (view.lookup !== null) lookup(name, view.lookup);
  inspect(true);
}

// mayNote says what this token may and may not do here.
function mayNote() {
  const w = state.whoami;
  if (!w) return "";
  const admin = ["purge_queue", "redrive", "discard_dead_letters", "seek_group", "create_group"];
  const missing = admin.filter((f) => !may(f));
  const who = (w.role ? "This token (" + w.subject + ", " + w.role + ")" : "The server's own role (no authentication)");
  if (missing.length === 0) return who + " may purge, redrive, discard, seek and make groups. Peek shows the messages the queue stores (completed ones too, until their storage is reclaimed) without receiving them. Seek moves a group: it receives again what it completed since then (or skips ahead), keeps its name and dead letters, and the leases it holds go stale.";
  return who + " may not " + missing.map((f) => f.replace(/_/g, " ")).join(", ") + ": those actions need an admin token, and are not offered.";
}

function actions(name) {
  if (!may("purge_queue")) return null;
  const withDead = el("input", { type: "checkbox", id: "purge-dead", "aria-label": "also discard the dead letters" });
  const purge = armed("Purge queue", () => act(async () => {
    const r = await api("POST", qpath(name) + "/purge" + (withDead.checked ? "?dead_letters=true" : ""));
    return r;
  }, (r) => "Purged " + plural(r.purged, "message", "messages") + " from " + name +
    (r.dead_letters_discarded !== undefined ? ", discarded " + plural(r.dead_letters_discarded, "dead letter", "dead letters") : ""), renderQueue));
  return el("div", { class: "row actions" }, purge,
    el("label", { class: "muted", for: "purge-dead" }, withDead, " also discard the dead letters (purge alone leaves them)"));
}

// renderDead lists the queue's dead letters, with redrive and discard (one,
// or all of a group) for a token that may.
async function renderDead() {
  const name = view.name;
  let dls;
  try {
    dls = (await api("GET", qpath(name) + "/dead-letters?max=" + DEAD_MAX)).dead_letters;
  } catch (e) {
    if (e.status === 401) return hooks.signedOut("Your token was refused: " + e.message);
    const box = $("dead");
    if (box) box.replaceChildren(el("p", { class: "error" }, e.message));
    return;
  }
  if (name !== view.name || !$("dead")) return;
  view.dead = deadOf(name);
  const total = view.dead;
  $("dead-title").textContent = "Dead letters (" + (total > dls.length ? dls.length + " of " + total : dls.length) + ")";
  const groups = [...new Set(dls.map((x) => x.group))];
  const bulk = groups.flatMap((g) => {
    const n = dls.filter((x) => x.group === g).length;
    const out = [];
    if (may("redrive")) out.push(armed("Redrive " + g, () => act(() => api("POST", qpath(name) + "/dead-letters/redrive", { group: g }),
      (r) => "Redrove " + plural(r.redriven, "dead letter", "dead letters") + " of " + name + "/" + g, renderQueue)));
    if (may("discard_dead_letters")) out.push(armed("Discard " + g, () => act(() => api("POST", qpath(name) + "/dead-letters/discard", { group: g }),
      (r) => "Discarded " + plural(r.discarded, "dead letter", "dead letters") + " of " + name + "/" + g, renderQueue),
      "Confirm: discard " + (total > n && groups.length === 1 ? "all " + total : "all " + n) + " of " + g));
    return out;
  });
  const row = (x) => el("tr", { class: "dead-letter", "data-id": String(x.id) },
    el("td", { "data-label": "id" }, String(x.id)), el("td", { "data-label": "group" }, x.group),
    el("td", { "data-label": "attempts" }, String(x.attempts)),
    el("td", { class: "left", "data-label": "error" }, el("pre", {}, x.error || "(lease expired)")),
    el("td", { class: "left", "data-label": "body" }, bodyView(x.dead_letter_id, x.body)),
    el("td", { "data-label": "died" }, new Date(x.died_at).toLocaleString()),
    el("td", { class: "buttons" },
      may("redrive") ? armed("Redrive", () => act(() => api("POST", qpath(name) + "/dead-letters/redrive", { group: x.group, ids: [x.id] }),
        () => "Redrove message " + x.id, renderQueue)) : null,
      may("discard_dead_letters") ? armed("Discard", () => act(() => api("POST", qpath(name) + "/dead-letters/discard", { group: x.group, ids: [x.id] }),
        () => "Discarded dead letter " + x.id, renderQueue), "Confirm: discard") : null));
  $("dead").replaceChildren(...[
    bulk.length ? el("div", { class: "row bulk" }, bulk) : null,
    dls.length === 0 ? el("p", { class: "muted" }, "None.") :
      el("div", { class: "scroll" }, el("table", { id: "dead-letters", class: "stack" },
        el("thead", {}, el("tr", {}, ["id", "group", "attempts", "error", "body", "died", ""].map((h) => el("th", { class: h === "error" || h === "body" ? "left" : null }, h)))),
        el("tbody", {}, dls.map(row)))),
  ].filter(Boolean));
}

// bodyView shows a body as text (never as HTML): whole if short, else cut,
// with the whole of it a click away (kept open across refreshes).
function bodyView(key, body) {
  const line = JSON.stringify(body);
  if (line.length <= BODY_CHARS) return el("pre", { class: "body" }, line);
  const d = el("details", { open: view.expanded.has(key) },
    el("summary", {}, line.slice(0, BODY_CHARS) + "…"),
    el("pre", { class: "body" }, JSON.stringify(body, null, 1)));
  d.addEventListener("toggle", () => { if (d.open) view.expanded.add(key); else view.expanded.delete(key); });
  return d;
}

function lookupForm(name) {
  const id = el("input", { name: "id", placeholder: "message id", "aria-label": "message id", class: "short", inputmode: "numeric",
    value: view.lookup === null ? "" : String(view.lookup) });
  const form = el("form", { class: "row lookup" }, id, el("button", { type: "submit" }, "Find"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const v = id.value.trim();
    if (!/^\d+$/.test(v)) return showToast("A message id is a positive integer", true);
    location.hash = "#/queue/" + encodeURIComponent(name) + "/message/" + v;
  });
  return form;
}

// lookup finds message id where the queue keeps it: stored (peek), in
// flight (leases), dead (dead letters), each as the token may read it.
async function lookup(name, id) {
  const box = $("lookup-result");
  box.replaceChildren(el("p", { class: "muted" }, "Looking for message " + id + "…"));
  const read = (ok, path) => (ok ? api("GET", qpath(name) + path).then((v) => ({ v }), (e) => ({ e })) : Promise.resolve({ skip: true }));
  const [pk, ls, dl] = await Promise.all([
    read(may("peek"), "/messages?max=1&after_id=" + (id - 1)),
    read(may("leases"), "/leases?max=1000"),
    read(may("dead_letters"), "/dead-letters?max=10000"),
  ]);
  if (name !== view.name || view.lookup !== id) return;
  const parts = [];
  const errors = [pk, ls, dl].filter((r) => r.e).map((r) => r.e.message);
  const stored = pk.v ? pk.v.messages.filter((m) => m.id === id) : [];
  const leases = ls.v ? ls.v.leases.filter((l) => l.id === id) : [];
  const dead = dl.v ? dl.v.dead_letters.filter((x) => x.id === id) : [];
  for (const m of stored) {
    parts.push(el("div", { class: "found", id: "found-stored" }, el("h4", {}, "Stored"),
      el("div", { class: "options" },
        el("div", {}, el("span", {}, "key "), m.key || "–"), el("div", {}, el("span", {}, "priority "), String(m.priority)),
        el("div", {}, el("span", {}, "sent "), new Date(m.sent_at).toLocaleString()),
        el("div", {}, el("span", {}, "due "), m.deliver_at ? new Date(m.deliver_at).toLocaleString() : "–"),
        el("div", {}, el("span", {}, "resent to "), (m.resent_to || []).join(", ") || "–")),
      bodyView("lookup-" + m.id, m.body)));
  }
  for (const l of leases) {
    parts.push(el("div", { class: "found", id: "found-lease" }, el("h4", {}, "In flight in " + l.group),
      "attempt " + l.attempt + ", consumer " + (l.consumer || "–") + ", lease ends " + new Date(l.lease_expires_at).toLocaleTimeString()));
  }
  for (const x of dead) {
    parts.push(el("div", { class: "found", id: "found-dead" }, el("h4", {}, "Dead letter of " + x.group),
      "after " + plural(x.attempts, "attempt", "attempts") + ", died " + new Date(x.died_at).toLocaleString() + ": ",
      el("pre", {}, x.error || "(lease expired)")));
  }
  if (parts.length === 0) {
    parts.push(el("p", { class: "muted", id: "not-found" }, "No message " + id + " in " + name +
      (errors.length ? "" : ": never sent, or its storage was reclaimed (completed messages are kept for the queue's retention)") + "."));
  }
  for (const e of errors) parts.push(el("p", { class: "error" }, e));
  box.replaceChildren(...parts);
}

// inspect reads the open queue's leases and a page of its messages and
// draws them in place (a form being filled is left alone), at most every
// POLL_MS, one at a time: peek reads every message the queue stores.
export async function inspect(now) {
  const name = view.name;
  if (!name || view.inspecting || (!now && Date.now() - view.inspectedAt < POLL_MS)) return;
  if (!may("leases") && !may("peek")) return;
  view.inspecting = true;
  view.inspectedAt = Date.now();
  const peekPath = qpath(name) + "/messages?max=" + PEEK_PAGE + (view.peekAfter === null ? "" : "&after_id=" + view.peekAfter);
  const read = (ok, path) => (ok ? api("GET", path).then((v) => ({ v }), (e) => ({ e })) : Promise.resolve({}));
  try {
    const [ls, pk] = await Promise.all([read(may("leases"), qpath(name) + "/leases?max=100"), read(may("peek"), peekPath)]);
    if (name !== view.name) return; // closed meanwhile
    if ((ls.e && ls.e.status === 401) || (pk.e && pk.e.status === 401)) return hooks.signedOut("Your token was refused: " + (ls.e || pk.e).message);
    const inflight = $("inflight"), peek = $("peek");
    if (inflight && (ls.e || ls.v)) inflight.replaceChildren(ls.e ? el("p", { class: "error" }, ls.e.message) : leasesTable(ls.v.leases));
    if (peek && (pk.e || pk.v)) peek.replaceChildren(pk.e ? el("p", { class: "error" }, pk.e.message) : peekTable(pk.v.messages));
    if (pk.v) {
      const msgs = pk.v.messages;
      view.peekLast = msgs.length === PEEK_PAGE ? msgs[msgs.length - 1].id : undefined;
      const next = $("peek-next");
      if (next) next.disabled = view.peekLast === undefined;
    }
  } finally {
    view.inspecting = false;
  }
}

function leasesTable(leases) {
  if (leases.length === 0) return el("p", { class: "muted" }, "Nothing in flight.");
  const now = Date.now();
  return el("div", { class: "scroll" }, el("table", { id: "leases", class: "stack" },
    el("thead", {}, el("tr", {}, ["group", "id", "position", "attempt", "consumer", "delivered", "lease expires"].map((h) => el("th", {}, h)))),
    el("tbody", {}, leases.map((l) => el("tr", { class: "lease", "data-id": String(l.id) },
      el("td", { "data-label": "group" }, l.group), el("td", { "data-label": "id" }, String(l.id)),
      el("td", { "data-label": "position" }, String(l.pos)), el("td", { "data-label": "attempt" }, String(l.attempt)),
      el("td", { "data-label": "consumer" }, l.consumer || "–"),
      el("td", { "data-label": "delivered" }, new Date(l.delivered_at).toLocaleTimeString()),
      el("td", { "data-label": "lease expires" }, new Date(l.lease_expires_at).toLocaleTimeString() + " (in " + fmtAge(Math.max(0, (new Date(l.lease_expires_at) - now) / 1000)) + ")"))))));
}

function peekTable(msgs) {
  if (msgs.length === 0) return el("p", { class: "muted" }, view.peekAfter === null ? "The queue stores no message." : "No message after id " + view.peekAfter + ".");
  return el("div", { class: "scroll" }, el("table", { id: "peeked", class: "stack" },
    el("thead", {}, el("tr", {}, ["id", "key", "priority", "sent", "due", "resent to", "body"].map((h) => el("th", { class: h === "body" ? "left" : null }, h)))),
    el("tbody", {}, msgs.map((m) => el("tr", { class: "peeked", "data-id": String(m.id) },
      el("td", { "data-label": "id" }, String(m.id)), el("td", { "data-label": "key" }, m.key || "–"),
      el("td", { "data-label": "priority" }, String(m.priority)),
      el("td", { "data-label": "sent" }, new Date(m.sent_at).toLocaleString()),
      el("td", { "data-label": "due" }, m.deliver_at ? new Date(m.deliver_at).toLocaleString() : "–"),
      el("td", { "data-label": "resent to" }, (m.resent_to || []).join(", ") || "–"),
      el("td", { class: "left", "data-label": "body" }, bodyView(m.id, m.body)))))));
}

// replay: seek a group (two clicks) and make a new group from a time, for
// a token that may.
function replay(name, groups) {
  const parts = [];
  if (may("seek_group") && groups.length > 0) parts.push(seekForm(name, groups));
  if (may("create_group")) parts.push(replayForm(name));
  return parts.length ? [el("h3", {}, "Replay"), ...parts] : null;
}

function seekForm(name, groups) {
  const group = el("select", { name: "group", "aria-label": "group to seek" }, groups.map((g) => el("option", { value: g }, g)));
  const to = el("input", { name: "to", type: "datetime-local", step: "1", "aria-label": "seek to" });
  const go = armed("Seek group", () => act(() => api("POST", qpath(name) + "/groups/" + encodeURIComponent(group.value) + "/seek",
    { to_position: to.value ? new Date(to.value).toISOString() : "earliest" }),
  () => "Group " + group.value + " of " + name + " now reads from " + (to.value ? new Date(to.value).toLocaleString() : "the earliest message"), renderQueue));
  return el("form", { class: "row seek", onsubmit: (ev) => ev.preventDefault() }, group,
    el("span", { class: "muted" }, "to"), to, el("span", { class: "muted" }, "(empty: the earliest retained message)"), go);
}

function replayForm(name) {
  const group = el("input", { name: "group", placeholder: "new group", "aria-label": "new group", class: "short" });
  const from = el("input", { name: "from", type: "datetime-local", step: "1", "aria-label": "start from" });
  const go = el("button", { type: "submit" }, "Create group");
  const form = el("form", { class: "row replay" }, group, el("span", { class: "muted" }, "from"), from,
    el("span", { class: "muted" }, "(empty: the earliest retained message)"), go);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const body = { name: group.value.trim(), start_from: from.value ? new Date(from.value).toISOString() : "earliest" };
    go.disabled = true;
    let ok = false;
    await act(async () => { await api("POST", qpath(name) + "/groups", body); ok = true; },
      () => "Group " + body.name + " of " + name + " replays from " + (from.value ? new Date(from.value).toLocaleString() : "the earliest message"),
      () => (ok ? renderQueue() : null));
    go.disabled = false;
  });
  return form;
}

