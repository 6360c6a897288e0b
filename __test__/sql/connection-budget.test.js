'use strict';

// `maxConnections`: one budget per process and DSN that every connection the transports on it
// open fits in (the pool, and on PostgreSQL the LISTEN connection when it goes to the DSN).
// Counted, not timed: every connection goes through a proxy in front of the server, and its
// live connections are sampled while 30 consumers on 30 queues and 64 concurrent senders
// keep the pool as busy as it gets.

const { InvalidArgumentError } = require('@schally/nestjs-messenger');
const { postgres, mysql, uniqueName } = require('../support/engines');
const { peakConnections, startProxy, viaProxy } = require('../faults/support/proxy');
const {
  envelopeOf,
  pollUntil,
  serializer,
  settleWithin,
  startAckingConsumer,
  throwsSync,
} = require('../support/transport-helpers');

const QUEUES = 30;
const MESSAGES = 3000;
const SENDERS = 64;

/** The budget each engine is held to here, and the smallest one it accepts. */
const ENGINES = [
  { engine: postgres, budget: 5, smallest: 5 },
  { engine: mysql, budget: 4, smallest: 4 },
];

describe.each(ENGINES)('$engine.name: maxConnections', ({ engine, budget, smallest }) => {
  const tableName = uniqueName('budget');
  let proxy;
  let dsn;

  beforeAll(async () => {
    await engine.requireServer();
    proxy = await startProxy({ targetPort: Number(new URL(engine.dsn).port) });
    dsn = viaProxy(engine.dsn, proxy);
  });

  afterAll(async () => {
    await proxy?.close();
    await engine.admin(engine.dsn).query(`DROP TABLE IF EXISTS ${tableName}`);
  });

  const transportOn = (queueName, options = {}) =>
    new engine.Transport({ dsn, tableName, queueName, serializer: serializer(), maxConnections: budget, ...options });

  it(`holds every connection of ${QUEUES} busy consumers and ${SENDERS} concurrent senders within ${budget}`, async () => {
    const consumers = Array.from({ length: QUEUES }, (_, i) => transportOn(`q${i}`));
    const loops = consumers.map((t) => startAckingConsumer(t));
    let peak;
    try {
      peak = await peakConnections(proxy, async () => {
        const sender = transportOn('q0');
        const ids = Array.from({ length: MESSAGES }, (_, i) => i);
        const lanes = Array.from({ length: SENDERS }, async (_, lane) => {
          for (let i = lane; i < ids.length; i += SENDERS) {
            await consumers[i % QUEUES].send(envelopeOf(`m${i}`));
          }
        });
        await Promise.all(lanes);
        const all = await pollUntil(() => loops.reduce((n, l) => n + l.received.length, 0) === MESSAGES, {
          timeoutMs: 60000,
        });
        expect(all).toBe(true);
        expect(loops.every((l) => l.error === undefined)).toBe(true);
        await sender.close();
      });
    } finally {
      await Promise.all(loops.map((l) => settleWithin(l.stop(), 5000).catch(() => {})));
      await Promise.all(consumers.map((t) => settleWithin(t.close(), 5000).catch(() => {})));
    }
    expect(peak).toBeGreaterThan(0);
    expect(peak).toBeLessThanOrEqual(budget);
  }, 90000);

  it('is one budget per DSN: a transport that names another is refused, one that names none joins', async () => {
    const first = transportOn('shared');
    try {
      const error = throwsSync(() => transportOn('shared', { maxConnections: budget + 1 }));
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect(error.message).toContain(`maxConnections ${budget + 1} differs from the ${budget}`);
      const silent = new engine.Transport({ dsn, tableName, queueName: 'shared', serializer: serializer() });
      await silent.close();
    } finally {
      await first.close();
    }
  });

  it(`refuses a budget below ${smallest}, and one that is no positive integer`, () => {
    // Another connect timeout: a target of its own, which no other transport holds yet.
    const small = throwsSync(() => transportOn('small', { connectTimeoutMs: 4321, maxConnections: smallest - 1 }));
    expect(small).toBeInstanceOf(InvalidArgumentError);
    expect(small.message).toContain(`maxConnections must be at least ${smallest}`);
    for (const bad of [0, 2.5, -1, '4', Number.NaN]) {
      const error = throwsSync(() => transportOn('bad', { maxConnections: bad }));
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect(error.message).toContain('maxConnections');
    }
  });
});
