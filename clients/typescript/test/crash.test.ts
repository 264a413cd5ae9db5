// The worker under crash: a worker process killed with SIGKILL mid-work
// loses nothing; its in-flight messages are delivered again once their
// leases expire (not before), to another worker.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";

import { Sluice, Worker } from "sluicemq";

import { eventually, newSluice, uniqueName } from "./helpers.js";

const fixture = fileURLToPath(new URL("./fixtures/crash-worker.js", import.meta.url));
const lease = 1000; // the fixture's

let s: Sluice;
before(() => {
  s = newSluice();
});
after(async () => {
  await s.end();
});

test("a worker killed with SIGKILL loses nothing; its messages come back after the lease", { timeout: 60_000 }, async () => {
  const q = uniqueName("tscrash");
  await s.createQueue(q);
  const ids = await s.sendBatch(q, Array.from({ length: 30 }, (_, i) => ({ body: i })));

  const child = spawn(process.execPath, [fixture, q], { stdio: ["ignore", "pipe", "inherit"] });
  const started = new Map<string, number>(); // id -> attempt
  const done = new Set<string>();
  const lines = createInterface({ input: child.stdout! });
  lines.on("line", (line) => {
    const [what, id, attempt] = line.split(" ");
    if (what === "start") {
      started.set(id!, Number(attempt));
    } else if (what === "done") {
      done.add(id!);
    }
  });
  const exited = new Promise<NodeJS.Signals | null>((resolve) => child.on("exit", (_code, signal) => resolve(signal)));
  let killedAt = 0;
  try {
    await eventually(() => done.size >= 8 && started.size > done.size, 20_000, "the child worker handled some and holds others");
  } finally {
    child.kill("SIGKILL");
    killedAt = Date.now();
  }
  assert.equal(await exited, "SIGKILL");
  const inflight = [...started.keys()].filter((id) => !done.has(id));
  assert.ok(inflight.length > 0);

  // Another worker takes over.
  const handled = new Map<string, { attempt: number; at: number }>();
  const ac = new AbortController();
  const run = new Worker<number>(
    s,
    q,
    "default",
    (m) => {
      handled.set(m.id, { attempt: m.attempt, at: Date.now() });
    },
    { pollInterval: 50 },
  ).run(ac.signal);
  try {
    await eventually(async () => (await s.status(q))[0]?.lag === 0, 20_000, "every message completed");
  } finally {
    ac.abort();
    await run;
  }

  // Nothing lost: each message was completed by the child or handled by
  // the second worker.
  for (const id of ids) {
    assert.ok(done.has(id) || handled.has(id), `message ${id} lost`);
  }
  // The child's in-flight messages came back with a new attempt, only
  // after their lease (renewed by heartbeats up to lease/3 before the kill).
  for (const id of inflight) {
    const h = handled.get(id);
    assert.ok(h, `in-flight message ${id} redelivered`);
    assert.ok(h.attempt >= 2, `message ${id} attempt ${h.attempt}`);
    assert.ok(h.at - killedAt >= lease / 2, `message ${id} redelivered ${h.at - killedAt} ms after the kill, before its lease ended`);
  }
  await s.dropQueue(q);
});
