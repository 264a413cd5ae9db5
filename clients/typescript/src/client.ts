// The client: one method per function of the SQL API (docs/sql.md). Each
// runs one statement; the engine checks the arguments and owns the
// semantics.

import pg from "pg";

import { translate } from "./errors.js";
import { messages, type MessagesOptions } from "./iterate.js";
import { Notifier } from "./notifier.js";
import { Worker, type Handler, type WorkerOptions } from "./worker.js";
import type {
  AckOptions,
  BatchMessage,
  CallOptions,
  CreateGroupOptions,
  DeadLetter,
  DeadLettersOptions,
  Headers,
  JSONValue,
  Lease,
  LeasesOptions,
  MaintainResult,
  Message,
  NackOptions,
  PeekedMessage,
  PeekOptions,
  Queryable,
  QueueInfo,
  QueueOptions,
  QueueStatus,
  ReceiveOptions,
  RedriveOptions,
  DiscardDeadLettersOptions,
  SendBatchOptions,
  SendOptions,
} from "./types.js";

// ms is a duration in milliseconds, or NULL, as an interval.
const ms = (n: number) => `($${n}::float8 * interval '1 millisecond')`;

// typedOptions is the jsonb options in column col with the options named by
// the text[] parameter $n (the durations) as whole microseconds: the one
// place the client reads them, whatever interval text the engine stored.
const typedOptions = (col: string, n: number) =>
  `(SELECT jsonb_object_agg(key, CASE WHEN key = ANY($${n}::text[]) AND jsonb_typeof(value) = 'string'
    THEN to_jsonb((extract(epoch FROM (value #>> '{}')::interval) * 1000000)::bigint) ELSE value END)
  FROM jsonb_each(${col}))`;

/** The SQL the client runs: each statement calls one function of the SQL API. */
export const sql = {
  send: `SELECT sluice.send($1, $2::jsonb, $3::jsonb, $4::text, ${ms(5)}, $6::int, $7::text) AS id`,
  sendBatch: `SELECT id FROM sluice.send_batch($1, $2::text[]::jsonb[], $3::text[]::jsonb[], $4::text[], ${ms(5)}, $6::int[], $7::text[]) AS s(id)`,
  receive: `SELECT id, body, headers, key, priority, attempt, sent_at, receipt, lease_expires_at, pos
FROM sluice.receive($1, $2, $3::int, ${ms(4)}, $5::text, $6::text[])`,
  ack: `SELECT sluice.ack($1, $2, $3::text[], $4::boolean) AS n`,
  nack: `SELECT sluice.nack($1, $2, $3, ${ms(4)}, $5::text) AS ok`,
  extend: `SELECT sluice.extend($1, $2, $3::text[], ${ms(4)}) AS n`,
  createQueue: `SELECT sluice.create_queue($1, $2::jsonb)`,
  alterQueue: `SELECT ${typedOptions("o", 3)} AS options FROM sluice.alter_queue($1, $2::jsonb) AS a(o)`,
  dropQueue: `SELECT sluice.drop_queue($1) AS ok`,
  listQueues: `SELECT queue, created_at, options AS raw_options, ${typedOptions("options", 1)} AS options, groups
FROM sluice.list_queues()`,
  queueLease: `SELECT extract(epoch FROM (options->>'lease')::interval) * 1000 AS lease,
       (options->>'max_attempts')::int AS max_attempts
FROM sluice.list_queues() WHERE queue = $1`,
  purgeQueue: `SELECT sluice.purge_queue($1) AS n`,
  upgradeQueue: `SELECT sluice.upgrade_queue($1) AS ok`,
  createGroup: `SELECT sluice.create_group($1, $2, $3::text)`,
  dropGroup: `SELECT sluice.drop_group($1, $2) AS ok`,
  seekGroup: `SELECT sluice.seek_group($1, $2, $3::text)`,
  status: `SELECT queue, group_name, ready, delayed, in_flight, dead,
       extract(epoch FROM oldest_pending_age) * 1000 AS oldest_pending_age, lag,
       cursor, lwm, head, live_epochs, holds_reclaim, coalesce(waiting, 0) AS waiting,
       coalesce(estimated, false) AS estimated, coalesce(dead_lettered, 0) AS dead_lettered
FROM sluice.status($1::text)`,
  deadLetters: `SELECT id, group_name, body, headers, key, attempts, error, died_at, sent_at, dead_letter_id
FROM sluice.dead_letters($1, $2::text, $3::int)`,
  redrive: `SELECT sluice.redrive($1, $2::text, $3::bigint[]) AS n`,
  discardDeadLetters: `SELECT sluice.discard_dead_letters($1, $2::text, $3::bigint[]) AS n`,
  peek: `SELECT id, body, headers, key, priority, sent_at, deliver_at, resent_to
FROM sluice.peek($1, $2::int, $3::bigint)`,
  leases: `SELECT group_name, id, pos, attempt, consumer, delivered_at, lease_expires_at
FROM sluice.leases($1, $2::text, $3::int)`,
  maintain: `SELECT queue, rotated, reclaimed FROM sluice.maintain()`,
  version: `SELECT sluice.version() AS v`,
} as const;

