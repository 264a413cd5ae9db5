// The runner of the shared worker behaviour vectors (test/worker/*.json,
// format in test/worker/README.md): each vector's messages go to a fresh
// queue, a Worker runs a handler that follows each message's script, the
// runner stops it as the vector says and checks what the handler saw and
// what the queue holds. The queue is created with raw SQL (setup, not what
// is checked). SLUICE_WORKER_VECTORS_DIR overrides the directory.

import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";

import { Sluice, Worker, type WorkerOptions } from "sluicemq";

import { newSluice, uniqueName } from "./helpers.js";

// This file runs from clients/typescript/build/test/.
const repoDir = fileURLToPath(new URL("../../../../test/worker/", import.meta.url));
const dir = process.env.SLUICE_WORKER_VECTORS_DIR ?? repoDir;

interface Action {
  sleep?: number;
  fail?: string;
}

interface WorkerVector {
  name: string;
  description: string;
  queue: Record<string, unknown>;
  worker: { concurrency?: number; poll_interval?: number; lease?: number; heartbeat_interval?: number; drain_timeout?: number };
  messages: { body: string; script: Action[] }[];
  stop: { started?: number; finished?: number };
  expect: {
    runs?: Record<string, number[]>;
    finished?: Record<string, number>;
    status?: Record<string, number>;
    dead_letters?: { body: string; attempts: number; error: string }[];
  };
}

function vectors(): WorkerVector[] {
  if (!existsSync(dir)) {
    return [];
  }
  return readdirSync(dir)
    .filter((f) => f.endsWith(".json"))
    .sort()
    .map((f) => {
      const v = JSON.parse(readFileSync(join(dir, f), "utf8")) as WorkerVector;
      assert.equal(v.name, f.slice(0, -".json".length), `${f}: name differs from the file's stem`);
      return v;
    });
}

const durations = new Set(["lease", "backoff_base", "backoff_max", "retention", "rotate_interval", "dedup_window"]);
const ms = (s: number | undefined) => (s === undefined ? undefined : s * 1000);

/** Waits ms, or less when signal is aborted (then rejects). */
function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(done, ms);
    function done() {
      signal.removeEventListener("abort", onAbort);
      resolve();
    }
    function onAbort() {
      clearTimeout(timer);
      reject(new Error("stopped"));
    }
    signal.addEventListener("abort", onAbort, { once: true });
  });
}

async function run(s: Sluice, v: WorkerVector): Promise<void> {
  const queue = uniqueName("wv");
  const opts = Object.fromEntries(Object.entries(v.queue).map(([k, x]) => [k, durations.has(k) ? `${x} seconds` : x]));
  await s.query("SELECT sluice.create_queue($1, $2::jsonb)", [queue, JSON.stringify(opts)]);
  try {
    const scripts = new Map<string, Action[]>();
    for (const m of v.messages) {
      scripts.set(m.body, m.script);
      await s.send(queue, m.body);
    }
    const runs = new Map<string, number[]>();
    const finished = new Map<string, number>();
    let started = 0;
    let done = 0;
    let changed = () => {};
    const w = v.worker;
    const o: WorkerOptions = {
      onError: () => {},
      onHandlerError: () => {},
    };
    if (w.concurrency !== undefined) o.concurrency = w.concurrency;
    if (w.poll_interval !== undefined) o.pollInterval = ms(w.poll_interval)!;
    if (w.lease !== undefined) o.lease = ms(w.lease)!;
    if (w.heartbeat_interval !== undefined) o.heartbeatInterval = ms(w.heartbeat_interval)!;
    if (w.drain_timeout !== undefined) o.drainTimeout = ms(w.drain_timeout)!;
    const worker = new Worker<string>(
      s,
      queue,
      "default",
      async (m, ctx) => {
        const seen = runs.get(m.body) ?? [];
        seen.push(m.attempt);
        runs.set(m.body, seen);
        started++;
        changed();
        try {
          const script = scripts.get(m.body) ?? [];
          const a = script[Math.min(seen.length, script.length) - 1];
          if (a?.sleep) {
            await sleep(a.sleep * 1000, ctx.signal);
          }
          if (a?.fail !== undefined) {
            throw new Error(a.fail);
          }
        } finally {
          finished.set(m.body, (finished.get(m.body) ?? 0) + 1);
          done++;
          changed();
        }
      },
      o,
    );
    const ac = new AbortController();
    let returned = false;
    const running = worker.run(ac.signal).finally(() => {
      returned = true;
      changed();
    });

    // Stop as the vector says.
    const due = () => (v.stop.started !== undefined && started >= v.stop.started) || (v.stop.finished !== undefined && done >= v.stop.finished);
    const deadline = Date.now() + 20_000;
    while (!due() && !returned && Date.now() < deadline) {
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, 100);
        changed = () => {
          clearTimeout(t);
          resolve();
        };
      });
    }
    ac.abort();
    assert.ok(!returned || due(), "the worker returned before the stop");
    assert.ok(due(), `the stop condition ${JSON.stringify(v.stop)} did not hold within 20 s; runs ${JSON.stringify([...runs])}`);
    const limit = (w.drain_timeout ?? 10) * 1000 + 10_000;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      running,
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error("the worker did not return within the drain timeout and 10 s")), limit);
      }),
    ]).finally(() => clearTimeout(timer));

    // What must hold.
    const e = v.expect;
    if (e.runs !== undefined) {
      for (const [body, got] of runs) {
        assert.ok(body in e.runs, `message ${body}: runs ${JSON.stringify(got)}, want none`);
      }
      for (const [body, want] of Object.entries(e.runs)) {
        assert.deepEqual(runs.get(body) ?? [], want, `message ${body}: runs with attempts`);
      }
    }
    for (const [body, want] of Object.entries(e.finished ?? {})) {
      assert.equal(finished.get(body) ?? 0, want, `message ${body}: runs finished`);
    }
    if (e.status !== undefined) {
      const st = (await s.status(queue)).find((r) => r.groupName === "default");
      assert.ok(st);
      const got: Record<string, number> = { ready: st.ready, delayed: st.delayed, in_flight: st.inFlight, dead: st.dead, lag: st.lag };
      for (const [k, want] of Object.entries(e.status)) {
        assert.ok(k in got, `status field ${k} unknown to the runner`);
        assert.equal(got[k], want, `status ${k} (${JSON.stringify(st)})`);
      }
    }
    if (e.dead_letters !== undefined) {
      const got = await s.deadLetters<string>(queue);
      assert.equal(got.length, e.dead_letters.length, `dead letters ${JSON.stringify(got)}`);
      e.dead_letters.forEach((want, i) => {
        const d = got[i]!;
        assert.equal(d.body, want.body);
        assert.equal(d.attempts, want.attempts);
        assert.ok((d.error ?? "").includes(want.error), `dead letter ${i}: error ${d.error}, want it to contain ${want.error}`);
      });
    }
  } finally {
    await s.dropQueue(queue);
  }
}

describe("worker vectors", () => {
  let s: Sluice;
  before(() => {
    s = newSluice(10);
  });
  after(async () => {
    await s.end();
  });

  const all = vectors();
  if (all.length === 0) {
    test("vectors", { skip: `no vectors in ${dir}` }, () => {});
  }
  for (const v of all) {
    test(v.name, { timeout: 60_000 }, () => run(s, v));
  }
});
