// An async iterator over received messages.

import type { Sluice } from "./client.js";
import type { JSONValue, Message } from "./types.js";
import { sleep } from "./wait.js";

/** Options of Sluice.messages (durations in ms). */
export interface MessagesOptions {
  /** Ends the iteration (the messages already received are still yielded). */
  signal?: AbortSignal;
  /** The most messages one receive asks for (default 10). */
  batchSize?: number;
  /** Lease of each message (default: the queue's lease option). */
  lease?: number;
  /** Free text naming the consumer. */
  consumer?: string;
  /** How long to wait before receiving again when the queue was empty (default 500). */
  pollInterval?: number;
}

/**
 * messages yields the messages of queue for group as receive leases them,
 * polling while the queue is empty, until signal is aborted. The caller
 * completes each one with ack or nack (the worker does that itself). A
 * loop left early (break) leaves the rest of the batch leased until their
 * leases expire.
 */
export async function* messages<B = JSONValue>(
  sluice: Sluice,
  queue: string,
  group = "default",
  opts: MessagesOptions = {},
): AsyncGenerator<Message<B>, void, undefined> {
  const poll = opts.pollInterval ?? 500;
  while (!opts.signal?.aborted) {
    const batch = await sluice.receive<B>(queue, group, {
      maxMessages: opts.batchSize ?? 10,
      lease: opts.lease ?? null,
      consumer: opts.consumer ?? null,
    });
    for (const m of batch) {
      yield m;
    }
    if (batch.length === 0) {
      await sleep(poll, opts.signal);
    }
  }
}