/**
 * The hot calls' statements, prepared once per connection under these
 * names (node-postgres parses and plans an unnamed statement on every
 * call). A name carries a hash of its text, so two client versions that
 * share a server never give one name two texts.
 */
export const preparedNames: ReadonlyMap<string, string> = new Map(
  (["send", "sendBatch", "receive", "ack", "nack", "extend"] as const).map((k) => [sql[k], `sluice_${k}_${fnv1a(sql[k])}`]),
);

/** fnv1a is the 32-bit FNV-1a hash of s's UTF-16 code units, in hex. */
function fnv1a(s: string): string {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h.toString(16).padStart(8, "0");
}

/** Options of the Sluice constructor. */
export interface SluiceOptions {
  /** A pool to use; the caller ends it. */
  pool?: pg.Pool;
  /** Or a connection string for a pool of the Sluice's own (ended by end()). */
  connectionString?: string;
  /** Size of the Sluice's own pool (default 10). */
  max?: number;
  /**
   * Prepare the hot calls' statements (send, sendBatch, receive, ack, nack,
   * extend) once per connection, as named statements (default true). Set
   * false behind a pooler that cannot carry prepared statements across its
   * server connections (PgBouncer in transaction mode before 1.21).
   */
  prepare?: boolean;
}

type Row = Record<string, unknown>;

const num = (v: unknown): number => Number(v);
const numOrNull = (v: unknown): number | null => (v === null || v === undefined ? null : Number(v));
/**
 * int8 reads an int8 column as node-postgres returns it (a decimal string),
 * keeping every digit: ids and positions pass past 2^53 exactly.
 */
const int8 = (v: unknown): string => String(v);
const int8OrNull = (v: unknown): string | null => (v === null || v === undefined ? null : String(v));
/**
 * count reads an int8 count as a number, refusing one that a number cannot
 * hold exactly (past 2^53) rather than rounding it.
 */
function count(v: unknown): number {
  const n = Number(v);
  if (!Number.isSafeInteger(n)) {
    throw new RangeError(`sluice: count ${String(v)} is not exact as a number`);
  }
  return n;
}
const json = (v: JSONValue | undefined | null): string | null => (v === undefined || v === null ? null : JSON.stringify(v));
const orNull = <T>(v: T | undefined | null): T | null => (v === undefined ? null : v);

/** The kind of a queue option: how the client sends and reads it. */
export type QueueOptionKind = "integer" | "duration" | "boolean";

/**
 * Every QueueOptions key with its create_queue option name and kind: the one
 * table the conversions both ways read. Its type makes the compiler require
 * exactly the keys of QueueOptions; test/options.test.ts checks it against
 * the engine's list (test/queue_options.json).
 */
