'use strict';

// RedisStreamsTransport with `cluster: true` on a real local Redis Cluster (three masters, no
// replicas, started for this file by bench/redis-cluster.js): the core conformance
// suite, streams on slots of every master reached through a seed that does not own them, the
// hash-tag validation of the stream and its delayKey, and a slot migration under a live
// consumer (MOVED/ASK followed, the group's pending list and the delayed zset moving along).

const crypto = require('node:crypto');
const fs = require('node:fs');
const {
  DelayStamp,
  Envelope,
  InvalidArgumentError,
  JsonSerializer,
  RedeliveryStamp,
  TransportError,
} = require('@schally/nestjs-messenger');
const { RedisStreamsTransport } = require('../..');
const { redis: engine } = require('../support/engines');
const { startCluster, nodeCommand } = require('../../bench/redis-cluster');
const { sleep, pollUntil, startAckingConsumer } = require('../support/transport-helpers');
const { idOf, fleetHarness } = require('../support/fleet');
const { conformanceSuite } = require('../shared/conformance.suite');
const { makeTlsFiles } = require('../support/tls-files');

const STREAM_ID = /^\d+-\d+$/;

class ClusterMessage {
  constructor(n, text = '') {
    this.n = n;
    this.text = text;
  }
}

/** @type {Awaited<ReturnType<typeof startCluster>> | undefined} */
let cluster;
/** @type {import('ioredis').Cluster | undefined} */
let admin;

beforeAll(async () => {
  cluster = await startCluster({ masters: 3 });
  admin = cluster.admin();
  await admin.ping();
}, 90000);

afterAll(async () => {
  await admin?.quit().catch(() => admin.disconnect());
  await cluster?.stop();
}, 30000);

// ---------------------------------------------------------------------------
// The core conformance suite, on the cluster (unique tagged streams land on all masters)
// ---------------------------------------------------------------------------

conformanceSuite(engine, {
  name: 'RedisStreamsTransport (Redis Cluster)',
  dsn: () => cluster.dsn,
  options: { cluster: true },
  remove: ({ stream }) => admin.del(stream, `${stream}:delayed`),
});

// ---------------------------------------------------------------------------
// Per-test resources for the cluster-specific tests
// ---------------------------------------------------------------------------

let keys = [];

const { open, ack, reject, receive, startConsumer: consume } = fleetHarness({
  // One DEL per key: keys of different tests may live on different slots.
  async cleanup() {
    for (const key of keys.splice(0)) await admin.del(key);
  },
});

function clusterTransport(stream, options = {}) {
  const transport = new RedisStreamsTransport({
    dsn: cluster.dsn,
    cluster: true,
    stream,
    name: 'cluster-worker',
    serializer: new JsonSerializer([ClusterMessage]),
    ...options,
  });
  return open(transport, 'cluster');
}

function message(n, ...stamps) {
  return new Envelope(new ClusterMessage(n, `cluster message ${n} ü 🚀`), stamps);
}

/** A background get() loop recording (and tracking, not settling) what it receives. */
function startConsumer(transport, sink) {
  const consumer = consume(transport, { sink });
  // A failed loop is visible before stop() is awaited.
  let failure;
  consumer.done.catch((error) => {
    failure = error;
  });
  return { failure: () => failure, stop: () => consumer.stop() };
}

/** A tagged stream whose slot is owned by the master on `port`. */
async function streamOwnedBy(port, prefix) {
  for (let i = 0; i < 2000; i += 1) {
    const stream = `messenger:{${prefix}-${crypto.randomBytes(4).toString('hex')}}`;
    const slot = await cluster.keyslot(stream);
    if ((await cluster.ownerOf(slot)) === port) {
      keys.push(stream, `${stream}:delayed`);
      return { stream, slot };
    }
  }
  throw new Error(`no stream found for the master on ${port}`);
}

/** Whether a client of the node at `port` has key tracking on (an idle consumer's wait). */
async function trackingOn(port) {
  return String(await nodeCommand(port, 'CLIENT', 'LIST'))
    .split('\n')
    .some((line) => /\bflags=\S*t/.test(line));
}

/** XREADGROUP calls (claims) the node at `port` has served so far. */
async function claimsServed(port) {
  const stats = String(await nodeCommand(port, 'INFO', 'commandstats'));
  return Number(/cmdstat_xreadgroup:calls=(\d+)/.exec(stats)?.[1] ?? 0);
}

