'use strict';

// SqlTransport on PostgreSQL through a real PgBouncer the tests start, in transaction mode
// (the DSN says `pgbouncer=true`, or is upstream's unchanged DSN and the pooler is found on
// connecting) and in session mode: sends, a delayed send, get, ack, reject, list, find and
// getMessageCount; many clients at once; idle consumers woken through `listenDsn`
// (transaction mode) or through PgBouncer itself (session mode), or polling with the logger
// told why; and the hint a DSN that says `pgbouncer=false` gets in transaction mode.
//
// PgBouncer runs with its settings as the installed version ships them but for the pool mode;
// where the version has protocol-level prepared statements (1.21 and later), once more with
// them off (max_prepared_statements = 0), as 1.18 and earlier are.

const { DelayStamp, InvalidArgumentError, TransportConnectionError } = require('@schally/nestjs-messenger');
const { SqlTransport } = require('../..');
const { postgres, mysql, uniqueName } = require('../support/engines');
const {
  envelopeOf,
  idOf,
  receiveUpTo,
  receiveOne,
  collect,
  serializer,
  settleWithin,
  throwsSync,
} = require('../support/transport-helpers');
const { sqlTable } = require('../support/sql-table');
const { startPgBouncer, hasProtocolPreparedStatements } = require('../support/pgbouncer');

const DIRECT = postgres.dsn;
const { TABLE, db, track, queue, consume } = sqlTable(postgres, { dsn: DIRECT, prefix: 'nmn_pgb' });

/** The PgBouncer settings each mode runs with: as shipped, and without prepared statements where they exist. */
function shippedAndWithout() {
  let protocolLevel = false;
  try {
    protocolLevel = hasProtocolPreparedStatements();
  } catch {
    // Not installed: startPgBouncer fails each case, saying how to install it.
  }
  const configs = [['as shipped', {}]];
  if (protocolLevel) configs.push(['max_prepared_statements = 0', { max_prepared_statements: 0 }]);
  return configs;
}

/**
 * A transport through `bouncer` as `variant` says; `app` (an application_name) makes its DSN
 * string, and so its pool, its own.
 */
function transportThrough(bouncer, variant, options, app = undefined) {
  const query = [variant.query, app === undefined ? '' : `application_name=${app}`].filter(Boolean).join('&');
  return track(
    new SqlTransport({
      dsn: bouncer.dsn(query),
      ...(variant.listen ? { listenDsn: DIRECT } : {}),
      tableName: TABLE,
      serializer: serializer(),
      ...options,
    }),
  );
}

const VARIANTS = [
  { name: 'transaction mode (pgbouncer=true), LISTEN through listenDsn', poolMode: 'transaction', query: 'pgbouncer=true', listen: true, push: true },
  { name: 'transaction mode (pgbouncer=true), polling', poolMode: 'transaction', query: 'pgbouncer=true', listen: false, push: false },
  { name: 'transaction mode, upstream\'s DSN (found on connecting), LISTEN through listenDsn', poolMode: 'transaction', query: '', listen: true, push: true },
  { name: 'transaction mode, upstream\'s DSN (found on connecting), polling', poolMode: 'transaction', query: '', listen: false, push: false },
  { name: 'session mode, LISTEN through PgBouncer', poolMode: 'session', query: '', listen: false, push: true },
  { name: 'session mode, LISTEN through listenDsn', poolMode: 'session', query: '', listen: true, push: true },
];

