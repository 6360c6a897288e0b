'use strict';

// `redisOptions`, upstream's ioredis options, on a throwaway redis-server: every key is honoured
// (db, port, username/password, keyPrefix on every key, connectTimeout, disableClientInfo), or
// accepted as asking nothing of the transport, or refused by name, and the DSN's own settings
// win as in ioredis (a contradicting option is refused, not dropped). keyPrefix is checked
// against upstream in a mixed fleet, and by an ACL user that may touch prefixed keys only.

const crypto = require('node:crypto');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const net = require('node:net');
const { DelayStamp, InvalidArgumentError, RedeliveryStamp, TransportConnectionError } = require('@schally/nestjs-messenger');
const { RedisStreamsTransport: UpstreamRedisStreamsTransport } = require('@schally/nestjs-messenger-transport-redis');
const { RedisStreamsTransport } = require('../..');
const { startRedisServer, withIoredis } = require('../support/redis-server');
const { startProxy, viaProxy } = require('../faults/support/proxy');
const {
  envelopeOf,
  idOf,
  receiveOne,
  serializer,
  closeAll,
  failure,
  throwsSync,
  settleWithin,
  expectNoSecret,
} = require('../support/transport-helpers');

const APP_SECRET = 'appSecret-7f3a';
let server;
let dsn;
const transports = [];

function transport(options) {
  const t = new RedisStreamsTransport({ serializer: serializer(), stream: uniqueStream(), dsn, ...options });
  transports.push(t);
  return t;
}

function upstream(options) {
  const t = new UpstreamRedisStreamsTransport({ serializer: serializer(), dsn, ...options });
  transports.push(t);
  return t;
}

/** A stream name without a hash tag: the transport's helper keys then wrap it in one. */
function uniqueStream() {
  return `orders-${crypto.randomBytes(5).toString('hex')}`;
}

const inspect = (use, db = 0) => withIoredis(`${dsn}/${db}`, use);

/** Every key of the server's database `db` that names `stream`. */
const keysOf = (stream, db = 0) => inspect((redis) => redis.keys(`*${stream}*`), db);

/**
 * `sender` sends `now`, then `later` delayed by `delayMs`; resolves the first message `receiver`
 * receives, asserted to be `now`.
 */
async function sendNowAndLater(sender, receiver, now, later, delayMs) {
  const sent = await sender.send(envelopeOf(now));
  await sender.send(envelopeOf(later).with(new DelayStamp(delayMs)));
  const first = await receiveOne(receiver);
  expect(idOf(first)).toBe(idOf(sent));
  return first;
}

beforeAll(async () => {
  server = await startRedisServer();
  dsn = `redis://127.0.0.1:${server.port}`;
  await inspect((redis) => redis.call('ACL', 'SETUSER', 'app', 'on', `>${APP_SECRET}`, '~app:*', '&*', '+@all'));
}, 30000);

afterAll(async () => {
  await server?.stop();
});

afterEach(() => closeAll(transports));