/** A tagged stream whose slot the master on `port` of `handle` (a cluster) owns. */
async function streamOn(handle, port, prefix) {
  for (let i = 0; i < 2000; i += 1) {
    const stream = `messenger:{${prefix}-${crypto.randomBytes(4).toString('hex')}}`;
    if ((await handle.ownerOf(await handle.keyslot(stream))) === port) return stream;
  }
  throw new Error(`no stream found for the master on ${port}`);
}

async function pendingCount(port, stream) {
  const summary = await nodeCommand(port, 'XPENDING', stream, 'messenger');
  return Number(summary[0]);
}

// ---------------------------------------------------------------------------
// Streams on every master
// ---------------------------------------------------------------------------

describe('streams on slots of each of the three masters (DSN seed: the first master)', () => {
  test.each([0, 1, 2])('master #%i: send, delayed send, list/find/count, receive, reject and ack', async (index) => {
    const ownerPort = cluster.ports[index];
    const { stream, slot } = await streamOwnedBy(ownerPort, `owner${index}`);
    const delayKey = `${stream}:delayed`;
    expect(await cluster.keyslot(delayKey)).toBe(slot);
    const sender = clusterTransport(stream);
    const receiver = clusterTransport(stream);

    const sentId = idOf(await sender.send(message(1)));
    expect(sentId).toMatch(STREAM_ID);
    const t0 = Date.now();
    const nonce = idOf(await sender.send(message(2, new DelayStamp(150))));
    expect(nonce).not.toMatch(STREAM_ID);

    // Stored on the owning master; every other node redirects.
    expect(await nodeCommand(ownerPort, 'XLEN', stream)).toBe(1);
    expect(await nodeCommand(ownerPort, 'ZCARD', delayKey)).toBe(1);
    for (const port of cluster.ports.filter((p) => p !== ownerPort)) {
      await expect(nodeCommand(port, 'XLEN', stream)).rejects.toThrow(
        new RegExp(`MOVED ${slot} 127\\.0\\.0\\.1:${ownerPort}`),
      );
    }

    const listed = [];
    for await (const envelope of receiver.list()) listed.push(envelope);
    expect(listed.map(idOf)).toEqual([sentId]);
    expect((await receiver.find(sentId))?.message.n).toBe(1);
    expect(await receiver.find(nonce)).toBeUndefined();
    expect(await receiver.getMessageCount()).toBe(2);

    const [first, delayed] = await receive(receiver, 2, 5000);
    expect(idOf(first)).toBe(sentId);
    expect({ ...first.message }).toEqual({ ...message(1).message });
    expect(delayed.message.n).toBe(2);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(150);
    expect(idOf(delayed)).toMatch(STREAM_ID);
    expect(delayed.last(DelayStamp)?.delayMs).toBe(150);

    await reject(receiver, first);
    const [copy] = await receive(receiver, 1, 5000);
    expect(copy).toBeDefined();
    expect(copy.message.n).toBe(1);
    expect(idOf(copy)).not.toBe(sentId);
    expect(copy.all(RedeliveryStamp).map((s) => s.retryCount)).toEqual([1]);

    await ack(receiver, copy);
    await ack(receiver, delayed);
    // Acks are written behind: getMessageCount() waits for them, so the server is read after.
    expect(await receiver.getMessageCount()).toBe(0);
    expect(await pendingCount(ownerPort, stream)).toBe(0);
    expect(await nodeCommand(ownerPort, 'XLEN', stream)).toBe(0);
    expect(await nodeCommand(ownerPort, 'ZCARD', delayKey)).toBe(0);
  }, 20000);
});

// ---------------------------------------------------------------------------
// Hash tags: the stream and its delayed zset must share a slot
// ---------------------------------------------------------------------------

