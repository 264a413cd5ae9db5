// The worker: receives messages of a queue for a consumer group and runs a
// handler for each, as the Go library's Consume does (worker.go, listen.go):
// a concurrency limit, lease heartbeats while handlers run, LISTEN wake-ups
// with a polling fallback, a key's run handled in order (stop at the first
// failure), retries through nack with the handler's error, and a graceful
// shutdown on an AbortSignal.

import type { Sluice } from "./client.js";
import { InvalidArgumentError, SluiceError } from "./errors.js";
import type { JSONValue, Message } from "./types.js";
import type { Subscription } from "./notifier.js";
import { Wakeup, within } from "./wait.js";

/** What a handler gets beside the message. */
export interface HandlerContext {
  /**
   * Aborted when the worker stops and the drain timeout has passed: the
   * message was given back, and the handler should return.
   */
  signal: AbortSignal;
}

/**
 * Handles one message. Returning (or resolving) acknowledges it; throwing
 * (or rejecting) gives it back with nack and the error's message, to be
 * retried after the queue's backoff or dead-lettered after max_attempts.
 */
export type Handler<B = JSONValue> = (msg: Message<B>, ctx: HandlerContext) => Promise<void> | void;

/**
 * A failed handler, as onHandlerError gets it. attempt is the delivery that
 * failed (from 1), maxAttempts the queue's when the worker started;
 * deadLettered is true when that was the last attempt and the message became
 * a dead letter, false when it is retried (after the queue's backoff, or when
 * its lease expires if giving it back failed).
 */
export interface HandlerFailure<B = JSONValue> {
  queue: string;
  group: string;
  message: Message<B>;
  error: unknown;
  attempt: number;
  maxAttempts: number;
  deadLettered: boolean;
}

/**
 * The default onHandlerError: one console.warn line with the queue, group,
 * message id, attempt, outcome and error text (never the message's body).
 */
export function warnHandlerFailure(f: HandlerFailure<unknown>): void {
  console.warn(
    `sluice: handler of ${f.queue}/${f.group} failed on message ${f.message.id}, attempt ${f.attempt} of ${f.maxAttempts}; ` +
      `${f.deadLettered ? "dead-lettered" : "retried"}: ${errorText(f.error)}`,
  );
}

/** Where a recovered error of the worker happened. */
export type WorkerOperation = "receive" | "ack" | "nack" | "extend" | "release" | "listen" | "handler";

/** Options of a Worker. Durations in milliseconds. */
export interface WorkerOptions {
  /** How many handlers run at once (default 10). */
  concurrency?: number;
  /** The most messages one receive asks for (default: concurrency). */
  batchSize?: number;
  /** How long each received message is held (default: the queue's lease option). */
  lease?: number;
  /** How often running handlers' leases are extended (default lease / 3; must be shorter than lease). */
  heartbeatInterval?: number;
  /** How long to wait for a wake-up before looking again when the queue looked empty (default 500). */
  pollInterval?: number;
  /**
   * LISTEN for wake-ups (default true; false behind a transaction-mode
   * pooler). The workers of one Sluice share one LISTEN connection of its
   * pool (Sluice.notifier).
   */
  listen?: boolean;
  /** How long running handlers may finish once stopped (default 10000); then their messages are given back. */
  drainTimeout?: number;
  /** Free text naming this consumer (at most 200 characters). */
  consumer?: string;
  /** Called with the errors the worker recovers from (default: console.error). */
  onError?: (err: unknown, op: WorkerOperation) => void;
  /**
   * Let acknowledgements commit without waiting for the disk: they ride on
   * the next receive (one round trip for both), which commits
   * asynchronously, or go alone with durable: false. A server crash may then
   * lose acks, and their messages come again. Default false: acks are
   * durable, each batch in its own transaction, sent beside the receives
   * (a receive does not wait for an ack's commit).
   */
  asyncCommitAcks?: boolean;
  /**
   * Called each time a handler throws, after its message was given back
   * (default: warnHandlerFailure, a console.warn line). Errors it throws are
   * reported to onError as "handler".
   */
  onHandlerError?: (failure: HandlerFailure) => void;
}

