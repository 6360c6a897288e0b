'use strict';

// SqlTransport idle waits on PostgreSQL: the wait bounded by the next available_at (no
// polling at pollIntervalMs), NOTIFY wake-ups across processes/pools, the NOTIFY wire form
// shared with upstream, and recovery from a lost LISTEN or pooled connection.
//
// Every transport here gets its own DSN string (an `application_name` parameter), so it has
// its own pool and LISTEN connection, which pg_stat_activity can tell apart.

const { Client } = require('pg');
const { DelayStamp } = require('@schally/nestjs-messenger');
const { SqlTransport } = require('../..');
const { postgres, uniqueName } = require('../support/engines');
const {
  TestMessage,
  serializer,
  envelopeOf,
  idOf,
  pollUntil,
  expectArrival,
} = require('../support/transport-helpers');
const { sqlTable } = require('../support/sql-table');

const POSTGRES_DSN = postgres.dsn;
const { TABLE, db, track, queue, consume: startConsumer } = sqlTable(postgres, { dsn: POSTGRES_DSN, prefix: 'nmn_ln' });

/** POSTGRES_DSN with the given scheme and application_name: a DSN string of its own. */
function dsnFor(scheme, app) {
  const base = POSTGRES_DSN.replace(/^postgres(ql)?:/, `${scheme}:`);
  return `${base}${base.includes('?') ? '&' : '?'}application_name=${app}`;
}

function transport({ scheme = 'postgres', app = uniqueName('nmn_app'), ...options }) {
  return track(
    new SqlTransport({
      dsn: dsnFor(scheme, app),
      tableName: TABLE,
      serializer: serializer(),
      ...options,
    }),
  );
}

/** The pid of the backend that LISTENs on TABLE for the given application_name, if any. */
async function listenerPid(app) {
  const rows = await db.query(
    `SELECT pid FROM pg_stat_activity
      WHERE application_name = $1 AND query = $2`,
    [app, `LISTEN ${TABLE}`],
  );
  return rows[0]?.pid;
}

/** Whether a backend of `app` has run the next-available_at peek (the consumer went idle). */
async function peeked(app) {
  const rows = await db.query(
    "SELECT 1 FROM pg_stat_activity WHERE application_name = $1 AND query LIKE '%wait_ms%'",
    [app],
  );
  return rows.length > 0;
}

/**
 * An idle consumer on a queue of its own (an application_name of its own, `options` on top of
 * getNotifyTimeoutMs 60 s), LISTENing (asserted) once this resolves, and a sender for the queue
 * on another DSN (another pool). `pid` is the LISTEN backend's.
 */
async function listeningConsumer(options) {
  const consumerApp = uniqueName('nmn_app');
  const queueName = queue();
  const t = transport({ app: consumerApp, queueName, getNotifyTimeoutMs: 60000, ...options });
  const sender = transport({ scheme: 'postgresql', queueName });
  const consumer = startConsumer(t);
  const pid = await pollUntil(() => listenerPid(consumerApp), { timeoutMs: 5000 });
  expect(pid).toBeDefined();
  return { consumerApp, sender, consumer, pid };
}

/** The pid of a LISTEN backend of `app` other than `pid`, once there is one (10 s at most). */
function newListenerPid(app, pid, intervalMs) {
  return pollUntil(
    async () => {
      const current = await listenerPid(app);
      return current !== undefined && current !== pid ? current : undefined;
    },
    { timeoutMs: 10000, intervalMs },
  );
}

describe('idle wait bounded by the next available_at', () => {
  it.each([
    ['with LISTEN (useNotify: true)', { useNotify: true, getNotifyTimeoutMs: 60000 }],
    ['in poll mode (useNotify: false)', { useNotify: false }],
  ])(
    'delivers a delayed message on time %s although pollIntervalMs is 60 s',
    async (_, options) => {
      const app = uniqueName('nmn_app');
      const t = transport({ app, queueName: queue(), pollIntervalMs: 60000, ...options });
      const consumer = startConsumer(t);
      // Let the consumer reach its idle wait on the empty queue (best effort: the timing
      // bounds below hold either way).
      if (options.useNotify) expect(await pollUntil(() => listenerPid(app), { timeoutMs: 5000 })).toBeDefined();
      await pollUntil(() => peeked(app), { timeoutMs: 2000 });
      expect(consumer.arrivals).toHaveLength(0);

      const sentAt = Date.now();
      const sent = await t.send(envelopeOf('delayed', '', [new DelayStamp(400)]));
      const { elapsed } = await expectArrival(consumer, sent, sentAt, 3000);
      expect(elapsed).toBeGreaterThanOrEqual(350);
      expect(elapsed).toBeLessThanOrEqual(1500);
    },
    10000,
  );
});

