'use strict';

/**
 * Consumes one receiver sequentially: for each envelope, dispatch it on the bus, then
 * ack (and `onHandled`) on success, or `onError` then reject on failure. A failing ack
 * propagates and stops the worker. Stops on external abort, `maxMessages`,
 * `maxRuntimeMs` or `maxMemoryBytes`. Never closes the receiver.
 */
class Worker {
  #receiver;
  #bus;
  #limits;
  #hooks;

  /**
   * @param {{get(signal: AbortSignal): AsyncIterable<object>, ack(envelope: object): Promise<void>, reject(envelope: object): Promise<void>}} receiver
   * @param {{dispatch(envelope: object): Promise<unknown>}} bus
   * @param {{maxMessages?: number, maxRuntimeMs?: number, maxMemoryBytes?: number}} [limits]
   * @param {{onHandled?: Function, onError?: Function}} [hooks]
   */
  constructor(receiver, bus, limits = {}, hooks = {}) {
    this.#receiver = receiver;
    this.#bus = bus;
    this.#limits = limits;
    this.#hooks = hooks;
  }

  /**
   * Runs until a stop condition is met.
   * @param {AbortSignal} [signal] external stop signal
   * @returns {Promise<{processed: number}>}
   */
  async run(signal) {
    const receiver = this.#receiver;
    const bus = this.#bus;
    const { maxMessages, maxRuntimeMs, maxMemoryBytes } = this.#limits;
    const { onHandled, onError } = this.#hooks;

    const internal = new AbortController();
    const propagateAbort = () => internal.abort(signal?.reason);
    if (signal !== undefined) {
      if (signal.aborted) {
        propagateAbort();
      } else {
        signal.addEventListener('abort', propagateAbort, { once: true });
      }
    }

    let runtimeTimer;
    if (maxRuntimeMs !== undefined) {
      runtimeTimer = setTimeout(() => internal.abort(), maxRuntimeMs);
      if (typeof runtimeTimer.unref === 'function') {
        runtimeTimer.unref();
      }
    }

    let processed = 0;
    try {
      for await (const envelope of receiver.get(internal.signal)) {
        let failed = false;
        let failure;
        try {
          await bus.dispatch(envelope);
        } catch (error) {
          failed = true;
          failure = error;
        }

        if (failed) {
          try {
            if (onError !== undefined) {
              await onError(envelope, failure);
            }
          } finally {
            await receiver.reject(envelope);
          }
        } else {
          await receiver.ack(envelope);
          if (onHandled !== undefined) {
            await onHandled(envelope);
          }
        }

        processed += 1;
        if (maxMessages !== undefined && processed >= maxMessages) {
          break;
        }
        if (maxMemoryBytes !== undefined && process.memoryUsage.rss() > maxMemoryBytes) {
          break;
        }
        if (internal.signal.aborted) {
          break;
        }
      }
    } finally {
      internal.abort();
      if (runtimeTimer !== undefined) {
        clearTimeout(runtimeTimer);
      }
      signal?.removeEventListener('abort', propagateAbort);
    }

    return { processed };
  }
}

module.exports = { Worker };
