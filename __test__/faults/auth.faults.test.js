'use strict';

// Fault scenario: the password changes under a running consumer and its connections
// are killed (a rotated credential). Expected (docs/reliability.md): no login storm (the
// consumer tries a few times with growing pauses), sends reject with TransportConnectionError,
// and the consumer's get() ends with TransportConnectionError after its few tries, so the core
// Worker stops instead of spinning silently. No password appears in any error. Runs on
// private servers with passwords: a SCRAM PostgreSQL cluster and a redis-server with
// requirepass.

const { Envelope, JsonSerializer, TransportConnectionError } = require('@schally/nestjs-messenger');
const { Redis } = require('ioredis');
const { Client } = require('pg');
const { SqlTransport, RedisStreamsTransport } = require('../..');
const { startPasswordCluster } = require('../support/pg-cluster');
const { startRedisServer } = require('../support/redis-server');
const { uniqueName } = require('../support/engines');
const { settleWithin } = require('./support/account');

class Rotated {
  constructor(n) {
    this.n = n;
  }
}

const OLD = 'first-Secret/1';
const NEW = 'second-Secret?2';
/** get() surfaces a refusal after 3 tries with pauses of about 0.1, 0.2 and 0.4 s. */
const SURFACE_WITHIN_MS = 8000;

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Runs get() until it ends or throws; resolves to { error, endedAt, received }. */
function consume(transport) {
  const received = [];
  const done = (async () => {
    try {
      for await (const envelope of transport.get()) {
        received.push(envelope.message.n);
        await transport.ack(envelope);
      }
      return { error: undefined, endedAt: Date.now(), received };
    } catch (error) {
      return { error, endedAt: Date.now(), received };
    }
  })();
  return { received, done };
}

/** A consumer of `transport` (consume()) that received a first message, asserted within 5 s. */
async function consumingBeforeRotation(transport) {
  const consumer = consume(transport);
  await transport.send(new Envelope(new Rotated(1)));
  const deadline = Date.now() + 5000;
  while (consumer.received.length < 1 && Date.now() < deadline) await sleep(20);
  expect(consumer.received).toEqual([1]);
  return consumer;
}

function expectNoPassword(error) {
  const text = `${error.message}\n${error.stack}\n${error.cause?.message ?? ''}`;
  for (const secret of [OLD, NEW, encodeURIComponent(OLD), encodeURIComponent(NEW)]) expect(text).not.toContain(secret);
}

/**
 * After the rotation: a send rejects with TransportConnectionError, and the consumer's get()
 * ends with one within SURFACE_WITHIN_MS; no password in either. Resolves to the consumer's end.
 */
async function expectRefusalSurfaced(transport, consumer) {
  const rotatedAt = Date.now();
  const sendError = await transport.send(new Envelope(new Rotated(2))).then(
    () => undefined,
    (error) => error,
  );
  expect(sendError).toBeInstanceOf(TransportConnectionError);
  expectNoPassword(sendError);

  // A timer left running would keep jest's process alive after the run.
  const outcome = await settleWithin(consumer.done, SURFACE_WITHIN_MS + 5000);
  expect(outcome.timeout).toBeUndefined();
  const ended = outcome.value;
  expect(ended.error).toBeInstanceOf(TransportConnectionError);
  expectNoPassword(ended.error);
  expect(ended.endedAt - rotatedAt).toBeLessThan(SURFACE_WITHIN_MS);
  return ended;
}

describe('PostgreSQL: the password rotates under a running consumer', () => {
  let cluster;
  let transport;

  beforeAll(async () => {
    cluster = await startPasswordCluster({ password: OLD });
  }, 60_000);

  afterAll(async () => {
    await transport?.close().catch(() => {});
    await cluster?.stop();
  });

  it('sends reject and get() ends with TransportConnectionError after a few tries, with no password in them', async () => {
    transport = new SqlTransport({
      dsn: cluster.dsn(OLD),
      queueName: uniqueName('rotate'),
      connectTimeoutMs: 2000,
      serializer: new JsonSerializer([Rotated]),
    });
    const consumer = await consumingBeforeRotation(transport);

    const admin = new Client({ connectionString: cluster.dsn(OLD) });
    await admin.connect();
    try {
      await admin.query(`ALTER USER postgres PASSWORD '${NEW.replace(/'/g, "''")}'`);
      await admin.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND backend_type = $1', [
        'client backend',
      ]);
    } finally {
      await admin.end();
    }
    const ended = await expectRefusalSurfaced(transport, consumer);
    expect(ended.error.message).toMatch(/password authentication failed|SQLSTATE 28/);
  }, 60_000);
});

describe('Redis: the password rotates under a running consumer', () => {
  let server;
  let transport;
  let admin;

  beforeAll(async () => {
    server = await startRedisServer({ args: ['--requirepass', OLD] });
  }, 30_000);

  afterAll(async () => {
    await transport?.close().catch(() => {});
    admin?.disconnect();
    await server?.stop();
  });

  it('sends reject and get() ends with TransportConnectionError after a few logins, not a storm', async () => {
    const dsn = `redis://:${encodeURIComponent(OLD)}@127.0.0.1:${server.port}`;
    transport = new RedisStreamsTransport({
      dsn,
      stream: `rotate:{${uniqueName('s')}}`,
      connectTimeoutMs: 2000,
      serializer: new JsonSerializer([Rotated]),
    });
    const consumer = await consumingBeforeRotation(transport);

    admin = new Redis({ port: server.port, host: '127.0.0.1', password: OLD, lazyConnect: true });
    await admin.connect();
    await admin.config('SET', 'requirepass', NEW);
    await admin.auth(NEW);
    await admin.config('RESETSTAT');
    await admin.client('KILL', 'TYPE', 'normal', 'SKIPME', 'yes');
    await expectRefusalSurfaced(transport, consumer);

    // A handful of refused logins over those seconds, not one every few milliseconds.
    const stats = await admin.info('errorstats');
    const wrongpass = Number(/errorstat_WRONGPASS:count=(\d+)/.exec(stats)?.[1] ?? 0);
    expect(wrongpass).toBeGreaterThan(0);
    expect(wrongpass).toBeLessThanOrEqual(20);
  }, 60_000);
});
