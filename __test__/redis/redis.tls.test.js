'use strict';

// RedisStreamsTransport over TLS (rediss://) against a throwaway redis-server that serves TLS
// only, with a certificate for 127.0.0.1 and localhost signed by a CA made for the test:
// trusted through `redisOptions.tls.ca` (string, Buffer, array), refused without it; and the
// other TLS options honoured (a tls object on redis://, servername, client certificates,
// rejectUnauthorized).

const fs = require('node:fs');
const { Redis } = require('ioredis');
const {
  DelayStamp,
  RedeliveryStamp,
  TransportConnectionError,
} = require('@schally/nestjs-messenger');
const { RedisStreamsTransport } = require('../..');
const { redis: engine } = require('../support/engines');
const { startRedisServer } = require('../support/redis-server');
const { makeTlsFiles } = require('../support/tls-files');
const {
  TestMessage,
  serializer,
  envelopeOf,
  idOf,
  receiveOne,
  pollUntil,
  settleWithin,
  failure,
  expectNoSecret,
} = require('../support/transport-helpers');

const SECRET = 'tlsSecretPw';
let tls;
let server;
let caPem;
let otherCaPem;
const transports = [];

function transport(options) {
  const t = new RedisStreamsTransport({ stream: engine.uniqueStream('tls'), serializer: serializer(), ...options });
  transports.push(t);
  return t;
}

/** A TLS client of our own for inspection (trusts the test CA). */
function inspector() {
  const redis = new Redis({
    host: '127.0.0.1',
    port: server.port,
    tls: { ca: caPem },
    maxRetriesPerRequest: 1,
    lazyConnect: true,
  });
  redis.on('error', () => {});
  return redis;
}

beforeAll(async () => {
  tls = makeTlsFiles();
  caPem = fs.readFileSync(tls.ca, 'utf8');
  otherCaPem = fs.readFileSync(tls.otherCa, 'utf8');
  server = await startRedisServer({ tls });
}, 30000);

afterAll(async () => {
  await server?.stop();
  tls?.remove();
});

afterEach(async () => {
  await Promise.all(transports.splice(0).map((t) => settleWithin(t.close(), 3000)));
});

describe('rediss:// with the CA in redisOptions.tls.ca', () => {
  it('round-trips immediate, delayed and rejected messages, with the entry stored as usual', async () => {
    const stream = engine.uniqueStream('tls');
    const t = transport({ dsn: `rediss://127.0.0.1:${server.port}`, stream, redisOptions: { tls: { ca: caPem } } });
    const sent = await t.send(envelopeOf('secure', 's'));
    const received = await receiveOne(t);
    expect(idOf(received)).toBe(idOf(sent));
    expect(received.message).toEqual(new TestMessage('secure', 's'));

    await t.reject(received);
    const again = await receiveOne(t);
    expect(again.last(RedeliveryStamp).retryCount).toBe(1);
    expect(idOf(again)).not.toBe(idOf(sent));
    await t.ack(again);

    const sentAt = Date.now();
    const nonce = idOf(await t.send(envelopeOf('delayed').with(new DelayStamp(200))));
    expect(nonce).toMatch(/^[0-9a-f-]{36}$/);
    const delayed = await receiveOne(t);
    expect(Date.now() - sentAt).toBeGreaterThanOrEqual(180);
    expect(delayed.message.id).toBe('delayed');
    // A delayed message rejected: its copy goes through the delayed zset again.
    await t.reject(delayed);
    const delayedAgain = await receiveOne(t);
    expect(delayedAgain.message.id).toBe('delayed');
    expect(delayedAgain.last(RedeliveryStamp).retryCount).toBe(1);
    await t.ack(delayedAgain);
    expect(await t.getMessageCount()).toBe(0);

    const redis = inspector();
    try {
      await redis.connect();
      expect(await redis.xlen(stream)).toBe(0);
      expect(await redis.zcard(`${stream}:delayed`)).toBe(0);
      expect((await redis.xinfo('GROUPS', stream))[0][1]).toBe('messenger');
    } finally {
      redis.disconnect();
    }
  });

  it.each([
    ['a Buffer', () => Buffer.from(caPem)],
    ['an array with an unrelated CA first', () => [otherCaPem, caPem]],
    ['an array of Buffers', () => [Buffer.from(otherCaPem), Buffer.from(caPem)]],
  ])('accepts the CA as %s', async (_, ca) => {
    const t = transport({ dsn: `rediss://127.0.0.1:${server.port}`, redisOptions: { tls: { ca: ca() } } });
    await t.send(envelopeOf('ca-form'));
    const received = await receiveOne(t);
    expect(received.message.id).toBe('ca-form');
    await t.ack(received);
  });

  it('connects by host name: rediss://localhost works (the certificate names it)', async () => {
    const t = transport({ dsn: `rediss://localhost:${server.port}`, redisOptions: { tls: { ca: caPem } } });
    await t.send(envelopeOf('by-name'));
    const received = await receiveOne(t);
    expect(received.message.id).toBe('by-name');
    await t.ack(received);
  });

  it('an idle consumer over TLS is woken by a send from another connection', async () => {
    const stream = engine.uniqueStream('tls');
    const consumer = transport({ dsn: `rediss://127.0.0.1:${server.port}`, stream, pollIntervalMs: 5000, redisOptions: { tls: { ca: caPem } } });
    const sender = transport({ dsn: `rediss://localhost:${server.port}`, stream, redisOptions: { tls: { ca: caPem } } });
    const controller = new AbortController();
    const received = [];
    const loop = (async () => {
      for await (const envelope of consumer.get(controller.signal)) {
        received.push(envelope.message.id);
        await consumer.ack(envelope);
      }
    })();
    try {
      await sender.send(envelopeOf('first'));
      expect(await pollUntil(() => received.length === 1)).toBe(true);
      await new Promise((resolve) => setTimeout(resolve, 300));
      const sentAt = Date.now();
      await sender.send(envelopeOf('second'));
      expect(await pollUntil(() => received.length === 2, { intervalMs: 2 })).toBe(true);
      expect(Date.now() - sentAt).toBeLessThan(300);
      expect(received).toEqual(['first', 'second']);
    } finally {
      controller.abort();
      await loop;
    }
    const startedAt = Date.now();
    await consumer.close();
    expect(Date.now() - startedAt).toBeLessThan(1000);
  });
});