describe('stream and delayKey slots on a cluster', () => {
  function constructionError(options) {
    try {
      clusterTransport(options.stream, options);
    } catch (error) {
      return error;
    }
    return undefined;
  }

  test('a stream without hash tag and the default delayKey is refused at construction, naming the hash-tag fix', async () => {
    let stream;
    do {
      stream = `messenger:untagged-${crypto.randomBytes(4).toString('hex')}`;
    } while ((await cluster.keyslot(stream)) === (await cluster.keyslot(`${stream}:delayed`)));
    keys.push(stream, `${stream}:delayed`);

    const error = constructionError({ stream });
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect(error).not.toBeInstanceOf(TransportError);
    expect(error.message).toContain(stream);
    expect(error.message).toContain(`${stream}:delayed`);
    expect(error.message).toMatch(/hash tag/i);
    expect(error.message).toMatch(/\{[^}]+\}/);
    expect(await admin.exists(stream)).toBe(0);
  });

  test('a tagged stream with a custom delayKey on another slot is refused the same way', async () => {
    const tag = `t-${crypto.randomBytes(4).toString('hex')}`;
    const stream = `messenger:{${tag}}`;
    let delayKey;
    do {
      delayKey = `delayed:{other-${crypto.randomBytes(4).toString('hex')}}`;
    } while ((await cluster.keyslot(delayKey)) === (await cluster.keyslot(stream)));
    keys.push(stream, delayKey);

    const error = constructionError({ stream, delayKey });
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect(error.message).toContain(stream);
    expect(error.message).toContain(delayKey);
    expect(error.message).toMatch(/hash tag|\{tag\}/i);
  });

  test('a custom delayKey with the same tag is accepted and used', async () => {
    const tag = `t-${crypto.randomBytes(4).toString('hex')}`;
    const stream = `messenger:{${tag}}`;
    const delayKey = `later:{${tag}}:zset`;
    keys.push(stream, delayKey, `${stream}:delayed`);
    expect(await cluster.keyslot(delayKey)).toBe(await cluster.keyslot(stream));

    const transport = clusterTransport(stream, { delayKey });
    const nonce = idOf(await transport.send(message(7, new DelayStamp(100))));
    expect(await admin.zcard(delayKey)).toBe(1);
    expect(await admin.exists(`${stream}:delayed`)).toBe(0);
    const member = JSON.parse((await admin.zrange(delayKey, 0, -1))[0]);
    expect(member.nonce).toBe(nonce);

    const [received] = await receive(transport, 1, 5000);
    expect(received?.message.n).toBe(7);
    await ack(transport, received);
    expect(await admin.zcard(delayKey)).toBe(0);
    // A write-behind ack resolves before its XDEL is written (within a commit's time).
    await pollUntil(async () => (await admin.xlen(stream)) === 0, { timeoutMs: 2000 });
    expect(await admin.xlen(stream)).toBe(0);
  });
});

// ---------------------------------------------------------------------------
// Slot migration under a live consumer
// ---------------------------------------------------------------------------

describe('many idle queues on a cluster', () => {
  const QUEUES = 200;

  /** Connections of other clients than the asking one, per node. */
  async function clientsPerNode() {
    const counts = {};
    for (const port of cluster.ports) {
      counts[port] = String(await nodeCommand(port, 'CLIENT', 'LIST')).trim().split('\n').length - 1;
    }
    return counts;
  }

  /** Claims the nodes have served so far. */
  async function claimsOnAllNodes() {
    let calls = 0;
    for (const port of cluster.ports) calls += await claimsServed(port);
    return calls;
  }

  test(`${QUEUES} idle consumers hold two connections per node, read nothing while idle, and are each woken by an entry or delayed member another client stores`, async () => {
    const before = await clientsPerNode();
    const tag = crypto.randomBytes(4).toString('hex');
    const streams = Array.from({ length: QUEUES }, (_, i) => `messenger:{idle-${tag}-${i}}`);
    keys.push(...streams.flatMap((stream) => [stream, `${stream}:delayed`]));
    const got = [];
    const consumers = streams.map((stream) => startConsumer(clusterTransport(stream), got));
    // Every node holds streams of some of the queues, and tracks their keys once they idle.
    await pollUntil(async () => (await Promise.all(cluster.ports.map(trackingOn))).every(Boolean), {
      timeoutMs: 10000,
      intervalMs: 50,
    });
    await sleep(500);

    const reads = await claimsOnAllNodes();
    await sleep(1500);
    // No consumer reads while nothing happens (each blocking read of its own would be issued
    // again every pollIntervalMs).
    expect((await claimsOnAllNodes()) - reads).toBe(0);
    const during = await clientsPerNode();
    const overTwo = cluster.ports
      .map((port) => ({ port, opened: during[port] - before[port] }))
      .filter(({ opened }) => opened > 2);
    expect(overTwo).toEqual([]);

    // Entries stored by another client (as the upstream transport stores them), one per
    // queue, and a delayed member for the first queue, due in 300 ms.
    const serializer = new JsonSerializer([ClusterMessage]);
    for (const [i, stream] of streams.entries()) {
      const { body, headers } = serializer.encode(message(i));
      await admin.xadd(stream, '*', 'body', body, 'headers', JSON.stringify(headers));
    }
    const delayed = serializer.encode(message(QUEUES));
    const dueAt = Date.now() + 300;
    await admin.zadd(
      `${streams[0]}:delayed`,
      dueAt,
      JSON.stringify({ nonce: crypto.randomUUID(), body: delayed.body, headers: JSON.stringify(delayed.headers) }),
    );
    await pollUntil(() => got.length >= QUEUES + 1 || consumers.some((c) => c.failure() !== undefined), {
      timeoutMs: 10000,
    });
    expect(consumers.map((c) => c.failure()).filter(Boolean)).toEqual([]);
    expect(got.map((g) => g.n).sort((a, b) => a - b)).toEqual(Array.from({ length: QUEUES + 1 }, (_, i) => i));
    expect(got.find((g) => g.n === QUEUES).at).toBeGreaterThanOrEqual(dueAt);
    await Promise.all(consumers.map((c) => c.stop()));
  }, 60000);
});

