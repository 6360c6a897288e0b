'use strict';

// Idle Redis queues of one process on one node share one blocking read (issue 36, item 1):
// idle consumers hold no connection of their own and run no command while nothing happens;
// a shared XREAD over their streams wakes the one a message arrives on.

const crypto = require('node:crypto');
const { DelayStamp } = require('@schally/nestjs-messenger');
const { throwawayRedis } = require('../support/throwaway-redis');
const {
  serializer,
  envelopeOf,
  idOf,
  sleep,
  pollUntil,
  startConsumer,
} = require('../support/transport-helpers');

const local = throwawayRedis({}, 30000);
const consumers = [];

const inspect = local.inspect;

function transport(options = {}) {
  return local.open({ stream: `idle-${crypto.randomBytes(5).toString('hex')}`, ...options });
}

function consume(t) {
  const consumer = startConsumer(t);
  consumers.push(consumer);
  return consumer;
}

/** Clients connected to the server, the inspecting one left out. */
const clientCount = () =>
  inspect(async (redis) => {
    const list = await redis.client('LIST');
    return list.split('\n').filter((line) => line.trim() !== '').length - 1;
  });

/** Calls of each command so far, from INFO commandstats. */
const commandCalls = () =>
  inspect(async (redis) => {
    const calls = {};
    for (const match of (await redis.info('commandstats')).matchAll(/cmdstat_([a-z|]+):calls=(\d+)/g)) {
      calls[match[1]] = Number(match[2]);
    }
    return calls;
  });

const readCalls = (calls) => (calls.xreadgroup ?? 0) + (calls.xread ?? 0);

/** Waits until every transport's consumer group exists (each get() loop has claimed once). */
async function untilIdle(list) {
  await pollUntil(
    () =>
      inspect(async (redis) => {
        for (const t of list) {
          const groups = await redis.call('XINFO', 'GROUPS', t.stream).catch(() => []);
          if (groups.length === 0) return false;
        }
        return true;
      }),
    { timeoutMs: 20000, intervalMs: 100 },
  );
}

afterEach(async () => {
  await Promise.all(consumers.splice(0).map((c) => c.stop()));
  await local.closeOpened();
}, 30000);

/** A transport whose stream name the test keeps (`t.stream`). */
function idleTransport(options) {
  const stream = `idle-${crypto.randomBytes(5).toString('hex')}`;
  const t = transport({ stream, ...options });
  t.stream = stream;
  return t;
}

describe('many idle queues in one process', () => {
  it('200 idle get() loops hold a handful of connections and issue almost no reads', async () => {
    const list = Array.from({ length: 200 }, () => idleTransport());
    list.forEach(consume);
    await untilIdle(list);
    await sleep(500);

    const clients = await clientCount();
    const before = await commandCalls();
    const pollsBefore = list.map((t) => t.stats().sharedPolls);
    await sleep(2000);
    const after = await commandCalls();
    const polls = list.map((t, i) => t.stats().sharedPolls - pollsBefore[i]);
    const reads = readCalls(after) - readCalls(before);
    const all = Object.keys(after).reduce((sum, k) => sum + after[k] - (before[k] ?? 0), 0);
    console.log(`200 idle queues: ${clients} connections; over 2 s idle: ${reads} xreadgroup/xread calls, ${all} commands in all`);
    expect(clients).toBeLessThanOrEqual(8);
    expect(reads).toBeLessThanOrEqual(5);
    // One poll per pollIntervalMs (50 ms) for all of them, counted alike by each transport.
    expect(polls[0]).toBeGreaterThanOrEqual(1);
    expect(polls[0]).toBeLessThanOrEqual(2000 / 50 + 5);
    expect(Math.max(...polls) - Math.min(...polls)).toBeLessThanOrEqual(1);
  }, 60000);

  it('200 queues that each sent and handled a message, then idle, still hold a handful', async () => {
    // As an app runs: every transport sends (its first sends open the send path) and its
    // consumer handles; the send connection is one per process and node, not per transport.
    const list = Array.from({ length: 200 }, () => idleTransport());
    const running = list.map(consume);
    await untilIdle(list);
    for (let round = 0; round < 3; round += 1) {
      await Promise.all(list.map((t, n) => t.send(envelopeOf(`q${n}-${round}`))));
    }
    await Promise.all(running.map((c) => c.waitFor(3, 20000)));
    for (const c of running) expect(c.arrivals).toHaveLength(3);
    await sleep(500);
    const clients = await clientCount();
    console.log(`200 queues after sending: ${clients} connections`);
    expect(clients).toBeLessThanOrEqual(8);
  }, 90000);
});