describe('NOTIFY wake-ups', () => {
  it('wakes an idle consumer through NOTIFY for a message sent on another DSN (another pool)', async () => {
    const { consumerApp, sender, consumer } = await listeningConsumer({ pollIntervalMs: 60000 });
    await pollUntil(() => peeked(consumerApp), { timeoutMs: 2000 });

    const sentAt = Date.now();
    const sent = await sender.send(envelopeOf('pushed'));
    const [arrival] = await consumer.waitFor(1, 3000);

    expect(arrival).toBeDefined();
    expect(idOf(arrival.envelope)).toBe(idOf(sent));
    expect(arrival.envelope.message).toEqual(new TestMessage('pushed'));
    expect(arrival.at - sentAt).toBeLessThan(1000);
  }, 10000);

  it('delivers nothing to a consumer for notifications of other queues of the same table', async () => {
    const { sender: mySender, consumer } = await listeningConsumer({ pollIntervalMs: 60000 });
    const otherSender = transport({ scheme: 'postgresql', queueName: queue() });

    const foreign = await otherSender.send(envelopeOf('not-for-you'));
    // Nothing arrives for the other queue's notification (deadline, not a sleep: any
    // delivery would end the wait early and fail below).
    await consumer.waitFor(1, 500);
    expect(consumer.arrivals).toHaveLength(0);

    const sentAt = Date.now();
    const own = await mySender.send(envelopeOf('for-you'));
    const arrivals = await consumer.waitFor(1, 3000);
    expect(arrivals.map((a) => idOf(a.envelope))).toEqual([idOf(own)]);
    expect(arrivals[0].at - sentAt).toBeLessThan(1000);

    const rows = await db.query(`SELECT delivered_at FROM ${TABLE} WHERE id = $1::bigint`, [idOf(foreign)]);
    expect(rows).toEqual([{ delivered_at: null }]);
  }, 10000);

  it('notifies on the table channel with the queue name as payload, and not at all with useNotify: false', async () => {
    const listener = new Client({ connectionString: POSTGRES_DSN });
    await listener.connect();
    try {
      const notifications = [];
      listener.on('notification', (n) => notifications.push({ channel: n.channel, payload: n.payload }));
      await listener.query(`LISTEN "${TABLE}"`);

      const loud = queue();
      const quiet = queue();
      const marker = queue();
      const loudT = transport({ queueName: loud });
      const quietT = transport({ queueName: quiet, useNotify: false });
      const markerT = transport({ queueName: marker });

      await loudT.send(envelopeOf('loud'));
      await quietT.send(envelopeOf('quiet'));
      // Notifications arrive in commit order: once the marker's is in, any for `quiet` would be too.
      await markerT.send(envelopeOf('marker'));
      const seen = await pollUntil(() => notifications.some((n) => n.payload === marker), { timeoutMs: 3000 });
      expect(seen).toBe(true);

      expect(notifications).toContainEqual({ channel: TABLE, payload: loud });
      expect(notifications.filter((n) => n.payload === quiet)).toEqual([]);
    } finally {
      await listener.end();
    }
  });
});

describe('connection loss', () => {
  it('falls back to polling when the LISTEN connection dies, then LISTENs again', async () => {
    const { consumerApp, sender, consumer, pid } = await listeningConsumer({ pollIntervalMs: 200 });

    const rows = await db.query('SELECT pg_terminate_backend($1) AS terminated', [pid]);
    expect(rows[0].terminated).toBe(true);

    const sentAt = Date.now();
    const sent = await sender.send(envelopeOf('after-loss'));
    const { elapsed } = await expectArrival(consumer, sent, sentAt, 4000);
    expect(elapsed).toBeLessThan(2000);

    const newPid = await newListenerPid(consumerApp, pid, 100);
    expect(newPid).toBeDefined();
  }, 20000);

  it('is woken through NOTIFY again once the LISTEN connection is re-established', async () => {
    const { consumerApp, sender, consumer, pid } = await listeningConsumer({ pollIntervalMs: 60000 });

    await db.query('SELECT pg_terminate_backend($1)', [pid]);
    const newPid = await newListenerPid(consumerApp, pid, 50);
    expect(newPid).toBeDefined();

    const sentAt = Date.now();
    const sent = await sender.send(envelopeOf('after-reconnect'));
    const { elapsed } = await expectArrival(consumer, sent, sentAt, 3000);
    expect(elapsed).toBeLessThan(1000);
  }, 20000);

  it('survives its idle pooled connections being terminated', async () => {
    const app = uniqueName('nmn_app');
    const t = transport({ app, queueName: queue() });
    const consumer = startConsumer(t);
    await t.send(envelopeOf('before'));
    expect(await consumer.waitFor(1, 3000)).toHaveLength(1);

    const rows = await db.query(
      `SELECT pg_terminate_backend(pid) AS terminated FROM pg_stat_activity
        WHERE application_name = $1 AND query NOT LIKE 'LISTEN%' AND state = 'idle'`,
      [app],
    );
    expect(rows.length).toBeGreaterThan(0);

    const sent = await t.send(envelopeOf('after'));
    const arrivals = await consumer.waitFor(2, 3000);
    expect(arrivals.map((a) => a.envelope.message.id)).toEqual(['before', 'after']);
    expect(idOf(arrivals[1].envelope)).toBe(idOf(sent));
    expect(await t.getMessageCount()).toBe(0);
  }, 10000);
});