describe('idle wake-ups on a cluster', () => {
  test('a node\'s tracking connection killed under an idle consumer: an entry another client stores afterwards still reaches it', async () => {
    const port = cluster.ports[1];
    const { stream } = await streamOwnedBy(port, 'tracking-killed');
    const got = [];
    const consumer = startConsumer(clusterTransport(stream), got);
    const trackingIds = async () =>
      String(await nodeCommand(port, 'CLIENT', 'LIST'))
        .split('\n')
        .filter((line) => /\bflags=\S*t/.test(line))
        .map((line) => /\bid=(\d+)/.exec(line)[1]);
    expect(await pollUntil(async () => (await trackingIds()).length === 1, { timeoutMs: 5000 })).toBe(true);
    const [killed] = await trackingIds();
    await nodeCommand(port, 'CLIENT', 'KILL', 'ID', killed);
    // Tracked again, over a new connection.
    expect(
      await pollUntil(async () => (await trackingIds()).some((id) => id !== killed), { timeoutMs: 5000 }),
    ).toBe(true);
    const serializer = new JsonSerializer([ClusterMessage]);
    const { body, headers } = serializer.encode(message(1));
    await admin.xadd(stream, '*', 'body', body, 'headers', JSON.stringify(headers));
    await pollUntil(() => got.length > 0 || consumer.failure() !== undefined, { timeoutMs: 5000 });
    expect(consumer.failure()).toBeUndefined();
    expect(got.map((g) => g.n)).toEqual([1]);
    await consumer.stop();
  }, 30000);

  test('a user the nodes refuse key tracking: idle consumers claim each pollIntervalMs, so an entry another client stores still reaches them in time', async () => {
    const user = `no-tracking-${crypto.randomBytes(3).toString('hex')}`;
    for (const port of cluster.ports) {
      await nodeCommand(port, 'ACL', 'SETUSER', user, 'on', '>pw', '~*', '&*', '+@all', '-client|tracking');
    }
    try {
      const port = cluster.ports[2];
      const { stream } = await streamOwnedBy(port, 'no-tracking');
      const dsn = cluster.dsn.replace('redis://', `redis://${user}:pw@`);
      const got = [];
      const transport = clusterTransport(stream, { dsn, pollIntervalMs: 50 });
      const consumer = startConsumer(transport, got);
      // Long enough for the tracking's retries to back off to their longest pause (2 s).
      await sleep(5000);
      // Meanwhile the consumer claims as if it polled (about 20 a second), not once per retry.
      const claimsBefore = await claimsServed(port);
      await sleep(1000);
      expect((await claimsServed(port)) - claimsBefore).toBeGreaterThanOrEqual(5);
      const serializer = new JsonSerializer([ClusterMessage]);
      const { body, headers } = serializer.encode(message(1));
      await admin.xadd(stream, '*', 'body', body, 'headers', JSON.stringify(headers));
      await pollUntil(() => got.length > 0 || consumer.failure() !== undefined, { timeoutMs: 3000, intervalMs: 10 });
      expect(consumer.failure()).toBeUndefined();
      expect(got.map((g) => g.n)).toEqual([1]);
      await consumer.stop();
      await ack(transport, got[0].envelope);
      // Before the user goes: deleting it closes its connections.
      await transport.close();
    } finally {
      for (const port of cluster.ports) await nodeCommand(port, 'ACL', 'DELUSER', user);
    }
  }, 30000);
});

