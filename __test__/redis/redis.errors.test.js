'use strict';

// RedisStreamsTransport when things go wrong: the shared cases (shared/errors.suite.js: an
// unreachable server and one that never answers, wrong passwords on a throwaway redis-server
// with requirepass, a process that prints nothing of its own), plus Redis's own: the ACL user
// form, a missing password (NOAUTH), failed commands (WRONGTYPE), and a consumer group or stream
// that vanishes under a live consumer.

const { Redis } = require('ioredis');
const {
  DelayStamp,
  RedeliveryStamp,
  TransportConnectionError,
  TransportError,
  TransportNotFoundError,
} = require('@schally/nestjs-messenger');
const { RedisStreamsTransport } = require('../..');
const { redis: engine } = require('../support/engines');
const { runChild } = require('../support/child');
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
  failure,
  expectNoSecret,
  startAckingConsumer,
} = require('../support/transport-helpers');
const { errorsSuite } = require('../shared/errors.suite');
const { outcomesSuite } = require('../shared/outcomes.suite');

const REDIS_DSN = engine.dsn;
const { track } = errorsSuite(engine);
outcomesSuite(engine);

const keys = [];
const consumers = [];

function transport(options) {
  return track(new RedisStreamsTransport({ dsn: REDIS_DSN, serializer: serializer(), ...options }));
}

function freshStream(prefix = 'err') {
  const stream = engine.uniqueStream(prefix);
  keys.push(stream, `${stream}:delayed`);
  return stream;
}

afterEach(async () => {
  await Promise.all(consumers.splice(0).map((c) => settleWithin(c.stop(), 2000)));
  await engine.admin().del(keys.splice(0));
});

/** A background get() loop that records and acks what it gets; `error` if get() threw. Stopped after the test. */
function startConsumer(t) {
  const consumer = startAckingConsumer(t);
  consumers.push(consumer);
  return consumer;
}

/**
 * Runs an async script body in a fresh node process (with RUST_LOG=trace, so any native
 * logging would show), and returns its output and what it collected into `report` (written to
 * fd 3, apart from stdout/stderr).
 */
function runWithReport(body, env = {}) {
  return runChild(
    `
    const fs = require('node:fs');
    const report = [];
    (async () => {
      ${body}
    })()
      .catch((error) => { report.push('FAILED ' + error.stack); process.exitCode = 2; })
      .finally(() => fs.writeSync(3, report.join('\\n')));
  `,
    { fd3: true, timeout: 15000, env: { RUST_LOG: 'trace', RUST_BACKTRACE: 'full', ...env } },
  );
}

describe(engine.auth.title, () => {
  const RIGHT = 'rightpass';
  const WRONG = 'wr0ngPassw0rd';
  let auth;

  beforeAll(async () => {
    auth = await engine.auth.start(RIGHT);
  }, 20000);

  afterAll(async () => {
    await auth?.stop();
  });

  it('fails the same way with a user name (ACL form) and with a percent-encoded wrong password', async () => {
    for (const [url, secrets] of [
      [auth.dsn(WRONG, 'default'), [WRONG]],
      [auth.dsn('wr0ng%40Pass%3Aw0rd'), ['wr0ng%40Pass%3Aw0rd', 'wr0ng@Pass:w0rd']],
    ]) {
      const t = track(new RedisStreamsTransport({ dsn: url, stream: 's' }));
      const { error, elapsedMs } = await failure(() => t.send(envelopeOf('x')));
      expect(error).toBeInstanceOf(TransportConnectionError);
      expect(elapsedMs).toBeLessThan(2000);
      expect(error.cause?.code).toBe('WRONGPASS');
      expectNoSecret(error, ...secrets);
    }
  });

  it('fails with TransportConnectionError (NOAUTH) when the DSN has no password', async () => {
    const t = track(new RedisStreamsTransport({ dsn: `redis://127.0.0.1:${auth.port}`, stream: 's' }));
    const { error, elapsedMs } = await failure(() => t.send(envelopeOf('x')));
    expect(error).toBeInstanceOf(TransportConnectionError);
    expect(error.message).toMatch(/NOAUTH|auth/i);
    expect(error.code).toBe('E_CONNECTION');
    expect(error.cause?.code).toBe('NOAUTH');
    expect(elapsedMs).toBeLessThan(2000);
  });

  it('works with the right password: send, receive, reject, delayed redelivery, ack', async () => {
    const stream = engine.uniqueStream('auth');
    const t = track(new RedisStreamsTransport({ dsn: auth.dsn(RIGHT), stream, serializer: serializer() }));
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
    const redis = new Redis(auth.dsn(RIGHT), { maxRetriesPerRequest: 1 });
    try {
      expect(await redis.xlen(stream)).toBe(0);
    } finally {
      redis.disconnect();
    }
  });

  it('reports the refusal once, and never the password, in a process that fails to authenticate', () => {
    const result = runWithReport(
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
      { DSN: auth.dsn(WRONG) },
    );
    expect(result.status).toBe(0);
    expect(result.stdout).toBe('send TransportConnectionError\nget TransportConnectionError\nclosed\n');
    // The one line the transport prints: the refusal, through Nest's Logger (the default in an
    // app with @nestjs/common), at error level.
    expect(result.stderr.trim().split('\n')).toEqual([
      expect.stringMatching(/ERROR.*\[Redis transport "child"\].*The server refused the consumer: .*authentication failed/i),
    ]);
    expect(result.stderr).not.toContain(WRONG);
    expect(result.report).not.toContain(WRONG);
  }, 20000);
});