describe('rediss:// without a CA that signed the server certificate', () => {
  it.each([
    ['no redisOptions (system roots)', undefined],
    ['an empty tls option', { tls: {} }],
    ['an unrelated CA', { tls: { ca: () => otherCaPem } }],
  ])('fails with TransportConnectionError: %s', async (_, redisOptions) => {
    const options = redisOptions?.tls?.ca ? { tls: { ca: redisOptions.tls.ca() } } : redisOptions;
    const t = transport({ dsn: `rediss://:${SECRET}@127.0.0.1:${server.port}`, redisOptions: options });
    for (const operation of [() => t.send(envelopeOf('x')), () => t.get(new AbortController().signal).next()]) {
      const { error, elapsedMs } = await failure(operation);
      expect(error).toBeInstanceOf(TransportConnectionError);
      expect(error.message).toMatch(/certificate|tls|ssl/i);
      expect(elapsedMs).toBeLessThan(3000);
      expectNoSecret(error, SECRET);
    }
  });

  it('a plain redis:// connection to the TLS port fails with TransportConnectionError', async () => {
    const t = transport({ dsn: `redis://127.0.0.1:${server.port}`, connectTimeoutMs: 1000 });
    const { error, elapsedMs } = await failure(() => t.send(envelopeOf('x')));
    expect(error).toBeInstanceOf(TransportConnectionError);
    expect(elapsedMs).toBeLessThan(3000);
  });
});

describe('redisOptions.tls on a redis:// DSN', () => {
  it('a tls object turns TLS on, as in ioredis', async () => {
    const stream = engine.uniqueStream('tls');
    const t = transport({ dsn: `redis://127.0.0.1:${server.port}`, stream, redisOptions: { tls: { ca: caPem } } });
    await t.send(envelopeOf('tls-on-redis-scheme'));
    const received = await receiveOne(t);
    expect(received.message.id).toBe('tls-on-redis-scheme');
    await t.ack(received);
  });
});

describe('tls.servername', () => {
  it('naming the DSN\'s host is accepted', async () => {
    const t = transport({ dsn: `rediss://localhost:${server.port}`, redisOptions: { tls: { ca: caPem, servername: 'LOCALHOST' } } });
    await t.send(envelopeOf('named'));
    await t.ack(await receiveOne(t));
  });
});

describe('client certificates (a server that requires one)', () => {
  let strict;
  let client;

  beforeAll(async () => {
    client = tls.issue('client', 'DNS:client.test', 'clientAuth');
    strict = await startRedisServer({ tls, args: ['--tls-auth-clients', 'yes'] });
  }, 30000);

  afterAll(async () => {
    await strict?.stop();
  });

  it('tls.cert and tls.key are presented', async () => {
    const t = transport({
      dsn: `rediss://127.0.0.1:${strict.port}`,
      redisOptions: { tls: { ca: caPem, cert: fs.readFileSync(client.cert), key: fs.readFileSync(client.key, 'utf8') } },
    });
    await t.send(envelopeOf('with-client-cert'));
    const received = await receiveOne(t);
    expect(received.message.id).toBe('with-client-cert');
    await t.ack(received);
  });

  it('without them the server refuses the connection: TransportConnectionError', async () => {
    const t = transport({ dsn: `rediss://127.0.0.1:${strict.port}`, connectTimeoutMs: 2000, redisOptions: { tls: { ca: caPem } } });
    const { error } = await failure(() => t.getMessageCount());
    expect(error).toBeInstanceOf(TransportConnectionError);
  });
});

describe('host name verification', () => {
  let otherTls;
  let otherServer;

  beforeAll(async () => {
    otherTls = makeTlsFiles({ subjectAltName: 'DNS:not-this-host.invalid' });
    otherServer = await startRedisServer({ tls: otherTls });
  }, 30000);

  afterAll(async () => {
    await otherServer?.stop();
    otherTls?.remove();
  });

  it('refuses a certificate from the trusted CA that names another host', async () => {
    const ca = fs.readFileSync(otherTls.ca, 'utf8');
    for (const host of ['127.0.0.1', 'localhost']) {
      const t = transport({ dsn: `rediss://${host}:${otherServer.port}`, redisOptions: { tls: { ca } } });
      const { error } = await failure(() => t.send(envelopeOf('x')));
      expect({ host, name: error.name }).toEqual({ host, name: 'TransportConnectionError' });
      expect(error.message).toMatch(/certificate|name/i);
    }
  });

  it('tls.rejectUnauthorized: false accepts it, and a certificate from an unknown CA', async () => {
    for (const redisOptions of [{ tls: { rejectUnauthorized: false } }, { tls: { ca: caPem, rejectUnauthorized: false } }]) {
      const t = transport({ dsn: `rediss://127.0.0.1:${otherServer.port}`, redisOptions });
      await t.send(envelopeOf('unverified'));
      const received = await receiveOne(t);
      expect(received.message.id).toBe('unverified');
      await t.ack(received);
    }
  });
});
