'use strict';

// RedisStreamsTransport on a real Redis beyond the conformance suite: options and their
// validation, misuse, the upstream storage layout (stream entries, consumer group, delayed
// zset), delayed promotion (on time, malformed members, atomic under competing drainers),
// poison and foreign entries, ack/reject at the Redis level, list/find/getMessageCount,
// stalled entries (XAUTOCLAIM) and the claim-renewal keeper, blocking reads and abandoned
// blocks. Behaviour reference: shared/reference/upstream-transports.md §2, §3.3, §5.2.

const { ROOT, CORE } = require('../support/child');
const { randomUUID } = require('node:crypto');
const { spawnSync } = require('node:child_process');
const { Redis } = require('ioredis');
const {
  BusNameStamp,
  DelayStamp,
  InvalidArgumentError,
  JsonSerializer,
  ReceivedStamp,
  RedeliveryStamp,
  TransportConnectionError,
  TransportError,
  TransportMessageIdStamp,
} = require('@schally/nestjs-messenger');
const { RedisStreamsTransport } = require('../..');
const { redis: engine } = require('../support/engines');
const {
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
  throwsSync,
  rejectionOf,
  startAckingConsumer,
} = require('../support/transport-helpers');

const REDIS_DSN = engine.dsn;
/** The same server under other DSN strings: a command connection (and wake board) of its own. */
const OTHER_DSN = `${REDIS_DSN}/0`;
const LOCALHOST_DSN = REDIS_DSN.replace('127.0.0.1', 'localhost');
const STREAM_ID = /^\d+-\d+$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

const transports = [];
const keys = [];
const consumers = [];
/** @type {import('ioredis').Redis} */
let redis;

beforeAll(async () => {
  await engine.requireServer();
  redis = new Redis(REDIS_DSN, { maxRetriesPerRequest: 1 });
});

afterAll(async () => {
  await redis?.quit();
});

afterEach(async () => {
  await Promise.all(consumers.splice(0).map((c) => settleWithin(c.stop(), 2000)));
  await Promise.all(transports.splice(0).map((t) => settleWithin(t.close(), 2000)));
  if (keys.length > 0) await redis.del(...keys.splice(0));
});

/** A fresh stream key (and its default delayed key), deleted after the test. */
function freshStream(prefix = 'rt') {
  const stream = engine.uniqueStream(prefix);
  keys.push(stream, `${stream}:delayed`);
  return stream;
}

/** A transport closed after the test; TestMessage registered unless a serializer is given. */
function transport(options) {
  const t = new RedisStreamsTransport({ dsn: REDIS_DSN, serializer: serializer(), ...options });
  transports.push(t);
  return t;
}

/** A background get() loop that records what it yields and acks it (or runs `handle`). */
function startConsumer(t, handle = (envelope) => t.ack(envelope)) {
  const controller = new AbortController();
  const received = [];
  const times = [];
  const done = (async () => {
    for await (const envelope of t.get(controller.signal)) {
      received.push(envelope);
      times.push(Date.now());
      await handle(envelope);
    }
  })();
  const consumer = {
    received,
    times,
    ids: () => received.map((e) => e.message.id),
    done,
    stop: async () => {
      controller.abort();
      await done;
    },
  };
  consumers.push(consumer);
  return consumer;
}

/** One get() loop held open: `next(ms)` yields one envelope or undefined (and ends the loop). */
function hold(t) {
  const controller = new AbortController();
  const iterator = t.get(controller.signal);
  return {
    async next(ms = 2000) {
      const timer = setTimeout(() => controller.abort(), ms);
      try {
        const { value, done } = await iterator.next();
        return done ? undefined : value;
      } finally {
        clearTimeout(timer);
      }
    },
    async stop() {
      controller.abort();
      await iterator.return();
    },
  };
}

/** The stored (body, headers) pair the transport writes for an envelope. */
function stored(envelope) {
  const encoded = serializer().encode(envelope);
  return { body: encoded.body, headers: JSON.stringify(encoded.headers) };
}

/** Appends an entry in upstream's form, as a TypeScript sender would. */
async function xaddMessage(stream, id, payload = '') {
  const { body, headers } = stored(envelopeOf(id, payload));
  return redis.xadd(stream, '*', 'body', body, 'headers', headers);
}

/** A delayed member in upstream's form. */
function delayedMember(id, nonce = randomUUID()) {
  const { body, headers } = stored(envelopeOf(id));
  return JSON.stringify({ nonce, body, headers });
}

/** Redis's clock in epoch ms (the transport scores delayed members with it). */
async function redisNow() {
  const [seconds, micros] = await redis.time();
  return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
}

/** XRANGE as [{ id, fields: [f, v, …] }]. */
async function entries(stream) {
  const reply = await redis.xrange(stream, '-', '+');
  return reply.map(([id, fields]) => ({ id, fields }));
}

/** XPENDING summary count (0 when the group or the stream is missing). */
async function pendingCount(stream, group = 'messenger') {
  try {
    const [count] = await redis.xpending(stream, group);
    return Number(count);
  } catch (error) {
    if (/NOGROUP/.test(error.message)) return 0;
    throw error;
  }
}

/** XINFO GROUPS as objects. */
async function groups(stream) {
  const reply = await redis.xinfo('GROUPS', stream);
  return reply.map((flat) => Object.fromEntries(pairs(flat)));
}

/** XINFO CONSUMERS as objects. */
async function consumersOf(stream, group = 'messenger') {
  const reply = await redis.xinfo('CONSUMERS', stream, group);
  return reply.map((flat) => Object.fromEntries(pairs(flat)));
}

function pairs(flat) {
  const out = [];
  for (let i = 0; i < flat.length; i += 2) out.push([flat[i], flat[i + 1]]);
  return out;
}

/**
 * Waits until `consumer` (which must have received something already, so that Redis knows
 * it) has been idle for `idleMs` by XINFO CONSUMERS: with a long pollIntervalMs it then sits
 * in its blocking read.
 */
async function waitUntilBlocked(stream, consumer, idleMs = 150) {
  const blocked = await pollUntil(
    async () => {
      try {
        const info = (await consumersOf(stream)).find((c) => c.name === consumer);
        return info !== undefined && Number(info.idle) >= idleMs;
      } catch {
        return false;
      }
    },
    { timeoutMs: 3000, intervalMs: 20 },
  );
  if (!blocked) throw new Error(`consumer ${consumer} never settled into a blocking read`);
}

/** Starts a consumer and lets it settle, idle, into a blocking read (after a warm-up message). */
async function startIdleConsumer(t, stream, consumerName) {
  const consumer = startConsumer(t);
  await xaddMessage(stream, 'warm-up');
  if (!(await pollUntil(() => consumer.received.length === 1))) throw new Error('warm-up message not received');
  await waitUntilBlocked(stream, consumerName);
  return consumer;
}

/**
 * A transport on a fresh stream (consumer `name`, pollIntervalMs 5000, `options`) with a
 * consumer settled, idle, into a blocking read.
 */
async function blockedInARead(name, options = {}) {
  const stream = freshStream();
  const t = transport({ stream, consumer: name, pollIntervalMs: 5000, ...options });
  const consumer = await startIdleConsumer(t, stream, name);
  return { stream, t, consumer };
}