/** For a describe on the shared server: requires it, and `live.redis`, an ioredis client on it for its tests. */
function sharedServerClient() {
  const live = { redis: undefined };
  beforeAll(async () => {
    await engine.requireServer();
    live.redis = new Redis(REDIS_DSN, { maxRetriesPerRequest: 1 });
  });
  afterAll(() => live.redis?.disconnect());
  return live;
}

describe('failed commands on a live server', () => {
  const live = sharedServerClient();

  it('maps WRONGTYPE (the stream key holds a string) to a base TransportError for every operation', async () => {
    const stream = freshStream();
    await live.redis.set(stream, 'not a stream');
    const t = transport({ stream });
    for (const [name, operation] of engine.operations()) {
      const { error } = await failure(() => operation(t));
      expect({ name, error: error.constructor.name }).toEqual({ name, error: 'TransportError' });
      expect(error).not.toBeInstanceOf(TransportConnectionError);
      expect(error).not.toBeInstanceOf(TransportNotFoundError);
      expect(error.message).toMatch(/^Redis transport failed during "\w+": .*WRONGTYPE/);
      expect({ name, code: error.code, causeCode: error.cause?.code }).toEqual({ name, code: 'E_TRANSPORT', causeCode: 'WRONGTYPE' });
      expect(error.cause.message).toMatch(/^WRONGTYPE /);
    }
    expect(await live.redis.get(stream)).toBe('not a stream');
  });

  it('fails with TransportConnectionError, not a generic error, when the DSN names a database the server does not have', async () => {
    const url = new URL(REDIS_DSN);
    url.pathname = '/99999';
    const t = transport({ dsn: url.toString(), stream: freshStream() });
    const { error } = await failure(() => t.send(envelopeOf('no such database')));
    expect(error).toBeInstanceOf(TransportConnectionError);
    expect(error.message).toContain('DB index is out of range');
  });

  it('maps a WRONGTYPE delayed key to TransportError: from a delayed send, and from get() (promotion); both work once fixed', async () => {
    const stream = freshStream();
    await live.redis.set(`${stream}:delayed`, 'oops');
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

    await live.redis.del(`${stream}:delayed`);
    await t.send(envelopeOf('fixed').with(new DelayStamp(50)));
    const received = await receiveOne(t);
    expect(received.message.id).toBe('fixed');
    await t.ack(received);
  });

  it('answers each send of a batch for itself: due ones stored and resolved, delayed ones refused as not applied', async () => {
    const stream = freshStream();
    await live.redis.set(`${stream}:delayed`, 'oops');
    const t = transport({ stream });
    await t.setup();
    const sends = [
      ...Array.from({ length: 20 }, (_, n) => t.send(envelopeOf(`due${n}`))),
      ...Array.from({ length: 3 }, (_, n) => t.send(envelopeOf(`later${n}`).with(new DelayStamp(60_000)))),
    ];
    const answers = await Promise.all(
      sends.map((sending) =>
        sending.then(
          () => 'stored',
          (error) => `${error.code} ${error.cause?.code} ${error.outcome}`,
        ),
      ),
    );
    expect(answers).toEqual([
      ...Array(20).fill('stored'),
      ...Array(3).fill('E_TRANSPORT WRONGTYPE not-applied'),
    ]);
    expect(await live.redis.xlen(stream)).toBe(20);
  });
});

