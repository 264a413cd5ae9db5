// Measure the TypeScript client for `sluice-bench clients`
// (bench/internal/bench/clients.go), as clients/python/bench/bench.py does the
// Python client. After npm run build, from clients/typescript:
//
//	DATABASE_URL=postgres://... node build/bench/bench.js MODE QUEUE N
//
// MODE is one of
//
//	send    sendBatch of 100 messages, N/100 times (one producer)
//	drain   receive 100, then ack them, until N are done (one consumer)
//	worker  a Worker (concurrency 10) with a no-op handler, until N are handled
//
// The queue exists; for drain and worker it holds N messages. Prints one
// JSON line: {"mode": ..., "messages": N, "seconds": elapsed}, timing only
// the work (not node's start or the pool's).

import { Sluice, Worker } from "sluicemq";

const body = { pad: "x".repeat(60) };

async function send(c: Sluice, q: string, n: number): Promise<void> {
  const batch = Array.from({ length: 100 }, () => ({ body }));
  for (let i = 0; i < n / 100; i++) {
    await c.sendBatch(q, batch);
  }
}

async function drain(c: Sluice, q: string, n: number): Promise<void> {
  for (let done = 0; done < n; ) {
    const msgs = await c.receive(q, "default", { maxMessages: 100 });
    if (msgs.length > 0) {
      done += await c.ack(q, "default", msgs.map((m) => m.receipt));
    }
  }
}

async function worker(c: Sluice, q: string, n: number): Promise<void> {
  let count = 0;
  const ac = new AbortController();
  const handler = () => {
    if (++count >= n) {
      ac.abort();
    }
  };
  await new Worker(c, q, "default", handler, { concurrency: 10 }).run(ac.signal);
}

const modes: Record<string, (c: Sluice, q: string, n: number) => Promise<void>> = { send, drain, worker };

const [mode = "", q = "", count = ""] = process.argv.slice(2);
const n = Number(count);
const run = modes[mode];
if (!run || !q || !Number.isInteger(n) || n < 1) {
  console.error("usage: node build/bench/bench.js send|drain|worker QUEUE N (DATABASE_URL names the database)");
  process.exit(2);
}
const c = new Sluice({ connectionString: process.env.DATABASE_URL });
let seconds: number;
try {
  await c.status(q); // open a connection before timing
  const start = performance.now();
  await run(c, q, n);
  seconds = (performance.now() - start) / 1000;
} finally {
  await c.end();
}
console.log(JSON.stringify({ mode, messages: n, seconds }));