export const queueOptionNames: { readonly [K in keyof Required<QueueOptions>]: readonly [string, QueueOptionKind] } = {
  maxAttempts: ["max_attempts", "integer"],
  lease: ["lease", "duration"],
  backoffBase: ["backoff_base", "duration"],
  backoffMax: ["backoff_max", "duration"],
  retention: ["retention", "duration"],
  rotateInterval: ["rotate_interval", "duration"],
  maxPayload: ["max_payload", "integer"],
  dedupWindow: ["dedup_window", "duration"],
  maxDelay: ["max_delay", "duration"],
  lanes: ["lanes", "integer"],
  slots: ["slots", "integer"],
  engine: ["engine", "integer"],
  notify: ["notify", "boolean"],
  defaultGroup: ["default_group", "boolean"],
};

const optionEntry = (k: string): readonly [string, QueueOptionKind] | undefined =>
  Object.hasOwn(queueOptionNames, k) ? queueOptionNames[k as keyof QueueOptions] : undefined;

// The engine names of the duration options (a parameter of typedOptions).
const durationOptions = Object.values(queueOptionNames)
  .filter(([, kind]) => kind === "duration")
  .map(([name]) => name);

/**
 * queueOptionsJSON renders QueueOptions as the jsonb options of
 * create_queue / alter_queue: snake_case keys, durations (ms) as interval
 * text. Any other key passes unchanged, so that the engine rejects what it
 * does not know (SL007) rather than the client dropping it.
 */
export function queueOptionsJSON(o: QueueOptions | undefined | null): Record<string, JSONValue> {
  const out: Record<string, JSONValue> = {};
  for (const [k, v] of Object.entries(o ?? {})) {
    if (v === undefined) {
      continue;
    }
    const entry = optionEntry(k);
    if (entry === undefined) {
      out[k] = v as JSONValue;
    } else if (entry[1] === "duration" && typeof v === "number") {
      out[entry[0]] = `${v} milliseconds`;
    } else {
      out[entry[0]] = v as JSONValue;
    }
  }
  return out;
}

/**
 * queueOptionsFrom reads options as the queries with typedOptions return
 * them (durations in microseconds) as QueueOptions (durations in ms); names
 * the client does not know are left out (they stay in rawOptions).
 */
export function queueOptionsFrom(typed: Record<string, JSONValue> | null | undefined): QueueOptions {
  const out: Record<string, JSONValue> = {};
  for (const [k, [name, kind]] of Object.entries(queueOptionNames)) {
    const v = typed?.[name];
    if (v !== undefined && v !== null) {
      out[k] = kind === "duration" ? Number(v) / 1000 : v;
    }
  }
  return out as QueueOptions;
}

export function toMessage<B = JSONValue>(r: Row): Message<B> {
  return {
    id: int8(r.id),
    body: r.body as B,
    headers: (r.headers ?? null) as Headers | null,
    key: (r.key ?? null) as string | null,
    priority: num(r.priority),
    attempt: num(r.attempt),
    sentAt: r.sent_at as Date,
    receipt: r.receipt as string,
    leaseExpiresAt: r.lease_expires_at as Date,
    pos: int8(r.pos),
  };
}

/**
 * Sluice is a client of one database that has the sluice schema. Every
 * method calls one function of the SQL API; pass `{ tx }` to run it on a
 * client in your own transaction. Errors of the engine are thrown as
 * SluiceError subclasses (see errors.ts); other errors as node-postgres
 * throws them.
 */
export class Sluice {
  /** The pool the calls run on (without `tx`). */
  readonly pool: pg.Pool;
  /**
   * The one LISTEN connection the Sluice's workers share (taken from the
   * pool when the first worker starts, released when the last stops).
   */
  readonly notifier: Notifier;
  readonly #ownPool: boolean;
  readonly #prepare: boolean;