describe('consumer group or stream vanishing under a live consumer', () => {
  const live = sharedServerClient();

  /**
   * A consumer on `dsn` takes a first message; `vanish(stream)` pulls the rug while it is idle;
   * another producer (`writer`) and the transport send afterwards. The same get() must go on and
   * deliver both, the orphan first.
   */
  async function goesOnAfter(dsn, writer, vanish) {
    for (const pollIntervalMs of [50, 5000]) {
      const stream = freshStream();
      const t = transport({ dsn, stream, pollIntervalMs });
      await t.send(envelopeOf('before'));
      const consumer = startConsumer(t);
      expect(await pollUntil(() => consumer.received.length === 1)).toBe(true);
      // Let the consumer go idle (in its blocking read), then pull the rug.
      await new Promise((resolve) => setTimeout(resolve, 200));
      await vanish(stream);
      // Written by another producer meanwhile (the stream comes back without a group).
      const encoded = serializer().encode(envelopeOf('meanwhile'));
      const orphan = await writer.xadd(stream, '*', 'body', encoded.body, 'headers', JSON.stringify(encoded.headers));
      await t.send(envelopeOf('after'));
      await pollUntil(() => consumer.received.length === 3 || consumer.error !== undefined, { timeoutMs: 8000 });
      expect({ pollIntervalMs, error: consumer.error?.message }).toEqual({ pollIntervalMs, error: undefined });
      expect(consumer.received.map((e) => e.message.id)).toEqual(['before', 'meanwhile', 'after']);
      expect(idOf(consumer.received[1])).toBe(orphan);
      await consumer.stop();
      expect(await t.getMessageCount()).toBe(0);
    }
  }

  it.each([
    ['the stream key is deleted', (stream) => live.redis.del(stream)],
    ['the group is destroyed', (stream) => live.redis.xgroup('DESTROY', stream, 'messenger')],
  ])(
    'when %s, get() goes on: the group is re-created from the start of the stream and nothing sent since is lost',
    async (_, vanish) => {
      await goesOnAfter(REDIS_DSN, live.redis, vanish);
    },
    20000,
  );

  it('when the server restarts empty (no persistence), get() goes on: the group is re-created and nothing sent since is lost', async () => {
    const server = await startRedisServer();
    const dsn = `redis://127.0.0.1:${server.port}`;
    let writer;
    try {
      await goesOnAfter(dsn, { xadd: (...args) => writer.xadd(...args) }, async () => {
        writer?.disconnect();
        await server.restart();
        writer = new Redis(dsn, { maxRetriesPerRequest: 1 });
      });
    } finally {
      writer?.disconnect();
      await server.stop();
    }
  }, 40000);

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
    await live.redis.del(stream);
    await t.ack(one);
    await t.reject(two);
    controller.abort();
    await iterator.return();
    // No copy was made, nothing was re-created.
    expect(await live.redis.exists(stream)).toBe(0);
    expect(await live.redis.exists(`${stream}:delayed`)).toBe(0);
    expect(await t.getMessageCount()).toBe(0);
    // The group is gone: the next read re-creates it and goes on.
    expect(await receiveWithin(t, 200)).toBeUndefined();
    await t.send(envelopeOf('three'));
    const three = await receiveOne(t);
    expect(three.message.id).toBe('three');
    await t.ack(three);
  });
});
