// The client's calls against a real PostgreSQL: results, bad input with
// its SL code (and nothing changed), transactions.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import {
  GroupExistsError,
  GroupNotFoundError,
  InvalidArgumentError,
  InvalidIsolationError,
  InvalidNameError,
  InvalidOptionError,
  InvalidReceiptError,
  JSONTooDeepError,
  type JSONValue,
  PayloadTooLargeError,
  QueueExistsError,
  QueueNotFoundError,
  SchemaMissingError,
  Sluice,
  SluiceError,
} from "sluicemq";

import { databaseURL, newSluice, uniqueName } from "./helpers.js";

let s: Sluice;
before(() => {
  s = newSluice();
});
after(async () => {
  await s.end();
});

async function withQueue(fn: (q: string) => Promise<void>, options: Parameters<Sluice["createQueue"]>[1] = { lanes: 1 }): Promise<void> {
  const q = uniqueName("ts");
  await s.createQueue(q, options);
  try {
    await fn(q);
  } finally {
    await s.dropQueue(q);
  }
}

describe("calls", () => {
  test("send, receive, ack, status", () =>
    withQueue(async (q) => {
      const id = await s.send(q, { order: 42 }, { headers: { trace: "t" }, key: "k", priority: 3 });
      const ids = await s.sendBatch(q, [{ body: [1, 2] }, { body: "two", key: "k2", headers: { h: 1 } }]);
      assert.equal(ids.length, 2);
      assert.ok(BigInt(ids[0]!) > BigInt(id) && BigInt(ids[1]!) > BigInt(ids[0]!));
      const msgs = await s.receive<unknown>(q, "default", { maxMessages: 10, consumer: "test" });
      assert.deepEqual(
        msgs.map((m) => [m.id, m.body, m.headers, m.key, m.attempt]),
        [
          [id, { order: 42 }, { trace: "t" }, "k", 1],
          [ids[0], [1, 2], null, null, 1],
          [ids[1], "two", { h: 1 }, "k2", 1],
        ],
      );
      for (const m of msgs) {
        assert.ok(m.sentAt instanceof Date && m.leaseExpiresAt instanceof Date);
        assert.equal(typeof m.receipt, "string");
        assert.match(m.id, /^\d+$/);
        assert.match(m.pos, /^\d+$/);
      }
      const [st] = await s.status(q);
      assert.equal(st?.inFlight, 3);
      assert.equal(st?.groupName, "default");
      assert.equal(await s.ack(q, "default", msgs.map((m) => m.receipt)), 3);
      assert.equal(await s.ack(q, "default", [msgs[0]!.receipt]), 0, "a stale receipt is not counted");
      const [after] = await s.status(q);
      assert.equal(after?.inFlight, 0);
      assert.equal(after?.lag, 0);
    }));

  test("nack, extend, dead letters, redrive", () =>
    withQueue(
      async (q) => {
        const id = await s.send(q, "job");
        const [m] = await s.receive(q, "default", { lease: 5000 });
        assert.equal(await s.extend(q, "default", [m!.receipt], 60_000), 1);
        assert.equal(await s.nack(q, "default", m!.receipt, { error: "boom", delay: 0 }), true);
        assert.equal(await s.nack(q, "default", m!.receipt, { error: "again" }), false, "stale");
        const dead = await s.deadLetters(q, { group: "default" });
        assert.equal(dead.length, 1);
        assert.equal(dead[0]?.id, id);
        assert.equal(dead[0]?.error, "boom");
        assert.equal(dead[0]?.attempts, 1);
        assert.ok(dead[0]?.diedAt instanceof Date);
        assert.equal(await s.redrive(q, { ids: [id] }), 1);
        const [again] = await s.receive(q);
        assert.equal(again?.id, id);
        assert.equal(again?.attempt, 1);
      },
      { lanes: 1, maxAttempts: 1 },
    ));

  test("peek and leases: rows typed, in the caller's transaction too", () =>
    withQueue(async (q) => {
      const first = await s.send(q, { n: 1 }, { headers: { h: "v" }, key: "k" });
      const later = await s.send(q, { n: 2 }, { delay: 3_600_000 });
      const [p1, p2] = await s.inTx((tx) => s.peek<{ n: number }>(q, { tx }));
      assert.equal(p1?.id, first);
      assert.equal(p1?.body.n, 1);
      assert.deepEqual(p1?.headers, { h: "v" });
      assert.equal(p1?.key, "k");
      assert.ok(p1?.sentAt instanceof Date);
      assert.equal(p1?.deliverAt, null);
      assert.equal(p1?.resentTo, null);
      assert.equal(p2?.id, later);
      assert.ok(p2?.deliverAt instanceof Date && p2.deliverAt.getTime() > p2.sentAt.getTime() + 3_500_000);
      assert.deepEqual((await s.peek(q, { maxMessages: 1, afterId: first })).map((m) => m.id), [later]);
      const [m] = await s.receive(q, "default", { consumer: "tests", lease: 60_000 });
      const [lease, ...rest] = await s.leases(q, { group: "default" });
      assert.equal(rest.length, 0);
      assert.equal(lease?.groupName, "default");
      assert.equal(lease?.id, m?.id);
      assert.equal(lease?.pos, m?.pos);
      assert.equal(lease?.attempt, 1);
      assert.equal(lease?.consumer, "tests");
      assert.ok(lease?.deliveredAt instanceof Date);
      assert.equal(lease?.leaseExpiresAt.getTime(), m?.leaseExpiresAt.getTime());
      await assert.rejects(s.peek(q, { maxMessages: 0 }), InvalidArgumentError);
      await assert.rejects(s.leases(q, { group: "nobody" }), GroupNotFoundError);
      assert.equal(await s.ack(q, "default", [m!.receipt]), 1);
      assert.deepEqual(await s.leases(q), []);
    }));

  test("queue and group admin", async () => {
    const q = uniqueName("ts");
    await s.createQueue(q, { lease: 1500, maxAttempts: 4, defaultGroup: false });
    try {
      const info = (await s.listQueues()).find((i) => i.queue === q);
      assert.deepEqual(info?.groups, []);
      assert.equal(info?.options.maxAttempts, 4);
      assert.equal(info?.options.lease, 1500);
      assert.equal(info?.rawOptions.max_attempts, 4);
      assert.equal(await s.queueLease(q), 1500);
      await s.createGroup(q, "a");
      await s.createGroup(q, "b", { startFrom: new Date() });
      await s.send(q, 1);
      const opts = await s.alterQueue(q, { maxAttempts: 9, backoffBase: 250 });
      assert.equal(opts.maxAttempts, 9);
      assert.equal(opts.backoffBase, 250);
      assert.equal((await s.status(q)).length, 2);
      assert.equal(await s.purgeQueue(q), 1);
      await s.send(q, 2);
      const got = await s.receive(q, "a");
      assert.equal(got.length, 1);
      assert.equal(await s.ack(q, "a", [got[0]!.receipt]), 1);
      await s.seekGroup(q, "a", new Date(Date.now() - 3600_000));
      assert.deepEqual((await s.receive(q, "a")).map((x) => x.id), [got[0]!.id]);
      await s.seekGroup(q, "a", "latest");
      assert.deepEqual(await s.receive(q, "a"), []);
      await assert.rejects(s.seekGroup(q, "nobody", "earliest"), GroupNotFoundError);
      assert.equal(await s.dropGroup(q, "b"), true);
      assert.equal(await s.dropGroup(q, "b"), false);
      assert.match(await s.version(), /^\d+\.\d+/);
      assert.ok(Array.isArray(await s.maintain()));
    } finally {
      assert.equal(await s.dropQueue(q), true);
    }
    assert.equal(await s.dropQueue(q), false);
  });

  test("messages iterator ends on abort", () =>
    withQueue(async (q) => {
      await s.sendBatch(q, [{ body: 1 }, { body: 2 }, { body: 3 }]);
      const ac = new AbortController();
      const seen: number[] = [];
      for await (const m of s.messages<number>(q, "default", { signal: ac.signal, batchSize: 2, pollInterval: 20 })) {
        seen.push(m.body);
        await s.ack(q, "default", [m.receipt]);
        if (seen.length === 3) {
          ac.abort();
        }
      }
      assert.deepEqual(seen, [1, 2, 3]);
    }));
});

