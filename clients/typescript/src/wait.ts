// Small waiting helpers of the worker.

/** Why a wait ended. */
export type WaitResult = "wake" | "timeout" | "abort";

/**
 * Wakeup is a level-triggered signal: notify() ends the current wait(), or
 * the next one if nobody waits (one pending wake-up is kept, like a Go
 * channel of capacity 1).
 */
export class Wakeup {
  #pending = false;
  #resolve: ((r: WaitResult) => void) | undefined;

  notify(): void {
    if (this.#resolve) {
      const r = this.#resolve;
      this.#resolve = undefined;
      r("wake");
    } else {
      this.#pending = true;
    }
  }

  /** Waits for notify(), for ms milliseconds (Infinity: no limit), or for signal. */
  wait(ms: number, signal?: AbortSignal): Promise<WaitResult> {
    if (this.#pending) {
      this.#pending = false;
      return Promise.resolve("wake");
    }
    if (signal?.aborted) {
      return Promise.resolve("abort");
    }
    return new Promise<WaitResult>((resolve) => {
      let timer: NodeJS.Timeout | undefined;
      const done = (r: WaitResult) => {
        if (timer !== undefined) {
          clearTimeout(timer);
        }
        signal?.removeEventListener("abort", onAbort);
        if (this.#resolve === done) {
          this.#resolve = undefined;
        }
        resolve(r);
      };
      const onAbort = () => done("abort");
      this.#resolve = done;
      if (Number.isFinite(ms)) {
        timer = setTimeout(() => done("timeout"), ms);
      }
      signal?.addEventListener("abort", onAbort, { once: true });
    });
  }
}

/** Sleeps ms milliseconds, or less if signal is aborted. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Wakeup().wait(ms, signal).then(() => undefined);
}

/** Resolves true when p settles within ms, false otherwise. */
export async function within(p: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<boolean>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
  });
  try {
    return await Promise.race([p.then(() => true), timeout]);
  } finally {
    clearTimeout(timer);
  }
}
