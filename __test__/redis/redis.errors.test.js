'use strict';

// RedisStreamsTransport when things go wrong: an unreachable server and one that never
// answers (typed, fast errors that never carry the DSN password), wrong and missing passwords
// on a throwaway redis-server with requirepass, failed commands (WRONGTYPE), a consumer group
// or stream that vanishes under a live consumer, and a process that prints nothing of its own.

const net = require('node:net');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { Redis } = require('ioredis');
const {
  DelayStamp,
  RedeliveryStamp,
  TransportConnectionError,
  TransportError,
  TransportNotFoundError,
} = require('@schally/nestjs-messenger');
const { RedisStreamsTransport } = require('../..');
const { REDIS_DSN, requireServer } = require('../support/servers');
const { uniqueStream } = require('../support/redis');
const { startRedisServer } = require('../support/redis-server');
const {
  TestMessage,
  serializer,
  envelopeOf,
  idOf,
  receiveOne,
  receiveWithin,
  pollUntil,
  settleWithin,
  errorTexts,
} = require('../support/transport-helpers');

const ROOT = path.resolve(__dirname, '..', '..');
const CORE = require.resolve('@schally/nestjs-messenger');
const SECRET = 'hunter2secret';
const UNREACHABLE_PORT = 6390;
const UNREACHABLE_DSN = `redis://:${SECRET}@127.0.0.1:${UNREACHABLE_PORT}`;

const transports = [];
const keys = [];
const consumers = [];

function track(t) {
  transports.push(t);
  return t;
}

function transport(options) {
  return track(new RedisStreamsTransport({ dsn: REDIS_DSN, serializer: serializer(), ...options }));
}

function freshStream(prefix = 'err') {
  const stream = uniqueStream(prefix);
  keys.push(stream, `${stream}:delayed`);
  return stream;
}

afterEach(async () => {
  await Promise.all(consumers.splice(0).map((c) => settleWithin(c.stop(), 2000)));
  await Promise.all(transports.splice(0).map((t) => settleWithin(t.close(), 2000)));
  if (keys.length > 0) {
    const redis = new Redis(REDIS_DSN, { maxRetriesPerRequest: 1 });
    try {
      await redis.del(...keys.splice(0));
    } finally {
      redis.disconnect();
    }
  }
});

/** Asserts that no text a logger could print for `error` contains any of `secrets`. */
function expectNoSecret(error, ...secrets) {
  const texts = errorTexts(error);
  for (const secret of secrets) {
    for (const text of texts) expect(text).not.toContain(secret);
  }
}

/** Runs `start`, which must reject; resolves `{ error, elapsedMs }`. */
async function failure(start) {
  const startedAt = Date.now();
  try {
    await start();
  } catch (error) {
    return { error, elapsedMs: Date.now() - startedAt };
  }
  throw new Error('expected the operation to fail');
}

/** A background get() loop that records what it yields and acks it; `error` if it threw. */
function startConsumer(t) {
  const controller = new AbortController();
  const consumer = { received: [], error: undefined };
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
  consumers.push(consumer);
  return consumer;
}

const OPERATIONS = [
  ['send', (t) => t.send(envelopeOf('x'))],
  ['delayed send', (t) => t.send(envelopeOf('x').with(new DelayStamp(1000)))],
  ['setup', (t) => t.setup()],
  ['get', (t) => t.get(new AbortController().signal).next()],
  ['list', (t) => t.list().next()],
  ['find', (t) => t.find('1-0')],
  ['getMessageCount', (t) => t.getMessageCount()],
];

