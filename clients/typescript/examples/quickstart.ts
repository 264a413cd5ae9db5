// A producer and a consumer in one process: the five-minute tour of
// docs/typescript.md. Run it from clients/typescript after npm run build:
//
//	DATABASE_URL=postgres://... node build/examples/quickstart.js
//
// It creates the queue "quickstart" if needed, sends ten orders, handles
// them with a worker, and stops on Ctrl-C (or after five seconds).

import { QueueExistsError, Sluice } from "sluicemq";

interface Order {
  order_id: number;
}

const sluice = new Sluice({ connectionString: process.env.DATABASE_URL });
try {
  await sluice.createQueue("quickstart", { lease: 30_000, maxAttempts: 5 });
} catch (err) {
  if (!(err instanceof QueueExistsError)) {
    throw err;
  }
}

await sluice.sendBatch(
  "quickstart",
  Array.from({ length: 10 }, (_, i) => ({ body: { order_id: i }, key: `customer-${i % 3}` })),
);

const ac = new AbortController();
process.once("SIGINT", () => ac.abort());
setTimeout(() => ac.abort(), 5000).unref();

await sluice.consume<Order>(
  "quickstart",
  "default",
  async (msg) => {
    console.log(`order ${msg.body.order_id} (key ${msg.key}, attempt ${msg.attempt})`);
  },
  { concurrency: 4, signal: ac.signal },
);
console.log(await sluice.status("quickstart"));
await sluice.end();
