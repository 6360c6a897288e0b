'use strict';

// The connections a draining consumer and a sender use, counted at a proxy in front of the
// server: claims go over one connection, acks over another and sends over a third, each kept
// from one statement to the next instead of going back to the pool in between (a connection
// going back is pinged first, and a statement that needs one meanwhile opens another: a backend
// start on PostgreSQL, a thread on MariaDB). Kept connections never hold up close(), and one the
// server dropped is replaced without the consumer noticing.

const { SqlTransport } = require('../..');
const { postgres, mysql } = require('../support/engines');
const { startProxy, viaServerProxy } = require('../faults/support/proxy');
const { serializer, envelopeOf, idOf, pollUntil } = require('../support/transport-helpers');

const MESSAGES = 3000;
/** How long a kept connection waits for its next statement (src/engines/sql/kept_connection.rs). */
const KEEP_FOR_MS = 1000;

/** Sends `count` messages through `transport`, 100 in flight. */
async function fill(transport, count) {
  for (let start = 0; start < count; start += 100) {
    const sends = [];
    for (let i = start; i < Math.min(count, start + 100); i += 1) sends.push(transport.send(envelopeOf(`m-${i}`)));
    await Promise.all(sends);
  }
}

/** Receives and acks `count` messages with one get() loop, as the core Worker does; their ids. */
async function drain(transport, count, { midway } = {}) {
  const ids = [];
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), 30_000);
  try {
    for await (const envelope of transport.get(controller.signal)) {
      await transport.ack(envelope);
      ids.push(idOf(envelope));
      if (ids.length === Math.floor(count / 2)) await midway?.();
      if (ids.length >= count) break;
    }
  } finally {
    clearTimeout(timer);
  }
  return ids;
}

describe.each([
  ['PostgreSQL', postgres],
  ['MariaDB', mysql],
])('connections of a draining consumer on %s', (_label, engine) => {
  let proxy;
  let target;
  let consumer;

  beforeAll(async () => {
    await engine.requireServer?.();
  });

  beforeEach(async () => {
    proxy = await startProxy({ targetPort: Number(new URL(engine.dsn).port) });
    target = engine.target('kept');
    const producer = new SqlTransport({ dsn: engine.dsn, ...target, serializer: serializer() });
    try {
      await fill(producer, MESSAGES);
    } finally {
      await producer.close();
    }
    consumer = new SqlTransport({ dsn: viaServerProxy(engine.dsn, proxy), ...target, serializer: serializer() });
  }, 60_000);

  afterEach(async () => {
    await consumer?.close().catch(() => {});
    await proxy.close();
    await engine.removeTarget(target);
  });

  it('claims over one connection and acks over another: two connections for 3,000 messages', async () => {
    const ids = await drain(consumer, MESSAGES);
    await consumer.close();
    expect(new Set(ids).size).toBe(MESSAGES);
    expect(proxy.accepted).toBeLessThanOrEqual(2);
  }, 60_000);

  it('close() right after a drain does not wait for the kept connections, and closes them', async () => {
    await drain(consumer, MESSAGES);
    const started = Date.now();
    await consumer.close();
    const closeMs = Date.now() - started;
    // A kept connection left out of the pool's close would hold close() for its keep time.
    expect(closeMs).toBeLessThan(KEEP_FOR_MS * 0.8);
    await pollUntil(() => proxy.connections === 0, { timeoutMs: 500 });
    expect(proxy.connections).toBe(0);
  }, 60_000);

  it('kept connections the server dropped are replaced: every message once, no outage reported', async () => {
    const events = [];
    await consumer.close();
    consumer = new SqlTransport({
      dsn: viaServerProxy(engine.dsn, proxy),
      ...target,
      serializer: serializer(),
      logger: { log: (m) => events.push(m), warn: (m) => events.push(m), error: (m) => events.push(m) },
    });
    let connectionsAtCut = 0;
    const ids = await drain(consumer, MESSAGES, {
      midway: () => {
        connectionsAtCut = proxy.connections;
        proxy.cut();
      },
    });
    const stats = consumer.stats();
    await consumer.close();
    expect(connectionsAtCut).toBeGreaterThan(0);
    expect(proxy.accepted).toBeGreaterThan(connectionsAtCut);
    expect(new Set(ids).size).toBe(MESSAGES);
    expect(stats.reconnects).toBe(0);
    expect(events).toEqual([]);
    expect(await freshCount(engine, target)).toBe(0);
  }, 60_000);
});

describe.each([
  ['PostgreSQL', postgres],
  ['MariaDB', mysql],
])('connections of a sender on %s', (_label, engine) => {
  let proxy;
  let target;
  let sender;

  beforeAll(async () => {
    await engine.requireServer?.();
  });

  beforeEach(async () => {
    proxy = await startProxy({ targetPort: Number(new URL(engine.dsn).port) });
    target = engine.target('kept-send');
    sender = new SqlTransport({ dsn: viaServerProxy(engine.dsn, proxy), ...target, serializer: serializer() });
  });

  afterEach(async () => {
    await sender?.close().catch(() => {});
    await proxy.close();
    await engine.removeTarget(target);
  });

  it('sends 100 in flight and then one by one over one connection', async () => {
    await fill(sender, MESSAGES);
    for (let i = 0; i < 200; i += 1) await sender.send(envelopeOf(`one-by-one-${i}`));
    await sender.close();
    expect(proxy.accepted).toBe(1);
    expect(await freshCount(engine, target)).toBe(MESSAGES + 200);
  }, 60_000);

  it('close() right after a send does not wait for the kept connection, and closes it', async () => {
    await fill(sender, 300);
    const started = Date.now();
    await sender.close();
    expect(Date.now() - started).toBeLessThan(KEEP_FOR_MS * 0.8);
    await pollUntil(() => proxy.connections === 0, { timeoutMs: 500 });
    expect(proxy.connections).toBe(0);
  }, 60_000);
});

/** Messages left on the target's queue, counted by a transport of its own. */
async function freshCount(engine, target) {
  const transport = new SqlTransport({ dsn: engine.dsn, ...target, serializer: serializer() });
  try {
    return await transport.getMessageCount();
  } finally {
    await transport.close();
  }
}