describe('unreachable server', () => {
  beforeAll(async () => {
    const open = await new Promise((resolve) => {
      const socket = net.connect({ host: '127.0.0.1', port: UNREACHABLE_PORT });
      socket.once('connect', () => {
        socket.destroy();
        resolve(true);
      });
      socket.once('error', () => resolve(false));
    });
    if (open) throw new Error(`port ${UNREACHABLE_PORT} must be closed for these tests`);
  });

  it.each(OPERATIONS)(
    '%s fails fast with TransportConnectionError that never shows the password',
    async (_, operation) => {
      const t = track(new RedisStreamsTransport({ dsn: UNREACHABLE_DSN, stream: uniqueStream('unreachable'), serializer: serializer() }));
      const { error, elapsedMs } = await failure(() => operation(t));
      expect(error).toBeInstanceOf(TransportConnectionError);
      expect(elapsedMs).toBeLessThan(6000);
      expect(error.message).toMatch(/^Redis transport failed during "\w+": /);
      expectNoSecret(error, SECRET);
      expect(await settleWithin(t.close(), 3000)).toEqual({ value: undefined });
    },
    10000,
  );

  it('a consumer that never reached the server ends get() with the error instead of retrying forever', async () => {
    const t = track(new RedisStreamsTransport({ dsn: UNREACHABLE_DSN, stream: 's', serializer: serializer() }));
    const consumer = startConsumer(t);
    expect(await settleWithin(consumer.done, 6000)).toEqual({ value: undefined });
    expect(consumer.error).toBeInstanceOf(TransportConnectionError);
    expectNoSecret(consumer.error, SECRET);
  }, 10000);

  it('keeps a user name and a percent-encoded password out of the error', async () => {
    const raw = 'p%40ss%3Aw0rd%2Fx';
    const t = track(new RedisStreamsTransport({ dsn: `redis://someuser:${raw}@127.0.0.1:${UNREACHABLE_PORT}/2`, stream: 's' }));
    const { error } = await failure(() => t.send(envelopeOf('x')));
    expect(error).toBeInstanceOf(TransportConnectionError);
    expectNoSecret(error, raw, 'p@ss:w0rd/x');
  });

  it('keeps the password of a malformed DSN out of the constructor error', () => {
    for (const dsn of [
      `redis://:${SECRET}@127.0.0.1:99999999`,
      `redis://user:${SECRET}@[bad`,
      `http://user:${SECRET}@127.0.0.1:6379`,
      `redis://:${SECRET}@127.0.0.1:6379/notadb`,
    ]) {
      let error;
      try {
        new RedisStreamsTransport({ dsn, stream: 's' });
      } catch (e) {
        error = e;
      }
      expect({ dsn, name: error?.name }).toEqual({ dsn, name: 'TransportConnectionError' });
      expectNoSecret(error, SECRET);
    }
  });

  describe('a server that accepts connections but never answers', () => {
    let server;
    let port;
    const sockets = new Set();

    beforeAll(async () => {
      server = net.createServer((socket) => {
        sockets.add(socket);
        socket.on('error', () => {});
        socket.on('close', () => sockets.delete(socket));
      });
      await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
      port = server.address().port;
    });

    afterAll(async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    });

    it('fails with TransportConnectionError after connectTimeoutMs', async () => {
      const t = track(
        new RedisStreamsTransport({ dsn: `redis://:${SECRET}@127.0.0.1:${port}`, stream: 's', connectTimeoutMs: 300 }),
      );
      const { error, elapsedMs } = await failure(() => t.send(envelopeOf('x')));
      expect(error).toBeInstanceOf(TransportConnectionError);
      expect(elapsedMs).toBeGreaterThanOrEqual(250);
      expect(elapsedMs).toBeLessThan(3000);
      expectNoSecret(error, SECRET);
      expect(await settleWithin(t.close(), 3000)).toEqual({ value: undefined });
    });

    it('fails within the default 5 s connect timeout, not after silent retries', async () => {
      const t = track(new RedisStreamsTransport({ dsn: `redis://:${SECRET}@127.0.0.1:${port}`, stream: 's' }));
      const { error, elapsedMs } = await failure(() => t.get(new AbortController().signal).next());
      expect(error).toBeInstanceOf(TransportConnectionError);
      expect(elapsedMs).toBeGreaterThanOrEqual(4000);
      expect(elapsedMs).toBeLessThan(7000);
      expectNoSecret(error, SECRET);
    }, 12000);
  });
});