describe('wake-ups through the shared read', () => {
  it('an entry XADDed by another connection reaches that stream\'s consumer only', async () => {
    const list = Array.from({ length: 50 }, () => idleTransport());
    const running = list.map(consume);
    await untilIdle(list);
    await sleep(200);

    const target = 17;
    const encoded = serializer().encode(envelopeOf('from-elsewhere'));
    await inspect((redis) => redis.xadd(list[target].stream, '*', 'body', encoded.body, 'headers', JSON.stringify(encoded.headers)));

    const [arrival] = await running[target].waitFor(1, 5000);
    expect(arrival).toBeDefined();
    expect(arrival.envelope.message.id).toBe('from-elsewhere');
    await sleep(200);
    running.forEach((c, i) => expect(c.arrivals.length).toBe(i === target ? 1 : 0));
  }, 60000);

  it('a send from this process to an idle queue, and a delayed one after its delay', async () => {
    const idle = idleTransport();
    const other = idleTransport();
    const consumer = consume(idle);
    consume(other);
    await untilIdle([idle, other]);
    await sleep(200);

    const sent = await idle.send(envelopeOf('now'));
    const [now] = await consumer.waitFor(1, 5000);
    expect(now && idOf(now.envelope)).toBe(idOf(sent));

    const sentAt = Date.now();
    await idle.send(envelopeOf('later', '', [new DelayStamp(500)]));
    const arrivals = await consumer.waitFor(2, 5000);
    expect(arrivals).toHaveLength(2);
    expect(arrivals[1].envelope.message.id).toBe('later');
    expect(arrivals[1].at - sentAt).toBeGreaterThanOrEqual(450);
  }, 30000);

  it('a delayed member added by another process is delivered when due', async () => {
    const idle = idleTransport();
    const consumer = consume(idle);
    await untilIdle([idle]);
    await sleep(200);

    const sender = transport({ stream: idle.stream, dsn: `${local.dsn}/0` });
    await sender.send(envelopeOf('from-afar', '', [new DelayStamp(300)]));
    const [arrival] = await consumer.waitFor(1, 5000);
    expect(arrival && arrival.envelope.message.id).toBe('from-afar');
  }, 30000);

  it('a consumer woken to claim comes back without the read being planned again', async () => {
    // Its stream stays in the read while it claims and handles: each wake-up costs the one
    // XREAD issued after it, not an UNBLOCK and a read over every other stream when it leaves
    // and again when it returns. Its handler takes 30 ms, longer than the read waits to
    // gather changes.
    const slow = Array.from({ length: 2 }, () => idleTransport());
    const others = Array.from({ length: 6 }, () => idleTransport());
    others.forEach(consume);
    const handled = [];
    const controller = new AbortController();
    const loops = slow.map(async (t) => {
      for await (const envelope of t.get(controller.signal)) {
        await sleep(30);
        await t.ack(envelope);
        handled.push(envelope);
      }
    });
    try {
      await untilIdle([...slow, ...others]);
      await sleep(300);
      const before = await commandCalls();
      const WAKES = 20;
      for (let n = 0; n < WAKES; n += 1) {
        await slow[n % 2].send(envelopeOf(`w-${n}`));
        await pollUntil(() => handled.length > n, { timeoutMs: 5000, intervalMs: 2 });
        await sleep(20);
      }
      const after = await commandCalls();
      const xreads = (after.xread ?? 0) - (before.xread ?? 0);
      const unblocks = (after['client|unblock'] ?? 0) - (before['client|unblock'] ?? 0);
      console.log(`${WAKES} wake-ups through the shared read: ${xreads} XREAD, ${unblocks} CLIENT UNBLOCK`);
      expect(handled).toHaveLength(WAKES);
      expect(xreads).toBeLessThanOrEqual(WAKES + 3);
      expect(unblocks).toBeLessThanOrEqual(3);
    } finally {
      controller.abort();
      await Promise.all(loops.map((loop) => loop.catch(() => {})));
    }
  }, 30000);

  it('a cancelled idle consumer leaves the shared read, and the last close ends it', async () => {
    // More idle consumers than block on reads of their own (4): they share one.
    const leaving = idleTransport();
    const staying = idleTransport();
    const others = Array.from({ length: 4 }, () => idleTransport());
    const leaver = consume(leaving);
    consume(staying);
    others.forEach((t) => consume(t));
    await untilIdle([leaving, staying, ...others]);
    await sleep(200);
    const base = await clientCount();

    const reads = [];
    await inspect(async (redis) => {
      const monitor = await redis.monitor();
      monitor.on('monitor', (_time, args) => {
        if (String(args[0]).toLowerCase() === 'xread') reads.push(args.map(String));
      });
      try {
        await leaver.stop();
        consumers.splice(consumers.indexOf(leaver), 1);
        // Left at once: the read is ended and issued again over the streams still waited on.
        await pollUntil(() => reads.some((args) => args.includes(staying.stream)), { timeoutMs: 8000 });
      } finally {
        monitor.disconnect();
      }
    });
    const last = reads.filter((args) => args.includes(staying.stream)).at(-1);
    expect(last).toBeDefined();
    expect(last).not.toContain(leaving.stream);

    await Promise.all(consumers.splice(0).map((c) => c.stop()));
    await local.closeOpened();
    await pollUntil(async () => (await clientCount()) === 0, { timeoutMs: 5000 });
    expect(base).toBeGreaterThan(0);
    expect(await clientCount()).toBe(0);
  }, 30000);
});
