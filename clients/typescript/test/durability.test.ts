// Acks are durable by default, in the client and the worker; asynchronous
// commit is an explicit opt-in (durable: false, asyncCommitAcks: true).

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { Sluice, Worker } from "sluicemq";

import { eventually, newSluice, uniqueName } from "./helpers.js";

let s: Sluice;
before(() => {
  s = newSluice();
});
after(async () => {
  await s.end();
});

/** synchronous_commit in the ack's transaction, after the ack. */
async function syncCommitAfterAck(q: string, durable?: boolean): Promise<string> {
  await s.send(q, 1);
  const [m] = await s.receive(q, "default");
  return s.inTx(async (tx) => {
    assert.equal(await s.ack(q, "default", [m!.receipt], durable === undefined ? { tx } : { tx, durable }), 1);
    const r = await tx.query("SELECT current_setting('synchronous_commit') AS v");
    return String(r.rows[0].v);
  });
}

describe("ack durability", { timeout: 60_000 }, () => {
  test("ack is durable unless asked", async () => {
    const q = uniqueName("tsd");
    await s.createQueue(q);
    assert.equal(await syncCommitAfterAck(q), "on");
    assert.equal(await syncCommitAfterAck(q, false), "off");
    await s.dropQueue(q);
  });

  for (const asyncCommitAcks of [false, true]) {
    test(`worker acks with asyncCommitAcks ${asyncCommitAcks}`, async () => {
      const q = uniqueName("tsd");
      await s.createQueue(q);
      const w = newSluice();
      const durable: boolean[] = [];
      let ride = 0;
      const ack = w.ack.bind(w);
      const receive = w.receive.bind(w);
      w.ack = (queue, group, receipts, opts) => {
        durable.push(opts?.durable ?? true);
        return ack(queue, group, receipts, opts);
      };
      w.receive = ((queue: string, group: string, opts?: Parameters<Sluice["receive"]>[2]) => {
        ride += opts?.ack?.length ?? 0;
        return receive(queue, group, opts);
      }) as Sluice["receive"];
      await s.sendBatch(q, Array.from({ length: 40 }, (_, i) => ({ body: i })));
      const ac = new AbortController();
      const run = new Worker(w, q, "default", () => {}, { concurrency: 4, asyncCommitAcks }).run(ac.signal);
      await eventually(async () => (await s.status(q))[0]?.lag === 0, 15_000, "every message completed");
      ac.abort();
      await run;
      await w.end();
      if (asyncCommitAcks) {
        assert.ok(!durable.includes(true), `durable ${durable}, ride ${ride}`);
      } else {
        assert.ok(durable.length > 0 && durable.every((d) => d) && ride === 0, `durable ${durable}, ride ${ride}`);
      }
      await s.dropQueue(q);
    });
  }
});
