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

/**
 * Per test of a describe on `engine`: a proxy in front of the server, a target of its own
 * (named after `prefix`; `prepare(target)` fills it first) and `transport`, a transport on it
 * through the proxy; after the test the transport is closed, then the proxy, and the target
 * removed. `open(options)` makes another transport through the proxy.
 */
function behindProxy(engine, prefix, prepare = async () => {}) {
  const ctx = {
    proxy: undefined,
    target: undefined,
    transport: undefined,
    open: (options = {}) =>
      new SqlTransport({ dsn: viaServerProxy(engine.dsn, ctx.proxy), ...ctx.target, serializer: serializer(), ...options }),
  };

  beforeAll(async () => {
    await engine.requireServer?.();
  });

  beforeEach(async () => {
    ctx.proxy = await startProxy({ targetPort: Number(new URL(engine.dsn).port) });
    ctx.target = engine.target(prefix);
    await prepare(ctx.target);
    ctx.transport = ctx.open();
  }, 60_000);

  afterEach(async () => {
    await ctx.transport?.close().catch(() => {});
    await ctx.proxy.close();
    await engine.removeTarget(ctx.target);
  });

  return ctx;
}

describe.each([
  ['PostgreSQL', postgres],
  ['MariaDB', mysql],
])('connections of a draining consumer on %s', (_label, engine) => {
  // The consumer's queue is filled directly (not through the proxy) before each test.
  const kept = behindProxy(engine, 'kept', async (target) => {
    const producer = new SqlTransport({ dsn: engine.dsn, ...target, serializer: serializer() });
    try {
      await fill(producer, MESSAGES);
    } finally {
      await producer.close();
    }
  });

  it('claims over one connection and acks over another: two connections for 3,000 messages', async () => {
    const ids = await drain(kept.transport, MESSAGES);
    await kept.transport.close();
    expect(new Set(ids).size).toBe(MESSAGES);
    expect(kept.proxy.accepted).toBeLessThanOrEqual(2);
  }, 60_000);

  it('close() right after a drain does not wait for the kept connections, and closes them', async () => {
    await drain(kept.transport, MESSAGES);
    const started = Date.now();
    await kept.transport.close();
    const closeMs = Date.now() - started;
    // A kept connection left out of the pool's close would hold close() for its keep time.
    expect(closeMs).toBeLessThan(KEEP_FOR_MS * 0.8);
    await pollUntil(() => kept.proxy.connections === 0, { timeoutMs: 500 });
    expect(kept.proxy.connections).toBe(0);
  }, 60_000);

  it('kept connections the server dropped are replaced: every message once, no outage reported', async () => {
    const events = [];
    await kept.transport.close();
    kept.transport = kept.open({
      logger: { log: (m) => events.push(m), warn: (m) => events.push(m), error: (m) => events.push(m) },
    });
    let connectionsAtCut = 0;
    const ids = await drain(kept.transport, MESSAGES, {
      midway: () => {
        connectionsAtCut = kept.proxy.connections;
        kept.proxy.cut();
      },
    });
    const stats = kept.transport.stats();
    await kept.transport.close();
    expect(connectionsAtCut).toBeGreaterThan(0);
    expect(kept.proxy.accepted).toBeGreaterThan(connectionsAtCut);
    expect(new Set(ids).size).toBe(MESSAGES);
    expect(stats.reconnects).toBe(0);
    expect(events).toEqual([]);
    expect(await freshCount(engine, kept.target)).toBe(0);
  }, 60_000);
});

describe.each([
  ['PostgreSQL', postgres],
  ['MariaDB', mysql],
])('connections of a sender on %s', (_label, engine) => {
  const kept = behindProxy(engine, 'kept-send');

  it('sends 100 in flight and then one by one over one connection', async () => {
    await fill(kept.transport, MESSAGES);
    for (let i = 0; i < 200; i += 1) await kept.transport.send(envelopeOf(`one-by-one-${i}`));
    await kept.transport.close();
    expect(kept.proxy.accepted).toBe(1);
    expect(await freshCount(engine, kept.target)).toBe(MESSAGES + 200);
  }, 60_000);

  it('close() right after a send does not wait for the kept connection, and closes it', async () => {
    await fill(kept.transport, 300);
    const started = Date.now();
    await kept.transport.close();
    expect(Date.now() - started).toBeLessThan(KEEP_FOR_MS * 0.8);
    await pollUntil(() => kept.proxy.connections === 0, { timeoutMs: 500 });
    expect(kept.proxy.connections).toBe(0);
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