describe('keys refused by name', () => {
  it.each([
    ['sentinels', { sentinels: [{ host: '127.0.0.1', port: 26379 }], name: 'mymaster' }, /not through Sentinel/, { cluster: true }],
    ['name', { name: 'mymaster' }, /Sentinel/],
    ['role', { sentinels: [{ host: '127.0.0.1', port: 26379 }], name: 'mymaster', role: 'slave' }, /master only/],
    ['tls', { sentinels: [{ host: '127.0.0.1', port: 26379 }], name: 'mymaster', tls: {} }, /without TLS/],
    ['sentinels', { sentinels: [{ host: '127.0.0.1', port: 26379 }], name: 'mymaster' }, /without TLS/, { dsn: 'rediss://127.0.0.1:6379' }],
    ['sentinelTLS', { sentinelTLS: {} }, /without TLS/],
    ['natMap', { natMap: { '10.0.0.1:6379': { host: '127.0.0.1', port: 6379 } } }, /used as they are/],
    ['retryStrategy', { retryStrategy: () => 100 }, /reconnects by itself/],
    ['maxRetriesPerRequest', { maxRetriesPerRequest: null }, /connectTimeoutMs/],
    ['enableOfflineQueue', { enableOfflineQueue: false }, /maxQueuedSends/],
    ['connectionName', { connectionName: 'app' }, /named/],
    ['path', { path: '/tmp/redis.sock' }, /over TCP/, { cluster: true }],
    ['path', { path: '/tmp/redis.sock' }, /not rediss:\/\//, { dsn: 'rediss://127.0.0.1:6379' }],
    ['commandTimeout', { commandTimeout: 1000 }, /connectTimeoutMs/],
    ['notAnOption', { notAnOption: 1 }, /not an ioredis option/],
    ['tls.checkServerIdentity', { tls: { checkServerIdentity: () => undefined } }, /tls\.ca, tls\.cert/],
    ['tls.servername', { tls: { servername: 'redis.example' } }, /DSN's host/],
    ['family', { family: 6 }, /IPv6 address/, { dsn: 'redis://localhost:6379' }],
    ['db', { db: 3 }, /database 0 only/, { cluster: true }],
  ].map(([key, redisOptions, why, more = {}]) => [key, redisOptions, why, more]))('redisOptions.%s', (key, redisOptions, why, more) => {
    const error = throwsSync(() => new RedisStreamsTransport({ dsn, stream: 's', redisOptions, ...more }));
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect(error.message).toContain(`redisOptions.${key} is not supported by nestjs-messenger-native`);
    expect(error.message).toMatch(why);
  });

  it('accepts keys that ask nothing of the transport, and others set to ioredis\'s default or undefined', async () => {
    const t = transport({
      redisOptions: {
        lazyConnect: true,
        enableReadyCheck: false,
        keepAlive: 10000,
        enableAutoPipelining: true,
        maxRetriesPerRequest: 20,
        enableOfflineQueue: true,
        sentinels: null,
        role: 'master',
        retryStrategy: undefined,
        family: 4,
        tls: undefined,
      },
    });
    await t.send(envelopeOf('accepted'));
    await t.ack(await receiveOne(t));
  });
});

describe('redisOptions.sentinels: Redis Sentinel, as ioredis reads it', () => {
  it('refuses an empty list and a missing master name as InvalidArgumentError', () => {
    for (const [redisOptions, why] of [
      [{ sentinels: [], name: 'mymaster' }, /redisOptions\.sentinels: expected a non-empty array/],
      [{ sentinels: [{ host: '127.0.0.1', port: 26379 }] }, /redisOptions\.name: expected the master's name/],
      [{ sentinels: [{ host: '127.0.0.1', port: 0 }], name: 'mymaster' }, /sentinels\[0\]\.port/],
    ]) {
      const error = throwsSync(() => new RedisStreamsTransport({ dsn, stream: 's', redisOptions }));
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect(error.message).toMatch(why);
    }
  });

  it('with no sentinel answering, a send fails within connectTimeoutMs as not applied, showing no password', async () => {
    const closed = await new Promise((resolve) => {
      const probe = net.createServer().listen(0, '127.0.0.1', () => {
        const { port } = probe.address();
        probe.close(() => resolve(port));
      });
    });
    const t = transport({
      dsn: 'redis://:master-pw-4411@127.0.0.1:1',
      connectTimeoutMs: 1000,
      redisOptions: { sentinels: [{ host: '127.0.0.1', port: closed }], name: 'mymaster', sentinelPassword: 'sentinel-pw-4411' },
    });
    const started = Date.now();
    const outcome = await settleWithin(t.send(envelopeOf('nowhere')), 5000);
    expect(Date.now() - started).toBeLessThan(3000);
    expect(outcome.error).toBeInstanceOf(TransportConnectionError);
    expect(outcome.error.outcome).toBe('not-applied');
    expect(outcome.error.message).toMatch(/Sentinel/);
    expect(outcome.error.message).not.toMatch(/pw-4411/);
  });
});

describe('redisOptions.path: a Unix socket, as ioredis reads it', () => {
  it('sends, delays, receives and acks over the socket, the DSN giving only credentials and database', async () => {
    const directory = fs.mkdtempSync(path.join(os.tmpdir(), 'nmn-sock-'));
    const socket = path.join(directory, 'redis.sock');
    const local = await startRedisServer({ args: ['--unixsocket', socket, '--unixsocketperm', '700'] });
    try {
      // The DSN's host and port are not where the server listens: only the socket is.
      const t = transport({ dsn: 'redis://127.0.0.1:1/0', redisOptions: { path: socket } });
      await t.send(envelopeOf('over the socket'));
      await t.send(envelopeOf('delayed over the socket').with(new DelayStamp(50)));
      const first = await receiveOne(t);
      await t.ack(first);
      const second = await receiveOne(t);
      await t.ack(second);
      expect([first.message.id, second.message.id]).toEqual(['over the socket', 'delayed over the socket']);
      expect(await t.getMessageCount()).toBe(0);
    } finally {
      await closeAll(transports);
      await local.stop();
      fs.rmSync(directory, { recursive: true, force: true });
    }
  });

  it('is refused with TLS (not used over a socket)', () => {
    const error = throwsSync(() => new RedisStreamsTransport({ dsn, stream: 's', redisOptions: { path: '/tmp/r.sock', tls: {} } }));
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect(error.message).toMatch(/redisOptions\.path is not supported .*TLS is not used over a Unix socket/);
  });
});

describe('the DSN wins, as in ioredis: an option contradicting it is refused', () => {
  it.each([
    ['db', 'DSN/2', { db: 3 }],
    ['port', 'redis://127.0.0.1:6390', { port: 6391 }],
    ['host', 'redis://127.0.0.1:6379', { host: 'redis.example' }],
    ['username', 'redis://app:pw@127.0.0.1:6379', { username: 'other' }],
  ])('redisOptions.%s', (key, givenDsn, redisOptions) => {
    const error = throwsSync(
      () => new RedisStreamsTransport({ dsn: givenDsn.replace('DSN', dsn), stream: 's', redisOptions }),
    );
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect(error.message).toContain(`redisOptions.${key} differs from the DSN's`);
  });

  it('a password differing from the DSN\'s is refused without showing either', () => {
    const error = throwsSync(
      () => new RedisStreamsTransport({ dsn: 'redis://:dsnSecret-1@127.0.0.1:6379', stream: 's', redisOptions: { password: 'optionSecret-2' } }),
    );
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect(error.message).toContain('redisOptions.password differs from the DSN\'s');
    expectNoSecret(error, 'dsnSecret-1', 'optionSecret-2');
  });

  it('the same value in both places is accepted', async () => {
    const t = transport({ dsn: `${dsn}/4`, redisOptions: { db: 4, host: '127.0.0.1', port: server.port } });
    await t.send(envelopeOf('same'));
    await t.ack(await receiveOne(t));
  });

  it('connectTimeout and connectTimeoutMs must agree when both are given', () => {
    const error = throwsSync(() => new RedisStreamsTransport({ dsn, stream: 's', connectTimeoutMs: 1000, redisOptions: { connectTimeout: 2000 } }));
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect(error.message).toMatch(/redisOptions\.connectTimeout .*connectTimeoutMs/);
  });

  it.each([
    ['db', { db: '3' }],
    ['port', { port: 70000 }],
    ['keyPrefix', { keyPrefix: 5 }],
    ['tls', { tls: 'RedisCloudFixed' }],
    ['tls.ca', { tls: { ca: 5 } }],
  ])('a value of the wrong type: redisOptions.%s', (key, redisOptions) => {
    const error = throwsSync(() => new RedisStreamsTransport({ dsn, stream: 's', redisOptions }));
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect(error.message).toContain(`Invalid redisOptions.${key}`);
  });
});

describe('honoured', () => {
  it('db: messages are stored in that database, not in 0', async () => {
    const stream = uniqueStream();
    const t = transport({ stream, redisOptions: { db: 5 } });
    const sent = await t.send(envelopeOf('in-db-5'));
    await t.send(envelopeOf('later').with(new DelayStamp(60000)));
    expect(await inspect((redis) => Promise.all([redis.xlen(stream), redis.zcard(`${stream}:delayed`)]), 5)).toEqual([1, 1]);
    expect(await keysOf(stream, 0)).toEqual([]);
    const received = await receiveOne(t);
    expect(idOf(received)).toBe(idOf(sent));
    await t.ack(received);
  });

  it('port: used when the DSN has none', async () => {
    const stream = uniqueStream();
    const t = transport({ dsn: 'redis://127.0.0.1', stream, redisOptions: { port: server.port } });
    await t.send(envelopeOf('on-the-private-server'));
    expect(await inspect((redis) => redis.xlen(stream))).toBe(1);
    await t.ack(await receiveOne(t));
  });

  it('username, password and keyPrefix: an ACL user allowed app:* keys only runs every operation', async () => {
    const stream = uniqueStream();
    const t = transport({ stream, redisOptions: { username: 'app', password: APP_SECRET, keyPrefix: 'app:' } });
    const first = await sendNowAndLater(t, t, 'first', 'delayed', 150);
    await t.reject(first);
    const again = await receiveOne(t);
    expect(again.last(RedeliveryStamp).retryCount).toBe(1);
    await t.ack(again);
    const delayed = await receiveOne(t);
    expect(delayed.message.id).toBe('delayed');
    expect((await t.find(idOf(delayed)))?.message.id).toBe('delayed');
    await t.ack(delayed);
    expect(await t.getMessageCount()).toBe(0);
    const keys = await keysOf(stream);
    expect(keys).toContain(`app:${stream}`);
    for (const key of keys) expect(key.startsWith('app:')).toBe(true);
  });

  it('a wrong password fails with TransportConnectionError and shows no password', async () => {
    const t = transport({ redisOptions: { username: 'app', password: 'wrongSecret-9c1e', keyPrefix: 'app:' }, connectTimeoutMs: 2000 });
    for (const operation of [() => t.send(envelopeOf('x')), () => t.getMessageCount()]) {
      const { error } = await failure(operation);
      expect(error).toBeInstanceOf(TransportConnectionError);
      expectNoSecret(error, 'wrongSecret-9c1e', APP_SECRET);
    }
  });

  it('keyPrefix: a mixed fleet with upstream on the same prefix shares the queue both ways', async () => {
    const stream = uniqueStream();
    const redisOptions = { keyPrefix: 'fleet:' };
    const ours = transport({ stream, redisOptions });
    await ours.setup();
    const theirs = upstream({ stream, redisOptions });

    const first = await sendNowAndLater(theirs, ours, 'from-upstream', 'from-upstream-delayed', 100);
    await ours.ack(first);
    const second = await receiveOne(ours);
    expect(second.message.id).toBe('from-upstream-delayed');
    await ours.ack(second);

    const third = await sendNowAndLater(ours, theirs, 'from-native', 'from-native-delayed', 100);
    await theirs.ack(third);
    const fourth = await receiveOne(theirs, 3000);
    expect(fourth.message.id).toBe('from-native-delayed');
    await theirs.ack(fourth);

    expect(await ours.getMessageCount()).toBe(0); // our acks are written by then
    expect(await inspect((redis) => redis.xlen(`fleet:${stream}`))).toBe(0);
    // Upstream's XGROUP escapes ioredis's prefix (ioredis knows no key in it): its empty
    // unprefixed stream is the only key outside the prefix, and none of ours.
    for (const key of await keysOf(stream)) expect(key === stream || key.startsWith('fleet:')).toBe(true);
  });

  it('connectTimeout: a server that never answers fails the connection within it', async () => {
    const sockets = new Set();
    const silent = net.createServer((socket) => sockets.add(socket));
    await new Promise((resolve) => silent.listen(0, '127.0.0.1', resolve));
    try {
      const t = transport({ dsn: `redis://127.0.0.1:${silent.address().port}`, redisOptions: { connectTimeout: 300 } });
      const { error, elapsedMs } = await failure(() => t.getMessageCount());
      expect(error).toBeInstanceOf(TransportConnectionError);
      expect(error.message).toContain('within 300 ms');
      expect(elapsedMs).toBeLessThan(2000);
    } finally {
      for (const socket of sockets) socket.destroy();
      await closeAll(transports);
      await new Promise((resolve) => silent.close(resolve));
    }
  });

  it('disableClientInfo: the connections send no CLIENT SETINFO', async () => {
    // Seen on the wire (a proxy counts what the client sends): servers before 7.2 refuse the
    // command and list no library name.
    const proxy = await startProxy({ targetPort: server.port });
    try {
      const setinfo = proxy.count(/* RESP of the subcommand */ 'SETINFO');
      const quiet = transport({ dsn: viaProxy(dsn, proxy), redisOptions: { disableClientInfo: true } });
      await quiet.getMessageCount();
      expect(setinfo.seen).toBe(0);
      const told = transport({ dsn: viaProxy(dsn, proxy) });
      await told.getMessageCount();
      expect(setinfo.seen).toBeGreaterThan(0);
      await closeAll(transports);
    } finally {
      await proxy.close();
    }
  });
});
