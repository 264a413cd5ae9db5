// Rows and options of the client. Durations are milliseconds (numbers).
// Ids and positions, int8 (bigint) in SQL, are decimal strings: exact over
// the whole int8 range, where a number is exact only below 2^53. Counts
// that SQL returns as int8 (status's ready, lag, ...; purgeQueue's and
// redrive's results) are numbers, checked exact (a RangeError past 2^53,
// which no count of messages reaches).

import type pg from "pg";

/** A JSON value: what a body or a headers object may hold. */
export type JSONValue = string | number | boolean | null | JSONValue[] | { [key: string]: JSONValue };

/** Headers of a message: a JSON object. */
export type Headers = { [key: string]: JSONValue };

/**
 * Anything that runs a query: a pg Pool, or a pg Client / PoolClient — one
 * inside a transaction (after BEGIN) makes the call join that transaction.
 */
export interface Queryable {
  query(text: string, values?: unknown[]): Promise<pg.QueryResult>;
}

/** Options every call takes. */
export interface CallOptions {
  /**
   * Run the call on this client, typically one in the caller's transaction,
   * so that the call commits or rolls back with the caller's own writes.
   * Default: the Sluice's pool (autocommit).
   */
  tx?: Queryable;
}

/** A message delivered by receive (the columns of sluice.message). */
export interface Message<B = JSONValue> {
  /** The message id (a retry or a redrive keeps it): an int8 as a decimal string. */
  id: string;
  /** The JSON body. */
  body: B;
  /** The headers object, or null. */
  headers: Headers | null;
  /** The ordering key, or null. */
  key: string | null;
  /** The priority given to send. */
  priority: number;
  /** 1 on the first delivery, one more per redelivery. */
  attempt: number;
  /** When the message was first sent. */
  sentAt: Date;
  /** Names this delivery: pass it to ack, nack or extend. */
  receipt: string;
  /** When the lease ends unless extended. */
  leaseExpiresAt: Date;
  /** The message's position in the queue's commit order (int8, a decimal string). */
  pos: string;
}

/** Options of send. */
export interface SendOptions extends CallOptions {
  /** Metadata: a JSON object. */
  headers?: Headers | null;
  /** Ordering key (at most 512 bytes). */
  key?: string | null;
  /** Deliver no earlier than now + delay (ms). */
  delay?: number | null;
  /** Orders unkeyed messages (default 0). */
  priority?: number;
  /** Deduplication key (at most 512 bytes). */
  dedupKey?: string | null;
}

/** One message of sendBatch. */
export interface BatchMessage {
  body: JSONValue;
  headers?: Headers | null;
  key?: string | null;
  priority?: number;
  dedupKey?: string | null;
}

/** Options of sendBatch. */
export interface SendBatchOptions extends CallOptions {
  /** Delay (ms) applied to every message. */
  delay?: number | null;
}

/** Options of receive. */
export interface ReceiveOptions extends CallOptions {
  /** 1 to 10000 (default 1). */
  maxMessages?: number;
  /** How long the messages are held (ms; default: the queue's lease option). */
  lease?: number | null;
  /** Free text naming the caller (at most 200 characters). */
  consumer?: string | null;
  /** Receipts to acknowledge first, in the same call. */
  ack?: string[] | null;
}

/** Options of nack. */
/** Options of ack. */
export interface AckOptions extends CallOptions {
  /**
   * Wait for the disk at commit (default true, as in every client). false
   * (an explicit opt-in) commits the ack's transaction asynchronously: no
   * flush to wait for, but a server crash may lose the ack, and the messages
   * are delivered again.
   */
  durable?: boolean;
}

export interface NackOptions extends CallOptions {
  /** Retry delay (ms). Default: the queue's exponential backoff; 0: at once. */
  delay?: number | null;
  /** Error text kept with a dead letter (at most 10000 characters). */
  error?: string | null;
}

/**
 * The options of a queue (docs/sql.md, create_queue): what createQueue and
 * alterQueue take, and what alterQueue and listQueues return (every option
 * set). An absent (or undefined) option is unset: createQueue gives it the
 * engine's default (in parentheses), alterQueue leaves it as it is; 0 is a
 * value (retention: 0 keeps nothing). Durations in ms. One key per row of
 * test/queue_options.json (queueOptionNames, test/options.test.ts).
 */
export interface QueueOptions {
  /** Deliveries before a message is dead-lettered (5). */
  maxAttempts?: number;
  /** Default lease of receive (30 s). */
  lease?: number;
  /** First nack retry delay, doubled per attempt (1 s). */
  backoffBase?: number;
  /** Cap of the retry delay (1 h). */
  backoffMax?: number;
  /** How long completed messages stay readable (1 h). */
  retention?: number;
  /** How often a new storage epoch starts (1 min). */
  rotateInterval?: number;
  /** Largest body + headers in bytes (1 MiB). */
  maxPayload?: number;
  /** How long a dedup key of send is remembered (1 h). */
  dedupWindow?: number;
  /** Longest delay of send, sendBatch and an explicit nack delay (365 days, also its upper bound). */
  maxDelay?: number;
  /** Dispatch lanes, 1 to 256 (8); fixed at creation. */
  lanes?: number;
  /** Storage slots, 2 to 4 (2); fixed at creation. Fewer cost less per call; more keep less retained traffic on disk. */
  slots?: number;
  /** Storage engine, 1 or 2 (2); fixed at creation (2 is engine v2, 1 the first engine: docs/design.md). */
  engine?: number;
  /** NOTIFY channel 'sluice' when a send commits (true). */
  notify?: boolean;
  /** Create the group 'default' (true); createQueue only. */
  defaultGroup?: boolean;
}

