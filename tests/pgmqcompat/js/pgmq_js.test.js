// The pgmq-js client (npm package pgmq-js, pinned in package.json),
// unchanged, against sluice's PGMQ compatibility layer. Run by
// `make test-pgmq-clients` through internal/pgmqcompat/cmd/pgmqcompat-run,
// which sets DATABASE_URL to a fresh database with schemas sluice and pgmq.
'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const { Pgmq } = require('pgmq-js');

function config() {
  const u = new URL(process.env.DATABASE_URL);
  return {
    host: u.hostname,
    port: Number(u.port),
    database: u.pathname.slice(1),
    user: decodeURIComponent(u.username),
    password: decodeURIComponent(u.password),
    ssl: false,
  };
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

test('pgmq-js drives the pgmq schema', async (t) => {
  // skipExtensionCreation: the layer is a schema, not an extension
  const pgmq = await Pgmq.new(config(), { skipExtensionCreation: true });
  t.after(() => pgmq.close());
  const q = 'js_' + Math.random().toString(36).slice(2, 10);

  await pgmq.queue.create(q);
  const queues = await pgmq.queue.list();
  assert.ok(queues.some((x) => x.name === q && !x.isPartitioned));

  const id = await pgmq.msg.send(q, { hello: 'world' });
  const ids = await pgmq.msg.sendBatch(q, [{ n: 1 }, { n: 2 }, { n: 3 }]);
  assert.equal(ids.length, 3);
  assert.ok(ids[0] > id && ids[0] < ids[1] && ids[1] < ids[2]);
  await pgmq.msg.send(q, { later: true }, 3600);

  const m = await pgmq.msg.read(q, 1);
  assert.equal(m.msgId, id);
  assert.equal(m.readCount, 1);
  assert.deepEqual(m.message, { hello: 'world' });

  const batch = await pgmq.msg.readBatch(q, 30, 2);
  assert.deepEqual(batch.map((x) => x.msgId), ids.slice(0, 2));
  assert.equal(await pgmq.msg.archive(q, batch[0].msgId), true);
  assert.deepEqual(await pgmq.msg.deleteBatch(q, [batch[1].msgId, 999999]), [batch[1].msgId]);
  assert.equal(await pgmq.msg.delete(q, batch[1].msgId), false);

  const popped = await pgmq.msg.pop(q);
  assert.equal(popped.msgId, ids[2]);
  assert.equal(await pgmq.msg.pop(q), undefined);

  // the first message's vt (1 s) passes: it comes back with read_ct 2
  await sleep(1200);
  const again = await pgmq.msg.read(q, 30);
  assert.equal(again.msgId, id);
  assert.equal(again.readCount, 2);
  // setVt sends untyped parameters, which PGMQ 1.13's four set_vt overloads
  // (the same here) make ambiguous: it fails on PGMQ 1.13 itself too.
  await assert.rejects(pgmq.msg.setVt(q, id, 0), /function pgmq\.set_vt\(unknown, unknown, unknown\) is not unique/);
  assert.equal(await pgmq.msg.delete(q, id), true);

  const metrics = await pgmq.queue.getMetrics(q);
  assert.equal(metrics.queueName, q);
  assert.equal(metrics.queueLength, 1); // the delayed message
  assert.equal(metrics.totalMessages, 5);
  assert.ok((await pgmq.queue.getAllMetrics()).some((x) => x.queueName === q));

  await pgmq.queue.purge(q);
  assert.equal((await pgmq.queue.getMetrics(q)).queueLength, 0);
  await pgmq.queue.detachArchive(q);
  await pgmq.queue.drop(q);
  assert.ok(!(await pgmq.queue.list()).some((x) => x.name === q));
});