describe('password authentication (throwaway redis-server with requirepass)', () => {
  const RIGHT = 'rightpass';
  const WRONG = 'wr0ngPassw0rd';
  let server;
  const dsn = (password, user = '') => `redis://${user}:${password}@127.0.0.1:${server.port}`;

  beforeAll(async () => {
    server = await startRedisServer({ args: ['--requirepass', RIGHT] });
  }, 20000);

  afterAll(async () => {
    await server?.stop();
  });

  it.each(OPERATIONS)(
    '%s with a wrong password fails fast with TransportConnectionError that never shows it',
    async (_, operation) => {
      const t = track(new RedisStreamsTransport({ dsn: dsn(WRONG), stream: uniqueStream('auth'), serializer: serializer() }));
      const { error, elapsedMs } = await failure(() => operation(t));
      expect(error).toBeInstanceOf(TransportConnectionError);
      expect(elapsedMs).toBeLessThan(2000);
      expect(error.message).toMatch(/auth|password|WRONGPASS/i);
      expectNoSecret(error, WRONG, RIGHT);
      expect(await settleWithin(t.close(), 3000)).toEqual({ value: undefined });
    },
    10000,
  );

  it('fails the same way with a user name (ACL form) and with a percent-encoded wrong password', async () => {
    for (const [url, secrets] of [
      [dsn(WRONG, 'default'), [WRONG]],
      [dsn('wr0ng%40Pass%3Aw0rd'), ['wr0ng%40Pass%3Aw0rd', 'wr0ng@Pass:w0rd']],
    ]) {
      const t = track(new RedisStreamsTransport({ dsn: url, stream: 's' }));
      const { error, elapsedMs } = await failure(() => t.send(envelopeOf('x')));
      expect(error).toBeInstanceOf(TransportConnectionError);
      expect(elapsedMs).toBeLessThan(2000);
      expectNoSecret(error, ...secrets);
    }
  });

  it('fails with TransportConnectionError (NOAUTH) when the DSN has no password', async () => {
    const t = track(new RedisStreamsTransport({ dsn: `redis://127.0.0.1:${server.port}`, stream: 's' }));
    const { error, elapsedMs } = await failure(() => t.send(envelopeOf('x')));
    expect(error).toBeInstanceOf(TransportConnectionError);
    expect(error.message).toMatch(/NOAUTH|auth/i);
    expect(elapsedMs).toBeLessThan(2000);
  });

  it('works with the right password: send, receive, reject, delayed redelivery, ack', async () => {
    const stream = uniqueStream('auth');
    const t = track(new RedisStreamsTransport({ dsn: dsn(RIGHT), stream, serializer: serializer() }));
    const sent = await t.send(envelopeOf('authenticated', 'ok'));
    const received = await receiveOne(t);
    expect(idOf(received)).toBe(idOf(sent));
    expect(received.message).toEqual(new TestMessage('authenticated', 'ok'));
    await t.reject(received);
    const again = await receiveOne(t);
    expect(again.last(RedeliveryStamp).retryCount).toBe(1);
    await t.ack(again);
    await t.send(envelopeOf('later').with(new DelayStamp(100)));
    const later = await receiveOne(t);
    expect(later.message.id).toBe('later');
    await t.ack(later);
    expect(await t.getMessageCount()).toBe(0);
    const redis = new Redis(dsn(RIGHT), { maxRetriesPerRequest: 1 });
    try {
      expect(await redis.xlen(stream)).toBe(0);
    } finally {
      redis.disconnect();
    }
  });

  it('logs nothing at all, and never the password, in a process that fails to authenticate', () => {
    const result = runChild(
      `
      const t = new RedisStreamsTransport({ dsn: process.env.DSN, stream: 'child' });
      for (const [name, op] of [['send', () => t.send(new Envelope(new M('x')))], ['get', () => t.get(new AbortController().signal).next()]]) {
        try {
          await op();
          console.log(name + ' UNEXPECTED success');
        } catch (error) {
          console.log(name + ' ' + error.name);
          report.push(error.stack, util.inspect(error, { depth: 10, showHidden: true }));
        }
      }
      await t.close();
      console.log('closed');
    `,
      { DSN: dsn(WRONG) },
    );
    expect(result.status).toBe(0);
    expect(result.stdout).toBe('send TransportConnectionError\nget TransportConnectionError\nclosed\n');
    expect(result.stderr).toBe('');
    expect(result.report).not.toContain(WRONG);
  }, 20000);
});