/** A queue, as list_queues returns it. */
export interface QueueInfo {
  queue: string;
  createdAt: Date;
  /** Its options, every one set (the engine's defaults filled in). */
  options: QueueOptions;
  groups: string[];
  /** Its options as the engine stores them (snake_case keys, intervals as the text they were given as). */
  rawOptions: Record<string, JSONValue>;
}

/** Options of createGroup. */
export interface CreateGroupOptions extends CallOptions {
  /** 'earliest' (default), 'latest', or a time to replay from. */
  startFrom?: "earliest" | "latest" | Date | string;
}

/** One row of status: depth and progress of a group. */
export interface QueueStatus {
  queue: string;
  /** The group, or null for a queue without groups. */
  groupName: string | null;
  ready: number;
  delayed: number;
  inFlight: number;
  dead: number;
  /** Age of the oldest message the group has not completed (ms), or null. */
  oldestPendingAge: number | null;
  lag: number;
  /** Positions (int8, decimal strings): last dispatched, first not completed, last numbered. */
  cursor: string | null;
  lwm: string | null;
  head: string | null;
  liveEpochs: number | null;
  holdsReclaim: boolean | null;
  /** Keyed messages that would be ready but wait for an earlier message of their key. */
  waiting: number;
  /**
   * Whether ready and lag include an estimate of a large backlog not numbered yet
   * (sluice.status reads at most sluice.status_exact_limit of it: docs/sql.md).
   */
  estimated: boolean;
  /**
   * Every message the group dead-lettered, redriven ones included, whichever client did it:
   * grows only while the group exists (a counter, where dead is a gauge).
   */
  deadLettered: number;
}

/** A dead letter (the columns of sluice.dead_letter_info). */
export interface DeadLetter<B = JSONValue> {
  /** The message id (int8, a decimal string). */
  id: string;
  groupName: string;
  body: B;
  headers: Headers | null;
  key: string | null;
  attempts: number;
  error: string | null;
  diedAt: Date;
  sentAt: Date;
  /** The dead letter's own id (int8, a decimal string). */
  deadLetterId: string;
}

/** Options of deadLetters. */
export interface DeadLettersOptions extends CallOptions {
  /** Only this group's dead letters (default: every group's). */
  group?: string | null;
  /** 1 to 10000 (100). */
  maxRows?: number;
}

/** Options of redrive. */
export interface RedriveOptions extends CallOptions {
  /** Only this group's dead letters (default: every group's). */
  group?: string | null;
  /** Only these message ids (default: all). */
  ids?: string[] | null;
}

/** Options of discardDeadLetters: a group, ids, or both (neither is refused, SL006). */
export interface DiscardDeadLettersOptions extends CallOptions {
  /** This group's dead letters: all of them when ids is not given. */
  group?: string | null;
  /** Only these message ids (of group, or of every group without one); [] is refused (SL006). */
  ids?: string[] | null;
}

/** A message a queue stores, as peek shows it (the columns of sluice.stored_message). */
export interface PeekedMessage<B = JSONValue> {
  /** The message id (as receive returns it). */
  id: string;
  /** The JSON body. */
  body: B;
  /** The headers object, or null. */
  headers: Headers | null;
  /** The ordering key, or null. */
  key: string | null;
  /** The priority given to send. */
  priority: number;
  /** When the message was first sent. */
  sentAt: Date;
  /** When it becomes deliverable if sent with a delay, else null. */
  deliverAt: Date | null;
  /** The groups it was sent to again (a retry after a nack, or a redrive), or null. */
  resentTo: string[] | null;
}

/** Options of peek. */
export interface PeekOptions extends CallOptions {
  /** 1 to 1000 (10). */
  maxMessages?: number;
  /** Only messages with an id above it (default: from the first); the last id of a page gets the next one. */
  afterId?: string | null;
}

/** A delivery in flight, as leases shows it (the columns of sluice.lease_info); it has no receipt. */
export interface Lease {
  /** The group that leased the message. */
  groupName: string;
  /** The message id (as receive returns it). */
  id: string;
  /** Its position in the queue's commit order. */
  pos: string;
  /** The delivery's attempt, as receive returned it. */
  attempt: number;
  /** The consumer named by the receive, or null. */
  consumer: string | null;
  /** When the receive leased it. */
  deliveredAt: Date;
  /** When the lease ends unless extended. */
  leaseExpiresAt: Date;
}

/** Options of leases. */
export interface LeasesOptions extends CallOptions {
  /** Only this group's leases (default: every group's). */
  group?: string | null;
  /** 1 to 1000 (100). */
  maxMessages?: number;
}

/** One row of maintain. */
export interface MaintainResult {
  queue: string;
  rotated: boolean;
  reclaimed: number;
}