/**
 * One round of an abort racing an XADD: a get() loop of `t` settles into a blocking read, an
 * entry is added and the loop aborted at once (the order varies with `round`), so the block
 * may or may not have taken the entry. Returns the entry's id and what the loop yielded.
 */
async function abortRacingAnXadd(t, stream, consumerName, round) {
  const consumer = startAckingConsumer(t);
  await waitUntilBlocked(stream, consumerName, 100);
  const added = xaddMessage(stream, `race-${round}`);
  if (round % 3 === 1) await sleep(0);
  if (round % 3 === 2) await added;
  const stopped = consumer.stopOrThrow(); // aborts at once
  const id = await added;
  await stopped;
  return { id, received: consumer.received };
}

/** A transport on a fresh stream, and the ids of the messages `<prefix>-<i>` it sent one by one, i from `first` to `last`. */
async function freshStreamWithSent(prefix, first, last) {
  const stream = freshStream();
  const t = transport({ stream });
  const ids = [];
  for (let i = first; i <= last; i += 1) ids.push(idOf(await t.send(envelopeOf(`${prefix}-${i}`))));
  return { stream, t, ids };
}

/** freshStreamWithSent of `count` messages, all of them received by the same transport (asserted). */
async function receivedOnFreshStream(count, prefix) {
  const { stream, t } = await freshStreamWithSent(prefix, 0, count - 1);
  const received = await receiveUpTo(t, count, 3000);
  expect(received).toHaveLength(count);
  return { stream, t, received };
}

/** Waits until the stream holds no entry and nothing is pending (acks are written behind). */
async function expectDrained(stream, timeoutMs = 2000) {
  const state = async () => ({ length: await redis.xlen(stream), pending: await pendingCount(stream) });
  await pollUntil(
    async () => {
      const now = await state();
      return now.length === 0 && now.pending === 0;
    },
    { timeoutMs },
  );
  expect(await state()).toEqual({ length: 0, pending: 0 });
}

describe('construction and options', () => {
  it('constructs with only dsn and stream: upstream defaults for name, group, consumer, delayKey and serializer', async () => {
    const stream = freshStream();
    const bare = new RedisStreamsTransport({ dsn: REDIS_DSN, stream });
    transports.push(bare);

    // The default serializer is a JsonSerializer: the stored form is the wire form.
    const envelope = envelopeOf('defaults', 'd');
    const sent = await bare.send(envelope);
    expect(idOf(sent)).toMatch(STREAM_ID);
    expect(await entries(stream)).toEqual([
      { id: idOf(sent), fields: ['body', stored(envelope).body, 'headers', stored(envelope).headers] },
    ]);
    // delayKey defaults to `<stream>:delayed`.
    const delayed = await bare.send(envelopeOf('later').with(new DelayStamp(60000)));
    expect(await redis.zrange(`${stream}:delayed`, 0, -1)).toHaveLength(1);
    expect(JSON.parse((await redis.zrange(`${stream}:delayed`, 0, -1))[0]).nonce).toBe(idOf(delayed));

    // name defaults to the stream, group to "messenger", consumer to `<pid>-<uuid>`.
    const reader = transport({ stream });
    const received = await receiveOne(reader);
    expect(received.message).toEqual(new TestMessage('defaults', 'd'));
    expect(received.last(ReceivedStamp)).toEqual(new ReceivedStamp(stream));
    await reader.ack(received);
    expect((await groups(stream)).map((g) => g.name)).toEqual(['messenger']);
    const names = (await consumersOf(stream)).map((c) => c.name);
    expect(names).toHaveLength(1);
    expect(names[0]).toMatch(new RegExp(`^${process.pid}-[0-9a-f-]{36}$`));
  });

  it('gives every instance a consumer name of its own by default', async () => {
    const stream = freshStream();
    const a = transport({ stream });
    const b = transport({ stream });
    await a.send(envelopeOf('1'));
    await a.send(envelopeOf('2'));
    const one = await receiveOne(a);
    await a.ack(one);
    const two = await receiveOne(b);
    await b.ack(two);
    const names = (await consumersOf(stream)).map((c) => c.name);
    expect(new Set(names).size).toBe(2);
  });

  it('honours every option (name, group, consumer, serializer, delayKey, readBatchSize, ioredis options of no effect)', async () => {
    const stream = freshStream();
    const delayKey = `${stream}:later`;
    keys.push(delayKey);
    const t = transport({
      dsn: REDIS_DSN,
      stream,
      name: 'custom-name',
      group: 'custom-group',
      consumer: 'custom-consumer',
      serializer: new JsonSerializer([TestMessage]),
      delayKey,
      claimIdleMs: 1000,
      pollIntervalMs: 20,
      readBatchSize: 3,
      cluster: false,
      redisOptions: { lazyConnect: true, enableReadyCheck: false, maxRetriesPerRequest: 20 },
      connectTimeoutMs: 2000,
    });
    for (const id of ['1', '2', '3', '4', '5']) await t.send(envelopeOf(id));
    const nonce = idOf(await t.send(envelopeOf('later').with(new DelayStamp(60000))));
    expect(await redis.zcard(delayKey)).toBe(1);
    expect(await redis.exists(`${stream}:delayed`)).toBe(0);
    expect(JSON.parse((await redis.zrange(delayKey, 0, 0))[0]).nonce).toBe(nonce);

    const loop = hold(t);
    const first = await loop.next();
    expect(first.message).toEqual(new TestMessage('1'));
    expect(first.last(ReceivedStamp)).toEqual(new ReceivedStamp('custom-name'));
    // The first read takes readBatchSize entries into this consumer's pending list.
    expect((await consumersOf(stream, 'custom-group')).map((c) => [c.name, Number(c.pending)])).toEqual([
      ['custom-consumer', 3],
    ]);
    expect((await groups(stream)).map((g) => g.name)).toEqual(['custom-group']);
    await t.ack(first);
    const rest = [];
    for (let i = 0; i < 4; i += 1) {
      const envelope = await loop.next();
      rest.push(envelope.message.id);
      await t.ack(envelope);
    }
    await loop.stop();
    expect(rest).toEqual(['2', '3', '4', '5']);
    await expectDrained(stream);
  });

  it('rejects invalid options with InvalidArgumentError', () => {
    const cases = [
      undefined,
      null,
      'redis://127.0.0.1:6379',
      { dsn: REDIS_DSN },
      { dsn: REDIS_DSN, stream: '' },
      { dsn: REDIS_DSN, stream: 42 },
      { dsn: REDIS_DSN, stream: 's', group: '' },
      { dsn: REDIS_DSN, stream: 's', consumer: '' },
      { dsn: REDIS_DSN, stream: 's', delayKey: '' },
      { dsn: REDIS_DSN, stream: 's', claimIdleMs: -1 },
      { dsn: REDIS_DSN, stream: 's', claimIdleMs: Number.NaN },
      { dsn: REDIS_DSN, stream: 's', pollIntervalMs: -5 },
      { dsn: REDIS_DSN, stream: 's', pollIntervalMs: Infinity },
      { dsn: REDIS_DSN, stream: 's', readBatchSize: 0 },
      { dsn: REDIS_DSN, stream: 's', readBatchSize: -1 },
      { dsn: REDIS_DSN, stream: 's', readBatchSize: 1.5 },
      { dsn: REDIS_DSN, stream: 's', connectTimeoutMs: -1 },
    ];
    for (const options of cases) {
      const error = throwsSync(() => new RedisStreamsTransport(options));
      expect({ options, name: error.name }).toEqual({ options, name: 'InvalidArgumentError' });
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect(error).not.toBeInstanceOf(TransportError);
    }
    expect(throwsSync(() => new RedisStreamsTransport({ dsn: REDIS_DSN, stream: 's', claimIdleMs: -1 })).message).toMatch(
      /claimIdleMs/,
    );
    expect(throwsSync(() => new RedisStreamsTransport({ dsn: REDIS_DSN, stream: 's', readBatchSize: 0 })).message).toMatch(
      /readBatchSize/,
    );
    expect(throwsSync(() => new RedisStreamsTransport({ dsn: REDIS_DSN, stream: 's', group: '' })).message).toMatch(/group/);
    expect(throwsSync(() => new RedisStreamsTransport({ dsn: REDIS_DSN })).message).toMatch(/stream/);
  });

  it('rejects a malformed DSN and a scheme other than redis:// or rediss:// with TransportConnectionError', () => {
    for (const dsn of ['', 'not a url', 'redis://', 'redis://127.0.0.1:6379/notadb', undefined]) {
      const error = throwsSync(() => new RedisStreamsTransport({ dsn, stream: 's' }));
      expect({ dsn, name: error.name }).toEqual({ dsn, name: 'TransportConnectionError' });
      expect(error).toBeInstanceOf(TransportConnectionError);
      expect(error.message).toMatch(/Redis DSN/);
    }
    for (const dsn of ['http://127.0.0.1:6379', 'postgres://u@127.0.0.1/db', 'valkey://127.0.0.1:6379']) {
      const error = throwsSync(() => new RedisStreamsTransport({ dsn, stream: 's' }));
      expect(error).toBeInstanceOf(TransportConnectionError);
      expect(error.message).toContain('redis:// or rediss://');
    }
    const secret = throwsSync(() => new RedisStreamsTransport({ dsn: 'http://user:hunter2secret@127.0.0.1:6379', stream: 's' }));
    expect(secret.message).not.toContain('hunter2secret');
  });

  it("accepts upstream's DSN forms without connecting (user, password, port, db; rediss)", async () => {
    for (const dsn of ['redis://localhost:6379', 'redis://user:pass@host.invalid:6390/2', 'rediss://secure.invalid:6379']) {
      const t = new RedisStreamsTransport({ dsn, stream: 's' });
      expect(await settleWithin(t.close(), 1000)).toEqual({ value: undefined });
    }
  });

  it('uses the database number of the DSN', async () => {
    const stream = freshStream();
    const t = transport({ dsn: `${REDIS_DSN}/3`, stream });
    await t.send(envelopeOf('db3'));
    expect(await redis.exists(stream)).toBe(0);
    const db3 = new Redis(`${REDIS_DSN}/3`, { maxRetriesPerRequest: 1 });
    try {
      expect(await db3.xlen(stream)).toBe(1);
      const received = await receiveOne(t);
      await t.ack(received);
      expect(await pollUntil(async () => (await db3.xlen(stream)) === 0)).toBe(true);
    } finally {
      await db3.del(stream, `${stream}:delayed`);
      await db3.quit();
    }
  });
});