/**
 * Runs an async script body in a fresh node process (with RUST_LOG=trace, so any native
 * logging would show), and returns its output and what it collected into `report` (written to
 * fd 3, apart from stdout/stderr).
 */
function runChild(body, env = {}) {
  const script = `
    const util = require('node:util');
    const fs = require('node:fs');
    const { RedisStreamsTransport } = require(${JSON.stringify(ROOT)});
    const { Envelope, JsonSerializer } = require(${JSON.stringify(CORE)});
    class M { constructor(id) { this.id = id; } }
    const report = [];
    (async () => {
      ${body}
    })()
      .catch((error) => { report.push('FAILED ' + error.stack); process.exitCode = 2; })
      .finally(() => fs.writeSync(3, report.join('\\n')));
  `;
  const result = spawnSync(process.execPath, ['-e', script], {
    cwd: ROOT,
    encoding: 'utf8',
    timeout: 15000,
    killSignal: 'SIGKILL',
    stdio: ['ignore', 'pipe', 'pipe', 'pipe'],
    env: { ...process.env, RUST_LOG: 'trace', RUST_BACKTRACE: 'full', ...env },
  });
  return { ...result, report: result.output[3] ?? '' };
}

describe('output of the process', () => {
  it('prints nothing on stdout or stderr while operations against an unreachable server fail', () => {
    const result = runChild(
      `
      const t = new RedisStreamsTransport({ dsn: process.env.DSN, stream: 'child', serializer: new JsonSerializer([M]) });
      const ops = [
        ['send', () => t.send(new Envelope(new M('x')))],
        ['get', () => t.get(new AbortController().signal).next()],
        ['list', () => t.list().next()],
        ['count', () => t.getMessageCount()],
      ];
      for (const [name, op] of ops) {
        try {
          await op();
          console.log(name + ' UNEXPECTED success');
        } catch (error) {
          console.log(name + ' ' + error.name);
          report.push(String(error), error.stack, util.inspect(error, { depth: 10, showHidden: true }));
        }
      }
      await t.close();
      console.log('closed');
    `,
      { DSN: UNREACHABLE_DSN },
    );
    expect(result.signal).toBeNull();
    expect(result.status).toBe(0);
    expect(result.stdout).toBe(
      'send TransportConnectionError\nget TransportConnectionError\nlist TransportConnectionError\ncount TransportConnectionError\nclosed\n',
    );
    expect(result.stderr).toBe('');
    expect(result.report).toContain('TransportConnectionError');
    expect(result.report).not.toContain(SECRET);
  }, 20000);
});

describe('failed commands on a live server', () => {
  let redis;

  beforeAll(async () => {
    await requireServer('redis', REDIS_DSN);
    redis = new Redis(REDIS_DSN, { maxRetriesPerRequest: 1 });
  });

  afterAll(() => redis?.disconnect());

  it('maps WRONGTYPE (the stream key holds a string) to a base TransportError for every operation', async () => {
    const stream = freshStream();
    await redis.set(stream, 'not a stream');
    const t = transport({ stream });
    for (const [name, operation] of OPERATIONS) {
      const { error } = await failure(() => operation(t));
      expect({ name, error: error.constructor.name }).toEqual({ name, error: 'TransportError' });
      expect(error).not.toBeInstanceOf(TransportConnectionError);
      expect(error).not.toBeInstanceOf(TransportNotFoundError);
      expect(error.message).toMatch(/^Redis transport failed during "\w+": .*WRONGTYPE/);
    }
    expect(await redis.get(stream)).toBe('not a stream');
  });

  it('maps a WRONGTYPE delayed key to TransportError: from a delayed send, and from get() (promotion); both work once fixed', async () => {
    const stream = freshStream();
    await redis.set(`${stream}:delayed`, 'oops');
    const t = transport({ stream });
    await t.setup();
    const { error: sendError } = await failure(() => t.send(envelopeOf('x').with(new DelayStamp(100))));
    expect(sendError).toBeInstanceOf(TransportError);
    expect(sendError).not.toBeInstanceOf(TransportConnectionError);
    expect(sendError.message).toMatch(/WRONGTYPE/);
    const { error: getError } = await failure(() => t.get(new AbortController().signal).next());
    expect(getError).toBeInstanceOf(TransportError);
    expect(getError).not.toBeInstanceOf(TransportConnectionError);
    expect(getError.message).toMatch(/WRONGTYPE/);

    await redis.del(`${stream}:delayed`);
    await t.send(envelopeOf('fixed').with(new DelayStamp(50)));
    const received = await receiveOne(t);
    expect(received.message.id).toBe('fixed');
    await t.ack(received);
  });
});

