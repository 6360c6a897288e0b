'use strict';

// `maxConnections` on a Redis node: one budget per process and DSN that the command
// connection, the read idle consumers share, the send connection and the consumers' own
// blocking reads fit in. Counted, not timed: every connection goes through a proxy in front
// of the server, and its live connections are sampled while consumers on many streams idle,
// wake and drain what 64 concurrent senders store.

const { Worker } = require('node:worker_threads');
const { InvalidArgumentError } = require('@schally/nestjs-messenger');
const { ROOT, CORE } = require('../support/child');
const { redis, uniqueName } = require('../support/engines');
const { peakConnections, startProxy, viaProxy } = require('../faults/support/proxy');
const {
  envelopeOf,
  pollUntil,
  serializer,
  settleWithin,
  sleep,
  startAckingConsumer,
  throwsSync,
} = require('../support/transport-helpers');

const STREAMS = 12;
const MESSAGES = 2000;
const SENDERS = 64;

let proxy;
let dsn;

beforeAll(async () => {
  await redis.requireServer();
  proxy = await startProxy({ targetPort: Number(new URL(redis.dsn).port) });
  dsn = viaProxy(redis.dsn, proxy);
});

afterAll(async () => {
  await proxy?.close();
});

const transportOn = (stream, options = {}) =>
  new redis.Transport({ dsn, stream, serializer: serializer(), ...options });

describe.each([
  { budget: 3, reads: 'no consumer reads on its own: all of them share one read' },
  { budget: 5, reads: 'two consumers read on their own, the rest share' },
])('maxConnections $budget ($reads)', ({ budget }) => {
  it(`holds ${STREAMS} consumers, idle then draining ${SENDERS} concurrent senders, within ${budget}`, async () => {
    const prefix = uniqueName('budget');
    const transports = Array.from({ length: STREAMS }, (_, i) => transportOn(`${prefix}-${i}`, { maxConnections: budget }));
    const loops = transports.map((t) => startAckingConsumer(t));
    try {
      const peak = await peakConnections(proxy, async () => {
        await sleep(300);
        const lanes = Array.from({ length: SENDERS }, async (_, lane) => {
          for (let i = lane; i < MESSAGES; i += SENDERS) {
            await transports[i % STREAMS].send(envelopeOf(`m${i}`));
          }
        });
        await Promise.all(lanes);
        const all = await pollUntil(() => loops.reduce((n, l) => n + l.received.length, 0) === MESSAGES, {
          timeoutMs: 30000,
        });
        expect(all).toBe(true);
        // Idle again, each consumer woken once more by a send of its own.
        await sleep(200);
        await Promise.all(transports.map((t, i) => t.send(envelopeOf(`again-${i}`))));
        await pollUntil(() => loops.every((l) => l.received.length > 0 && l.ids().some((id) => id.startsWith('again-'))), {
          timeoutMs: 10000,
        });
      });
      console.log(`maxConnections ${budget}: peak ${peak} connections`);
      expect(loops.every((l) => l.error === undefined)).toBe(true);
      expect(peak).toBeGreaterThan(0);
      expect(peak).toBeLessThanOrEqual(budget);
    } finally {
      await Promise.all(loops.map((l) => settleWithin(l.stop(), 5000).catch(() => {})));
      await Promise.all(transports.map((t) => settleWithin(t.close(), 5000).catch(() => {})));
    }
  }, 60000);
});

/** A worker thread that sends `count` messages to `stream` through its own transport. */
const SENDING_WORKER = `
  const { parentPort, workerData } = require('node:worker_threads');
  const { RedisStreamsTransport } = require(${JSON.stringify(ROOT)});
  const { Envelope, JsonSerializer } = require(${JSON.stringify(CORE)});
  class M { constructor(id) { this.id = id; } }
  (async () => {
    const t = new RedisStreamsTransport({ ...workerData.options, serializer: new JsonSerializer([M]) });
    for (let i = 0; i < workerData.count; i += 1) await t.send(new Envelope(new M('w' + i)));
    if (workerData.leaveOpen) {
      parentPort.postMessage('sent');
      return;
    }
    await t.close();
    parentPort.postMessage('sent');
  })().catch((error) => parentPort.postMessage(String(error)));
`;

/** Runs a sending worker to its end (terminated with its transport open, with `leaveOpen`). */
function sendFromWorker(options, count, { leaveOpen = false } = {}) {
  const worker = new Worker(SENDING_WORKER, { eval: true, workerData: { options, count, leaveOpen } });
  return new Promise((resolve, reject) => {
    worker.once('message', (message) => (message === 'sent' ? resolve() : reject(new Error(`worker: ${message}`))));
    worker.once('error', reject);
  }).finally(() => worker.terminate());
}