describe("prepared statements", () => {
  // (pools of one connection: pg_prepared_statements is per connection)
  async function preparedOn(t: Sluice): Promise<string[]> {
    const res = await t.pool.query("SELECT name FROM pg_prepared_statements WHERE name LIKE 'sluice\\_%'");
    return res.rows.map((r: { name: string }) => r.name.replace(/_[0-9a-f]{8}$/, "")).sort();
  }

  test("the hot calls are prepared once per connection; admin calls are not", async () => {
    const t = new Sluice({ connectionString: databaseURL(), max: 1 });
    const q = uniqueName("tsprep");
    try {
      await t.createQueue(q, { lanes: 1 });
      for (let i = 0; i < 3; i++) {
        await t.send(q, { i });
        const [m] = await t.receive(q);
        assert.ok(m, "a message");
        assert.equal(await t.ack(q, "default", [m.receipt]), 1);
      }
      await t.sendBatch(q, [{ body: 1 }]);
      const [m] = await t.receive(q);
      assert.equal(await t.extend(q, "default", [m!.receipt], 5000), 1);
      assert.equal(await t.nack(q, "default", m!.receipt), true);
      await t.status(q);
      assert.deepEqual(await preparedOn(t), [
        "sluice_ack",
        "sluice_extend",
        "sluice_nack",
        "sluice_receive",
        "sluice_send",
        "sluice_sendBatch",
      ]);
      await t.dropQueue(q);
    } finally {
      await t.end();
    }
  });

  test("prepare: false prepares nothing; a caller's transaction uses the names too", async () => {
    const off = new Sluice({ connectionString: databaseURL(), max: 1, prepare: false });
    const q = uniqueName("tsprep");
    try {
      await off.createQueue(q, { lanes: 1 });
      await off.send(q, {});
      const [m] = await off.receive(q);
      assert.equal(await off.ack(q, "default", [m!.receipt]), 1);
      assert.deepEqual(await preparedOn(off), []);
    } finally {
      await off.end();
    }
    const on = new Sluice({ connectionString: databaseURL(), max: 1 });
    try {
      await on.inTx(async (tx) => {
        await on.send(q, { in: "tx" }, { tx });
      });
      assert.deepEqual(await preparedOn(on), ["sluice_send"]);
      await on.dropQueue(q);
    } finally {
      await on.end();
    }
  });
});