/** Defaults of WorkerOptions. */
export const defaults = Object.freeze({
  concurrency: 10,
  pollInterval: 500,
  drainTimeout: 10_000,
});

// While messages flow (for hotPeriod after the last ones or the last
// wake-up), an empty receive is retried after hotPollInterval: the engine
// sends one wake-up per queue among concurrent sends, so one can be missed.
const hotPeriod = 1000;
const hotPollInterval = 25;
// The longest error text nack accepts.
const maxErrorText = 10_000;
// The most receipts one ack carries.
const maxAckBatch = 1000;

/** A receipt waiting for the acker (or, with asyncCommitAcks, a receive). */
interface QueuedAck {
  receipt: string;
  /** Of a keyed message: its key's next message waits for this ack. */
  keyed: boolean;
}

/** A message being handled. */
interface Job<B> {
  msg: Message<B>;
  /** Given back at shutdown: the handler's outcome is ignored. */
  released: boolean;
}

/** errorText is the text nack records for a handler's failure. */
export function errorText(err: unknown): string {
  let text: string;
  if (err instanceof Error) {
    text = err.message !== "" ? err.message : err.name;
  } else {
    text = String(err);
  }
  return text.length > maxErrorText ? text.slice(0, maxErrorText) : text;
}

/**
 * Worker runs handler for the messages of queue, group, until the signal
 * given to run() is aborted. Make one per run.
 */