describe('failover under idle consumers (a cluster with a replica of each master)', () => {
  /** @type {Awaited<ReturnType<typeof startCluster>> | undefined} */
  let failover;

  beforeAll(async () => {
    failover = await startCluster({ masters: 3, replicas: 1 });
  }, 90000);

  afterAll(async () => {
    await failover?.stop();
  }, 30000);

  test('the master holding an idle consumer\'s stream dies and its replica takes over: the keys are tracked on the new master, and an entry stored there reaches the consumer', async () => {
    const [seed] = failover.ports;
    const masters = [...new Set((await Promise.all(Array.from({ length: 16384 }, (_, s) => s).filter((s) => s % 512 === 0).map((s) => failover.ownerOf(s)))))];
    const victim = masters.find((port) => port !== seed);
    const stream = await streamOn(failover, victim, 'failover');
    const slot = await failover.keyslot(stream);
    const transport = new RedisStreamsTransport({
      dsn: failover.dsn,
      cluster: true,
      stream,
      serializer: new JsonSerializer([ClusterMessage]),
      connectTimeoutMs: 1000,
    });
    const consumer = startAckingConsumer(transport);
    const got = consumer.received;
    try {
      expect(await pollUntil(() => trackingOn(victim), { timeoutMs: 5000 })).toBe(true);
      await failover.kill(victim);
      // The replica is promoted once the others have taken the master for failed.
      let owner;
      expect(
        await pollUntil(
          async () => {
            owner = await failover.ownerOf(slot, seed);
            return owner !== undefined && owner !== victim;
          },
          { timeoutMs: 20000, intervalMs: 100 },
        ),
      ).toBe(true);
      expect(await pollUntil(() => trackingOn(owner), { timeoutMs: 10000, intervalMs: 50 })).toBe(true);
      // Tracked again, so the consumer reads nothing while nothing happens.
      await sleep(500);
      const before = await claimsServed(owner);
      await sleep(1000);
      expect((await claimsServed(owner)) - before).toBe(0);
      const { body, headers } = new JsonSerializer([ClusterMessage]).encode(message(7));
      await nodeCommand(owner, 'XADD', stream, '*', 'body', body, 'headers', JSON.stringify(headers));
      await pollUntil(() => got.length > 0, { timeoutMs: 5000 });
      expect(got.map((e) => e.message.n)).toEqual([7]);
    } finally {
      await consumer.stop();
      await transport.close();
    }
  }, 60000);
});

describe('a cluster served over TLS only', () => {
  /** @type {Awaited<ReturnType<typeof startCluster>> | undefined} */
  let tlsCluster;
  let tlsFiles;

  beforeAll(async () => {
    tlsFiles = makeTlsFiles();
    // The cluster bus asks the nodes for certificates: one that is also a client's.
    const node = tlsFiles.issue('node', 'IP:127.0.0.1,DNS:localhost', 'serverAuth,clientAuth');
    tlsCluster = await startCluster({ masters: 3, tls: { ...node, ca: tlsFiles.ca } });
  }, 90000);

  afterAll(async () => {
    await tlsCluster?.stop();
    tlsFiles?.remove();
  }, 30000);

  test('rediss:// with the CA: messages go round, and an idle consumer\'s keys are tracked over TLS (it reads nothing while idle)', async () => {
    const ca = fs.readFileSync(tlsFiles.ca, 'utf8');
    const owner = tlsCluster.ports[1];
    const stream = await streamOn(tlsCluster, owner, 'tls');
    const options = {
      dsn: tlsCluster.dsn,
      cluster: true,
      stream,
      serializer: new JsonSerializer([ClusterMessage]),
      redisOptions: { tls: { ca } },
    };
    const consumerTransport = new RedisStreamsTransport(options);
    const sender = new RedisStreamsTransport(options);
    const consumer = startAckingConsumer(consumerTransport);
    const got = consumer.received;
    try {
      await sender.send(message(1));
      await pollUntil(() => got.length > 0, { timeoutMs: 5000 });
      expect(await pollUntil(() => trackingOn(owner), { timeoutMs: 5000 })).toBe(true);
      await sleep(500);
      const before = await claimsServed(owner);
      await sleep(1000);
      expect((await claimsServed(owner)) - before).toBe(0);
      await sender.send(message(2));
      await pollUntil(() => got.length > 1, { timeoutMs: 5000 });
      expect(got.map((e) => e.message.n)).toEqual([1, 2]);
    } finally {
      await consumer.stop();
      await consumerTransport.close();
      await sender.close();
    }
  }, 60000);
});

