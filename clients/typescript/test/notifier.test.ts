// One LISTEN connection per Sluice: its workers share it, a worker that
// stops unsubscribes, the last one releases it, and the notifier survives a
// terminated connection (the workers are still woken, long before their
// poll interval).

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { type NotifierEvent, Sluice, Worker } from "sluicemq";

import { eventually, newSluice, uniqueName } from "./helpers.js";

let s: Sluice; // the Sluice under test
let admin: Sluice; // looks from the server's side
before(() => {
  s = newSluice(20);
  admin = newSluice(2);
});
after(async () => {
  await s.end();
  await admin.end();
});

/** The sessions of the database whose last statement was a LISTEN or UNLISTEN. */
async function listenConns(): Promise<number> {
  const rows = await admin.query(
    `SELECT count(*)::int AS n FROM pg_stat_activity
     WHERE datname = current_database() AND pid <> pg_backend_pid() AND query ~* '^(UN)?LISTEN '`,
    [],
  );
  return rows[0]?.n as number;
}

async function terminateListener(): Promise<number> {
  const rows = await admin.query(
    `SELECT count(*)::int AS n FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
     WHERE datname = current_database() AND pid <> pg_backend_pid() AND query ~* '^LISTEN ') k`,
    [],
  );
  return rows[0]?.n as number;
}

test("ten workers of one Sluice share one LISTEN connection", { timeout: 60_000 }, async () => {
  assert.equal(await listenConns(), 0, "another test left a LISTEN connection");
  const queues = Array.from({ length: 5 }, () => uniqueName("ntf"));
  const got = new Map<string, number[]>(queues.map((q) => [q, []]));
  const runs: { ac: AbortController; run: Promise<void> }[] = [];
  for (const q of queues) {
    await s.createQueue(q);
  }
  try {
    for (const q of queues) {
      for (let i = 0; i < 2; i++) {
        const ac = new AbortController();
        const w = new Worker(s, q, "default", () => void got.get(q)!.push(Date.now()), {
          pollInterval: 60_000,
          onError: () => {},
        });
        runs.push({ ac, run: w.run(ac.signal) });
      }
    }
    await eventually(async () => (await listenConns()) === 1, 10_000, "one LISTEN connection");

    // A send to each queue is delivered within 2 s: by a wake-up, the
    // workers poll every minute once their hot period is over.
    const wakes = async () => {
      await new Promise((r) => setTimeout(r, 1500));
      for (const q of queues) {
        const before = got.get(q)!.length;
        const sent = Date.now();
        await s.send(q, "hi");
        await eventually(() => got.get(q)!.length > before, 10_000, `delivery on ${q}`);
        const at = got.get(q)![before]!;
        assert.ok(at - sent < 2000, `queue ${q}: delivered ${at - sent} ms after the send, want a wake-up`);
      }
    };
    await wakes();
    assert.equal(await listenConns(), 1, "LISTEN connections for ten workers");

    assert.equal(await terminateListener(), 1);
    await eventually(async () => (await listenConns()) === 1, 10_000, "a new LISTEN connection");
    await wakes();

    // A worker that stops unsubscribes; the others keep the connection.
    runs[0]!.ac.abort();
    await runs[0]!.run;
    assert.equal(await listenConns(), 1, "LISTEN connections after one worker stopped");
    await wakes();
  } finally {
    for (const r of runs) {
      r.ac.abort();
    }
    await Promise.all(runs.map((r) => r.run));
    for (const q of queues) {
      await s.dropQueue(q);
    }
  }
  // The last worker released the connection before its run resolved.
  await eventually(async () => (await listenConns()) === 0, 10_000, "no LISTEN connection once every worker stopped");
});

test("the notifier LISTENs by channel, with a count per channel", { timeout: 30_000 }, async () => {
  const events: Record<string, NotifierEvent[]> = { a1: [], a2: [], b: [] };
  const sub = (name: string, channel: string) => s.notifier.listen(channel, (ev) => void events[name]!.push(ev));
  const a1 = sub("a1", "chan a");
  const a2 = sub("a2", "chan a");
  const b = sub("b", "chan b");
  const heard = (name: string, kind: string, payload?: string) =>
    events[name]!.some((e) => e.kind === kind && (payload === undefined || (e.kind === "notified" && e.payload === payload)));
  try {
    await eventually(() => heard("a1", "listening") && heard("a2", "listening") && heard("b", "listening"), 10_000, "listening");
    assert.equal(await listenConns(), 1);
    await admin.query("SELECT pg_notify('chan a', 'x'), pg_notify('chan b', 'y')", []);
    await eventually(() => heard("a1", "notified", "x") && heard("a2", "notified", "x") && heard("b", "notified", "y"), 10_000, "notified");
    assert.ok(!heard("a1", "notified", "y"), "a subscriber of chan a heard chan b");

    // The last subscription of chan b ends: chan b is UNLISTENed, chan a stays.
    await b.unlisten();
    const nb = events.b!.length;
    await a2.unlisten();
    const na2 = events.a2!.length;
    await admin.query("SELECT pg_notify('chan b', 'y2'), pg_notify('chan a', 'x2')", []);
    await eventually(() => heard("a1", "notified", "x2"), 10_000, "notified after unlisten");
    assert.equal(events.b!.length, nb, "an ended subscription heard an event");
    assert.equal(events.a2!.length, na2, "an ended subscription heard an event");
    const rows = await admin.query(
      `SELECT query FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND query ~* '^(UN)?LISTEN '`,
      [],
    );
    assert.deepEqual(rows.map((r) => r.query), ['UNLISTEN "chan b"']);
  } finally {
    await a1.unlisten();
    await a2.unlisten();
    await b.unlisten();
  }
  await eventually(async () => (await listenConns()) === 0, 10_000, "the connection released");
});