  constructor(options: SluiceOptions = {}) {
    this.#prepare = options.prepare ?? true;
    if (options.pool) {
      this.pool = options.pool;
      this.#ownPool = false;
    } else {
      const config: pg.PoolConfig = { max: options.max ?? 10 };
      if (options.connectionString !== undefined) {
        config.connectionString = options.connectionString;
      }
      this.pool = new pg.Pool(config);
      // An idle client's connection error must not crash the process: the
      // pool drops the client and the next call connects again.
      this.pool.on("error", () => {});
      this.#ownPool = true;
    }
    this.notifier = new Notifier(this.pool);
  }

  /** Ends the pool if the Sluice made it. */
  async end(): Promise<void> {
    if (this.#ownPool) {
      await this.pool.end();
    }
  }

  /** Runs one statement, translating the engine's errors. */
  async query(text: string, values: unknown[], opts?: CallOptions): Promise<Row[]> {
    const db: Queryable = opts?.tx ?? this.pool;
    // (a tx of the caller's own kind of Queryable takes text only)
    const named = this.#prepare && (db === this.pool || db instanceof pg.Client);
    const name = named ? preparedNames.get(text) : undefined;
    try {
      const res =
        name === undefined
          ? await db.query(text, values)
          : await (db as pg.Pool | pg.Client).query({ name, text, values });
      return res.rows as Row[];
    } catch (err) {
      throw translate(err);
    }
  }

  /**
   * Runs fn in a transaction on a client of the pool: BEGIN, fn(tx), COMMIT
   * (ROLLBACK if fn throws). Pass `{ tx }` to the calls inside.
   */
  async inTx<T>(fn: (tx: pg.PoolClient) => Promise<T>): Promise<T> {
    const client = await this.pool.connect();
    let broken: Error | undefined;
    try {
      await client.query("BEGIN");
      try {
        const out = await fn(client);
        await client.query("COMMIT");
        return out;
      } catch (err) {
        try {
          await client.query("ROLLBACK");
        } catch (rbErr) {
          broken = rbErr as Error;
        }
        throw translate(err);
      }
    } finally {
      client.release(broken);
    }
  }

  // Queue administration.

  /** Creates a queue (with the group "default" unless options.defaultGroup is false). */
  async createQueue(queue: string, options?: QueueOptions | null, opts?: CallOptions): Promise<void> {
    await this.query(sql.createQueue, [queue, JSON.stringify(queueOptionsJSON(options))], opts);
  }

  /**
   * Changes the options set in changes (the rest keep their values); returns
   * all the queue's options afterwards. lanes, slots and engine are fixed at
   * creation, defaultGroup is createQueue's only (InvalidOptionError).
   */
  async alterQueue(queue: string, changes: QueueOptions, opts?: CallOptions): Promise<QueueOptions> {
    const rows = await this.query(sql.alterQueue, [queue, JSON.stringify(queueOptionsJSON(changes)), durationOptions], opts);
    return queueOptionsFrom(rows[0]?.options as Record<string, JSONValue>);
  }

  /**
   * Drops a queue; true if it existed. Waits for the transactions using the
   * queue without holding its other calls up; with the session's
   * lock_timeout set, fails with SQLSTATE 55P03 (naming the holder's pid;
   * nothing changed) after that long.
   */
  async dropQueue(queue: string, opts?: CallOptions): Promise<boolean> {
    const rows = await this.query(sql.dropQueue, [queue], opts);
    return rows[0]?.ok === true;
  }

  /** The queues, their options and groups. */
  async listQueues(opts?: CallOptions): Promise<QueueInfo[]> {
    const rows = await this.query(sql.listQueues, [durationOptions], opts);
    return rows.map((r) => ({
      queue: r.queue as string,
      createdAt: r.created_at as Date,
      options: queueOptionsFrom(r.options as Record<string, JSONValue>),
      groups: (r.groups ?? []) as string[],
      rawOptions: r.raw_options as Record<string, JSONValue>,
    }));
  }

