// QueueOptions against the table of the engine's options
// (test/queue_options.json). The conformance vectors option_<name>.json run
// each option through createQueue, listQueues and alterQueue; these tests
// pin the typed form itself: one key per option of the engine (the type of
// queueOptionNames makes the compiler hold it to QueueOptions' keys),
// undefined unset and 0 a value.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";

import { InvalidOptionError, queueOptionNames, Sluice, type QueueOptions } from "sluicemq";

import { newSluice, uniqueName } from "./helpers.js";

// This file runs from clients/typescript/build/test/.
const tablePath = fileURLToPath(new URL("../../../../test/queue_options.json", import.meta.url));
const table = JSON.parse(readFileSync(tablePath, "utf8")) as { options: { name: string; kind: string }[] };

test("one QueueOptions key per option of the engine", () => {
  const client = Object.values(queueOptionNames)
    .map(([name, kind]) => `${name}:${kind}`)
    .sort();
  const engine = table.options.map((o) => `${o.name}:${o.kind}`).sort();
  assert.deepEqual(client, engine, "queueOptionNames (name:kind) differ from test/queue_options.json");
});

describe("typed queue options", () => {
  let s: Sluice;
  before(() => {
    s = newSluice(2);
  });
  after(async () => {
    await s.end();
  });

  const optionsOf = async (q: string): Promise<QueueOptions | undefined> =>
    (await s.listQueues()).find((i) => i.queue === q)?.options;

  test("unset is not zero", async () => {
    const q = uniqueName("tsopt");
    await s.createQueue(q, { retention: 0, backoffBase: 0, maxAttempts: undefined, maxDelay: 1500 });
    try {
      const before = await optionsOf(q);
      assert.equal(before?.retention, 0);
      assert.equal(before?.backoffBase, 0);
      assert.equal(before?.maxAttempts, 5); // unset: the engine's default
      assert.equal(before?.maxDelay, 1500);
      assert.equal(before?.engine, 2); // the default
      assert.deepEqual(await s.alterQueue(q, {}), before);
      const after = await s.alterQueue(q, { dedupWindow: 2.5, notify: false });
      assert.deepEqual(after, { ...before, dedupWindow: 2.5, notify: false });
      assert.deepEqual(Object.keys(after).sort(), Object.keys(queueOptionNames).sort(), "every option set when read back");
      await assert.rejects(s.alterQueue(q, { maxAttempts: 7, lease: 0 }), InvalidOptionError);
      await assert.rejects(s.alterQueue(q, { defaultGroup: false }), InvalidOptionError);
      assert.deepEqual(await optionsOf(q), after, "a refused alter changes nothing");
    } finally {
      await s.dropQueue(q);
    }
  });
});
