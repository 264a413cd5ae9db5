// The conformance runner: every test/conformance/*.json vector of the
// repository (format: test/conformance/README.md) runs through the public
// API of the client, one sub-test per file. SLUICE_CONFORMANCE_DIR
// overrides the directory.

import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";

import {
  queueOptionNames,
  sql,
  Sluice,
  SluiceError,
  type BatchMessage,
  type DeadLetter,
  type Lease,
  type Message,
  type PeekedMessage,
  type QueueOptions,
  type QueueStatus,
} from "sluicemq";

import { newSluice, uniqueName } from "./helpers.js";

// This file runs from clients/typescript/build/test/.
const repoDir = fileURLToPath(new URL("../../../../test/conformance/", import.meta.url));
const dir = process.env.SLUICE_CONFORMANCE_DIR ?? repoDir;

type JSONish = unknown;
type Args = Record<string, JSONish>;

interface Step {
  call: string;
  args?: Args;
  save?: string;
  expect?: { result?: JSONish; count?: number; match?: JSONish[]; contains?: JSONish };
  expect_error?: string;
}

interface Vector {
  name: string;
  description: string;
  steps: Step[];
}

function vectors(): Vector[] {
  if (!existsSync(dir)) {
    return [];
  }
  return readdirSync(dir)
    .filter((f) => f.endsWith(".json"))
    .sort()
    .map((f) => JSON.parse(readFileSync(join(dir, f), "utf8")) as Vector);
}

/** Replaces "$queue", "$queue_x" and "$saved.path" strings (whole strings only). */
function substitute(v: JSONish, queue: string, saved: Map<string, JSONish>): JSONish {
  if (typeof v === "string" && v.startsWith("$")) {
    if (v === "$queue") {
      return queue;
    }
    if (v.startsWith("$queue_")) {
      return queue + v.slice("$queue".length);
    }
    const [name, ...path] = v.slice(1).split(".");
    if (name === undefined || !saved.has(name)) {
      throw new Error(`no saved result named ${name}`);
    }
    let out: JSONish = saved.get(name);
    for (const seg of path) {
      out = (out as Record<string, JSONish>)[seg];
    }
    return out;
  }
  if (Array.isArray(v)) {
    return v.map((e) => substitute(e, queue, saved));
  }
  if (v !== null && typeof v === "object") {
    return Object.fromEntries(Object.entries(v).map(([k, e]) => [k, substitute(e, queue, saved)]));
  }
  return v;
}

// Durations in vectors are seconds; the client takes milliseconds.
const ms = (s: JSONish): number | null | undefined => (typeof s === "number" ? s * 1000 : (s as null | undefined));

// The table of the engine's queue options (test/queue_options.json).
const table = JSON.parse(readFileSync(join(repoDir, "..", "queue_options.json"), "utf8")) as {
  options: { name: string; kind: string }[];
};
const kinds = new Map(table.options.map((o) => [o.name, o.kind]));
// The client's keys by engine name.
const clientKeys = new Map(Object.entries(queueOptionNames).map(([k, [name, kind]]) => [name, [k, kind] as const]));

/**
 * A vector's options (engine names, durations in s) as QueueOptions, each
 * option of the table through the client's key. What the typed form cannot
 * carry on purpose (a name the engine does not know, a value of the wrong
 * kind: bad-input vectors) passes as it is, for the engine to reject. An
 * option of the table the client has no key for fails: the client misses it.
 */
function queueOptions(o: JSONish): Record<string, unknown> | undefined {
  if (o === undefined || o === null) {
    return undefined;
  }
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(o as Args)) {
    const kind = kinds.get(k);
    const key = clientKeys.get(k);
    if (kind === undefined) {
      out[k] = v; // unknown: the engine rejects it
      continue;
    }
    assert.ok(key !== undefined && key[1] === kind, `QueueOptions has no ${kind} key for the engine's option ${k}`);
    out[key[0]] = kind === "duration" && typeof v === "number" ? v * 1000 : v;
  }
  return out;
}

/** Typed options as the vectors hold them: engine names, durations in s. */
function optionsJSON(o: QueueOptions): JSONish {
  const out: Record<string, JSONish> = {};
  for (const [k, v] of Object.entries(o)) {
    const [name, kind] = queueOptionNames[k as keyof QueueOptions];
    out[name] = kind === "duration" ? (v as number) / 1000 : v;
  }
  return out;
}

const iso = (d: unknown) => (d instanceof Date ? d.toISOString() : d);

const messageRow = (m: Message) => ({
  id: m.id,
  body: m.body,
  headers: m.headers,
  key: m.key,
  priority: m.priority,
  attempt: m.attempt,
  sent_at: iso(m.sentAt),
  receipt: m.receipt,
  lease_expires_at: iso(m.leaseExpiresAt),
  pos: m.pos,
});