  /** Removes every message of a queue; returns how many. Waits, and fails with 55P03, as dropQueue. */
  async purgeQueue(queue: string, opts?: CallOptions): Promise<number> {
    const rows = await this.query(sql.purgeQueue, [queue], opts);
    return count(rows[0]?.n);
  }

  /**
   * Replaces a queue of engine 1 by one of engine 2 of the same name,
   * options and groups, in place, without copying messages; true if it did,
   * false if the queue is of engine 2 already. Each group receives what the
   * old storage holds first; status counts both, and seekGroup is refused
   * (NotSupportedError, SL011), until maintain() drops the old storage once
   * every group has drained it. A queue of the pgmq layer too. Needs role
   * sluice_admin. QueueNotFoundError (SL002), InvalidNameError (SL001),
   * NotSupportedError while an earlier upgrade drains.
   */
  async upgradeQueue(queue: string, opts?: CallOptions): Promise<boolean> {
    const rows = await this.query(sql.upgradeQueue, [queue], opts);
    return rows[0]?.ok === true;
  }

  // Consumer groups.

  /** Adds a consumer group to a queue. */
  async createGroup(queue: string, group: string, opts?: CreateGroupOptions): Promise<void> {
    const start = opts?.startFrom instanceof Date ? opts.startFrom.toISOString() : (opts?.startFrom ?? "earliest");
    await this.query(sql.createGroup, [queue, group, start], opts);
  }

  /** Removes a consumer group; true if it existed. */
  async dropGroup(queue: string, group: string, opts?: CallOptions): Promise<boolean> {
    const rows = await this.query(sql.dropGroup, [queue, group], opts);
    return rows[0]?.ok === true;
  }

  /**
   * Moves a consumer group to "earliest", "latest" or a time: backward it
   * receives again what it acked, forward it skips. It keeps its name, ttl
   * and dead letters; leases held at the seek go stale (their acks count 0)
   * and pending retries are forgotten.
   */
  async seekGroup(queue: string, group: string, toPosition: "earliest" | "latest" | Date | string,
                  opts?: CallOptions): Promise<void> {
    const to = toPosition instanceof Date ? toPosition.toISOString() : toPosition;
    await this.query(sql.seekGroup, [queue, group, to], opts);
  }

  // Sending.

  /**
   * Appends one message; returns its id (int8, as a decimal string). A body
   * of null or undefined is rejected (SL006).
   */
  async send(queue: string, body: JSONValue | undefined, opts?: SendOptions): Promise<string> {
    const rows = await this.query(
      sql.send,
      [
        queue,
        json(body),
        json(opts?.headers),
        orNull(opts?.key),
        orNull(opts?.delay),
        opts?.priority ?? 0,
        orNull(opts?.dedupKey),
      ],
      opts,
    );
    return int8(rows[0]?.id);
  }

  /** Appends many messages in one statement; returns one id per message (a decimal string), in order. */
  async sendBatch(queue: string, messages: BatchMessage[], opts?: SendBatchOptions): Promise<string[]> {
    if (messages.length === 0) {
      return [];
    }
    const column = <T>(f: (m: BatchMessage) => T | undefined | null): (T | null)[] | null => {
      const out = messages.map((m) => orNull(f(m)));
      return out.every((v) => v === null) ? null : out;
    };
    const rows = await this.query(
      sql.sendBatch,
      [
        queue,
        messages.map((m) => json(m.body)),
        column((m) => json(m.headers)),
        column((m) => m.key),
        orNull(opts?.delay),
        column((m) => m.priority)?.map((p) => p ?? 0) ?? null,
        column((m) => m.dedupKey),
      ],
      opts,
    );
    return rows.map((r) => int8(r.id));
  }

  // Receiving and completing.

