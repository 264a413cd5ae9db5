// Shared by the tests: a Sluice on DATABASE_URL (a database with the sluice
// schema; make test-typescript makes one) and unique queue names.

import { randomBytes } from "node:crypto";

import { Sluice } from "sluicemq";

/** The database the tests run against. */
export function databaseURL(): string {
  const url = process.env.DATABASE_URL;
  if (!url) {
    throw new Error("DATABASE_URL is not set: run the tests with make test-typescript (it starts a PostgreSQL)");
  }
  return url;
}

/** A new Sluice with a pool of its own; end() it. */
export function newSluice(max = 10): Sluice {
  return new Sluice({ connectionString: databaseURL(), max });
}

/** A queue name unique to this run. */
export function uniqueName(prefix: string): string {
  return `${prefix}_${randomBytes(4).toString("hex")}`;
}

/** Waits until cond() holds, polling, or throws after timeout ms. */
export async function eventually(cond: () => Promise<boolean> | boolean, timeout = 10_000, what = "condition"): Promise<void> {
  const deadline = Date.now() + timeout;
  for (;;) {
    if (await cond()) {
      return;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeout} ms waiting for ${what}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}