describe('consumer group or stream vanishing under a live consumer', () => {
  let redis;

  beforeAll(async () => {
    await requireServer('redis', REDIS_DSN);
    redis = new Redis(REDIS_DSN, { maxRetriesPerRequest: 1 });
  });

  afterAll(() => redis?.disconnect());

  async function xaddMessage(stream, id) {
    const encoded = serializer().encode(envelopeOf(id));
    return redis.xadd(stream, '*', 'body', encoded.body, 'headers', JSON.stringify(encoded.headers));
  }

  it.each([
    ['the stream key is deleted', (stream) => redis.del(stream)],
    ['the group is destroyed', (stream) => redis.xgroup('DESTROY', stream, 'messenger')],
  ])(
    'when %s, get() fails once with TransportNotFoundError; the next get() re-creates the group and loses nothing',
    async (_, vanish) => {
      for (const pollIntervalMs of [50, 5000]) {
        const stream = freshStream();
        const t = transport({ stream, pollIntervalMs });
        await t.send(envelopeOf('before'));
        const first = startConsumer(t);
        expect(await pollUntil(() => first.received.length === 1)).toBe(true);
        // Let the consumer go idle (in its blocking read), then pull the rug.
        await new Promise((resolve) => setTimeout(resolve, 200));
        await vanish(stream);
        expect(await settleWithin(first.done, 3000)).toEqual({ value: undefined });
        expect(first.error).toBeInstanceOf(TransportNotFoundError);
        expect(first.error.message).toMatch(/NOGROUP/);

        // Written by another producer meanwhile (the stream comes back without a group).
        const orphan = await xaddMessage(stream, 'meanwhile');
        const second = startConsumer(t);
        await t.send(envelopeOf('after'));
        await pollUntil(() => second.received.length === 2 || second.error !== undefined, { timeoutMs: 3000 });
        expect({ pollIntervalMs, error: second.error?.message }).toEqual({ pollIntervalMs, error: undefined });
        expect(second.received.map((e) => e.message.id)).toEqual(['meanwhile', 'after']);
        expect(idOf(second.received[0])).toBe(orphan);
        await second.stop();
        expect(await t.getMessageCount()).toBe(0);
      }
    },
    15000,
  );

  it('ack and reject of a message whose stream was deleted are no-ops; the transport goes on', async () => {
    const stream = freshStream();
    const t = transport({ stream, ackMode: 'commit' });
    await t.send(envelopeOf('one'));
    await t.send(envelopeOf('two'));
    const controller = new AbortController();
    const iterator = t.get(controller.signal);
    const one = (await iterator.next()).value;
    const two = (await iterator.next()).value;
    expect([one.message.id, two.message.id]).toEqual(['one', 'two']);
    // Two messages in flight, then the stream goes away.
    await redis.del(stream);
    await t.ack(one);
    await t.reject(two);
    controller.abort();
    await iterator.return();
    // No copy was made, nothing was re-created.
    expect(await redis.exists(stream)).toBe(0);
    expect(await redis.exists(`${stream}:delayed`)).toBe(0);
    expect(await t.getMessageCount()).toBe(0);
    // The group is gone: the next read says so once (typed), the one after re-creates it.
    const { error } = await failure(() => t.get(new AbortController().signal).next());
    expect(error).toBeInstanceOf(TransportNotFoundError);
    expect(await receiveWithin(t, 200)).toBeUndefined();
    await t.send(envelopeOf('three'));
    const three = await receiveOne(t);
    expect(three.message.id).toBe('three');
    await t.ack(three);
  });
});
