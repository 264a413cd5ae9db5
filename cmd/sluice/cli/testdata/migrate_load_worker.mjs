// A TypeScript worker for TestMigrateUnderLoad
// (cmd/sluice/cli/migrate_load_test.go), on the compiled client:
//
//	DATABASE_URL=... node migrate_load_worker.mjs PATH/TO/dist/index.js QUEUE...
//
// Runs a Worker on group default of each QUEUE and prints "QUEUE ID" on
// stdout for each message its handler ran (the worker acks it when the
// handler returns). Prints "ready" once started; stops gracefully on
// SIGTERM. Every error the worker recovers from (onError: receive, ack,
// nack, extend) and every failed handler goes to stderr: the test wants
// none.

import { pathToFileURL } from "node:url";

const [lib, ...queues] = process.argv.slice(2);
const { Sluice, Worker } = await import(pathToFileURL(lib).href);
const c = new Sluice({ connectionString: process.env.DATABASE_URL });
const ac = new AbortController();
process.on("SIGTERM", () => ac.abort());
const runs = queues.map((q) =>
  new Worker(
    c,
    q,
    "default",
    (msg) => {
      process.stdout.write(`${q} ${msg.id}\n`);
    },
    {
      concurrency: 4,
      onError: (err, op) => console.error(`typescript worker error (${op}): ${err}`),
      onHandlerError: (f) => console.error(`typescript worker handler failed: ${f.error}`),
    },
  ).run(ac.signal),
);
console.log("ready");
try {
  await Promise.all(runs);
} finally {
  await c.end();
}
