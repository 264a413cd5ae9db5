// int8 stays exact: ids and positions past 2^53 cross the client as
// decimal strings, every digit kept, both ways.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { Sluice } from "sluicemq";

import { newSluice, uniqueName } from "./helpers.js";

let s: Sluice;
before(() => {
  s = newSluice(4);
});
after(async () => {
  await s.end();
});

// 2^53 + 1 is the first integer a number cannot hold: Number("9007199254740993") is ...992.
const big = 2n ** 53n;

test("ids past 2^53 are exact in send, receive, peek, leases, dead letters and redrive", async () => {
  const q = uniqueName("int8");
  await s.createQueue(q, { lanes: 1, maxAttempts: 1 });
  try {
    // The queue's id sequence goes past 2^53: the next id is 2^53 + 1.
    await s.query("SELECT setval(id_seq, $1::bigint) FROM sluice.queue WHERE name = $2", [big.toString(), q]);
    const id = await s.send(q, "first");
    assert.equal(id, (big + 1n).toString());
    const ids = await s.sendBatch(q, [{ body: "second" }, { body: "third" }]);
    assert.deepEqual(ids, [(big + 2n).toString(), (big + 3n).toString()]);

    const peeked = await s.peek(q, { afterId: id });
    assert.deepEqual(peeked.map((m) => m.id), ids);

    const [m] = await s.receive(q, "default");
    assert.ok(m);
    assert.equal(m.id, id);
    assert.match(m.pos, /^\d+$/);
    const [l] = await s.leases(q, { group: "default" });
    assert.equal(l?.id, id);
    assert.equal(l?.pos, m.pos);
    const [st] = await s.status(q);
    assert.equal(st?.cursor, m.pos);

    // max_attempts 1: the nack dead-letters it, and redrive finds it by its exact id.
    assert.equal(await s.nack(q, "default", m.receipt, { error: "boom" }), true);
    const [d] = await s.deadLetters(q);
    assert.equal(d?.id, id);
    assert.match(d?.deadLetterId ?? "", /^\d+$/);
    // An id off by one (what a number would have made of it) redrives nothing.
    assert.equal(await s.redrive(q, { ids: [big.toString()] }), 0);
    assert.equal(await s.redrive(q, { ids: [id] }), 1);
    // The redriven message comes after the others (a redrive is sent again).
    const again = await s.receive(q, "default", { maxMessages: 10 });
    assert.deepEqual(again.map((r) => r.id), [...ids, id]);
  } finally {
    await s.dropQueue(q);
  }
});
