'use strict';

const { TransportError } = require('./errors');
const { DelayStamp, ReceivedStamp, RedeliveryStamp, TransportMessageIdStamp } = require('./stamps');
const { sleep } = require('./sleep');

const IDLE_SLEEP_MS = 5;

/**
 * Process-local transport, the normative reference for the transport contract (ADR-007).
 * It keeps envelopes as given (no serialization). The in-flight map is its only settle
 * state: `reject` acts only on deliveries currently in flight, `ack` is ungated and
 * idempotent, and `close()` waits for the in-flight map to empty.
 */
class InMemoryTransport {
  #name;
  /** @type {{id: string, envelope: import('./envelope').Envelope, availableAt: number}[]} */
  #queue = [];
  /** @type {Map<string, {id: string, envelope: import('./envelope').Envelope, availableAt: number}>} */
  #inFlight = new Map();
  /** @type {(() => void)[]} */
  #drainWaiters = [];
  #closing = false;
  #nextId = 0;

  /** @param {{name?: string}} [options] */
  constructor(options = {}) {
    this.#name = options.name ?? 'in-memory';
  }

  /** Stores the envelope; returns it with a TransportMessageIdStamp appended. */
  send(envelope) {
    if (this.#closing) {
      throw new TransportError('Cannot send on a transport that is closing or closed.');
    }
    const delayMs = envelope.last(DelayStamp)?.delayMs ?? 0;
    const id = this.#enqueue(envelope, Date.now() + delayMs);
    return Promise.resolve(envelope.with(new TransportMessageIdStamp(id)));
  }

  /**
   * Yields available envelopes (FIFO) one per `next()`, each moved to in-flight and
   * tagged with ReceivedStamp and TransportMessageIdStamp. Ends on abort or close.
   */
  async *get(signal) {
    while (!signal.aborted && !this.#closing) {
      const index = this.#firstAvailableIndex(Date.now());
      if (index === -1) {
        await sleep(IDLE_SLEEP_MS);
        continue;
      }
      const [entry] = this.#queue.splice(index, 1);
      this.#inFlight.set(entry.id, entry);
      yield entry.envelope.with(
        new ReceivedStamp(this.#name),
        new TransportMessageIdStamp(entry.id),
      );
    }
  }

  /** Deletes the message (queued or in flight). Idempotent. */
  ack(envelope) {
    const id = requireId(envelope);
    const index = this.#queue.findIndex((entry) => entry.id === id);
    if (index !== -1) {
      this.#queue.splice(index, 1);
    }
    this.#settle(id);
    return Promise.resolve();
  }

  /**
   * Redelivers an in-flight message under a fresh id with an incremented
   * RedeliveryStamp (available immediately), then settles the original. Does nothing
   * when the envelope is not in flight.
   */
  reject(envelope) {
    const id = requireId(envelope);
    if (!this.#inFlight.has(id)) {
      return Promise.resolve();
    }
    const previous = envelope.last(RedeliveryStamp)?.retryCount ?? 0;
    const copy = envelope
      .withoutAll(ReceivedStamp)
      .withoutAll(TransportMessageIdStamp)
      .withoutAll(RedeliveryStamp)
      .with(new RedeliveryStamp(previous + 1, new Date()));
    this.#enqueue(copy, Date.now());
    this.#settle(id);
    return Promise.resolve();
  }

  /** Stops new work; resolves once nothing is in flight. Idempotent. */
  close() {
    this.#closing = true;
    if (this.#inFlight.size === 0) {
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      this.#drainWaiters.push(resolve);
    });
  }

  /** Number of queued messages (delayed included, in-flight excluded). */
  getMessageCount() {
    return Promise.resolve(this.#queue.length);
  }

  /** Queued messages in order (in-flight excluded), each with its TransportMessageIdStamp. */
  async *list(limit) {
    const max = limit ?? Number.POSITIVE_INFINITY;
    const snapshot = this.#queue.slice();
    let count = 0;
    for (const entry of snapshot) {
      if (count >= max) {
        return;
      }
      count += 1;
      yield entry.envelope.with(new TransportMessageIdStamp(entry.id));
    }
  }

  /** The queued message with that id (in-flight excluded), or undefined. */
  find(id) {
    const key = String(id);
    const entry = this.#queue.find((candidate) => candidate.id === key);
    return Promise.resolve(
      entry === undefined ? undefined : entry.envelope.with(new TransportMessageIdStamp(entry.id)),
    );
  }

  #enqueue(envelope, availableAt) {
    const id = String(this.#nextId);
    this.#nextId += 1;
    this.#queue.push({ id, envelope, availableAt });
    return id;
  }

  #firstAvailableIndex(now) {
    return this.#queue.findIndex((entry) => entry.availableAt <= now);
  }

  #settle(id) {
    this.#inFlight.delete(id);
    if (this.#inFlight.size === 0 && this.#drainWaiters.length > 0) {
      const waiters = this.#drainWaiters.splice(0);
      // Wake close() waiters only after the settling caller has observed its own
      // ack/reject resolving, so "settled" strictly happens-before "closed".
      setImmediate(() => {
        for (const resolve of waiters) {
          resolve();
        }
      });
    }
  }
}

/** @returns {string} */
function requireId(envelope) {
  const stamp = envelope.last(TransportMessageIdStamp);
  if (stamp === undefined) {
    throw new TransportError('Cannot ack or reject an envelope without a TransportMessageIdStamp.');
  }
  return String(stamp.id);
}

module.exports = { InMemoryTransport };
