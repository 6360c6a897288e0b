'use strict';

// Fault scenario 2: a slow or stuck handler on a live worker, with a short lease. The message
// in the handler is not delivered to anyone else while its worker lives (its claim is
// renewed), and the rows prefetched behind it are handed back to other consumers instead of
// being renewed for as long as the handler takes. Runs on the shared servers: it stops or
// breaks nothing, and every queue and stream is its own.

const { Envelope, JsonSerializer, TransportMessageIdStamp } = require('@schally/nestjs-messenger');
const { SqlTransport, RedisStreamsTransport } = require('../..');
const engines = require('../support/engines');
const { requireServer } = require('../../bench/engines');

class SlowMessage {
  constructor(n) {
    this.n = n;
  }
}

/** A short lease: a second for SQL (redeliverTimeoutSeconds) and Redis (claimIdleMs). */
const LEASE_MS = 1000;
/** How long prefetched rows may wait behind a consumer that takes none (documented: 5 s). */
const PREFETCH_HOLD_MS = 5000;

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const idOf = (envelope) => String(envelope.last(TransportMessageIdStamp).id);

const ENGINES = [
  {
    engine: engines.postgres,
    open: (target) =>
      new SqlTransport({ dsn: engines.postgres.dsn, queueName: target, redeliverTimeoutSeconds: LEASE_MS / 1000, serializer: serializer() }),
  },
  {
    engine: engines.mysql,
    open: (target) =>
      new SqlTransport({ dsn: engines.mysql.dsn, queueName: target, redeliverTimeoutSeconds: LEASE_MS / 1000, serializer: serializer() }),
  },
  {
    engine: engines.sqlite,
    open: (target, dsn) => new SqlTransport({ dsn, queueName: target, redeliverTimeoutSeconds: LEASE_MS / 1000, serializer: serializer() }),
  },
  {
    engine: engines.redis,
    open: (target) =>
      new RedisStreamsTransport({ dsn: engines.redis.dsn, stream: `faults:{${target}}`, claimIdleMs: LEASE_MS, serializer: serializer() }),
  },
];

function serializer() {
  return new JsonSerializer([SlowMessage]);
}

describe.each(ENGINES)('slow and stuck handlers on $engine.label', ({ engine, open }) => {
  const transports = [];
  const loops = [];
  let dsn;

  beforeAll(async () => {
    await requireServer(engine.name);
    dsn = engine.temporaryDsn ? engine.temporaryDsn('slow') : engine.dsn;
  });

  const streams = [];

  afterEach(async () => {
    for (const loop of loops.splice(0)) loop.abort();
    await Promise.all(transports.splice(0).map((t) => t.close().catch(() => {})));
    // Streams are not emptied by acks: remove this test's keys (SQL rows are acked away).
    if (engine.name === 'redis') await engine.admin().del(streams.splice(0).flatMap((s) => [s, `${s}:delayed`]));
  });

  function transport(target) {
    if (engine.name === 'redis' && !streams.includes(`faults:{${target}}`)) streams.push(`faults:{${target}}`);
    const opened = open(target, dsn);
    transports.push(opened);
    return opened;
  }

  /** Consumes `transport` in the background, acking at once; returns what it received. */
  function consume(of) {
    const controller = new AbortController();
    loops.push(controller);
    const received = [];
    const done = (async () => {
      for await (const envelope of of.get(controller.signal)) {
        received.push(envelope);
        await of.ack(envelope);
      }
    })();
    return { received, controller, done };
  }

  /** The first message `of` yields; its iterator is left open (the handler still runs). */
  async function takeOne(of) {
    const controller = new AbortController();
    loops.push(controller);
    const iterator = of.get(controller.signal)[Symbol.asyncIterator]();
    const { value } = await iterator.next();
    return value;
  }

  it('does not deliver the message of a live worker whose handler outlives the lease to anyone else', async () => {
    const target = engines.uniqueName('slow');
    const worker = transport(target);
    const other = transport(target);
    await worker.send(new Envelope(new SlowMessage(1)));
    const held = await takeOne(worker);
    expect(held.message.n).toBe(1);

    const competitor = consume(other);
    // The handler runs for 3.5 leases while the other consumer is idle on the same queue.
    await sleep(LEASE_MS * 3.5);
    expect(competitor.received.map((e) => e.message.n)).toEqual([]);

    await worker.ack(held);
    await sleep(LEASE_MS * 1.5);
    expect(competitor.received.map((e) => e.message.n)).toEqual([]);
    expect(await other.getMessageCount()).toBe(0);
  }, 20000);

  it('keeps renewing a slow message while its worker goes on claiming others (concurrent handlers)', async () => {
    const target = engines.uniqueName('busy');
    const worker = transport(target);
    const other = transport(target);
    const sender = transport(target);
    await sender.send(new Envelope(new SlowMessage(0)));
    const controller = new AbortController();
    loops.push(controller);
    const iterator = worker.get(controller.signal)[Symbol.asyncIterator]();
    const { value: slow } = await iterator.next();
    expect(slow.message.n).toBe(0);

    // The worker's other handlers take a fresh batch every few tens of milliseconds (each
    // one claimed while the slow message is in flight) for 3.5 leases; a competitor consumes too.
    const competitor = consume(other);
    const startedAt = Date.now();
    let n = 1;
    const taking = (async () => {
      while (!controller.signal.aborted) {
        const { value, done } = await iterator.next();
        if (done) return;
        await worker.ack(value);
      }
    })();
    while (Date.now() - startedAt < LEASE_MS * 3.5) {
      await sender.send(new Envelope(new SlowMessage(n)));
      n += 1;
      await sleep(30);
    }
    expect(competitor.received.map((e) => e.message.n)).not.toContain(0);
    await worker.ack(slow);
    controller.abort();
    await taking.catch(() => {});
  }, 20000);

  it('hands the rows prefetched behind a stuck handler back to other consumers; the stuck message stays with its worker', async () => {
    const target = engines.uniqueName('stuck');
    const worker = transport(target);
    const other = transport(target);
    const total = 20;
    for (let n = 1; n <= total; n += 1) await worker.send(new Envelope(new SlowMessage(n)));

    const stuck = await takeOne(worker);
    const startedAt = Date.now();
    const competitor = consume(other);
    const bound = PREFETCH_HOLD_MS + 2 * LEASE_MS + 2000;
    while (competitor.received.length < total - 1 && Date.now() - startedAt < bound) await sleep(50);

    const others = competitor.received.map((e) => e.message.n).sort((a, b) => a - b);
    const expected = Array.from({ length: total }, (_, i) => i + 1).filter((n) => n !== stuck.message.n);
    expect(others).toEqual(expected);
    expect(new Set(competitor.received.map(idOf)).size).toBe(total - 1);
    expect(competitor.received.map(idOf)).not.toContain(idOf(stuck));

    // Still held by its live worker a lease later; settled, nothing is left.
    await sleep(LEASE_MS * 1.5);
    expect(competitor.received.map(idOf)).not.toContain(idOf(stuck));
    await worker.ack(stuck);
    await sleep(300);
    expect(await other.getMessageCount()).toBe(0);
  }, 30000);
});
