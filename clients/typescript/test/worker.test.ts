// The worker against a real PostgreSQL: concurrency, retries with the
// handler's error, per-key order, heartbeats past the lease, LISTEN
// wake-ups, and shutdown through an AbortSignal.

import assert from "node:assert/strict";
import { after, afterEach, before, describe, test } from "node:test";

import {
  InvalidArgumentError,
  QueueNotFoundError,
  Sluice,
  Worker,
  type HandlerFailure,
  type Message,
  type WorkerOptions,
} from "sluicemq";

import { eventually, newSluice, uniqueName } from "./helpers.js";

let s: Sluice;
before(() => {
  s = newSluice();
});
after(async () => {
  await s.end();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const lag = async (q: string) => (await s.status(q))[0]?.lag ?? -1;

async function newQueue(options: Parameters<Sluice["createQueue"]>[1] = {}): Promise<string> {
  const q = uniqueName("tsw");
  await s.createQueue(q, options);
  return q;
}

// Workers still running when a test ends (it failed): stopped by afterEach
// so that the test process can exit.
const running: { ac: AbortController; run: Promise<void> }[] = [];
afterEach(async () => {
  for (const w of running.splice(0)) {
    w.ac.abort();
    await w.run.catch(() => {});
  }
});

/** Starts a worker; returns its AbortController and run promise. */
function start<B>(q: string, handler: (m: Message<B>, ctx: { signal: AbortSignal }) => Promise<void> | void, o: WorkerOptions = {}) {
  const ac = new AbortController();
  const errors: unknown[] = [];
  const run = new Worker<B>(s, q, "default", handler, { onError: (e) => errors.push(e), drainTimeout: 3000, ...o }).run(ac.signal);
  running.push({ ac, run });
  return { ac, run, errors };
}

// nextOfKeyAfterFirst runs a worker (two slots, one message a receive, a
// 30 s poll, and o) on q, which holds the messages 0 and 1 of one key. The
// handler of 0 runs past the hot period of the empty receives, then fails
// when fail is set. It returns how many ms after that 1 was handled, once
// the worker stopped without errors.
async function nextOfKeyAfterFirst(q: string, o: WorkerOptions, fail: boolean): Promise<number> {
  const handled: number[] = [];
  let firstDone = 0;
  let gap = -1;
  const w = start<number>(
    q,
    async (m) => {
      handled.push(m.body);
      if (m.body !== 0) {
        gap = Date.now() - firstDone;
        return;
      }
      await sleep(1500); // past the hot period of the empty receives
      firstDone = Date.now();
      if (fail) {
        throw new Error("first fails");
      }
    },
    { concurrency: 2, batchSize: 1, pollInterval: 30_000, ...o },
  );
  await eventually(() => handled.length === 2, 6000, "the key's next message handled long before the 30 s poll");
  assert.deepEqual(handled, [0, 1]);
  w.ac.abort();
  await w.run;
  assert.deepEqual(w.errors, []);
  return gap;
}

describe("worker", { timeout: 60_000 }, () => {
  test("handles every message, at most concurrency at once, and acks", async () => {
    const q = await newQueue();
    const ids = await s.sendBatch(q, Array.from({ length: 50 }, (_, i) => ({ body: i })));
    let running = 0;
    let most = 0;
    const seen = new Set<string>();
    const w = start<number>(
      q,
      async (m) => {
        running++;
        most = Math.max(most, running);
        await sleep(10);
        seen.add(m.id);
        running--;
      },
      { concurrency: 4 },
    );
    await eventually(async () => (await lag(q)) === 0, 15_000, "every message completed");
    w.ac.abort();
    await w.run;
    assert.equal(seen.size, ids.length);
    assert.ok(most <= 4, `at most 4 at once, saw ${most}`);
    assert.ok(most >= 2, `handlers ran side by side (saw ${most})`);
    assert.deepEqual(w.errors, []);
    await s.dropQueue(q);
  });

  test("a failing handler is retried through nack and dead-lettered with its error", async () => {
    const q = await newQueue({ maxAttempts: 3, backoffBase: 50, backoffMax: 100 });
    const id = await s.send(q, "bad");
    const attempts: number[] = [];
    const w = start(q, (m) => {
      attempts.push(m.attempt);
      throw new Error(`failed on attempt ${m.attempt}`);
    }, { pollInterval: 50 });
    await eventually(async () => (await s.status(q))[0]?.dead === 1, 10_000, "a dead letter");
    w.ac.abort();
    await w.run;
    assert.deepEqual(attempts, [1, 2, 3]);
    const [d] = await s.deadLetters(q);
    assert.equal(d?.id, id);
    assert.equal(d?.error, "failed on attempt 3");
    await s.dropQueue(q);
  });

  test("onHandlerError hears of each failure: message, error, attempt, retried or dead-lettered", async () => {
    const q = await newQueue({ maxAttempts: 2, backoffBase: 50, backoffMax: 100 });
    const id = await s.send(q, "secret body");
    const failures: HandlerFailure[] = [];
    const w = start(q, () => {
      throw new Error("no such customer");
    }, { pollInterval: 50, onHandlerError: (f) => failures.push(f) });
    await eventually(() => failures.length === 2, 10_000, "two failures");
    w.ac.abort();
    await w.run;
    assert.deepEqual(
      failures.map((f) => [f.queue, f.group, f.message.id, f.attempt, f.maxAttempts, f.deadLettered, (f.error as Error).message]),
      [
        [q, "default", id, 1, 2, false, "no such customer"],
        [q, "default", id, 2, 2, true, "no such customer"],
      ],
    );
    await s.dropQueue(q);
  });

  test("by default a handler's failure is a console.warn line, without the message body", async () => {
    const q = await newQueue({ maxAttempts: 2, backoffBase: 50, backoffMax: 100 });
    const id = await s.send(q, "secret body");
    const lines: string[] = [];
    const warn = console.warn;
    console.warn = (...args: unknown[]) => {
      lines.push(args.map(String).join(" "));
    };
    try {
      const w = start(q, () => {
        throw new Error("no such customer");
      }, { pollInterval: 50 });
      await eventually(async () => (await s.status(q))[0]?.dead === 1 && lines.length === 2, 10_000, "two warnings");
      w.ac.abort();
      await w.run;
    } finally {
      console.warn = warn;
    }
    assert.deepEqual(lines, [
      `sluice: handler of ${q}/default failed on message ${id}, attempt 1 of 2; retried: no such customer`,
      `sluice: handler of ${q}/default failed on message ${id}, attempt 2 of 2; dead-lettered: no such customer`,
    ]);
    await s.dropQueue(q);
  });

  test("a key's messages are handled in order; a failure stops the run until its retry succeeds", async () => {
    const q = await newQueue({ backoffBase: 50, backoffMax: 100 });
    const msgs = [];
    for (const key of ["a", "b"]) {
      for (let i = 0; i < 5; i++) {
        msgs.push({ body: { key, i }, key });
      }
    }
    await s.sendBatch(q, msgs);
    const done: Record<string, number[]> = { a: [], b: [] };
    const handled: string[] = [];
    let failedOnce = false;
    const w = start<{ key: string; i: number }>(
      q,
      async (m) => {
        handled.push(`${m.body.key}${m.body.i}`);
        await sleep(5);
        if (m.body.key === "a" && m.body.i === 2 && !failedOnce) {
          failedOnce = true;
          throw new Error("a2 fails once");
        }
        done[m.body.key]!.push(m.body.i);
      },
      { concurrency: 10, pollInterval: 50 },
    );
    await eventually(async () => (await lag(q)) === 0, 15_000, "every message completed");
    w.ac.abort();
    await w.run;
    assert.deepEqual(done.a, [0, 1, 2, 3, 4]);
    assert.deepEqual(done.b, [0, 1, 2, 3, 4]);
    // a3 was never handled before a2's retry.
    const a = handled.filter((h) => h.startsWith("a"));
    assert.deepEqual(a, ["a0", "a1", "a2", "a2", "a3", "a4"]);
    await s.dropQueue(q);
  });

  test("heartbeats keep a handler's lease past its length", async () => {
    const q = await newQueue();
    await s.send(q, "slow");
    const attempts: number[] = [];
    const w = start(
      q,
      async (m) => {
        attempts.push(m.attempt);
        await sleep(2500); // two and a half leases long
      },
      { lease: 1000, pollInterval: 50 },
    );
    await eventually(() => attempts.length === 1, 5000, "the handler started");
    await sleep(1500);
    const [st] = await s.status(q);
    assert.equal(st?.inFlight, 1, "still leased");
    assert.equal(st?.ready, 0, "not redelivered");
    await eventually(async () => (await lag(q)) === 0, 5000, "completed");
    w.ac.abort();
    await w.run;
    assert.deepEqual(attempts, [1], "handled once, never redelivered");
    await s.dropQueue(q);
  });

  test("a NOTIFY wakes an idle worker long before its poll interval", async () => {
    const q = await newQueue();
    const got: number[] = [];
    const w = start<number>(q, (m) => {
      got.push(Date.now() - m.sentAt.getTime());
    }, { pollInterval: 30_000 });
    await sleep(1500); // past the hot period of the first empty receive
    await s.send(q, 1);
    await eventually(() => got.length === 1, 5000, "the message handled");
    assert.ok(got[0]! < 2000, `woken after ${got[0]} ms`);
    w.ac.abort();
    await w.run;
    await s.dropQueue(q);
  });

  test("the LISTEN connection is made again after it is killed", async () => {
    const q = await newQueue();
    const got: number[] = [];
    const w = start<number>(q, (m) => {
      got.push(Date.now() - m.sentAt.getTime());
    }, { pollInterval: 30_000 });
    const listening = async () =>
      Number(
        (
          await s.query(
            "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() AND query ~ '^LISTEN ' AND pid <> pg_backend_pid()",
            [],
          )
        )[0]?.n,
      );
    await eventually(async () => (await listening()) === 1, 5000, "the worker listening");
    await s.query(
      "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND query ~ '^LISTEN ' AND pid <> pg_backend_pid()",
      [],
    );
    await sleep(1500); // a new LISTEN connection, and past the hot period
    await s.send(q, 1);
    await eventually(() => got.length === 1, 5000, "the message handled");
    assert.ok(got[0]! < 2000, `woken after ${got[0]} ms`);
    assert.ok(w.errors.length >= 1, "the lost connection was reported to onError");
    w.ac.abort();
    await w.run;
    await s.dropQueue(q);
  });

  test("abort mid-handler: a running handler finishes and its message is acked", async () => {
    const q = await newQueue();
    await s.send(q, "x");
    let finished = false;
    let started = false;
    const w = start(q, async () => {
      started = true;
      await sleep(300);
      finished = true;
    }, { pollInterval: 50 });
    await eventually(() => started, 5000, "the handler started");
    w.ac.abort();
    await w.run;
    assert.ok(finished, "run resolved after the handler finished");
    assert.equal(await lag(q), 0, "acked before run resolved");
    await s.dropQueue(q);
  });

  test("abort mid-handler past the drain timeout: the message is given back and the handler's signal aborted", async () => {
    const q = await newQueue();
    const id = await s.send(q, "x");
    let started = false;
    let aborted = false;
    const w = start(
      q,
      async (_m, ctx) => {
        started = true;
        await new Promise<void>((resolve) => ctx.signal.addEventListener("abort", () => resolve(), { once: true }));
        aborted = true;
      },
      { pollInterval: 50, drainTimeout: 200, lease: 30_000 },
    );
    await eventually(() => started, 5000, "the handler started");
    const t0 = Date.now();
    w.ac.abort();
    await w.run;
    assert.ok(aborted);
    assert.ok(Date.now() - t0 < 5000);
    // Given back at once, not after its 30 s lease.
    const [m] = await s.receive(q);
    assert.equal(m?.id, id);
    assert.equal(m?.attempt, 2);
    await s.dropQueue(q);
  });

  // A durable ack that waits does not hold up the worker's receives: the
  // acker sends it beside them. Here the ack of the first message waits for
  // another transaction that completed it and has not ended (the ack's row
  // is in conflict with that one's); meanwhile the second message is
  // received and handled. (The fetch loop used to send the acks queued for
  // it before each receive, on its own: with one handler, it woke as the
  // slot came free, took the first message's receipt before the acker did
  // and waited there, and the second message stayed in the queue until the
  // other transaction ended.)
  test("a durable ack that waits does not hold up the receives", async () => {
    const q = await newQueue();
    const first = await s.send(q, 1);
    const blocker = await s.pool.connect();
    let open = false;
    try {
      await blocker.query("BEGIN");
      open = true;
      const handled: string[] = [];
      const w = start(
        q,
        async (m) => {
          if (m.id === first) {
            // Completed by the blocker first, in a transaction left open: the
            // worker's ack of it waits for that transaction.
            await blocker.query("SELECT sluice.ack($1, 'default', ARRAY[$2])", [q, m.receipt]);
            await s.send(q, 2);
          }
          handled.push(m.id);
        },
        { concurrency: 1, pollInterval: 20 },
      );
      await eventually(() => handled.length === 2, 5000, "the second message handled while the first one's ack waited");
      await blocker.query("ROLLBACK");
      open = false;
      await eventually(
        async () => {
          const [st] = await s.status(q);
          return st?.ready === 0 && st?.inFlight === 0 && st?.lag === 0;
        },
        10_000,
        "both messages acknowledged once the blocker ended",
      );
      w.ac.abort();
      await w.run;
      assert.deepEqual(w.errors, []);
    } finally {
      if (open) {
        await blocker.query("ROLLBACK").catch(() => {});
      }
      blocker.release();
    }
    await s.dropQueue(q);
  });

  // The next message of a key becomes receivable only once the ack of the
  // one before commits; the acker, which sends it beside the receives, then
  // wakes the fetch loop (here past its hot period, with a 30 s poll).
  test("a keyed message's durable ack wakes the worker for the key's next message", async () => {
    const q = await newQueue();
    await s.sendBatch(q, [
      { body: 0, key: "k" },
      { body: 1, key: "k" },
    ]);
    const gap = await nextOfKeyAfterFirst(q, {}, false);
    assert.ok(gap >= 0 && gap < 1000, `the next message handled ${gap} ms after its predecessor`);
    await s.dropQueue(q);
  });

  // With asyncCommitAcks a keyed message's ack rides on the next receive:
  // queueing it wakes the fetch loop (here past its hot period, with a 30 s
  // poll), whose receive acks it and takes the key's next message at once.
  test("with asyncCommitAcks a keyed message's ack wakes the worker for the key's next message", async () => {
    const q = await newQueue();
    await s.sendBatch(q, [
      { body: 0, key: "k" },
      { body: 1, key: "k" },
    ]);
    const gap = await nextOfKeyAfterFirst(q, { asyncCommitAcks: true }, false);
    assert.ok(gap >= 0 && gap < 1000, `the next message handled ${gap} ms after its predecessor`);
    assert.equal(await lag(q), 0, "both acknowledged");
    await s.dropQueue(q);
  });

  // A nack that dead-letters a keyed message (its last attempt) frees the
  // key's next message at once: the worker wakes for it (here past its hot
  // period, with a 30 s poll).
  test("a keyed message's dead-lettering nack wakes the worker for the key's next message", async () => {
    const q = await newQueue({ maxAttempts: 1 });
    const [firstId] = await s.sendBatch(q, [
      { body: 0, key: "k" },
      { body: 1, key: "k" },
    ]);
    const failures: HandlerFailure[] = [];
    const gap = await nextOfKeyAfterFirst(q, { onHandlerError: (f) => failures.push(f) }, true);
    assert.ok(gap >= 0 && gap < 1000, `the next message handled ${gap} ms after its predecessor's dead-lettering`);
    assert.deepEqual(
      failures.map((f) => [f.message.id, f.attempt, f.deadLettered]),
      [[firstId, 1, true]],
    );
    assert.equal((await s.deadLetters(q))[0]?.id, firstId);
    await s.dropQueue(q);
  });

  test("an unknown queue or a heartbeat not shorter than the lease rejects run", async () => {
    await assert.rejects(new Worker(s, uniqueName("none"), "default", () => {}).run(), QueueNotFoundError);
    const q = await newQueue();
    await assert.rejects(new Worker(s, q, "default", () => {}, { lease: 100, heartbeatInterval: 100 }).run(), InvalidArgumentError);
    await s.dropQueue(q);
  });
});
