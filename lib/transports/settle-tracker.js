'use strict';

/**
 * The ADR-007 settle state of one transport instance: the ids it delivered and has not yet
 * settled (the only thing `reject()` is gated on), plus every native operation in progress.
 * `drained()` resolves once both are empty, which is what `close()` waits for.
 */
class SettleTracker {
  #inFlight = new Set();
  #pending = new Set();
  /** Sends queued and not settled yet (counted, not tracked one promise each: see `sendQueued`). */
  #sends = 0;
  #waiters = [];

  /** @param {string} id */
  deliver(id) {
    this.#inFlight.add(id);
  }

  /** @param {string} id */
  isInFlight(id) {
    return this.#inFlight.has(id);
  }

  /**
   * Ends the delivery of `id`; true if it was in flight (and so may be rejected).
   * @param {string} id
   */
  settle(id) {
    const wasInFlight = this.#inFlight.delete(id);
    if (wasInFlight) this.#notifyIfDrained();
    return wasInFlight;
  }

  /**
   * Tracks a promise until it settles; returns it unchanged.
   * @template T
   * @param {Promise<T>} promise
   * @returns {Promise<T>}
   */
  track(promise) {
    this.#pending.add(promise);
    const done = () => {
      this.#pending.delete(promise);
      this.#notifyIfDrained();
    };
    promise.then(done, done);
    return promise;
  }

  /** One more send is queued; `sendsSettled` ends it. */
  sendQueued() {
    this.#sends += 1;
  }

  /** @param {number} count sends that settled */
  sendsSettled(count) {
    this.#sends -= count;
    this.#notifyIfDrained();
  }

  /** Resolves when nothing is in flight and nothing is pending. */
  drained() {
    if (this.#isDrained()) return Promise.resolve();
    return new Promise((resolve) => this.#waiters.push(resolve));
  }

  #isDrained() {
    return this.#inFlight.size === 0 && this.#pending.size === 0 && this.#sends === 0;
  }

  #notifyIfDrained() {
    if (!this.#isDrained() || this.#waiters.length === 0) return;
    // Deferred, so the caller that settled last sees its own await complete before close()
    // resolves (the conformance suite checks that order).
    setImmediate(() => {
      if (!this.#isDrained()) return;
      const waiters = this.#waiters.splice(0);
      for (const resolve of waiters) resolve();
    });
  }
}

module.exports = { SettleTracker };