describe('slot migration', () => {
  /**
   * Resolves once a client keeps key tracking on (an idle consumer's wait, see
   * src/engines/redis/idle_read/tracking.rs) on the node at `port`.
   */
  async function trackingClientOn(port) {
    return pollUntil(
      async () =>
        String(await nodeCommand(port, 'CLIENT', 'LIST'))
          .split('\n')
          .some((line) => /\bflags=\S*t/.test(line) && /\bresp=3\b/.test(line)),
      { timeoutMs: 3000, intervalMs: 5 },
    );
  }

  /**
   * The stream's slot moves from the first master to the second (manual SETSLOT/MIGRATE
   * sequence) around one consumer transport. With `pauseLoop`, the consumer's get() loop is
   * ended before the move and started again after it (the transport instance and its
   * connections stay); otherwise the loop runs, idle with its keys tracked on the source,
   * through the move.
   */
  async function migrationScenario({ pauseLoop }) {
    const fromPort = cluster.ports[0];
    const toPort = cluster.ports[1];
    const { stream, slot } = await streamOwnedBy(fromPort, pauseLoop ? 'migrate-paused' : 'migrate-live');
    const delayKey = `${stream}:delayed`;
    const consumerTransport = clusterTransport(stream);
    const sender = clusterTransport(stream);
    const got = [];
    let consumer = startConsumer(consumerTransport, got);
    const byN = (n) => got.filter((g) => g.n === n);

    // Before: one delivered and left in flight (pending in the group) across the migration,
    // and one delayed message that becomes due only after the migration.
    await sender.send(message(1));
    await pollUntil(() => got.length >= 1, { timeoutMs: 5000 });
    expect(byN(1)).toHaveLength(1);
    const tDelayed = Date.now();
    await sender.send(message(2, new DelayStamp(1500)));
    expect(await nodeCommand(fromPort, 'ZCARD', delayKey)).toBe(1);
    expect(await pendingCount(fromPort, stream)).toBe(1);
    if (pauseLoop) await consumer.stop();

    const migration = await cluster.migrateSlot(slot, toPort, {
      // Slot MIGRATING, keys still on the source: served there.
      between: async () => {
        await sender.send(message(3));
        if (!pauseLoop) {
          await pollUntil(() => byN(3).length > 0, { timeoutMs: 3000 });
          // The live consumer waits (again) with its keys tracked on the source when keys move.
          expect(await trackingClientOn(fromPort)).toBe(true);
        }
      },
      // Keys on the target, slot not yet handed over: the source answers ASK.
      afterMove: async () => {
        await sender.send(message(4));
        await sleep(200);
      },
    });
    expect([...migration.moved].sort()).toEqual([delayKey, stream].sort());
    // The slot is now the target's, everywhere; the source redirects.
    expect(await cluster.ownerOf(slot, fromPort)).toBe(toPort);
    await expect(nodeCommand(fromPort, 'XLEN', stream)).rejects.toThrow(/MOVED/);
    // The group and its pending entries moved along (1 and, with a live loop, 3; the live
    // consumer follows the slot at once, so it may already hold 4 as well).
    const pendingAfterMove = await pendingCount(toPort, stream);
    expect(pendingAfterMove).toBeGreaterThanOrEqual(pauseLoop ? 1 : 2);
    expect(pendingAfterMove).toBeLessThanOrEqual(pauseLoop ? 1 : 3);

    // After: new sends go to the new owner (the shared client's slot map is stale → MOVED).
    await sender.send(message(5));
    if (pauseLoop) consumer = startConsumer(consumerTransport, got);
    await pollUntil(() => [1, 3, 4, 5].every((n) => byN(n).length > 0) || consumer.failure() !== undefined, {
      timeoutMs: 8000,
    });
    expect(consumer.failure()).toBeUndefined();
    expect([1, 3, 4, 5].filter((n) => byN(n).length === 0)).toEqual([]);

    // The message in flight since before the migration is acked on the new owner.
    await ack(consumerTransport, byN(1)[0].envelope);
    // A reject after the migration: the copy comes back.
    await reject(consumerTransport, byN(5)[0].envelope);
    await pollUntil(() => byN(5).length >= 2 && byN(2).length >= 1, { timeoutMs: 8000 });
    const delayed = byN(2)[0];
    expect(delayed).toBeDefined();
    expect(delayed.at - tDelayed).toBeGreaterThanOrEqual(1500);
    const copy = byN(5)[1];
    expect(copy).toBeDefined();
    expect(copy.envelope.all(RedeliveryStamp).map((s) => s.retryCount)).toEqual([1]);
    expect(copy.id).not.toBe(byN(5)[0].id);

    await sleep(200);
    const counts = {};
    for (const g of got) counts[g.n] = (counts[g.n] ?? 0) + 1;
    expect(counts).toEqual({ 1: 1, 2: 1, 3: 1, 4: 1, 5: 2 });
    for (const g of got.filter((x) => x !== byN(1)[0] && x !== byN(5)[0])) {
      await ack(consumerTransport, g.envelope);
    }
    await consumer.stop();

    // Acks are written behind: getMessageCount() waits for them, so the server is read after.
    expect(await consumerTransport.getMessageCount()).toBe(0);
    expect(await pendingCount(toPort, stream)).toBe(0);
    expect(await nodeCommand(toPort, 'XLEN', stream)).toBe(0);
    expect(await nodeCommand(toPort, 'ZCARD', delayKey)).toBe(0);
  }

  test('the stream\'s slot moves to another master while a consumer is live (idle, its keys tracked on the source): redirects are followed, nothing is lost or duplicated', async () => {
    await migrationScenario({ pauseLoop: false });
  }, 30000);

  test('a send answered by redirects the client gives up on (keys moved, target not yet importing) is sent again once the slot settles: stored once', async () => {
    const fromPort = cluster.ports[0];
    const toPort = cluster.ports[1];
    const { stream, slot } = await streamOwnedBy(fromPort, 'redirect-loop');
    const sender = clusterTransport(stream);
    await sender.send(message(1));
    const [fromId, toId] = [cluster.idOf(fromPort), cluster.idOf(toPort)];
    // The source migrating and its keys moved, but the target not importing: the source
    // answers ASK, the target MOVED back, until the target takes the slot.
    await nodeCommand(fromPort, 'CLUSTER', 'SETSLOT', String(slot), 'MIGRATING', toId);
    await nodeCommand(toPort, 'CLUSTER', 'SETSLOT', String(slot), 'IMPORTING', fromId);
    await nodeCommand(fromPort, 'MIGRATE', '127.0.0.1', String(toPort), '', '0', '5000', 'KEYS', stream);
    await nodeCommand(toPort, 'CLUSTER', 'SETSLOT', String(slot), 'STABLE');
    const sending = sender.send(message(2)).then(
      (envelope) => ({ envelope }),
      (error) => ({ error }),
    );
    await sleep(60);
    await nodeCommand(toPort, 'CLUSTER', 'SETSLOT', String(slot), 'IMPORTING', fromId);
    const outcome = await sending;
    expect(outcome.error).toBeUndefined();
    expect(idOf(outcome.envelope)).toMatch(STREAM_ID);
    for (const port of cluster.ports) await nodeCommand(port, 'CLUSTER', 'SETSLOT', String(slot), 'NODE', toId);
    await cluster.waitOwner(slot, toPort);
    expect(await nodeCommand(toPort, 'XLEN', stream)).toBe(2);
    await sender.close();
  }, 30000);

  test('the stream\'s slot moves while the consumer transport is open but its get() loop paused: sends follow ASK/MOVED, the pending entry and delayed zset move along', async () => {
    await migrationScenario({ pauseLoop: true });
  }, 30000);
});