const statusRow = (s: QueueStatus) => ({
  queue: s.queue,
  group_name: s.groupName,
  ready: s.ready,
  delayed: s.delayed,
  in_flight: s.inFlight,
  dead: s.dead,
  oldest_pending_age: s.oldestPendingAge === null ? null : s.oldestPendingAge / 1000,
  lag: s.lag,
  cursor: s.cursor,
  lwm: s.lwm,
  head: s.head,
  live_epochs: s.liveEpochs,
  holds_reclaim: s.holdsReclaim,
  waiting: s.waiting,
  estimated: s.estimated,
  dead_lettered: s.deadLettered,
});

const deadLetterRow = (d: DeadLetter) => ({
  id: d.id,
  group_name: d.groupName,
  body: d.body,
  headers: d.headers,
  key: d.key,
  attempts: d.attempts,
  error: d.error,
  died_at: iso(d.diedAt),
  sent_at: iso(d.sentAt),
  dead_letter_id: d.deadLetterId,
});

const peekedRow = (m: PeekedMessage) => ({
  id: m.id,
  body: m.body,
  headers: m.headers,
  key: m.key,
  priority: m.priority,
  sent_at: iso(m.sentAt),
  deliver_at: m.deliverAt === null ? null : iso(m.deliverAt),
  resent_to: m.resentTo,
});

const leaseRow = (l: Lease) => ({
  group_name: l.groupName,
  id: l.id,
  pos: l.pos,
  attempt: l.attempt,
  consumer: l.consumer,
  delivered_at: iso(l.deliveredAt),
  lease_expires_at: iso(l.leaseExpiresAt),
});

/* eslint-disable @typescript-eslint/no-explicit-any */
type Any = any;

// sendBatch takes one object per message; a vector whose per-message arrays
// differ in length from bodies (bad input the typed API cannot express)
// goes through the client's raw-SQL escape hatch (Sluice.query with the
// client's own statement).
async function sendBatch(s: Sluice, a: Args): Promise<string[]> {
  const bodies = a.bodies as Any[] | null;
  const cols = ["headers", "keys", "priorities", "dedup_keys"] as const;
  const aligned = bodies !== null && cols.every((c) => a[c] === undefined || a[c] === null || (a[c] as Any[]).length === bodies.length);
  if (aligned && bodies !== null) {
    const col = (c: (typeof cols)[number], i: number) => (a[c] == null ? undefined : (a[c] as Any[])[i]);
    const msgs: BatchMessage[] = bodies.map((body, i) => ({
      body,
      headers: col("headers", i),
      key: col("keys", i),
      priority: col("priorities", i),
      dedupKey: col("dedup_keys", i),
    }));
    return s.sendBatch(a.queue as string, msgs, { delay: ms(a.delay) ?? null });
  }
  const text = (xs: unknown) => (xs == null ? null : (xs as Any[]).map((x) => (x === null ? null : JSON.stringify(x))));
  const rows = await s.query(sql.sendBatch, [
    a.queue,
    text(bodies),
    text(a.headers),
    a.keys ?? null,
    ms(a.delay) ?? null,
    a.priorities ?? null,
    a.dedup_keys ?? null,
  ]);
  return rows.map((r) => String(r.id));
}

/** Runs one step through the client and returns its normalised result. */
async function call(s: Sluice, step: Step, a: Args): Promise<JSONish> {
  const q = a.queue as string;
  const g = a.group_name as string;
  switch (step.call) {
    case "create_queue":
      await s.createQueue(q, queueOptions(a.options) as Any);
      return null;
    case "drop_queue":
      return s.dropQueue(q);
    case "purge_queue":
      return s.purgeQueue(q);
    case "upgrade_queue":
      return s.upgradeQueue(q);
    case "alter_queue":
      return optionsJSON(await s.alterQueue(q, queueOptions(a.options) as Any));
    case "queue_options": {
      const info = (await s.listQueues()).find((i) => i.queue === q);
      assert.ok(info !== undefined, `no queue ${q} in listQueues`);
      return optionsJSON(info.options);
    }
    case "create_group":
      await s.createGroup(q, g, a.start_from === undefined ? {} : { startFrom: a.start_from as string });
      return null;
    case "drop_group":
      return s.dropGroup(q, g);
    case "seek_group":
      await s.seekGroup(q, g, a.to_position as string);
      return null;
    case "send":
      return s.send(q, a.body as Any, {
        headers: a.headers as Any,
        key: a.key as Any,
        delay: ms(a.delay),
        priority: a.priority as Any,
        dedupKey: a.dedup_key as Any,
      });
    case "send_batch":
      return sendBatch(s, a);
    case "receive": {
      const msgs = await s.receive(q, g, {
        maxMessages: a.max_messages as Any,
        lease: ms(a.lease),
        consumer: a.consumer as Any,
        ack: a.ack as Any,
      });
      return msgs.map(messageRow);
    }
    case "ack":
      return s.ack(q, g, a.receipts as string[]);
    case "nack":
      return s.nack(q, g, a.receipt as string, { delay: ms(a.delay), error: a.error as Any });
    case "extend":
      return s.extend(q, g, a.receipts as string[], ms(a.lease) as number);
    case "status":
      return (await s.status(q)).map(statusRow);
    case "dead_letters":
      return (await s.deadLetters(q, { group: g, maxRows: a.max_rows as Any })).map(deadLetterRow);
    case "redrive":
      return s.redrive(q, { group: g, ids: a.ids as Any });
    case "discard_dead_letters":
      return s.discardDeadLetters(q, { group: g, ids: a.ids as Any });
    case "peek":
      return (await s.peek(q, { maxMessages: a.max_messages as Any, afterId: a.after_id as Any })).map(peekedRow);
    case "leases":
      return (await s.leases(q, { group: g, maxMessages: a.max_messages as Any })).map(leaseRow);
    case "sleep":
      await new Promise((r) => setTimeout(r, (a.seconds as number) * 1000));
      return null;
    default:
      throw new Error(`unknown call ${step.call}`);
  }
}