describe('misuse and close()', () => {
  it("throws upstream's TransportError when acking or rejecting an envelope without a TransportMessageIdStamp", async () => {
    const t = transport({ stream: freshStream() });
    for (const settle of [(e) => t.ack(e), (e) => t.reject(e)]) {
      const error = await rejectionOf(settle(envelopeOf('no-id')));
      expect(error).toBeInstanceOf(TransportError);
      expect(error.message).toBe('Cannot ack or reject an envelope without a TransportMessageIdStamp.');
    }
  });

  it('refuses to send once closed, and while close() waits for an in-flight message', async () => {
    const stream = freshStream();
    const t = transport({ stream });
    await t.send(envelopeOf('in-flight'));
    const received = await receiveOne(t);
    const closing = t.close();
    const during = await rejectionOf(t.send(envelopeOf('during')));
    expect(during).toBeInstanceOf(TransportError);
    expect(during.message).toBe('Cannot send on a Redis transport that is closing or closed.');
    expect(await settleWithin(closing, 100)).toBe('timeout');
    await t.ack(received);
    await closing;
    const after = await rejectionOf(t.send(envelopeOf('after')));
    expect(after).toBeInstanceOf(TransportError);
    expect(after).not.toBeInstanceOf(TransportConnectionError);
    expect(after.message).toBe('Cannot send on a Redis transport that is closing or closed.');
    expect(await redis.xlen(stream)).toBe(0);
  });

  it('close() is idempotent, and get() after close() ends at once without yielding', async () => {
    const stream = freshStream();
    const t = transport({ stream });
    await t.send(envelopeOf('left'));
    await Promise.all([t.close(), t.close()]);
    await t.close();
    const startedAt = Date.now();
    expect(await receiveWithin(t, 1000)).toBeUndefined();
    expect(Date.now() - startedAt).toBeLessThan(200);
    expect(await redis.xlen(stream)).toBe(1);
  });

  it('closes an instance that never connected at once', async () => {
    const t = new RedisStreamsTransport({ dsn: REDIS_DSN, stream: 'never-used' });
    expect(await settleWithin(t.close(), 500)).toEqual({ value: undefined });
  });
});

