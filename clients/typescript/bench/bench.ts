// Throughput of the TypeScript client, printed as JSON on stdout, for
// `sluice bench` to drive beside the Go library (issue 14):
//
//	send    producers sending batches of --batch (sendBatch, one transaction each) for --duration s
//	drain   --messages preloaded, consumers receiving batches of --batch then acking them
//	worker  --messages preloaded, a Worker with a no-op handler (concurrency --concurrency)
//
// Usage (from clients/typescript, after npm run build):
//
//	DATABASE_URL=postgres://... node build/bench/bench.js [--scenarios send,drain,worker]
//	    [--duration 5] [--messages 20000] [--batch 100] [--producers 1] [--consumers 1] [--concurrency 100]
//
// Each result: {"scenario", "batch", ..., "messages", "seconds", "msg_per_s"}. The queue
// (bench_ts_<random>) is dropped at the end.

import { randomBytes } from "node:crypto";
import { parseArgs } from "node:util";

import { Sluice, Worker } from "sluice";

const { values } = parseArgs({
  options: {
    scenarios: { type: "string", default: "send,drain,worker" },
    duration: { type: "string", default: "5" },
    messages: { type: "string", default: "20000" },
    batch: { type: "string", default: "100" },
    producers: { type: "string", default: "1" },
    consumers: { type: "string", default: "1" },
    concurrency: { type: "string", default: "100" },
  },
});
const duration = Number(values.duration) * 1000;
const messages = Number(values.messages);
const batch = Number(values.batch);
const producers = Number(values.producers);
const consumers = Number(values.consumers);
const concurrency = Number(values.concurrency);

// About 100 bytes of JSON, as the Go bench sends.
const body = (i: number) => ({ i, pad: "x".repeat(80) });

interface Result {
  scenario: string;
  [param: string]: number | string;
  messages: number;
  seconds: number;
  msg_per_s: number;
}

const sluice = new Sluice({ connectionString: process.env.DATABASE_URL, max: Math.max(producers, consumers) + 4 });

async function withQueue<T>(fn: (q: string) => Promise<T>): Promise<T> {
  const q = `bench_ts_${randomBytes(4).toString("hex")}`;
  await sluice.createQueue(q);
  try {
    return await fn(q);
  } finally {
    await sluice.dropQueue(q);
  }
}

async function preload(q: string, n: number): Promise<void> {
  for (let sent = 0; sent < n; sent += 1000) {
    const size = Math.min(1000, n - sent);
    await sluice.sendBatch(q, Array.from({ length: size }, (_, i) => ({ body: body(sent + i) })));
  }
}

const result = (scenario: string, params: Record<string, number>, count: number, ms: number): Result => ({
  scenario,
  ...params,
  messages: count,
  seconds: ms / 1000,
  msg_per_s: Math.round(count / (ms / 1000)),
});

function send(): Promise<Result> {
  return withQueue(async (q) => {
    const msgs = Array.from({ length: batch }, (_, i) => ({ body: body(i) }));
    let count = 0;
    const t0 = performance.now();
    const deadline = t0 + duration;
    await Promise.all(
      Array.from({ length: producers }, async () => {
        while (performance.now() < deadline) {
          await sluice.sendBatch(q, msgs);
          count += batch;
        }
      }),
    );
    return result("send", { batch, producers }, count, performance.now() - t0);
  });
}

function drain(): Promise<Result> {
  return withQueue(async (q) => {
    await preload(q, messages);
    let count = 0;
    const t0 = performance.now();
    const deadline = t0 + 10 * duration;
    await Promise.all(
      Array.from({ length: consumers }, async () => {
        while (count < messages && performance.now() < deadline) {
          const got = await sluice.receive(q, "default", { maxMessages: batch });
          if (got.length > 0) {
            await sluice.ack(q, "default", got.map((m) => m.receipt));
            count += got.length;
          }
        }
      }),
    );
    return result("drain", { batch, consumers }, count, performance.now() - t0);
  });
}

function worker(): Promise<Result> {
  return withQueue(async (q) => {
    await preload(q, messages);
    let count = 0;
    const ac = new AbortController();
    const t0 = performance.now();
    const deadline = setTimeout(() => ac.abort(), 10 * duration);
    await new Worker(
      sluice,
      q,
      "default",
      () => {
        if (++count >= messages) {
          ac.abort();
        }
      },
      { concurrency, batchSize: batch, pollInterval: 50 },
    ).run(ac.signal);
    clearTimeout(deadline);
    return result("worker", { batch: Math.min(batch, concurrency), concurrency }, count, performance.now() - t0);
  });
}

const scenarios: Record<string, () => Promise<Result>> = { send, drain, worker };
const results: Result[] = [];
try {
  for (const name of values.scenarios.split(",")) {
    const run = scenarios[name.trim()];
    if (!run) {
      throw new Error(`unknown scenario ${name} (send, drain, worker)`);
    }
    results.push(await run());
  }
} finally {
  await sluice.end();
}
console.log(JSON.stringify({ client: "typescript", node: process.version, results }, null, 2));
