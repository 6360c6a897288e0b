'use strict';

// Small helpers shared by the SqlTransport test files: receiving with a deadline, polling a
// condition, closing without letting one failed test hang the next, secret-leak checks.

const util = require('node:util');
const { Envelope, JsonSerializer, TransportMessageIdStamp } = require('@schally/nestjs-messenger');

/** The message class the transport tests send. */
class TestMessage {
  /**
   * @param {string} id
   * @param {string} [payload]
   */
  constructor(id, payload = '') {
    this.id = id;
    this.payload = payload;
  }
}

function serializer() {
  return new JsonSerializer([TestMessage]);
}

function envelopeOf(id, payload = '', stamps = []) {
  return new Envelope(new TestMessage(id, payload), stamps);
}

/** The envelope's TransportMessageIdStamp id, as a string. */
function idOf(envelope) {
  const stamp = envelope.last(TransportMessageIdStamp);
  if (stamp === undefined) throw new Error('envelope has no TransportMessageIdStamp');
  return String(stamp.id);
}

/**
 * Up to `count` envelopes yielded by one `get()` loop within `ms`; the loop is then ended
 * (so prefetched rows are released).
 */
async function receiveUpTo(transport, count, ms) {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), ms);
  const received = [];
  try {
    if (count <= 0) return received;
    for await (const envelope of transport.get(controller.signal)) {
      received.push(envelope);
      if (received.length >= count) break;
    }
    return received;
  } finally {
    controller.abort();
    clearTimeout(timer);
  }
}

/** The first envelope within `ms`, or undefined. */
async function receiveWithin(transport, ms) {
  const [first] = await receiveUpTo(transport, 1, ms);
  return first;
}

/** Exactly one envelope within `ms` (asserted). */
async function receiveOne(transport, ms = 2000) {
  const envelope = await receiveWithin(transport, ms);
  if (envelope === undefined) throw new Error(`expected a message within ${ms} ms`);
  return envelope;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Polls `probe` until it returns a truthy value (which is returned) or the deadline passes
 * (then the last value is returned).
 */
async function pollUntil(probe, { timeoutMs = 2000, intervalMs = 20 } = {}) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value || Date.now() >= deadline) return value;
    await sleep(intervalMs);
  }
}

/** Resolves `{ value }` or `{ error }` of a promise, or `'timeout'` after `ms`. */
async function settleWithin(promise, ms) {
  let timer;
  const timeout = new Promise((resolve) => {
    timer = setTimeout(() => resolve('timeout'), ms);
  });
  try {
    return await Promise.race([
      promise.then(
        (value) => ({ value }),
        (error) => ({ error }),
      ),
      timeout,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Closes every transport, each bounded (a test that failed with a message in flight must not
 * hang the hooks of the others).
 */
async function closeAll(transports) {
  const pending = transports.splice(0);
  await Promise.all(pending.map((t) => settleWithin(t.close(), 5000)));
}

/** Every text a logger could print for `error`: String(), message, stack, inspect, causes. */
function errorTexts(error) {
  const texts = [String(error), util.inspect(error, { depth: 10, showHidden: true })];
  const seen = new Set();
  for (let e = error; e !== undefined && e !== null && !seen.has(e); e = e.cause) {
    seen.add(e);
    if (typeof e === 'object') {
      texts.push(String(e.message), String(e.stack));
    } else {
      texts.push(String(e));
    }
  }
  return texts;
}

module.exports = {
  TestMessage,
  serializer,
  envelopeOf,
  idOf,
  receiveUpTo,
  receiveWithin,
  receiveOne,
  sleep,
  pollUntil,
  settleWithin,
  closeAll,
  errorTexts,
};