describe("bad input", () => {
  // Each case: the call, the class and code it must throw.
  test("every SL code maps to its class, and nothing changes", () =>
    withQueue(
      async (q) => {
        const id = await s.send(q, "kept");
        const [m] = await s.receive(q);
        const cases: [string, () => Promise<unknown>, new (...a: never[]) => SluiceError, string][] = [
          ["bad name", () => s.createQueue("bad name!"), InvalidNameError, "SL001"],
          ["unknown queue", () => s.send(uniqueName("none"), 1), QueueNotFoundError, "SL002"],
          ["unknown group", () => s.receive(q, "nope"), GroupNotFoundError, "SL003"],
          ["duplicate queue", () => s.createQueue(q), QueueExistsError, "SL004"],
          ["duplicate group", () => s.createGroup(q, "default"), GroupExistsError, "SL005"],
          ["null body", () => s.send(q, null), InvalidArgumentError, "SL006"],
          ["undefined body", () => s.send(q, undefined), InvalidArgumentError, "SL006"],
          ["negative delay", () => s.send(q, 1, { delay: -5 }), InvalidArgumentError, "SL006"],
          ["zero max", () => s.receive(q, "default", { maxMessages: 0 }), InvalidArgumentError, "SL006"],
          ["zero lease", () => s.extend(q, "default", [m!.receipt], 0), InvalidArgumentError, "SL006"],
          ["unknown option", () => s.createQueue(uniqueName("x"), { bogus: 1 } as never), InvalidOptionError, "SL007"],
          ["bad option", () => s.alterQueue(q, { maxAttempts: -1 }), InvalidOptionError, "SL007"],
          ["bad receipt", () => s.ack(q, "default", ["garbage"]), InvalidReceiptError, "SL008"],
          ["too large", () => s.send(q, "x".repeat(200)), PayloadTooLargeError, "SL009"],
        ];
        for (const [what, fn, cls, code] of cases) {
          await assert.rejects(fn, (err: unknown) => {
            assert.ok(err instanceof cls, `${what}: ${String(err)} is not a ${cls.name}`);
            assert.ok(err instanceof SluiceError);
            assert.equal(err.code, code, what);
            assert.ok(err.message.length > 0);
            assert.ok(err.cause, "the driver's error is the cause");
            return true;
          });
        }
        const [st] = await s.status(q);
        assert.equal(st?.inFlight, 1);
        assert.equal(st?.ready, 0);
        assert.equal(await s.ack(q, "default", [m!.receipt]), 1);
        assert.equal(m?.id, id);
      },
      { lanes: 1, maxPayload: 100 },
    ));

  test("receive outside READ COMMITTED is SL010", () =>
    withQueue(async (q) => {
      const client = await s.pool.connect();
      try {
        await client.query("BEGIN ISOLATION LEVEL REPEATABLE READ");
        await assert.rejects(s.receive(q, "default", { tx: client }), InvalidIsolationError);
        await client.query("ROLLBACK");
      } finally {
        client.release();
      }
    }));

  test("JSON nested deeper than 512 levels is SL012", () =>
    withQueue(async (q) => {
      let deep: JSONValue = [];
      for (let i = 0; i < 600; i++) deep = [deep];
      await assert.rejects(s.send(q, deep), JSONTooDeepError);
      assert.deepEqual(await s.receive(q, "default", { maxMessages: 10 }), []);
    }));

  test("other errors pass unchanged; a missing function is SchemaMissingError", async () => {
    await assert.rejects(s.query("SELECT sluice.no_such_function()", []), SchemaMissingError);
    await assert.rejects(s.query("SELEC 1", []), (err: unknown) => !(err instanceof SluiceError) && (err as { code?: string }).code === "42601");
  });
});