describe('storage layout (identical to upstream)', () => {
  it('stores a send as one entry with exactly the fields body (serializer body) and headers (JSON of the header map)', async () => {
    const stream = freshStream();
    const t = transport({ stream });
    const envelope = envelopeOf('layout', 'p "q" \n é 🎉').with(new BusNameStamp('bus'), new RedeliveryStamp(2, new Date(0)));
    const sent = await t.send(envelope);
    const expected = serializer().encode(envelope);
    const all = await entries(stream);
    expect(all).toEqual([
      { id: idOf(sent), fields: ['body', expected.body, 'headers', JSON.stringify(expected.headers)] },
    ]);
    expect(JSON.parse(all[0].fields[3])).toEqual(expected.headers);
    expect(typeof JSON.parse(all[0].fields[3])['X-Message-Stamps']).toBe('string');
    expect(await redis.exists(`${stream}:delayed`)).toBe(0);
    expect(typeof sent.last(TransportMessageIdStamp).id).toBe('string');
  });

  it('stores a delayed send as a zset member {"nonce","body","headers"} scored now+delay (epoch ms), and returns the nonce', async () => {
    const stream = freshStream();
    const t = transport({ stream });
    const envelope = envelopeOf('delayed', 'x').with(new DelayStamp(5000));
    const before = await redisNow();
    const sent = await t.send(envelope);
    const after = await redisNow();
    const nonce = idOf(sent);
    expect(nonce).toMatch(UUID);

    const [member, score] = await redis.zrange(`${stream}:delayed`, 0, -1, 'WITHSCORES');
    expect(await redis.zcard(`${stream}:delayed`)).toBe(1);
    const { body, headers } = stored(envelope);
    // Byte for byte: key order nonce, body, headers; headers is the JSON string.
    expect(member).toBe(JSON.stringify({ nonce, body, headers }));
    expect(Object.keys(JSON.parse(member))).toEqual(['nonce', 'body', 'headers']);
    expect(typeof JSON.parse(member).headers).toBe('string');
    expect(Number.isInteger(Number(score))).toBe(true);
    expect(Number(score)).toBeGreaterThanOrEqual(before + 5000);
    expect(Number(score)).toBeLessThanOrEqual(after + 5000 + 1);
    expect(Math.abs(Number(score) - (Date.now() + 5000))).toBeLessThan(1000);
    // Nothing in the stream until it is due.
    expect(await redis.xlen(stream)).toBe(0);
  });

  it('rounds a fractional delay up to whole milliseconds (never early)', async () => {
    const stream = freshStream();
    const t = transport({ stream });
    const before = await redisNow();
    await t.send(envelopeOf('fraction').with(new DelayStamp(1000.2)));
    const [, score] = await redis.zrange(`${stream}:delayed`, 0, -1, 'WITHSCORES');
    expect(Number.isInteger(Number(score))).toBe(true);
    expect(Number(score)).toBeGreaterThanOrEqual(before + 1001);
  });

  it('treats DelayStamp(0) as an immediate send', async () => {
    const stream = freshStream();
    const t = transport({ stream });
    const sent = await t.send(envelopeOf('zero').with(new DelayStamp(0)));
    expect(idOf(sent)).toMatch(STREAM_ID);
    expect(await redis.xlen(stream)).toBe(1);
    expect(await redis.exists(`${stream}:delayed`)).toBe(0);
  });

  it('creates the consumer group "messenger" from id 0 on the first get(): entries written before it are delivered', async () => {
    const stream = freshStream();
    const first = await xaddMessage(stream, 'before-1');
    const second = await xaddMessage(stream, 'before-2');
    expect(await groups(stream)).toEqual([]);

    const t = transport({ stream });
    const received = await receiveUpTo(t, 2, 2000);
    expect(received.map((e) => [idOf(e), e.message.id])).toEqual([
      [first, 'before-1'],
      [second, 'before-2'],
    ]);
    for (const e of received) await t.ack(e);
    const [group] = await groups(stream);
    expect(group.name).toBe('messenger');
    expect(group['last-delivered-id']).toBe(second);
    await expectDrained(stream);
  });

  it('creates the stream and the group on the first get() of an empty stream (MKSTREAM)', async () => {
    const stream = freshStream();
    const t = transport({ stream });
    expect(await receiveWithin(t, 150)).toBeUndefined();
    expect(await redis.type(stream)).toBe('stream');
    const [group] = await groups(stream);
    expect(group.name).toBe('messenger');
    expect(group['last-delivered-id']).toBe('0-0');
  });

  it('joins an existing group without resetting it (BUSYGROUP is fine)', async () => {
    const stream = freshStream();
    await xaddMessage(stream, 'old');
    await redis.xgroup('CREATE', stream, 'messenger', '$');
    const fresh = await xaddMessage(stream, 'new');
    const t = transport({ stream });
    await t.setup();
    const received = await receiveUpTo(t, 2, 500);
    expect(received.map((e) => idOf(e))).toEqual([fresh]);
    await t.ack(received[0]);
  });
});

describe('delayed messages', () => {
  it.each([
    ['a consumer started after the send', {}, false],
    ['an idle consumer blocked in a read (default pollIntervalMs)', {}, true],
    // The SQL engines wake idle consumers on an in-process send (see the MySQL and PostgreSQL
    // "in-process delayed send ... although pollIntervalMs is 60 s" tests); the Redis engine
    // has the same wake signal, bumped by every send.
    ['an idle consumer blocked in a read although pollIntervalMs is 5000 (in-process sender)', { pollIntervalMs: 5000 }, true],
  ])('delivers a 300 ms delayed message on time to %s', async (_, options, idleFirst) => {
    const stream = freshStream();
    const consumerName = `c-${randomUUID()}`;
    const t = transport({ stream, consumer: consumerName, ...options });
    const sender = transport({ stream });
    let consumer;
    if (idleFirst) consumer = await startIdleConsumer(t, stream, consumerName);
    const sentAt = Date.now();
    await sender.send(envelopeOf('on-time').with(new DelayStamp(300)));
    let receivedAt;
    if (idleFirst) {
      expect(await pollUntil(() => consumer.received.length === 2, { timeoutMs: 2000, intervalMs: 5 })).toBe(true);
      expect(consumer.ids()).toEqual(['warm-up', 'on-time']);
      receivedAt = Date.now();
    } else {
      const received = await receiveOne(t, 2000);
      receivedAt = Date.now();
      await t.ack(received);
    }
    const elapsed = receivedAt - sentAt;
    expect(elapsed).toBeGreaterThanOrEqual(280);
    expect(elapsed).toBeLessThan(1000);
  });

  it('drops malformed members put into the zset by hand, and still delivers a good delayed message', async () => {
    const stream = freshStream();
    const delayKey = `${stream}:delayed`;
    const due = (await redisNow()) - 1000;
    const malformed = [
      'not json',
      '{"nonce":"n-1"}',
      '{"nonce":"n-2","body":"{}"}',
      '{"nonce":"n-3","headers":"{}"}',
      '{"nonce":"n-4","body":{"id":"x"},"headers":"{}"}',
      '[1,2,3]',
      '42',
    ];
    for (const member of malformed) await redis.zadd(delayKey, due, member);
    const t = transport({ stream });
    const consumer = startConsumer(t);
    await t.send(envelopeOf('good').with(new DelayStamp(200)));
    expect(await pollUntil(() => consumer.received.length >= 1, { timeoutMs: 2000 })).toBe(true);
    expect(consumer.ids()).toEqual(['good']);
    expect(await redis.zcard(delayKey)).toBe(0);
    await expectDrained(stream);
    // get() keeps going after the dropped members.
    await t.send(envelopeOf('after'));
    expect(await pollUntil(() => consumer.received.length >= 2, { timeoutMs: 2000 })).toBe(true);
    await consumer.stop();
    expect(consumer.ids()).toEqual(['good', 'after']);
  });

  it('promotes members written in upstream form by another writer, on time at the default pollIntervalMs (50)', async () => {
    const stream = freshStream();
    const t = transport({ stream });
    const consumer = startConsumer(t);
    const due = (await redisNow()) + 300;
    await redis.zadd(`${stream}:delayed`, due, delayedMember('from-ts'));
    expect(await pollUntil(() => consumer.received.length >= 1, { timeoutMs: 2000, intervalMs: 5 })).toBe(true);
    expect(consumer.ids()).toEqual(['from-ts']);
    // Redis's clock and ours are the same host's.
    expect(consumer.times[0]).toBeGreaterThanOrEqual(due - 20);
    expect(consumer.times[0]).toBeLessThan(due + 250);
    expect(await redis.zcard(`${stream}:delayed`)).toBe(0);
  });

  it('delivers 500 delayed messages with the same due time exactly once across two competing transports (atomic promotion)', async () => {
    const stream = freshStream();
    const delayKey = `${stream}:delayed`;
    const a = transport({ stream, pollIntervalMs: 20 });
    const b = transport({ stream, dsn: OTHER_DSN, pollIntervalMs: 20 });
    const consumerA = startConsumer(a);
    const consumerB = startConsumer(b);

    const due = (await redisNow()) + 400;
    const ids = Array.from({ length: 500 }, (_, i) => `d-${i}`);
    const pipeline = redis.pipeline();
    for (const id of ids) pipeline.zadd(delayKey, due, delayedMember(id));
    await pipeline.exec();
    expect(await redis.zcard(delayKey)).toBe(500);

    const total = () => consumerA.received.length + consumerB.received.length;
    expect(await pollUntil(() => total() >= 500, { timeoutMs: 10000 })).toBe(true);
    // Not before the due time (Redis's clock and ours are the same host's).
    expect(Math.min(...consumerA.times, ...consumerB.times)).toBeGreaterThanOrEqual(due - 20);
    await sleep(300);
    await consumerA.stop();
    await consumerB.stop();
    const delivered = [...consumerA.ids(), ...consumerB.ids()];
    expect(delivered).toHaveLength(500);
    expect(new Set(delivered).size).toBe(500);
    expect([...delivered].sort()).toEqual([...ids].sort());
    expect(await redis.zcard(delayKey)).toBe(0);
    await expectDrained(stream);
  }, 20000);

  it('does not deliver a delayed message before it is due even with many consumers polling', async () => {
    const stream = freshStream();
    const consumersList = [0, 1, 2].map(() => startConsumer(transport({ stream, pollIntervalMs: 5 })));
    const sentAt = Date.now();
    await transport({ stream }).send(envelopeOf('not-early').with(new DelayStamp(400)));
    expect(
      await pollUntil(() => consumersList.some((c) => c.received.length > 0), { timeoutMs: 2000, intervalMs: 5 }),
    ).toBe(true);
    expect(Date.now() - sentAt).toBeGreaterThanOrEqual(380);
    await sleep(100);
    expect(consumersList.reduce((n, c) => n + c.received.length, 0)).toBe(1);
  });
});

