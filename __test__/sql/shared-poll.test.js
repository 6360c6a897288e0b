'use strict';

// Idle cost where the database does not wake idle consumers (MySQL/MariaDB, SQLite, and
// PostgreSQL with `useNotify: false`): the idle consumers of one table in a process share one
// poll per pollIntervalMs, whatever the number of queues (docs/operations.md, "Connections"). Counted, not timed: the transports' stats (sharedPolls,
// emptyClaims) and, on a server, every packet the process sent, at a proxy in front of it. Rows another process writes still reach the consumer of their queue and no other: at
// once when due, when their delay has passed, and when a crashed consumer's lease runs out.

const { JsonSerializer } = require('@schally/nestjs-messenger');
const { postgres, mysql, sqlite, uniqueName } = require('../support/engines');
const { CORE, runChild } = require('../support/child');
const { startProxy, viaProxy } = require('../faults/support/proxy');
const { pollUntil, settleWithin } = require('../support/transport-helpers');

const QUEUES = 60;
const POLL_MS = 100;
/** How long the idle process is watched: 20 poll intervals. */
const IDLE_MS = 2000;
/** "Delivered at all", not a speed: far above the poll interval. */
const DELIVERY_BOUND_MS = 5000;

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** The message class of this file and of its child processes (PRELUDE's `M`). */
class M {
  constructor(id) {
    this.id = id;
  }
}

/**
 * Runs `body` (an async function's statements, with `t` a transport on the queue) in another
 * node process, which stores what it sends with a pool and wake-ups of its own. It must exit
 * cleanly, or, with `crashes`, be killed (SIGKILL) by its own body.
 */
function inAnotherProcess(dsn, target, body, { extra = {}, crashes = false } = {}) {
  extra = { ...target.options, ...extra };
  target = { tableName: target.tableName, queueName: target.queueName };
  const script = `
    const { DelayStamp } = require(${JSON.stringify(CORE)});
    (async () => {
      const t = new Transport(transportOptions(${JSON.stringify(extra)}));
      ${body}
    })().catch((error) => { console.error(error); process.exit(1); });
  `;
  const child = runChild(script, { env: { DSN: dsn, TARGET: JSON.stringify(target) }, timeout: 20000 });
  const ended = crashes ? child.signal === 'SIGKILL' : child.status === 0;
  if (!ended) throw new Error(`child failed (${child.status ?? child.signal}): ${child.stderr}`);
  return child;
}

/** The engines whose idle consumers poll, and the options that make them do so. */
const POLLING = [
  { engine: postgres, label: 'postgres (useNotify: false)', options: { useNotify: false } },
  { engine: mysql, label: 'mysql', options: {} },
  { engine: sqlite, label: 'sqlite', options: {} },
];

describe.each(POLLING)('$label: one poll per table serves every idle queue', ({ engine, options: engineOptions }) => {
  const tableName = uniqueName('shared_poll');
  const target = (queueName) => ({ tableName, queueName, options: engineOptions });
  /** The DSN other processes use (the consumers' goes through the proxy on MariaDB). */
  let directDsn;
  let dsn;
  let proxy;
  const transports = [];
  /** Queue name → envelopes its consumer received. */
  const received = new Map();
  const loops = [];

  function consume(queueName, options = {}) {
    const t = new engine.Transport({
      dsn,
      tableName,
      queueName,
      pollIntervalMs: POLL_MS,
      serializer: new JsonSerializer([M]),
      ...engineOptions,
      ...options,
    });
    transports.push(t);
    received.set(queueName, []);
    const controller = new AbortController();
    const done = (async () => {
      for await (const envelope of t.get(controller.signal)) {
        received.get(queueName).push(envelope);
        await t.ack(envelope);
      }
    })();
    loops.push({ controller, done });
    return t;
  }

  const deliveries = () => [...received.values()].reduce((n, list) => n + list.length, 0);
  const queueNames = () => [...received.keys()];

  /** Sums over the idle consumers, and the table's poll count (every transport shows it). */
  function idleFigures() {
    const stats = transports.map((t) => t.stats());
    return {
      emptyClaims: stats.reduce((n, s) => n + s.emptyClaims, 0),
      sharedPolls: stats[0].sharedPolls,
      packets: proxy?.packets.seen ?? 0,
    };
  }

  beforeAll(async () => {
    await engine.requireServer();
    if (engine.name !== 'sqlite') {
      directDsn = engine.dsn;
      proxy = await startProxy({ targetPort: Number(new URL(directDsn).port) });
      proxy.packets = proxy.count(() => true);
      dsn = viaProxy(directDsn, proxy);
    } else {
      directDsn = engine.runDsn('nmn-shared-poll');
      dsn = directDsn;
    }
    for (let i = 0; i < QUEUES; i += 1) consume(`q${i}`);
    // Idle: each consumer claimed once and found nothing.
    const idle = await pollUntil(() => transports.every((t) => t.stats().emptyClaims >= 1), { timeoutMs: 20000 });
    if (!idle) throw new Error('the consumers did not all make their first claim within 20 s');
  }, 60000);

  afterAll(async () => {
    for (const { controller } of loops) controller.abort();
    await Promise.all(loops.map(({ done }) => settleWithin(done, 5000).catch(() => {})));
    await Promise.all(transports.map((t) => settleWithin(t.close(), 5000).catch(() => {})));
    if (engine.name !== 'sqlite') {
      await engine.admin(directDsn).query(`DROP TABLE IF EXISTS ${tableName}`);
      await proxy?.close();
    } else {
      engine.removeRunDsn(directDsn);
    }
  }, 60000);

  it(`${QUEUES} idle queues cost one poll per interval, not one (or two) per queue`, async () => {
    await sleep(3 * POLL_MS);
    const before = idleFigures();
    await sleep(IDLE_MS);
    const after = idleFigures();
    const intervals = IDLE_MS / POLL_MS;

    const polls = after.sharedPolls - before.sharedPolls;
    expect(polls).toBeGreaterThanOrEqual(1);
    expect(polls).toBeLessThanOrEqual(intervals + 5);
    // Polling on their own, the consumers made one empty claim each per interval: QUEUES × 20.
    expect(after.emptyClaims - before.emptyClaims).toBeLessThan(QUEUES);
    if (proxy) {
      // Everything the process sent the server: a poll per interval (each perhaps after a
      // ping of the connection it got); a poll per queue was ≥ 2 × QUEUES × 20 packets.
      expect(after.packets - before.packets).toBeLessThanOrEqual(2 * intervals + 10);
    }
    expect(deliveries()).toBe(0);
  }, 20000);

  it("a row another process stores wakes its queue's consumer and no other", async () => {
    const queueName = queueNames()[7];
    inAnotherProcess(directDsn, target(queueName), `
      await t.send(new Envelope(new M('from-another-process')));
      await t.close();
    `);
    const arrived = await pollUntil(() => received.get(queueName).length === 1, { timeoutMs: DELIVERY_BOUND_MS });
    expect(arrived).toBe(true);
    expect(received.get(queueName)[0].message).toEqual(new M('from-another-process'));
    await sleep(3 * POLL_MS);
    expect(deliveries()).toBe(1);
  }, 30000);

  it('a delayed row another process stores is delivered once its delay has passed', async () => {
    const queueName = queueNames()[23];
    const before = deliveries();
    inAnotherProcess(directDsn, target(queueName), `
      await t.send(new Envelope(new M('delayed'), [new DelayStamp(1500)]));
      await t.close();
    `);
    const arrived = await pollUntil(() => received.get(queueName).length === 1, {
      timeoutMs: 1500 + DELIVERY_BOUND_MS,
    });
    expect(arrived).toBe(true);
    expect(received.get(queueName)[0].message).toEqual(new M('delayed'));
    expect(deliveries()).toBe(before + 1);
  }, 30000);

  it("a crashed consumer's message is delivered to an idle consumer when its lease runs out", async () => {
    const queueName = `crashed_${uniqueName('q')}`;
    // The other process claims the message and dies holding it.
    const child = inAnotherProcess(directDsn, target(queueName), `
      await t.send(new Envelope(new M('held-by-the-dead')));
      const { value } = await t.get(new AbortController().signal).next();
      process.stdout.write(value.message.id);
      process.kill(process.pid, 'SIGKILL');
    `, { extra: { redeliverTimeoutSeconds: 1 }, crashes: true });
    expect(child.stdout).toBe('held-by-the-dead');
    consume(queueName, { redeliverTimeoutSeconds: 1 });
    const arrived = await pollUntil(() => received.get(queueName).length === 1, {
      timeoutMs: 1000 + DELIVERY_BOUND_MS,
    });
    expect(arrived).toBe(true);
    expect(received.get(queueName)[0].message).toEqual(new M('held-by-the-dead'));
  }, 30000);
});


describe.each(POLLING)('$label: the shared poll names any queue', ({ engine, options: engineOptions }) => {
  it('a queue whose name has quotes, backslashes and non-ASCII letters is polled and woken', async () => {
    await engine.requireServer();
    const directDsn = engine.name === 'sqlite' ? engine.runDsn('nmn-shared-poll-names') : engine.dsn;
    const tableName = uniqueName('poll_names');
    const queueName = `it's "é" \\ ${uniqueName('q')}`;
    const options = { dsn: directDsn, tableName, pollIntervalMs: POLL_MS, serializer: new JsonSerializer([M]), ...engineOptions };
    const idle = [queueName, 'plain'].map((name) => new engine.Transport({ ...options, queueName: name }));
    const received = [];
    const controller = new AbortController();
    const loops = idle.map((t) =>
      (async () => {
        for await (const envelope of t.get(controller.signal)) {
          received.push(envelope.message.id);
          await t.ack(envelope);
        }
      })(),
    );
    try {
      await pollUntil(() => idle.every((t) => t.stats().emptyClaims >= 1), { timeoutMs: 10000 });
      const before = idle.map((t) => t.stats().emptyClaims);
      await sleep(10 * POLL_MS);
      // The poll answered for both queues: neither was woken to claim for nothing (a failed
      // poll wakes every consumer, each interval).
      expect(idle.map((t, i) => t.stats().emptyClaims - before[i])).toEqual([0, 0]);
      inAnotherProcess(directDsn, { tableName, queueName, options: engineOptions }, `
        await t.send(new Envelope(new M('odd-name')));
        await t.close();
      `);
      expect(await pollUntil(() => received.length === 1, { timeoutMs: DELIVERY_BOUND_MS })).toBe(true);
      expect(received).toEqual(['odd-name']);
    } finally {
      controller.abort();
      await Promise.all(loops.map((done) => settleWithin(done, 5000).catch(() => {})));
      await Promise.all(idle.map((t) => settleWithin(t.close(), 5000).catch(() => {})));
      if (engine.name === 'sqlite') engine.removeRunDsn(directDsn);
      else await engine.admin(directDsn).query(`DROP TABLE IF EXISTS ${tableName}`);
    }
  }, 30000);
});

describe('mysql: the shared poll compares names as the table does', () => {
  it.each([
    ['utf8mb3', 'utf8mb3_general_ci'],
    ['latin1', 'latin1_swedish_ci'],
    ['utf8mb4', 'utf8mb4_bin'],
  ])("a migration's %s table (%s): a row stored under another case reaches the consumer whose claim takes it", async (charset, collation) => {
    await mysql.requireServer();
    const tableName = uniqueName('poll_collation');
    await mysql.admin().query(
      `CREATE TABLE ${tableName} (id BIGINT AUTO_INCREMENT PRIMARY KEY, body LONGTEXT NOT NULL, headers LONGTEXT NOT NULL, ` +
        `queue_name VARCHAR(190) NOT NULL, created_at DATETIME(3) NOT NULL, available_at DATETIME(3) NOT NULL, delivered_at DATETIME(3) NULL, ` +
        `INDEX ${tableName}_claim_idx (queue_name, available_at, delivered_at, id)) ENGINE=InnoDB DEFAULT CHARSET=${charset} COLLATE=${collation}`,
    );
    const options = { dsn: mysql.dsn, tableName, pollIntervalMs: POLL_MS, serializer: new JsonSerializer([M]) };
    const idle = ['Orders', 'mail', 'audit'].map((queueName) => namedTransport(options, queueName));
    const received = new Map(idle.map((t) => [t.queueName, []]));
    const controller = new AbortController();
    const loops = idle.map((t) =>
      (async () => {
        for await (const envelope of t.transport.get(controller.signal)) {
          received.get(t.queueName).push(envelope.message.id);
          await t.transport.ack(envelope);
        }
      })(),
    );
    try {
      await pollUntil(() => idle.every((t) => t.transport.stats().emptyClaims >= 1), { timeoutMs: 10000 });
      const before = idle.map((t) => t.transport.stats().emptyClaims);
      await sleep(10 * POLL_MS);
      // The poll answered (a failed one wakes every consumer each interval, to claim for nothing).
      expect(idle.map((t, i) => t.transport.stats().emptyClaims - before[i])).toEqual([0, 0, 0]);
      inAnotherProcess(mysql.dsn, { tableName, queueName: 'orders', options: {} }, `
        await t.send(new Envelope(new M('lowercase')));
        await t.close();
      `);
      const caseInsensitive = !collation.endsWith('_bin');
      if (caseInsensitive) {
        // `orders` is `Orders` to this table: the claim of the consumer on `Orders` takes it.
        expect(await pollUntil(() => received.get('Orders').length === 1, { timeoutMs: DELIVERY_BOUND_MS })).toBe(true);
        expect(received.get('Orders')).toEqual(['lowercase']);
      } else {
        await sleep(5 * POLL_MS);
        expect(received.get('Orders')).toEqual([]);
      }
      expect(received.get('mail')).toEqual([]);
      expect(received.get('audit')).toEqual([]);
    } finally {
      controller.abort();
      await Promise.all(loops.map((done) => settleWithin(done, 5000).catch(() => {})));
      await Promise.all(idle.map((t) => settleWithin(t.transport.close(), 5000).catch(() => {})));
      await mysql.admin().query(`DROP TABLE IF EXISTS ${tableName}`);
    }
  }, 30000);
});

/** A MySQL transport on `queueName`, with its name beside it. */
function namedTransport(options, queueName) {
  return { queueName, transport: new mysql.Transport({ ...options, queueName }) };
}
