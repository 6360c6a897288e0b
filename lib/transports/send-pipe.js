'use strict';

const { fromNative, nativeSync } = require('../native/errors');
const { isNodeHost } = require('../native/host');

/** Sends served on the event loop's own thread (src/direct/sends.rs) need Node.js's libuv. */
const DIRECT_SENDS = isNodeHost();

/**
 * A queue's sends as promises, settled in batches: each send is queued by a sync native call
 * under a sequence number, and the native side reports every send that settled meanwhile in
 * one callback (see src/queue/completions.rs). While a send is waited on, the native callback keeps
 * the event loop alive, as a pending native promise would (src/napi/loop_hold.rs).
 */
/**
 * Pipes with sends in flight, held here so that a sender hears back even when its transport is
 * dropped meanwhile. Otherwise a pipe is reachable only from its transport: the callback the
 * native side keeps holds it weakly, so a transport dropped without close() can be collected
 * (and its native queue with it).
 * @type {Set<SendPipe>}
 */
const IN_FLIGHT = new Set();

class SendPipe {
  #queue;
  #next = 0;
  /** @type {Map<number, { resolve: (id: string) => void, reject: (error: Error) => void }>} */
  #waiting = new Map();
  #started = false;
  /** @type {(count: number) => void} */
  #onSettled;

  /**
   * @param {object} queue the native queue (binding's NativeQueue)
   * @param {(count: number) => void} onSettled told how many sends settled, after their promises
   */
  constructor(queue, onSettled) {
    this.#queue = queue;
    this.#onSettled = onSettled;
  }

  /**
   * Queues one message now (sends keep their call order) and resolves to its id. A message the
   * storage is known to refuse throws here, before anything is written.
   * @param {string} body
   * @param {string} headers
   * @param {number} delayMs
   * @returns {Promise<string>}
   */
  send(body, headers, delayMs) {
    if (!this.#started) {
      const settle = SendPipe.#settleThrough(new WeakRef(this));
      nativeSync(() => this.#queue.onSendsSettled(settle, DIRECT_SENDS));
      this.#started = true;
    }
    const seq = this.#next;
    this.#next = (this.#next + 1) >>> 0;
    try {
      this.#queue.sendQueued(seq, body, headers, delayMs);
    } catch (error) {
      throw fromNative(error);
    }
    IN_FLIGHT.add(this);
    return new Promise((resolve, reject) => this.#waiting.set(seq, { resolve, reject }));
  }

  /**
   * The settle callback the native side keeps: it reaches the pipe through `pipe` (a weak
   * reference) and holds nothing else.
   * @param {WeakRef<SendPipe>} pipe
   */
  static #settleThrough(pipe) {
    return (seqs, ids, errors) => pipe.deref()?.#settle(seqs, ids, errors);
  }

  /**
   * @param {number[]} seqs the sends that settled
   * @param {string} ids their ids, joined by line breaks, in the order of `seqs`
   * @param {Array<string | null> | null} errors null when every send was stored
   */
  #settle(seqs, ids, errors) {
    const idList = ids.split('\n');
    let settled = 0;
    for (let i = 0; i < seqs.length; i += 1) {
      const waiter = this.#waiting.get(seqs[i]);
      if (waiter === undefined) continue;
      this.#waiting.delete(seqs[i]);
      settled += 1;
      const error = errors ? errors[i] : null;
      if (error === null || error === undefined) waiter.resolve(idList[i]);
      else waiter.reject(fromNative(new Error(error)));
    }
    if (this.#waiting.size === 0) IN_FLIGHT.delete(this);
    if (settled > 0) this.#onSettled(settled);
  }
}

module.exports = { SendPipe };