describe('poison and foreign entries', () => {
  /** Entries a TS or native consumer cannot turn into a message. */
  async function addPoison(stream) {
    return {
      foreign: await redis.xadd(stream, '*', 'foo', 'bar'),
      bodyOnly: await redis.xadd(stream, '*', 'body', '{"id":"b"}'),
      headersOnly: await redis.xadd(stream, '*', 'headers', stored(envelopeOf('h')).headers),
      notJsonHeaders: await redis.xadd(stream, '*', 'body', '{"id":"x"}', 'headers', 'not-json'),
      headersNotObject: await redis.xadd(stream, '*', 'body', '{"id":"x"}', 'headers', '"a string"'),
      unregistered: await redis.xadd(
        stream,
        '*',
        'body',
        '{"id":"u"}',
        'headers',
        JSON.stringify({ 'X-Message-Type': 'NotRegistered', 'X-Message-Stamps': '[]' }),
      ),
      bodyNotObject: await redis.xadd(stream, '*', 'body', '[1]', 'headers', stored(envelopeOf('y')).headers),
    };
  }

  it('acks and deletes foreign and undecodable entries, delivers only the good ones, and keeps going', async () => {
    const stream = freshStream();
    const t = transport({ stream });
    await t.setup();
    const poison = await addPoison(stream);
    const good = idOf(await t.send(envelopeOf('good-1')));

    const consumer = startConsumer(t);
    expect(await pollUntil(() => consumer.received.length >= 1)).toBe(true);
    expect(consumer.received.map((e) => [idOf(e), e.message.id])).toEqual([[good, 'good-1']]);
    await t.send(envelopeOf('good-2'));
    expect(await pollUntil(() => consumer.received.length >= 2)).toBe(true);
    await consumer.stop();
    expect(consumer.ids()).toEqual(['good-1', 'good-2']);

    await expectDrained(stream);
    const left = (await entries(stream)).map((e) => e.id);
    for (const id of Object.values(poison)) expect(left).not.toContain(id);
  });

  it('list() skips undecodable entries and leaves them in place; find() of one is undefined', async () => {
    const stream = freshStream();
    const t = transport({ stream });
    const poison = await addPoison(stream);
    const good = await xaddMessage(stream, 'listed');
    const listed = [];
    for await (const envelope of t.list()) listed.push([idOf(envelope), envelope.message.id]);
    expect(listed).toEqual([[good, 'listed']]);
    for (const id of Object.values(poison)) expect(await t.find(id)).toBeUndefined();
    expect(await redis.xlen(stream)).toBe(Object.keys(poison).length + 1);
    expect(await pendingCount(stream)).toBe(0);
  });
});

