// sluice: a TypeScript client and worker for sluice, the message queue
// inside PostgreSQL. Thin over the SQL API (docs/sql.md): the engine owns
// the semantics.

export { Sluice, sql, preparedNames, queueOptionsJSON, queueOptionsFrom, queueOptionNames, type QueueOptionKind } from "./client.js";
export type { SluiceOptions } from "./client.js";
export {
  SluiceError,
  InvalidNameError,
  QueueNotFoundError,
  GroupNotFoundError,
  QueueExistsError,
  GroupExistsError,
  InvalidArgumentError,
  InvalidOptionError,
  InvalidReceiptError,
  PayloadTooLargeError,
  InvalidIsolationError,
  NotSupportedError,
  JSONTooDeepError,
  SchemaMissingError,
  errorClasses,
  translate,
} from "./errors.js";
export { Worker, errorText, warnHandlerFailure, defaults as workerDefaults } from "./worker.js";
export type { Handler, HandlerContext, HandlerFailure, WorkerOptions, WorkerOperation } from "./worker.js";
export { Notifier } from "./notifier.js";
export type { NotifierEvent, Subscription } from "./notifier.js";
export { messages } from "./iterate.js";
export type { MessagesOptions } from "./iterate.js";
export type * from "./types.js";