  /** Leases up to maxMessages ready messages of a queue for a group. */
  async receive<B = JSONValue>(queue: string, group = "default", opts?: ReceiveOptions): Promise<Message<B>[]> {
    const rows = await this.query(
      sql.receive,
      [queue, group, opts?.maxMessages ?? 1, orNull(opts?.lease), orNull(opts?.consumer), orNull(opts?.ack)],
      opts,
    );
    return rows.map((r) => toMessage<B>(r));
  }

  /** Completes messages; returns how many were completed now (stale receipts are not counted). */
  async ack(queue: string, group: string, receipts: string[], opts?: AckOptions): Promise<number> {
    const rows = await this.query(sql.ack, [queue, group, receipts, opts?.durable ?? true], opts);
    return num(rows[0]?.n);
  }

  /** Gives a message back after a failure; false for a stale receipt. */
  async nack(queue: string, group: string, receipt: string, opts?: NackOptions): Promise<boolean> {
    const rows = await this.query(sql.nack, [queue, group, receipt, orNull(opts?.delay), orNull(opts?.error)], opts);
    return rows[0]?.ok === true;
  }

  /** Renews leases to at least now + lease (ms; never shorter); returns how many were renewed. */
  async extend(queue: string, group: string, receipts: string[], lease: number, opts?: CallOptions): Promise<number> {
    const rows = await this.query(sql.extend, [queue, group, receipts, lease], opts);
    return num(rows[0]?.n);
  }

  /** Depth and progress of each group of a queue (or of every queue). */
  async status(queue?: string | null, opts?: CallOptions): Promise<QueueStatus[]> {
    const rows = await this.query(sql.status, [orNull(queue)], opts);
    return rows.map((r) => ({
      queue: r.queue as string,
      groupName: (r.group_name ?? null) as string | null,
      ready: count(r.ready),
      delayed: count(r.delayed),
      inFlight: count(r.in_flight),
      dead: count(r.dead),
      oldestPendingAge: numOrNull(r.oldest_pending_age),
      lag: count(r.lag),
      cursor: int8OrNull(r.cursor),
      lwm: int8OrNull(r.lwm),
      head: int8OrNull(r.head),
      liveEpochs: numOrNull(r.live_epochs),
      holdsReclaim: (r.holds_reclaim ?? null) as boolean | null,
      waiting: count(r.waiting),
      estimated: r.estimated as boolean,
      deadLettered: count(r.dead_lettered),
    }));
  }

  /** Scheduled upkeep of every queue (reclaim and rotate). */
  async maintain(opts?: CallOptions): Promise<MaintainResult[]> {
    const rows = await this.query(sql.maintain, [], opts);
    return rows.map((r) => ({ queue: r.queue as string, rotated: r.rotated as boolean, reclaimed: num(r.reclaimed) }));
  }

  // Dead letters.

  /** Messages that exhausted their attempts and were neither redriven nor discarded, oldest first. */
  async deadLetters<B = JSONValue>(queue: string, opts?: DeadLettersOptions): Promise<DeadLetter<B>[]> {
    const rows = await this.query(sql.deadLetters, [queue, orNull(opts?.group), opts?.maxRows ?? 100], opts);
    return rows.map((r) => ({
      id: int8(r.id),
      groupName: r.group_name as string,
      body: r.body as B,
      headers: (r.headers ?? null) as Headers | null,
      key: (r.key ?? null) as string | null,
      attempts: num(r.attempts),
      error: (r.error ?? null) as string | null,
      diedAt: r.died_at as Date,
      sentAt: r.sent_at as Date,
      deadLetterId: int8(r.dead_letter_id),
    }));
  }

  /** Makes dead letters deliverable again; returns how many. */
  async redrive(queue: string, opts?: RedriveOptions): Promise<number> {
    const rows = await this.query(sql.redrive, [queue, orNull(opts?.group), orNull(opts?.ids)], opts);
    return count(rows[0]?.n);
  }