/**
 * Partial match: every expected key present and matching; arrays
 * element-wise, same length. The client returns int8 ids and positions as
 * decimal strings: an expected integer matches one by value.
 */
function matches(expected: JSONish, actual: JSONish): boolean {
  if (expected === null || typeof expected !== "object") {
    if (typeof expected === "number" && Number.isInteger(expected) && typeof actual === "string" && /^-?\d+$/.test(actual)) {
      return BigInt(actual) === BigInt(expected);
    }
    return expected === actual;
  }
  if (Array.isArray(expected)) {
    return Array.isArray(actual) && actual.length === expected.length && expected.every((e, i) => matches(e, actual[i]));
  }
  if (actual === null || typeof actual !== "object" || Array.isArray(actual)) {
    return false;
  }
  const act = actual as Record<string, JSONish>;
  return Object.entries(expected).every(([k, e]) => k in act && matches(e, act[k]));
}

function check(step: Step, expect: NonNullable<Step["expect"]>, result: JSONish): void {
  const where = `${step.call} ${JSON.stringify(step.args)}: got ${JSON.stringify(result)}`;
  if ("result" in expect) {
    assert.deepEqual(result, expect.result, where);
  }
  if (expect.count !== undefined) {
    assert.ok(Array.isArray(result) && result.length === expect.count, `count ${expect.count}: ${where}`);
  }
  if (expect.match !== undefined) {
    const r = result as JSONish[];
    assert.ok(Array.isArray(r) && r.length >= expect.match.length, `match: ${where}`);
    expect.match.forEach((e, i) => assert.ok(matches(e, r[i]), `match[${i}] ${JSON.stringify(e)}: ${where}`));
  }
  if (expect.contains !== undefined) {
    const ok = Array.isArray(result) ? result.some((r) => matches(expect.contains, r)) : matches(expect.contains, result);
    assert.ok(ok, `contains ${JSON.stringify(expect.contains)}: ${where}`);
  }
}

describe("conformance", () => {
  let s: Sluice;
  before(() => {
    s = newSluice(4);
  });
  after(async () => {
    await s.end();
  });

  const all = vectors();
  if (all.length === 0) {
    test("vectors", { skip: `no vectors in ${dir}` }, () => {});
  }
  for (const v of all) {
    test(v.name, async () => {
      const queue = uniqueName("conf");
      const saved = new Map<string, JSONish>();
      const created = new Set<string>();
      try {
        for (const [i, step] of v.steps.entries()) {
          const args = substitute(step.args ?? {}, queue, saved) as Args;
          if (step.call === "create_queue") {
            created.add(args.queue as string);
          }
          let result: JSONish;
          try {
            result = await call(s, step, args);
          } catch (err) {
            if (step.expect_error !== undefined && err instanceof SluiceError) {
              assert.equal(err.code, step.expect_error, `step ${i} ${step.call}: ${err.message}`);
              continue;
            }
            throw new Error(`step ${i} ${step.call} ${JSON.stringify(args)} failed: ${String(err)}`, { cause: err });
          }
          assert.equal(step.expect_error, undefined, `step ${i} ${step.call} should fail with ${step.expect_error}, got ${JSON.stringify(result)}`);
          if (step.save !== undefined) {
            saved.set(step.save, result);
          }
          if (step.expect !== undefined) {
            check(step, substitute(step.expect, queue, saved) as NonNullable<Step["expect"]>, result);
          }
        }
      } finally {
        for (const q of created) {
          await s.dropQueue(q).catch(() => false);
        }
      }
    });
  }
});