describe('ack and reject at the Redis level', () => {
  it('ack is XACK + XDEL: the entry leaves the pending list and the stream (written behind by default); a second ack is a no-op', async () => {
    const stream = freshStream();
    const t = transport({ stream, consumer: 'acker' });
    const id = idOf(await t.send(envelopeOf('to-ack')));
    const loop = hold(t);
    const received = await loop.next();
    expect(idOf(received)).toBe(id);
    const [count, , , perConsumer] = await redis.xpending(stream, 'messenger');
    expect([count, perConsumer]).toEqual([1, [['acker', '1']]]);
    expect((await entries(stream)).map((e) => e.id)).toEqual([id]);

    await t.ack(received);
    await expectDrained(stream, 1000);
    await t.ack(received);
    await loop.stop();
    expect(await t.getMessageCount()).toBe(0);
    await expectDrained(stream);
  });

  it("with ackMode 'commit', ack() resolves once XACK + XDEL are done", async () => {
    const stream = freshStream();
    const t = transport({ stream, consumer: 'committer', ackMode: 'commit' });
    for (let round = 0; round < 5; round += 1) {
      const id = idOf(await t.send(envelopeOf(`commit-${round}`)));
      const loop = hold(t);
      const received = await loop.next();
      expect(idOf(received)).toBe(id);
      expect(await pendingCount(stream)).toBe(1);
      await t.ack(received);
      expect({ round, length: await redis.xlen(stream), pending: await pendingCount(stream) }).toEqual({
        round,
        length: 0,
        pending: 0,
      });
      await loop.stop();
    }
  });

  it('rejects an unknown ackMode with InvalidArgumentError', () => {
    const error = throwsSync(() => new RedisStreamsTransport({ dsn: REDIS_DSN, stream: 's', ackMode: 'later' }));
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect(error.message).toMatch(/ackMode/);
  });

  it('list(), find() and getMessageCount() right after a written-behind ack already reflect it', async () => {
    const stream = freshStream();
    const t = transport({ stream });
    const one = idOf(await t.send(envelopeOf('one')));
    const two = idOf(await t.send(envelopeOf('two')));
    const received = await receiveUpTo(t, 2, 2000);
    expect(received.map(idOf)).toEqual([one, two]);
    await t.ack(received[0]);
    expect(await t.find(one)).toBeUndefined();
    await t.ack(received[1]);
    const listed = [];
    for await (const e of t.list()) listed.push(idOf(e));
    expect(listed).toEqual([]);
    expect(await t.getMessageCount()).toBe(0);
    await expectDrained(stream, 0);
  });

  it('close() writes the acks recorded before it', async () => {
    const { stream, t, received } = await receivedOnFreshStream(20, 'c');
    for (const e of received) await t.ack(e);
    await t.close();
    await expectDrained(stream, 0);
  });

  it('acks many in-flight messages at once (all gone from the stream and the pending list)', async () => {
    const { stream, t, received } = await receivedOnFreshStream(50, 'm');
    await Promise.all(received.map((e) => t.ack(e)));
    await expectDrained(stream);
  });

  it('an ack of a find() or list() result deletes the entry, on an instance that never consumed', async () => {
    const stream = freshStream();
    const sender = transport({ stream });
    const one = idOf(await sender.send(envelopeOf('found')));
    const two = idOf(await sender.send(envelopeOf('listed')));
    const inspector = transport({ stream });
    const found = await inspector.find(one);
    expect(found.message).toEqual(new TestMessage('found'));
    await inspector.ack(found);
    expect(await pollUntil(async () => (await redis.xlen(stream)) === 1)).toBe(true);
    expect((await entries(stream)).map((e) => e.id)).toEqual([two]);
    for await (const envelope of inspector.list()) await inspector.ack(envelope);
    await expectDrained(stream);
  });

  it('reject: the copy gets RedeliveryStamp+1 under a new id, the original is gone from the stream and the pending list', async () => {
    const stream = freshStream();
    const t = transport({ stream });
    const original = idOf(await t.send(envelopeOf('rejected', 'r')));
    const loop = hold(t);
    const received = await loop.next();
    await t.reject(received);

    const all = await entries(stream);
    expect(all).toHaveLength(1);
    const copyId = all[0].id;
    expect(copyId).not.toBe(original);
    expect(copyId).toMatch(STREAM_ID);
    expect(await pendingCount(stream)).toBe(0);
    expect(await t.find(original)).toBeUndefined();
    const stamps = JSON.parse(JSON.parse(all[0].fields[3])['X-Message-Stamps']);
    expect(stamps.filter((s) => s.type === 'RedeliveryStamp').map((s) => s.data.retryCount)).toEqual([1]);

    const copy = await loop.next();
    expect(idOf(copy)).toBe(copyId);
    expect(copy.message).toEqual(new TestMessage('rejected', 'r'));
    expect(copy.last(RedeliveryStamp).retryCount).toBe(1);
    await t.reject(copy);
    const again = await loop.next();
    expect(again.last(RedeliveryStamp).retryCount).toBe(2);
    expect(again.all(RedeliveryStamp)).toHaveLength(1);
    await t.ack(again);
    await loop.stop();
    await expectDrained(stream);
  });

  it('reject of a message with a DelayStamp puts the copy in the delayed zset; it arrives after the delay', async () => {
    const stream = freshStream();
    const t = transport({ stream });
    await t.send(envelopeOf('delayed-reject').with(new DelayStamp(300)));
    const loop = hold(t);
    const received = await loop.next(3000);
    const original = idOf(received);
    const rejectedAt = Date.now();
    const before = await redisNow();
    await t.reject(received);

    expect(await redis.xlen(stream)).toBe(0);
    expect(await pendingCount(stream)).toBe(0);
    const [member, score] = await redis.zrange(`${stream}:delayed`, 0, -1, 'WITHSCORES');
    const parsed = JSON.parse(member);
    expect(Object.keys(parsed)).toEqual(['nonce', 'body', 'headers']);
    expect(parsed.nonce).toMatch(UUID);
    const stamps = JSON.parse(JSON.parse(parsed.headers)['X-Message-Stamps']);
    expect(stamps.find((s) => s.type === 'RedeliveryStamp').data.retryCount).toBe(1);
    expect(stamps.find((s) => s.type === 'DelayStamp').data.delayMs).toBe(300);
    expect(Number(score)).toBeGreaterThanOrEqual(before + 300);
    expect(Number(score)).toBeLessThan(before + 300 + 200);

    const copy = await loop.next(3000);
    const elapsed = Date.now() - rejectedAt;
    expect(elapsed).toBeGreaterThanOrEqual(280);
    expect(elapsed).toBeLessThan(1000);
    expect(idOf(copy)).not.toBe(original);
    expect(copy.last(RedeliveryStamp).retryCount).toBe(1);
    await t.ack(copy);
    await loop.stop();
    expect(await redis.zcard(`${stream}:delayed`)).toBe(0);
  });

  it('a reject of an envelope this instance did not deliver does nothing', async () => {
    const stream = freshStream();
    const a = transport({ stream, consumer: 'a' });
    const b = transport({ stream, consumer: 'b' });
    const id = idOf(await a.send(envelopeOf('owned-by-b')));
    const loop = hold(b);
    const received = await loop.next();
    expect(idOf(received)).toBe(id);

    await a.reject(received);
    await a.reject(await a.find(id));
    await a.reject(envelopeOf('never').with(new TransportMessageIdStamp(id)));
    expect((await entries(stream)).map((e) => e.id)).toEqual([id]);
    expect(await redis.exists(`${stream}:delayed`)).toBe(0);
    const [, , , perConsumer] = await redis.xpending(stream, 'messenger');
    expect(perConsumer).toEqual([['b', '1']]);

    await b.ack(received);
    await loop.stop();
    await expectDrained(stream);
  });
});

describe('list, find and getMessageCount', () => {
  it('list(limit) shows stream entries in order, pending ones included, not delayed ones', async () => {
    const stream = freshStream();
    const t = transport({ stream, readBatchSize: 1 });
    const ids = [];
    for (const id of ['l-1', 'l-2', 'l-3']) ids.push(idOf(await t.send(envelopeOf(id))));
    await t.send(envelopeOf('l-delayed').with(new DelayStamp(60000)));
    const listed = async (limit) => {
      const out = [];
      for await (const e of t.list(limit)) out.push([idOf(e), e.message.id]);
      return out;
    };
    expect(await listed()).toEqual([
      [ids[0], 'l-1'],
      [ids[1], 'l-2'],
      [ids[2], 'l-3'],
    ]);
    expect(await listed(2)).toEqual([
      [ids[0], 'l-1'],
      [ids[1], 'l-2'],
    ]);

    const loop = hold(t);
    const first = await loop.next();
    expect(await pendingCount(stream)).toBe(1);
    expect((await listed()).map(([id]) => id)).toEqual(ids);
    await t.ack(first);
    await loop.stop();
    expect((await listed()).map(([id]) => id)).toEqual(ids.slice(1));
    // Listing consumes nothing.
    expect(await pendingCount(stream)).toBe(0);
  });

  it('list() shows 100 entries by default', async () => {
    const stream = freshStream();
    const pipeline = redis.pipeline();
    const { body, headers } = stored(envelopeOf('many'));
    for (let i = 0; i < 120; i += 1) pipeline.xadd(stream, '*', 'body', body, 'headers', headers);
    await pipeline.exec();
    const t = transport({ stream });
    let count = 0;
    for await (const _ of t.list()) count += 1;
    expect(count).toBe(100);
    count = 0;
    for await (const _ of t.list(500)) count += 1;
    expect(count).toBe(120);
  });

  it("find(id) finds an entry by its stream id; a delayed send's nonce, 'abc' and unknown ids give undefined", async () => {
    const stream = freshStream();
    const t = transport({ stream });
    const id = idOf(await t.send(envelopeOf('findable', 'f')));
    const nonce = idOf(await t.send(envelopeOf('delayed').with(new DelayStamp(60000))));
    const found = await t.find(id);
    expect(found.message).toEqual(new TestMessage('findable', 'f'));
    expect(found.last(TransportMessageIdStamp)).toEqual(new TransportMessageIdStamp(id));
    // Stamped as upstream's find() stamps it: received by this transport (named after its stream).
    expect(found.last(ReceivedStamp)).toEqual(new ReceivedStamp(stream));
    for (const missing of [nonce, 'abc', '0-0', '99999999999999-0', '1-2-3', '', '-', '+']) {
      expect({ missing, found: await t.find(missing) }).toEqual({ missing, found: undefined });
    }
    expect(await pendingCount(stream)).toBe(0);
    expect(await redis.xlen(stream)).toBe(1);
  });

  it('getMessageCount() counts undelivered entries plus delayed ones, before any group exists too', async () => {
    const stream = freshStream();
    const t = transport({ stream });
    // No stream, no group.
    expect(await t.getMessageCount()).toBe(0);
    await redis.del(stream);

    // Written by another writer, before any group exists.
    for (const id of ['c-1', 'c-2', 'c-3']) await xaddMessage(stream, id);
    const later = (await redisNow()) + 60000;
    await redis.zadd(`${stream}:delayed`, later, delayedMember('c-4'), later + 1, delayedMember('c-5'));
    expect(await groups(stream)).toEqual([]);
    const fresh = transport({ stream, readBatchSize: 1 });
    expect(await fresh.getMessageCount()).toBe(5);

    // An in-flight entry is not counted; acking it removes it for good.
    const loop = hold(fresh);
    const first = await loop.next();
    expect(first.message.id).toBe('c-1');
    expect(await fresh.getMessageCount()).toBe(4);
    await fresh.ack(first);
    expect(await fresh.getMessageCount()).toBe(4);
    await loop.stop();
    expect(await fresh.getMessageCount()).toBe(4);

    await fresh.send(envelopeOf('c-6'));
    await fresh.send(envelopeOf('c-7').with(new DelayStamp(60000)));
    expect(await fresh.getMessageCount()).toBe(6);
    expect(await t.getMessageCount()).toBe(6);
    // Counting consumes nothing.
    expect(await redis.xlen(stream)).toBe(3);
    expect(await redis.zcard(`${stream}:delayed`)).toBe(3);
    expect(await pendingCount(stream)).toBe(0);
  });

  it('getMessageCount() still counts messages a finished get() loop prefetched and gave back', async () => {
    const stream = freshStream();
    const t = transport({ stream, readBatchSize: 10 });
    for (const id of ['p-1', 'p-2', 'p-3']) await t.send(envelopeOf(id));
    expect(await t.getMessageCount()).toBe(3);
    // One get() loop takes one message (the read took all three) and ends.
    const received = await receiveOne(t);
    await t.ack(received);
    // Two messages are waiting for a consumer: any consumer can take them at once.
    const other = transport({ stream });
    expect(await other.getMessageCount()).toBe(2);
    expect(await t.getMessageCount()).toBe(2);
    const rest = await receiveUpTo(other, 2, 1000);
    expect(rest.map((e) => e.message.id).sort()).toEqual(['p-2', 'p-3']);
    for (const e of rest) await other.ack(e);
  });
});