export class Worker<B = JSONValue> {
  readonly #sluice: Sluice;
  readonly #queue: string;
  readonly #group: string;
  readonly #handler: Handler<B>;
  readonly #o: Required<Omit<WorkerOptions, "lease" | "heartbeatInterval" | "consumer" | "onHandlerError">> & {
    onHandlerError: (failure: HandlerFailure<B>) => void;
    lease?: number;
    heartbeatInterval?: number;
    consumer?: string;
  };

  #lease = 0;
  #maxAttempts = 0;
  #heartbeatInterval = 0;
  readonly #inflight = new Map<string, Job<B>>();
  readonly #tasks = new Set<Promise<void>>();
  readonly #wake = new Wakeup();
  readonly #freed = new Wakeup();
  #free = 0;
  #acks: QueuedAck[] = [];
  #acking: Promise<void> | undefined;
  readonly #handlerAbort = new AbortController();
  #running = false;

  constructor(sluice: Sluice, queue: string, group: string, handler: Handler<B>, options: WorkerOptions = {}) {
    this.#sluice = sluice;
    this.#queue = queue;
    this.#group = group;
    this.#handler = handler;
    const concurrency = options.concurrency !== undefined && options.concurrency > 0 ? options.concurrency : defaults.concurrency;
    const batch = options.batchSize !== undefined && options.batchSize > 0 ? options.batchSize : concurrency;
    this.#o = {
      concurrency,
      batchSize: Math.min(batch, concurrency, 10_000),
      pollInterval: options.pollInterval !== undefined && options.pollInterval > 0 ? options.pollInterval : defaults.pollInterval,
      listen: options.listen ?? true,
      drainTimeout: options.drainTimeout !== undefined && options.drainTimeout > 0 ? options.drainTimeout : defaults.drainTimeout,
      onError: options.onError ?? ((err, op) => console.error(`sluice: ${op} failed (queue ${queue}, group ${group}):`, err)),
      onHandlerError: (options.onHandlerError as ((f: HandlerFailure<B>) => void) | undefined) ?? warnHandlerFailure,
      asyncCommitAcks: options.asyncCommitAcks ?? false,
    };
    if (options.lease !== undefined) {
      this.#o.lease = options.lease;
    }
    if (options.heartbeatInterval !== undefined) {
      this.#o.heartbeatInterval = options.heartbeatInterval;
    }
    if (options.consumer !== undefined) {
      this.#o.consumer = options.consumer;
    }
  }

  /** How many messages are being handled now. */
  get inFlight(): number {
    return this.#inflight.size;
  }

  /**
   * Runs until signal is aborted, then stops receiving, lets running
   * handlers finish for up to drainTimeout, gives the messages of those
   * still running back for immediate redelivery, aborts their signals,
   * waits for them to return and resolves. Rejects early (after the same
   * shutdown) with a SluiceError when the queue or group does not exist or
   * the engine rejects an argument; connection errors are reported to
   * onError and retried.
   */
  async run(signal?: AbortSignal): Promise<void> {
    if (this.#running) {
      throw new Error("sluice: Worker.run called twice");
    }
    this.#running = true;
    await this.#setup();
    this.#free = this.#o.concurrency;
    const listener = this.#o.listen ? this.#listen() : undefined;
    const heartbeat = setInterval(() => {
      if (this.#heartbeating === undefined) {
        this.#heartbeating = this.#heartbeat().finally(() => {
          this.#heartbeating = undefined;
        });
      }
    }, this.#heartbeatInterval);
    let failure: unknown;
    try {
      await this.#fetch(signal ?? new AbortController().signal);
    } catch (err) {
      failure = err;
    }
    // Shutdown: let running handlers finish, up to the drain timeout.
    const drained = Promise.all(this.#tasks);
    if (!(await within(drained, this.#o.drainTimeout))) {
      await this.#releaseAll();
      this.#handlerAbort.abort();
      await drained;
    }
    await this.#flushAcks();
    clearInterval(heartbeat);
    await this.#heartbeating;
    await listener?.unlisten();
    if (failure !== undefined) {
      throw failure;
    }
  }

  async #setup(): Promise<void> {
    // status raises SL001 / SL002 for a bad or unknown queue name.
    await this.#sluice.status(this.#queue);
    const settings = await this.#sluice.queueSettings(this.#queue);
    if (settings === undefined) {
      throw new Error(`sluice: queue ${this.#queue} has no lease option`);
    }
    this.#maxAttempts = settings.maxAttempts;
    let lease = this.#o.lease;
    if (lease === undefined || lease <= 0) {
      lease = settings.lease;
    }
    const hb = this.#o.heartbeatInterval !== undefined && this.#o.heartbeatInterval > 0 ? this.#o.heartbeatInterval : lease / 3;
    if (hb >= lease) {
      throw new InvalidArgumentError(
        "SL006",
        `consuming queue ${this.#queue}, group ${this.#group}: heartbeat interval ${hb} ms must be shorter than the lease ${lease} ms`,
      );
    }
    this.#lease = lease;
    this.#heartbeatInterval = hb;
  }

  // fetch receives messages and starts their handlers until signal is
  // aborted or an error that retrying cannot fix.
  async #fetch(signal: AbortSignal): Promise<void> {
    let active = 0; // when messages or a wake-up last came
    while (!signal.aborted) {
      if (this.#free === 0) {
        await this.#freed.wait(Infinity, signal);
        continue;
      }
      // The receive is not cut short by the signal: it could lease messages
      // nobody sees until their lease expires. With asyncCommitAcks the acks
      // waiting ride on it (one round trip, committed asynchronously);
      // durable acks are the acker's alone, sent beside the receive, which
      // does not wait for their commit to reach the disk (nor for anything
      // holding them up).
      const done = this.#o.asyncCommitAcks ? this.#acks.splice(0, maxAckBatch).map((a) => a.receipt) : [];
      let msgs: Message<B>[] = [];
      try {
        msgs = await this.#sluice.receive<B>(this.#queue, this.#group, {
          maxMessages: Math.min(this.#free, this.#o.batchSize),
          lease: this.#lease,
          consumer: this.#o.consumer ?? null,
          ack: done.length > 0 ? done : null,
        });
      } catch (err) {
        if (done.length > 0) {
          await this.#ackNow(done);
        }
        if (err instanceof SluiceError) {
          throw err;
        }
        this.#o.onError(err, "receive");
      }
      if (signal.aborted) {
        await this.#release(msgs);
        return;
      }
      // Unkeyed messages run in parallel; the messages of one key run one
      // after the other, in order.
      const runs = new Map<string, Message<B>[]>();
      for (const m of msgs) {
        this.#free--;
        if (m.key === null) {
          this.#spawn(this.#handle(this.#track(m), false).then(() => undefined));
          continue;
        }
        const run = runs.get(m.key);
        if (run) {
          run.push(m);
        } else {
          runs.set(m.key, [m]);
        }
      }
      for (const run of runs.values()) {
        this.#spawn(this.#runKey(run));
      }
      if (msgs.length > 0) {
        active = Date.now();
        continue; // more may be ready
      }
      let wait = this.#o.pollInterval;
      if (Date.now() - active < hotPeriod) {
        wait = Math.min(wait, hotPollInterval);
      }
      if ((await this.#wake.wait(wait, signal)) === "wake") {
        active = Date.now();
      }
    }
  }

  #spawn(task: Promise<void>): void {
    const t = task.finally(() => this.#tasks.delete(t));
    this.#tasks.add(t);
  }

  // runKey handles the messages of one key in order. Each but the last is
  // acknowledged before the next is handled; after a failure the rest are
  // not handled: the engine's nack released them (or, after a failed ack,
  // they come back when their leases expire, still in order).
  async #runKey(msgs: Message<B>[]): Promise<void> {
    const jobs = msgs.map((m) => this.#track(m));
    let failed = false;
    for (const [i, j] of jobs.entries()) {
      if (failed) {
        this.#untrack(j);
        continue;
      }
      failed = !(await this.#handle(j, i < jobs.length - 1));
    }
  }

  #track(msg: Message<B>): Job<B> {
    const j: Job<B> = { msg, released: false };
    this.#inflight.set(msg.receipt, j);
    return j;
  }

  // untrack forgets j and frees its slot; it reports whether j was given
  // back at shutdown meanwhile.
  #untrack(j: Job<B>): boolean {
    this.#inflight.delete(j.msg.receipt);
    this.#free++;
    this.#freed.notify();
    return j.released;
  }

  // handle runs the handler of j, then acks or nacks its message: the ack
  // is batched, or made at once if ackNow. It reports whether the handler
  // succeeded (and the ack made at once did too).
  async #handle(j: Job<B>, ackNow: boolean): Promise<boolean> {
    let failure: unknown;
    let ok = true;
    try {
      await this.#handler(j.msg, { signal: this.#handlerAbort.signal });
    } catch (err) {
      ok = false;
      failure = err;
    }
    if (this.#untrack(j)) {
      return ok;
    }
    if (ok && ackNow) {
      return this.#ackNow([j.msg.receipt]);
    }
    if (ok) {
      this.#queueAck({ receipt: j.msg.receipt, keyed: j.msg.key !== null });
      return true;
    }
    let nacked = false;
    try {
      nacked = await this.#sluice.nack(this.#queue, this.#group, j.msg.receipt, { error: errorText(failure) });
    } catch (err) {
      this.#o.onError(err, "nack");
    }
    const m = j.msg;
    const deadLettered = nacked && m.attempt >= this.#maxAttempts;
    if (deadLettered && m.key !== null) {
      // The key's next message is receivable now (a nack that retries holds
      // the key until the retry is due): wake the fetch loop for it.
      this.#wake.notify();
    }
    try {
      this.#o.onHandlerError({
        queue: this.#queue,
        group: this.#group,
        message: m,
        error: failure,
        attempt: m.attempt,
        maxAttempts: this.#maxAttempts,
        deadLettered,
      });
    } catch (err) {
      this.#o.onError(err, "handler");
    }
    return false;
  }

  async #ackNow(receipts: string[]): Promise<boolean> {
    try {
      await this.#sluice.ack(this.#queue, this.#group, receipts, { durable: !this.#o.asyncCommitAcks });
      return true;
    } catch (err) {
      this.#o.onError(err, "ack");
      return false;
    }
  }

  // queueAck hands a receipt to the acker: one ack call at a time, carrying
  // all the receipts that came while the previous one was in flight (with
  // asyncCommitAcks, the next receive may take them first). With
  // asyncCommitAcks, the receipt of a keyed message also wakes the fetch
  // loop, before the acker starts: a loop waiting for a wake-up resumes
  // before the acker looks, takes the receipt, and its receive both acks it
  // and takes the key's next message, receivable only then. (A loop in a
  // receive leaves it to the acker, which wakes it once the ack committed.)
  #queueAck(a: QueuedAck): void {
    this.#acks.push(a);
    if (a.keyed && this.#o.asyncCommitAcks) {
      this.#wake.notify();
    }
    this.#startAcker();
  }

  #startAcker(): Promise<void> {
    if (this.#acking === undefined) {
      this.#acking = this.#acker();
    }
    return this.#acking;
  }

  // acker sends the queued receipts, maxAckBatch at a time, until none is
  // left. Durable acks are sent by it alone, beside the fetch loop's
  // receives; when an ack it sent of a keyed message committed, it wakes the
  // fetch loop, since that key's next message becomes receivable only then.
  async #acker(): Promise<void> {
    try {
      await Promise.resolve(); // let the receipts of this tick gather
      for (;;) {
        const batch = this.#acks.splice(0, maxAckBatch);
        if (batch.length === 0) {
          return;
        }
        const ok = await this.#ackNow(batch.map((a) => a.receipt));
        if (ok && batch.some((a) => a.keyed)) {
          this.#wake.notify();
        }
      }
    } finally {
      // In the same turn as the check above that found no receipt left: one
      // queued after it starts a new acker.
      this.#acking = undefined;
    }
  }

  async #flushAcks(): Promise<void> {
    while (this.#acking !== undefined || this.#acks.length > 0) {
      await this.#startAcker();
    }
  }

  // releaseAll gives back the messages of the handlers still running.
  async #releaseAll(): Promise<void> {
    const msgs: Message<B>[] = [];
    for (const j of this.#inflight.values()) {
      j.released = true;
      msgs.push(j.msg);
    }
    await this.#release(msgs);
  }

  // release gives msgs back for immediate redelivery.
  async #release(msgs: Message<B>[]): Promise<void> {
    for (const m of msgs) {
      try {
        await this.#sluice.nack(this.#queue, this.#group, m.receipt, {
          delay: 0,
          error: "consumer shut down before the handler finished",
        });
      } catch (err) {
        this.#o.onError(err, "release");
      }
    }
  }

  #heartbeating: Promise<void> | undefined;

  // heartbeat extends the leases of running handlers (one at a time).
  async #heartbeat(): Promise<void> {
    const receipts: string[] = [];
    for (const [r, j] of this.#inflight) {
      if (!j.released) {
        receipts.push(r);
      }
    }
    if (receipts.length === 0) {
      return;
    }
    try {
      await this.#sluice.extend(this.#queue, this.#group, receipts, this.#lease);
    } catch (err) {
      this.#o.onError(err, "extend");
    }
  }

  // listen subscribes the worker to its Sluice's notifier, which holds the
  // one LISTEN connection all the Sluice's workers share: a notification
  // naming the queue wakes the fetch loop, and so does the start of
  // listening (sends may have committed while nobody listened). While the
  // connection is down, polling covers the gap.
  #listen(): Subscription {
    return this.#sluice.notifier.listen("sluice", (ev) => {
      if (ev.kind === "listening" || (ev.kind === "notified" && ev.payload === this.#queue)) {
        this.#wake.notify();
      } else if (ev.kind === "lost") {
        this.#o.onError(ev.error, "listen");
      }
    });
  }
}