  /**
   * Drops dead letters for good; returns how many. All of `group`'s when no
   * ids are given, else those of the ids (of `group`, or of every group). A
   * discarded dead letter is no longer listed, counted in `dead` or
   * redriven (`deadLettered` still counts it). Neither a group nor ids, or
   * `ids: []`, is refused (SL006): it never discards a whole queue's by
   * omission. Needs role sluice_admin.
   */
  async discardDeadLetters(queue: string, opts: DiscardDeadLettersOptions): Promise<number> {
    const rows = await this.query(sql.discardDeadLetters, [queue, orNull(opts?.group), orNull(opts?.ids)], opts);
    return count(rows[0]?.n);
  }

  // Looking without receiving.

  /**
   * The messages a queue stores, by id, without receiving them (leases and
   * changes nothing): not yet delivered, in flight, and completed ones until
   * their epoch is reclaimed. Reads every stored message.
   */
  async peek<B = JSONValue>(queue: string, opts?: PeekOptions): Promise<PeekedMessage<B>[]> {
    const rows = await this.query(sql.peek, [queue, opts?.maxMessages ?? 10, orNull(opts?.afterId)], opts);
    return rows.map((r) => ({
      id: int8(r.id),
      body: r.body as B,
      headers: (r.headers ?? null) as Headers | null,
      key: (r.key ?? null) as string | null,
      priority: num(r.priority),
      sentAt: r.sent_at as Date,
      deliverAt: (r.deliver_at ?? null) as Date | null,
      resentTo: (r.resent_to ?? null) as string[] | null,
    }));
  }

  /** The deliveries in flight (leased, not expired, not completed), the earliest expiry first; no receipts. */
  async leases(queue: string, opts?: LeasesOptions): Promise<Lease[]> {
    const rows = await this.query(sql.leases, [queue, orNull(opts?.group), opts?.maxMessages ?? 100], opts);
    return rows.map((r) => ({
      groupName: r.group_name as string,
      id: int8(r.id),
      pos: int8(r.pos),
      attempt: num(r.attempt),
      consumer: (r.consumer ?? null) as string | null,
      deliveredAt: r.delivered_at as Date,
      leaseExpiresAt: r.lease_expires_at as Date,
    }));
  }

  /** The version of the installed sluice engine. */
  async version(opts?: CallOptions): Promise<string> {
    const rows = await this.query(sql.version, [], opts);
    return rows[0]?.v as string;
  }

  // Consuming.

  /**
   * Runs a Worker: handler for each message of queue for group until
   * opts.signal is aborted (see Worker.run).
   */
  consume<B = JSONValue>(
    queue: string,
    group: string,
    handler: Handler<B>,
    opts: WorkerOptions & { signal?: AbortSignal } = {},
  ): Promise<void> {
    return new Worker<B>(this, queue, group, handler, opts).run(opts.signal);
  }

  /** An async iterator over received messages (see messages in iterate.ts); the caller acks them. */
  messages<B = JSONValue>(queue: string, group = "default", opts?: MessagesOptions): AsyncGenerator<Message<B>, void, undefined> {
    return messages<B>(this, queue, group, opts);
  }

  /** The queue's lease option in ms, or undefined when there is no such queue. */
  async queueLease(queue: string, opts?: CallOptions): Promise<number | undefined> {
    return (await this.queueSettings(queue, opts))?.lease;
  }

  /**
   * The queue's lease (ms) and max_attempts options, or undefined when there
   * is no such queue.
   */
  async queueSettings(queue: string, opts?: CallOptions): Promise<{ lease: number; maxAttempts: number } | undefined> {
    const rows = await this.query(sql.queueLease, [queue], opts);
    const row = rows[0];
    return row === undefined ? undefined : { lease: num(row.lease), maxAttempts: num(row.max_attempts) };
  }
}
