'use strict';

// Small helpers shared by the transport test files and suites: receiving with a deadline,
// background consumers, polling a condition, closing without letting one failed test hang the
// next, expected failures, secret-leak checks.

const util = require('node:util');
const { DelayStamp, Envelope, JsonSerializer, TransportMessageIdStamp } = require('@schally/nestjs-messenger');

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

/**
 * Every operation of a transport that reaches its server or file, by name, for "each fails the
 * same way" tables. `findId` is an id of the engine's form; `delayed` adds a delayed send (a
 * different write on Redis).
 */
function transportOperations({ findId = '1', delayed = false } = {}) {
  return [
    ['send', (t) => t.send(envelopeOf('x'))],
    ...(delayed ? [['delayed send', (t) => t.send(envelopeOf('x').with(new DelayStamp(1000)))]] : []),
    ['setup', (t) => t.setup()],
    ['get', (t) => t.get(new AbortController().signal).next()],
    ['list', (t) => t.list().next()],
    ['find', (t) => t.find(findId)],
    ['getMessageCount', (t) => t.getMessageCount()],
  ];
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

/** Polls `predicate` every `intervalMs`; throws naming `what` once `timeoutMs` passed. */
async function waitFor(predicate, timeoutMs, what, intervalMs = 10) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await predicate()) return;
    if (Date.now() > deadline) throw new Error(`Timed out after ${timeoutMs} ms waiting for ${what}`);
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

/**
 * A long-running get() loop that records each delivery and when it arrived; `stop()` aborts
 * it and acks what it got (so close() can finish).
 */
function startConsumer(t) {
  const controller = new AbortController();
  const arrivals = [];
  const done = (async () => {
    for await (const envelope of t.get(controller.signal)) {
      arrivals.push({ envelope, at: Date.now() });
    }
    return 'ended';
  })();
  return {
    arrivals,
    done,
    /** The arrivals once there are `count`, or what arrived by the deadline. */
    async waitFor(count, timeoutMs) {
      await pollUntil(() => arrivals.length >= count, { timeoutMs, intervalMs: 5 });
      return arrivals.slice();
    },
    async stop() {
      controller.abort();
      await settleWithin(done, 5000);
      for (const { envelope } of arrivals.splice(0)) await t.ack(envelope).catch(() => {});
    },
  };
}

/**
 * Asserts (jest) that the first arrival at `consumer` (of startConsumer) within `timeoutMs` is
 * `sent`; resolves it and how many ms after `sentAt` it came.
 */
async function expectArrival(consumer, sent, sentAt, timeoutMs) {
  const [arrival] = await consumer.waitFor(1, timeoutMs);
  expect(arrival).toBeDefined();
  expect(idOf(arrival.envelope)).toBe(idOf(sent));
  return { arrival, elapsed: arrival.at - sentAt };
}

/**
 * A background get() loop that records what it yields (`received`, `ids()`) and acks it, like
 * the core Worker; `error` is set if get() threw (the loop then ends). `stop()` aborts the loop
 * (at once, before its first await) and waits for it; `stopOrThrow()` also rethrows `error`.
 */
function startAckingConsumer(t) {
  const controller = new AbortController();
  const consumer = { received: [], error: undefined };
  consumer.ids = () => consumer.received.map((e) => e.message.id);
  consumer.done = (async () => {
    try {
      for await (const envelope of t.get(controller.signal)) {
        consumer.received.push(envelope);
        await t.ack(envelope);
      }
    } catch (error) {
      consumer.error = error;
    }
  })();
  consumer.stop = async () => {
    controller.abort();
    await consumer.done;
  };
  consumer.stopOrThrow = async () => {
    await consumer.stop();
    if (consumer.error !== undefined) throw consumer.error;
  };
  return consumer;
}

/**
 * The first envelope one get() loop of `transport` yields, acked while the loop is still open;
 * the loop is then aborted and ended.
 */
async function ackFirst(transport) {
  const controller = new AbortController();
  const loop = transport.get(controller.signal);
  const { value } = await loop.next();
  await transport.ack(value);
  controller.abort();
  await loop.return();
  return value;
}

/** Drains an async iterable into an array. */
async function collect(iterable) {
  const items = [];
  for await (const item of iterable) items.push(item);
  return items;
}

/** The error `promise` rejects with (it must reject). */
async function rejectionOf(promise) {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error('expected the promise to reject');
}

/** The error `fn` throws (it must throw). */
function throwsSync(fn) {
  try {
    fn();
  } catch (error) {
    return error;
  }
  throw new Error('expected the call to throw');
}

/** Runs `start()`, which must reject; resolves `{ error, elapsedMs }`. */
async function failure(start) {
  const startedAt = Date.now();
  try {
    await start();
  } catch (error) {
    return { error, elapsedMs: Date.now() - startedAt };
  }
  throw new Error('expected the operation to fail');
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

/** Asserts (jest) that no text a logger could print for `error` contains any of `secrets`. */
function expectNoSecret(error, ...secrets) {
  const texts = errorTexts(error);
  for (const secret of secrets) {
    for (const text of texts) expect(text).not.toContain(secret);
  }
}

module.exports = {
  TestMessage,
  serializer,
  envelopeOf,
  transportOperations,
  idOf,
  receiveUpTo,
  receiveWithin,
  receiveOne,
  sleep,
  pollUntil,
  waitFor,
  settleWithin,
  closeAll,
  startConsumer,
  expectArrival,
  startAckingConsumer,
  ackFirst,
  collect,
  rejectionOf,
  throwsSync,
  failure,
  errorTexts,
  expectNoSecret,
};