describe('fenced settles', () => {
  /**
   * A message delivered to `stale` that `current` then took over (the pending entry moved to
   * current's consumer, idle for an hour: what a frozen consumer's lapsed claim looks like):
   * both hold an envelope of the same entry.
   */
  async function takenOver() {
    const stream = freshStream();
    const stale = transport({ stream, consumer: `stale-${randomUUID()}`, claimIdleMs: 60000 });
    const currentName = `current-${randomUUID()}`;
    const current = transport({ stream, consumer: currentName, claimIdleMs: 60000 });
    await stale.send(envelopeOf('fenced', 'f'));
    const first = await receiveOne(stale);
    await redis.xclaim(stream, 'messenger', currentName, 0, idOf(first), 'IDLE', 3600000, 'JUSTID');
    const second = await receiveOne(current, 8000);
    expect(idOf(second)).toBe(idOf(first));
    return { stream, stale, current, first, second };
  }

  it('ignores the ack of a delivery taken over by another consumer, and counts it', async () => {
    const { stream, stale, current, first, second } = await takenOver();
    await stale.ack(first);
    expect(await pollUntil(() => stale.stats().staleSettles === 1, { timeoutMs: 2000 })).toBe(true);
    expect(await redis.xlen(stream)).toBe(1);
    expect(await pendingCount(stream)).toBe(1);

    await current.ack(second);
    await expectDrained(stream);
    expect(current.stats().staleSettles).toBe(0);
  }, 15000);

  it('ignores the reject of a delivery taken over: no copy, the newer delivery untouched', async () => {
    const { stream, stale, current, first, second } = await takenOver();
    await stale.reject(first);
    expect(stale.stats().staleSettles).toBe(1);
    const entries = await redis.xrange(stream, '-', '+');
    expect(entries.map(([id]) => id)).toEqual([idOf(first)]);
    await current.ack(second);
    await expectDrained(stream);
  }, 15000);

  it('acks a find() result by id, whoever holds the entry', async () => {
    const { stream, stale, current, first, second } = await takenOver();
    const operator = transport({ stream });
    await operator.ack(await operator.find(idOf(second)));
    await expectDrained(stream);
    await current.ack(second);
    await stale.ack(first);
    expect(operator.stats().staleSettles).toBe(0);
    expect(await pollUntil(() => current.stats().staleSettles === 1, { timeoutMs: 2000 })).toBe(true);
  }, 15000);
});

