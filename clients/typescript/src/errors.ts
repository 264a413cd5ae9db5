// Errors raised by the sluice engine: one class per SQLSTATE of class SL
// (docs/sql.md, "Error codes"). translate() is the one place where driver
// errors are interpreted.

/** Fields a server error of node-postgres carries (pg's DatabaseError). */
interface DriverError {
  code?: unknown;
  message: string;
  hint?: unknown;
  detail?: unknown;
}

/**
 * A failure reported by the sluice engine (SQLSTATE class SL) or a missing
 * sluice schema. Branch on the subclass (or on `code`), not on the message.
 * `cause` is node-postgres' DatabaseError.
 */
export class SluiceError extends Error {
  /** The SQLSTATE, such as "SL002". */
  readonly code: string;
  /** The server's hint, if any. */
  readonly hint: string | undefined;
  /** The server's detail, if any. */
  readonly detail: string | undefined;

  constructor(code: string, message: string, options?: { hint?: string; detail?: string; cause?: unknown }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = code;
    this.hint = options?.hint;
    this.detail = options?.detail;
  }
}

/** SL001: a queue or group name that is NULL or malformed. */
export class InvalidNameError extends SluiceError {}
/** SL002: no queue with that name. */
export class QueueNotFoundError extends SluiceError {}
/** SL003: no group with that name in the queue. */
export class GroupNotFoundError extends SluiceError {}
/** SL004: createQueue of an existing name. */
export class QueueExistsError extends SluiceError {}
/** SL005: createGroup of an existing name. */
export class GroupExistsError extends SluiceError {}
/** SL006: NULL or out-of-range argument (body, lease, maxMessages, ...). */
export class InvalidArgumentError extends SluiceError {}
/** SL007: queue options with an unknown key or a bad value. */
export class InvalidOptionError extends SluiceError {}
/**
 * SL008: a receipt that is not of sluice's form at all. A well-formed
 * receipt whose lease is gone is not an error: ack, nack and extend report
 * it by not counting it.
 */
export class InvalidReceiptError extends SluiceError {}
/** SL009: body + headers larger than the queue's max_payload. */
export class PayloadTooLargeError extends SluiceError {}
/** SL010: receive (or send with a dedup key) outside READ COMMITTED. */
export class InvalidIsolationError extends SluiceError {}
/** SL011: a call the queue does not support (yet): seek during its upgrade to engine 2, say. */
export class NotSupportedError extends SluiceError {}
/** SL012: body or headers nested deeper than 512 levels. */
export class JSONTooDeepError extends SluiceError {}
/**
 * The database has no sluice schema, or an older one without the function
 * called: install or upgrade it with `sluice migrate`. `code` is
 * PostgreSQL's own (such as 42883 undefined_function).
 */
export class SchemaMissingError extends SluiceError {}

type ErrorClass = new (code: string, message: string, options?: { hint?: string; detail?: string; cause?: unknown }) => SluiceError;

/** The engine's SQLSTATEs and their classes. */
export const errorClasses: Readonly<Record<string, ErrorClass>> = Object.freeze({
  SL001: InvalidNameError,
  SL002: QueueNotFoundError,
  SL003: GroupNotFoundError,
  SL004: QueueExistsError,
  SL005: GroupExistsError,
  SL006: InvalidArgumentError,
  SL007: InvalidOptionError,
  SL008: InvalidReceiptError,
  SL009: PayloadTooLargeError,
  SL010: InvalidIsolationError,
  SL011: NotSupportedError,
  SL012: JSONTooDeepError,
});

function isDriverError(err: unknown): err is DriverError {
  return err instanceof Error && typeof (err as { code?: unknown }).code === "string";
}

function optString(v: unknown): string | undefined {
  return typeof v === "string" && v !== "" ? v : undefined;
}

/**
 * translate turns a node-postgres error into a SluiceError when it is one of
 * sluice's (class SL, or the sluice schema missing); other errors
 * (connection failures, other SQLSTATEs) are returned unchanged.
 */
export function translate(err: unknown): unknown {
  if (!isDriverError(err) || err instanceof SluiceError) {
    return err;
  }
  const code = err.code as string;
  const hint = optString(err.hint);
  const detail = optString(err.detail);
  const cls = errorClasses[code];
  if (cls !== undefined) {
    return new cls(code, err.message, { hint, detail, cause: err });
  }
  if (schemaMissing(code, err.message)) {
    return new SchemaMissingError(code, err.message, {
      hint: "install or upgrade the sluice schema with: sluice migrate",
      detail,
      cause: err,
    });
  }
  return err;
}

// invalid_schema_name, undefined_function, undefined_table, undefined_object
const missingCodes = new Set(["3F000", "42883", "42P01", "42704"]);

function schemaMissing(code: string, message: string): boolean {
  return missingCodes.has(code) && message.includes("sluice");
}