describe("transactions", () => {
  test("a send rolled back is never delivered; one committed is", () =>
    withQueue(async (q) => {
      await assert.rejects(
        s.inTx(async (tx) => {
          await s.send(q, "rolled back", { tx });
          throw new Error("application failure");
        }),
        /application failure/,
      );
      const id = await s.inTx(async (tx) => s.send(q, "committed", { tx }));
      const msgs = await s.receive(q, "default", { maxMessages: 10 });
      assert.deepEqual(msgs.map((m) => [m.id, m.body]), [[id, "committed"]]);
    }));

  test("an ack rolled back with the caller's transaction: the message is redelivered", () =>
    withQueue(async (q) => {
      const id = await s.send(q, "work");
      const [m] = await s.receive(q, "default", { lease: 500 });
      const client = await s.pool.connect();
      try {
        await client.query("BEGIN");
        assert.equal(await s.ack(q, "default", [m!.receipt], { tx: client }), 1);
        await s.send(q, "follow-up", { tx: client });
        await client.query("ROLLBACK");
      } finally {
        client.release();
      }
      await new Promise((r) => setTimeout(r, 700));
      const again = await s.receive(q, "default", { maxMessages: 10 });
      assert.deepEqual(again.map((x) => [x.id, x.attempt]), [[id, 2]], "redelivered after the lease, and the follow-up never sent");
      // Now ack it in a committed transaction, with a follow-up send.
      const next = await s.inTx(async (tx) => {
        assert.equal(await s.ack(q, "default", [again[0]!.receipt], { tx }), 1);
        return s.send(q, "follow-up", { tx });
      });
      const [f] = await s.receive(q);
      assert.equal(f?.id, next);
      assert.equal(await s.ack(q, "default", [f!.receipt]), 1);
      assert.equal((await s.status(q))[0]?.lag, 0);
    }));
});

describe("without a database", () => {
  test("queue options: camelCase to the engine's names, durations in ms as intervals, unknown keys kept", async () => {
    const { queueOptionsJSON } = await import("sluicemq");
    assert.deepEqual(queueOptionsJSON({ maxAttempts: 3, lease: 1500, dedupWindow: 0.5, maxDelay: 0, notify: false, defaultGroup: false, lanes: 1 }), {
      max_attempts: 3,
      lease: "1500 milliseconds",
      dedup_window: "0.5 milliseconds",
      max_delay: "0 milliseconds",
      notify: false,
      default_group: false,
      lanes: 1,
    });
    assert.deepEqual(queueOptionsJSON({ bogus: 1 } as never), { bogus: 1 });
    assert.deepEqual(queueOptionsJSON(undefined), {});
  });

  test("a handler's error text: the message, cut to what nack accepts", async () => {
    const { errorText } = await import("sluicemq");
    assert.equal(errorText(new Error("boom")), "boom");
    assert.equal(errorText("plain"), "plain");
    assert.equal(errorText(new TypeError("")), "TypeError");
    assert.equal(errorText(new Error("x".repeat(20_000))).length, 10_000);
  });
});