describe('stalled entries (XAUTOCLAIM)', () => {
  it('takes over an entry left pending by a consumer that is gone: same id, no RedeliveryStamp, after ~claimIdleMs', async () => {
    const stream = freshStream();
    const sender = transport({ stream });
    await sender.setup();
    const id = idOf(await sender.send(envelopeOf('stalled', 's')));
    // A consumer that reads and dies: the entry stays in its pending list.
    const read = await redis.xreadgroup('GROUP', 'messenger', 'dead-consumer', 'COUNT', 1, 'STREAMS', stream, '>');
    const pendingSince = Date.now();
    expect(read[0][1][0][0]).toBe(id);

    const b = transport({ stream, claimIdleMs: 100 });
    const received = await receiveOne(b, 2000);
    const elapsed = Date.now() - pendingSince;
    expect(idOf(received)).toBe(id);
    expect(received.message).toEqual(new TestMessage('stalled', 's'));
    expect(received.last(RedeliveryStamp)).toBeUndefined();
    expect(elapsed).toBeGreaterThanOrEqual(95);
    expect(elapsed).toBeLessThan(1000);
    await b.ack(received);
    await expectDrained(stream);
  });

  it('does not take over an entry pending for less than claimIdleMs', async () => {
    const stream = freshStream();
    const sender = transport({ stream });
    await sender.setup();
    await sender.send(envelopeOf('young'));
    await redis.xreadgroup('GROUP', 'messenger', 'slow-consumer', 'COUNT', 1, 'STREAMS', stream, '>');
    const b = transport({ stream, claimIdleMs: 1500 });
    expect(await receiveWithin(b, 800)).toBeUndefined();
    const received = await receiveOne(b, 3000);
    expect(received.message.id).toBe('young');
    await b.ack(received);
  });

  it('takes over the entry of a transport whose process died without close()', async () => {
    const stream = freshStream();
    const sender = transport({ stream });
    const id = idOf(await sender.send(envelopeOf('orphan', 'o')));
    const script = `
      const { RedisStreamsTransport } = require(${JSON.stringify(ROOT)});
      const { JsonSerializer, TransportMessageIdStamp } = require(${JSON.stringify(CORE)});
      class TestMessage { constructor(id, payload) { this.id = id; this.payload = payload; } }
      (async () => {
        const t = new RedisStreamsTransport({ dsn: process.env.DSN, stream: process.env.STREAM, serializer: new JsonSerializer([TestMessage]) });
        for await (const envelope of t.get(new AbortController().signal)) {
          console.log('got ' + envelope.last(TransportMessageIdStamp).id);
          process.kill(process.pid, 'SIGKILL');
        }
      })();
    `;
    const child = spawnSync(process.execPath, ['-e', script], {
      cwd: ROOT,
      encoding: 'utf8',
      timeout: 10000,
      env: { ...process.env, DSN: REDIS_DSN, STREAM: stream },
    });
    const diedAt = Date.now();
    expect(child.signal).toBe('SIGKILL');
    expect(child.stdout).toBe(`got ${id}\n`);
    expect(await pendingCount(stream)).toBe(1);

    const b = transport({ stream, claimIdleMs: 100 });
    const received = await receiveOne(b, 2000);
    expect(Date.now() - diedAt).toBeLessThan(1000);
    expect(idOf(received)).toBe(id);
    expect(received.message).toEqual(new TestMessage('orphan', 'o'));
    expect(received.last(RedeliveryStamp)).toBeUndefined();
    await b.ack(received);
    await expectDrained(stream);
  }, 15000);

  it('keeps entries buffered behind a slow handler claimed: another consumer does not take them over', async () => {
    const { stream, ids } = await freshStreamWithSent('k', 1, 6);
    const a = transport({ stream, claimIdleMs: 300, consumer: 'slow-a' });
    const handledByA = [];
    const consumerA = startConsumer(a, async (envelope) => {
      handledByA.push(idOf(envelope));
      if (handledByA.length === 1) await sleep(1000);
      await a.ack(envelope);
    });
    // A's first read took all six: one in its handler, five buffered.
    expect(await pollUntil(() => handledByA.length === 1)).toBe(true);
    expect((await consumersOf(stream)).find((c) => c.name === 'slow-a').pending).toBe(6);

    const b = transport({ stream, claimIdleMs: 300, consumer: 'b' });
    const consumerB = startConsumer(b);
    expect(await pollUntil(() => handledByA.length === 6, { timeoutMs: 4000 })).toBe(true);
    await sleep(400);
    await consumerA.stop();
    await consumerB.stop();

    expect(handledByA).toEqual(ids);
    // The five buffered entries were never taken over. (The first one sat in A's handler for
    // 1 s, longer than claimIdleMs: taking that one over is upstream's documented behaviour.)
    const takenByB = consumerB.received.map(idOf);
    for (const id of ids.slice(1)) expect(takenByB).not.toContain(id);
    expect(takenByB.every((id) => id === ids[0])).toBe(true);
    await expectDrained(stream);
  }, 10000);

  it('with handlers faster than claimIdleMs, nothing is ever taken over although the batch outlasts it', async () => {
    const { stream, ids } = await freshStreamWithSent('f', 1, 6);
    const a = transport({ stream, claimIdleMs: 300 });
    const handledByA = [];
    const consumerA = startConsumer(a, async (envelope) => {
      handledByA.push(idOf(envelope));
      await sleep(200);
      await a.ack(envelope);
    });
    expect(await pollUntil(() => handledByA.length === 1)).toBe(true);
    const consumerB = startConsumer(transport({ stream, claimIdleMs: 300 }));
    expect(await pollUntil(() => handledByA.length === 6, { timeoutMs: 4000 })).toBe(true);
    await sleep(400);
    await consumerA.stop();
    await consumerB.stop();
    expect(handledByA).toEqual(ids);
    expect(consumerB.received.map(idOf)).toEqual([]);
  }, 10000);
});

describe('blocking reads', () => {
  it.each([
    ['a transport on another DSN spelling', 'transport'],
    ['a plain XADD from another client', 'xadd'],
  ])('wakes an idle consumer (pollIntervalMs 5000) within ~200 ms for a message sent by %s', async (_, how) => {
    const stream = freshStream();
    const consumerName = `idle-${randomUUID()}`;
    const t = transport({ stream, consumer: consumerName, pollIntervalMs: 5000 });
    const sender = transport({ stream, dsn: LOCALHOST_DSN });
    const consumer = await startIdleConsumer(t, stream, consumerName);
    for (let round = 1; round <= 3; round += 1) {
      await waitUntilBlocked(stream, consumerName, 200);
      const sentAt = Date.now();
      if (how === 'transport') await sender.send(envelopeOf(`w-${round}`));
      else await xaddMessage(stream, `w-${round}`);
      expect(await pollUntil(() => consumer.received.length === round + 1, { timeoutMs: 2000, intervalMs: 2 })).toBe(
        true,
      );
      expect(Date.now() - sentAt).toBeLessThan(200);
    }
    expect(consumer.ids()).toEqual(['warm-up', 'w-1', 'w-2', 'w-3']);
  });

  it('abort of a consumer blocked in a read (pollIntervalMs 5000) ends get() within 500 ms without throwing', async () => {
    const { t, consumer } = await blockedInARead('to-abort');
    const startedAt = Date.now();
    expect(await settleWithin(consumer.stop(), 2000)).toEqual({ value: undefined });
    expect(Date.now() - startedAt).toBeLessThan(500);
    // The instance stays usable.
    await t.send(envelopeOf('after-abort'));
    const received = await receiveOne(t);
    expect(received.message.id).toBe('after-abort');
    await t.ack(received);
  });

  it('close() of a consumer blocked in a read (pollIntervalMs 5000) ends get() and resolves within 500 ms', async () => {
    const { stream, t, consumer } = await blockedInARead('to-close');
    const startedAt = Date.now();
    expect(await settleWithin(t.close(), 2000)).toEqual({ value: undefined });
    expect(await settleWithin(consumer.done, 2000)).toEqual({ value: undefined });
    expect(Date.now() - startedAt).toBeLessThan(500);
    await expectDrained(stream);
  });

  it('never loses a message that arrives while a blocking read is abandoned: the next get() of the same instance delivers it', async () => {
    const { stream, t, consumer } = await blockedInARead('abandoner');
    await consumer.stop();
    const outcomes = [];
    for (let round = 0; round < 12; round += 1) {
      const { id, received } = await abortRacingAnXadd(t, stream, 'abandoner', round);
      if (received.length === 0) {
        const next = await receiveOne(t, 1000);
        expect(idOf(next)).toBe(id);
        await t.ack(next);
        outcomes.push('next get()');
      } else {
        expect(received.map(idOf)).toEqual([id]);
        outcomes.push('before abort');
      }
    }
    expect(outcomes).toHaveLength(12);
    await expectDrained(stream);
  }, 20000);

  it('hands an entry that an aborted blocking read took straight back: another consumer gets it at once, not after claimIdleMs', async () => {
    const { stream, t, consumer } = await blockedInARead('aborter', { claimIdleMs: 30000 });
    await consumer.stop();
    for (let round = 0; round < 12; round += 1) {
      const { id, received } = await abortRacingAnXadd(t, stream, 'aborter', round);
      if (received.length === 0) {
        const other = transport({ stream, consumer: `other-${round}`, claimIdleMs: 30000 });
        const next = await receiveOne(other, 1000);
        expect(idOf(next)).toBe(id);
        await other.ack(next);
      } else {
        expect(received.map(idOf)).toEqual([id]);
      }
    }
    await expectDrained(stream);
  }, 30000);
});
