// The notifier: one LISTEN connection that a Sluice's workers share, as the
// Go library's internal/notifier does for a Client's consumers.

import type pg from "pg";

import { Wakeup } from "./wait.js";

/**
 * What a subscription hears: a notification on its channel; that the
 * connection listens on the channel (the first time, or again after
 * "lost": notifications sent before may have been missed); or that the
 * connection failed (the notifier reconnects after a pause).
 */
export type NotifierEvent =
  | { kind: "notified"; payload: string }
  | { kind: "listening" }
  | { kind: "lost"; error: unknown };

/** A subscription of a Notifier; end it with unlisten(). */
export interface Subscription {
  /**
   * Ends the subscription: its function is not called afterwards. The last
   * subscription of a channel makes the connection UNLISTEN it; the last of
   * all releases the connection, and the promise resolves once it has.
   */
  unlisten(): Promise<void>;
}

// Pauses between connection attempts (ms): doubling from minPause to maxPause.
const minPause = 100;
const maxPause = 5000;

interface Sub {
  channel: string;
  fn: (ev: NotifierEvent) => void;
  /** "listening" was delivered since it subscribed or since the last "lost". */
  heard: boolean;
}

/** One run of the notifier's loop: from the first subscription to the end of the last. */
interface Generation {
  stopped: boolean;
  /** Notified when stopped, to cut a pause or a pending connect short. */
  stop: Wakeup;
  done: Promise<void>;
}

/**
 * Notifier holds at most one connection of a pg pool (destroyed, never
 * given back, when done: it is in LISTEN mode), LISTENing on the channels
 * its subscriptions want, with a count per channel. The connection is taken
 * when the first subscription comes and released when the last ends, so a
 * Notifier needs no end(). When it fails, the subscriptions hear "lost", the
 * notifier connects again after a pause, and they hear "listening" once it
 * listens.
 */
export class Notifier {
  readonly #pool: pg.Pool;
  readonly #subs = new Map<string, Set<Sub>>();
  /** The channels the current connection LISTENs on. */
  readonly #live = new Set<string>();
  /** A subscription came or went: the loop looks again. */
  readonly #changed = new Wakeup();
  #gen: Generation | undefined;

  constructor(pool: pg.Pool) {
    this.#pool = pool;
  }

  /**
   * Subscribes fn to the notifications of channel (an identifier: it is
   * quoted as one) until unlisten(). It does not wait for the connection: fn
   * hears "listening" once the channel is listened on (soon, when it already
   * is). fn runs on the connection's events: it must be quick and not throw.
   */
  listen(channel: string, fn: (ev: NotifierEvent) => void): Subscription {
    const sub: Sub = { channel, fn, heard: false };
    let subs = this.#subs.get(channel);
    if (subs === undefined) {
      subs = new Set();
      this.#subs.set(channel, subs);
    }
    subs.add(sub);
    if (this.#gen === undefined || this.#gen.stopped) {
      const prev = this.#gen;
      const gen: Generation = { stopped: false, stop: new Wakeup(), done: Promise.resolve() };
      // One connection at a time: the new run starts once the last has ended.
      gen.done = (prev?.done ?? Promise.resolve()).then(() => this.#run(gen));
      this.#gen = gen;
    }
    this.#changed.notify();
    let ended = false;
    return {
      unlisten: async () => {
        if (ended) {
          return;
        }
        ended = true;
        const set = this.#subs.get(channel);
        set?.delete(sub);
        if (set?.size === 0) {
          this.#subs.delete(channel);
        }
        const gen = this.#gen;
        if (gen !== undefined && this.#subs.size === 0) {
          gen.stopped = true;
          gen.stop.notify();
        }
        this.#changed.notify();
        if (gen?.stopped) {
          await gen.done;
        }
      },
    };
  }

  /** Serves the subscriptions until gen stops, reconnecting after failures. */
  async #run(gen: Generation): Promise<void> {
    let pause = minPause;
    while (!gen.stopped) {
      const state = { listened: false };
      try {
        await this.#session(gen, state);
      } catch (err) {
        if (gen.stopped) {
          return;
        }
        this.#deliverAll({ kind: "lost", error: err });
        if (state.listened) {
          pause = minPause;
        }
        await gen.stop.wait(pause);
        pause = Math.min(2 * pause, maxPause);
      }
    }
  }

  /** Takes a connection of the pool, or nothing if gen stops first (the connection, when it comes, goes back). */
  async #connect(gen: Generation): Promise<pg.PoolClient | undefined> {
    const connecting = this.#pool.connect();
    const stopped = gen.stop.wait(Infinity).then(() => undefined);
    const client = await Promise.race([connecting, stopped]);
    if (client === undefined) {
      connecting.then((c) => c.release(), () => {});
    }
    return client;
  }

  /** Holds one connection until gen stops (resolves) or it fails (rejects). */
  async #session(gen: Generation, state: { listened: boolean }): Promise<void> {
    const client = await this.#connect(gen);
    if (client === undefined) {
      return;
    }
    let failure: unknown;
    const onError = (err: unknown) => {
      failure ??= err;
      this.#changed.notify();
    };
    const onEnd = () => onError(new Error("sluice: the LISTEN connection ended"));
    const onNotification = (n: pg.Notification) => this.#deliver(n.channel, { kind: "notified", payload: n.payload ?? "" });
    client.on("error", onError);
    client.on("end", onEnd);
    client.on("notification", onNotification);
    try {
      for (;;) {
        if (failure !== undefined) {
          throw failure;
        }
        if (gen.stopped) {
          return;
        }
        await this.#sync(client);
        state.listened = true;
        this.#greet();
        await this.#changed.wait(Infinity);
      }
    } finally {
      client.off("notification", onNotification);
      client.off("end", onEnd);
      // The error listener stays: an error after the release must not go unheard.
      this.#live.clear();
      // The connection is in LISTEN mode: destroy it rather than give it back.
      client.release(failure instanceof Error ? failure : true);
    }
  }

  /** LISTENs on the channels subscribed to, UNLISTENs the others. */
  async #sync(client: pg.PoolClient): Promise<void> {
    for (const ch of [...this.#live]) {
      if (!this.#subs.has(ch)) {
        await client.query(`UNLISTEN ${client.escapeIdentifier(ch)}`);
        this.#live.delete(ch);
      }
    }
    for (const ch of [...this.#subs.keys()]) {
      if (!this.#live.has(ch)) {
        await client.query(`LISTEN ${client.escapeIdentifier(ch)}`);
        this.#live.add(ch);
      }
    }
  }

  /** Tells the subscriptions of live channels that have not heard it that they listen. */
  #greet(): void {
    for (const [ch, subs] of this.#subs) {
      if (!this.#live.has(ch)) {
        continue;
      }
      for (const s of [...subs]) {
        if (!s.heard && subs.has(s)) {
          s.heard = true;
          s.fn({ kind: "listening" });
        }
      }
    }
  }

  // The deliveries call the functions of a snapshot of the subscriptions,
  // skipping any that a function before ended.
  #deliver(channel: string, ev: NotifierEvent): void {
    const subs = this.#subs.get(channel);
    for (const s of [...(subs ?? [])]) {
      if (subs?.has(s)) {
        s.fn(ev);
      }
    }
  }

  #deliverAll(ev: NotifierEvent): void {
    for (const subs of this.#subs.values()) {
      for (const s of [...subs]) {
        if (subs.has(s)) {
          s.heard = false;
          s.fn(ev);
        }
      }
    }
  }
}