describe.each(shippedAndWithout())('PgBouncer %s', (_, settings) => {
  describe.each(VARIANTS)('$name', (variant) => {
    let bouncer;

    beforeAll(async () => {
      await postgres.requireServer();
      bouncer = await startPgBouncer({ serverDsn: DIRECT, poolMode: variant.poolMode, settings });
    });

    afterAll(async () => {
      await bouncer?.stop();
    });

    it('sends, delays, gets, acks, rejects, lists, finds and counts', async () => {
      const queueName = queue();
      const t = transportThrough(bouncer, variant, { queueName, pollIntervalMs: 100 });

      const [a, b] = await Promise.all([t.send(envelopeOf('a')), t.send(envelopeOf('b'))]);
      const sentLateAt = Date.now();
      const late = await t.send(envelopeOf('late', '', [new DelayStamp(1500)]));
      expect(await t.getMessageCount()).toBe(2);
      expect((await t.find(idOf(a)))?.message.id).toBe('a');
      expect((await collect(t.list())).map((e) => e.message.id)).toEqual(['a', 'b', 'late']);

      const got = await receiveUpTo(t, 2, 5000);
      expect(got.map((e) => e.message.id).sort()).toEqual(['a', 'b']);
      const [first, second] = got;
      await t.ack(first);
      // A reject stores a copy for redelivery (a new row) in place of the original.
      await t.reject(second);
      expect(await t.getMessageCount()).toBe(1);
      const rows = await db.rows(TABLE, queueName);
      expect(rows.map((r) => JSON.parse(r.body).id)).toEqual(['late', second.message.id]);
      expect(rows.map((r) => r.id)).not.toContain(idOf(a));
      expect(rows.map((r) => r.id)).not.toContain(idOf(b));

      const again = await receiveOne(t, 5000);
      expect(again.message.id).toBe(second.message.id);
      await t.ack(again);
      const delayed = await receiveOne(t, 5000);
      expect(idOf(delayed)).toBe(idOf(late));
      expect(Date.now() - sentLateAt).toBeGreaterThanOrEqual(1400);
      await t.ack(delayed);
      await t.close();
      expect(await db.rows(TABLE, queueName)).toEqual([]);
    });

    it('carries many clients at once: 200 sends from two pools, each message received once', async () => {
      const queueName = queue();
      const transports = [0, 1].map((n) =>
        transportThrough(bouncer, variant, { queueName, pollIntervalMs: 50 }, uniqueName(`nmn_pgb${n}`)),
      );
      const consumers = transports.map((t) => consume(t));
      const sent = await Promise.all(
        Array.from({ length: 200 }, (_, i) => transports[i % 2].send(envelopeOf(`m${i}`))),
      );
      const deadline = Date.now() + 20000;
      while (consumers.reduce((n, c) => n + c.arrivals.length, 0) < 200 && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      const received = consumers.flatMap((c) => c.arrivals.map(({ envelope }) => idOf(envelope)));
      expect(received.sort()).toEqual(sent.map(idOf).sort());
    });

    const wakeTitle = variant.push
      ? 'wakes an idle consumer by NOTIFY (pollIntervalMs 60 s)'
      : 'polls at pollIntervalMs and tells the logger once why';
    it(wakeTitle, async () => {
      const queueName = queue();
      const logs = [];
      const logger = { log: (m) => logs.push(m), warn: (m) => logs.push(m), error: (m) => logs.push(m) };
      const t = transportThrough(bouncer, variant, {
        queueName,
        pollIntervalMs: variant.push ? 60000 : 300,
        getNotifyTimeoutMs: 60000,
        logger,
      });
      const consumer = consume(t);
      // Let it reach its idle wait on the empty queue.
      await new Promise((resolve) => setTimeout(resolve, 1000));
      // Sent straight to the server by another pool: only NOTIFY (or a poll) can wake `t`.
      const sender = track(new SqlTransport({ dsn: DIRECT, tableName: TABLE, queueName, serializer: serializer() }));
      const sentAt = Date.now();
      await sender.send(envelopeOf('wake'));
      const [arrival] = await consumer.waitFor(1, 5000);
      expect(arrival?.envelope.message.id).toBe('wake');
      expect(arrival.at - sentAt).toBeLessThan(3000);
      const told = logs.filter((m) => m.includes('listenDsn'));
      expect(told).toHaveLength(variant.push ? 0 : 1);
    });
  });
});

describe('a transaction-mode PgBouncer the DSN says is not one (pgbouncer=false)', () => {
  let bouncer;

  beforeAll(async () => {
    await postgres.requireServer();
    // One server connection: the driver's named statements of two clients meet on it.
    bouncer = await startPgBouncer({ serverDsn: DIRECT, poolMode: 'transaction', settings: { default_pool_size: 1 } });
  });

  afterAll(async () => {
    await bouncer?.stop();
  });

  it('fails with the prepared-statement error saying to say pgbouncer=true', async () => {
    const queueName = queue();
    const first = track(new SqlTransport({ dsn: bouncer.dsn('pgbouncer=false'), tableName: TABLE, queueName, serializer: serializer() }));
    const other = track(
      new SqlTransport({
        dsn: bouncer.dsn(`pgbouncer=false&application_name=${uniqueName('nmn_other')}`),
        tableName: TABLE,
        queueName,
        serializer: serializer(),
      }),
    );
    await first.send(envelopeOf('first'));
    const outcome = await settleWithin(other.send(envelopeOf('other')), 10000);
    expect(outcome.error?.message).toMatch(/prepared statement/);
    expect(outcome.error?.message).toContain('say pgbouncer=true');
  });

  it('with upstream\'s DSN on the same pooler, both clients send and receive', async () => {
    const queueName = queue();
    const first = track(new SqlTransport({ dsn: bouncer.dsn(), tableName: TABLE, queueName, serializer: serializer() }));
    const other = track(
      new SqlTransport({ dsn: bouncer.dsn(`application_name=${uniqueName('nmn_other')}`), tableName: TABLE, queueName, serializer: serializer() }),
    );
    await first.send(envelopeOf('first'));
    await other.send(envelopeOf('other'));
    const got = await receiveUpTo(first, 2, 5000);
    expect(got.map((e) => e.message.id).sort()).toEqual(['first', 'other']);
  });
});

describe('options', () => {
  it('refuses a listenDsn that is not a PostgreSQL DSN string, or beside a non-PostgreSQL dsn, as InvalidArgumentError', () => {
    for (const options of [
      { dsn: DIRECT, listenDsn: 42 },
      { dsn: DIRECT, listenDsn: '' },
      { dsn: DIRECT, listenDsn: mysql.dsn },
      { dsn: mysql.dsn, listenDsn: DIRECT },
    ]) {
      const error = throwsSync(() => new SqlTransport({ ...options, tableName: TABLE }));
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect(error.message).toContain('listenDsn');
    }
  });

  it('refuses a malformed listenDsn or pgbouncer value as TransportConnectionError, showing no password', () => {
    for (const options of [
      { dsn: DIRECT, listenDsn: 'postgres://u:hunter2@[bad' },
      { dsn: `${DIRECT}${DIRECT.includes('?') ? '&' : '?'}pgbouncer=yes`, listenDsn: 'postgres://u:hunter2@db/app' },
    ]) {
      const error = throwsSync(() => new SqlTransport({ ...options, tableName: TABLE }));
      expect(error).toBeInstanceOf(TransportConnectionError);
      expect(error.message).not.toContain('hunter2');
    }
  });
});