describe('maxConnections with worker threads', () => {
  it('holds a process whose main thread and two worker threads all send within 3', async () => {
    const prefix = uniqueName('budget-threads');
    const budget = 3;
    const idle = transportOn(`${prefix}-idle`, { maxConnections: budget });
    const consumer = startAckingConsumer(idle);
    const main = transportOn(`${prefix}-main`, { maxConnections: budget });
    const perThread = 300;
    try {
      // The main thread's send connection first: the one the budget keeps for sends.
      await main.send(envelopeOf('m0'));
      await sleep(200);
      const peak = await peakConnections(proxy, async () => {
        await Promise.all([
          (async () => {
            for (let i = 1; i < perThread; i += 1) await main.send(envelopeOf(`m${i}`));
          })(),
          sendFromWorker({ dsn, stream: `${prefix}-w1`, maxConnections: budget }, perThread),
          sendFromWorker({ dsn, stream: `${prefix}-w2`, maxConnections: budget }, perThread),
        ]);
        await sleep(200);
      });
      console.log(`three sending threads, maxConnections ${budget}: peak ${peak} connections`);
      const lengths = await Promise.all(['main', 'w1', 'w2'].map((s) => redis.admin().withClient((c) => c.xlen(`${prefix}-${s}`))));
      expect(lengths).toEqual([perThread, perThread, perThread]);
      expect(consumer.error).toBeUndefined();
      expect(peak).toBeGreaterThan(0);
      expect(peak).toBeLessThanOrEqual(budget);
    } finally {
      await settleWithin(consumer.stop(), 5000).catch(() => {});
      await Promise.all([idle, main].map((t) => settleWithin(t.close(), 5000).catch(() => {})));
      await redis.admin().del(['main', 'w1', 'w2', 'idle'].map((s) => `${prefix}-${s}`));
    }
  }, 60000);
});

describe('maxConnections: a thread that ends gives its send connection back', () => {
  it('a worker terminated with its transport open leaves the send connection to the main thread', async () => {
    // A deployment of its own (another connect timeout), which no other test holds.
    const options = { dsn, maxConnections: 3, connectTimeoutMs: 4322 };
    const prefix = uniqueName('budget-gone');
    const main = transportOn(`${prefix}-main`, options);
    const sendConnections = async () =>
      (await redis.admin().withClient((c) => c.client('LIST')))
        .split('\n')
        .filter((line) => line.includes('name=nestjs-messenger-native:send')).length;
    try {
      // Other files' transports on the server (the same jest process) count apart.
      const before = await sendConnections();
      // The worker's sends take the budget's one send connection; it is terminated unclosed.
      await sendFromWorker({ ...options, stream: `${prefix}-w` }, 50, { leaveOpen: true });
      expect(await pollUntil(async () => (await sendConnections()) === before, { timeoutMs: 5000 })).toBe(true);
      await main.send(envelopeOf('first'));
      // The direct path opens its connection in the background after a first send.
      await sleep(300);
      for (let i = 0; i < 20; i += 1) await main.send(envelopeOf(`m${i}`));
      expect(await sendConnections()).toBe(before + 1);
    } finally {
      await settleWithin(main.close(), 5000).catch(() => {});
      await redis.admin().del([`${prefix}-main`, `${prefix}-w`]);
    }
  }, 30000);
});

describe('maxConnections on Redis', () => {
  it('is one budget per DSN: a transport that names another is refused, one that names none joins', async () => {
    const stream = uniqueName('budget');
    const first = transportOn(stream, { maxConnections: 4 });
    try {
      const error = throwsSync(() => transportOn(stream, { maxConnections: 6 }));
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect(error.message).toContain('maxConnections 6 differs from the 4');
      const silent = transportOn(stream);
      await silent.close();
    } finally {
      await first.close();
    }
  });

  it('refuses a budget below 3, one that is no positive integer, and any on a cluster', () => {
    // Another connect timeout: a deployment of its own, which no other transport holds yet.
    const small = throwsSync(() => transportOn(uniqueName('s'), { connectTimeoutMs: 4321, maxConnections: 2 }));
    expect(small).toBeInstanceOf(InvalidArgumentError);
    expect(small.message).toContain('maxConnections must be at least 3');
    for (const bad of [0, 2.5, -1, '4', Number.NaN]) {
      const error = throwsSync(() => transportOn(uniqueName('s'), { maxConnections: bad }));
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect(error.message).toContain('maxConnections');
    }
    const cluster = throwsSync(() => transportOn('{s}x', { cluster: true, maxConnections: 8 }));
    expect(cluster).toBeInstanceOf(InvalidArgumentError);
    expect(cluster.message).toContain('maxConnections applies to a single Redis node');
  });
});
