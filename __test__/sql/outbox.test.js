'use strict';

// The transactional outbox: `SqlTransport#outboxStatement(envelope)` run by the
// drivers apps really use (`pg`, a `pg` pool client, `mysql2`, `better-sqlite3` in an app
// process of its own, Knex) inside their own transaction, against the real servers. Commit: delivered once, as the row `send()` would
// have written (upstream workers read it too); rollback: never delivered; a delay is honoured;
// on PostgreSQL an idle consumer is woken at commit and not before.

const path = require('node:path');
const { fork } = require('node:child_process');
const { DelayStamp } = require('@schally/nestjs-messenger');
const { SqlTransport: UpstreamSqlTransport } = require('@schally/nestjs-messenger-transport-sql');
const { postgres, mysql, sqlite, uniqueName } = require('../support/engines');
const {
  closeAll,
  envelopeOf,
  idOf,
  pollUntil,
  receiveUpTo,
  receiveWithin,
  serializer,
  sleep,
  startAckingConsumer,
} = require('../support/transport-helpers');
const { outboxTableReady, outboxTransport } = require('../support/outbox');

/** The app's side: a driver connection that can run a statement in a transaction. */
const drivers = [
  {
    name: 'pg Client',
    engine: postgres,
    async connect(dsn) {
      const { Client } = require('pg');
      const client = new Client({ connectionString: dsn });
      await client.connect();
      return {
        query: (sql) => client.query(sql),
        run: async ({ text, values }) => (await client.query(text, values)).rows[0].id,
        close: () => client.end(),
      };
    },
  },
  {
    name: 'pg Pool client',
    engine: postgres,
    async connect(dsn) {
      const { Pool } = require('pg');
      const pool = new Pool({ connectionString: dsn, max: 2 });
      const client = await pool.connect();
      return {
        query: (sql) => client.query(sql),
        run: async ({ text, values }) => (await client.query(text, values)).rows[0].id,
        close: async () => {
          client.release();
          await pool.end();
        },
      };
    },
  },
  {
    name: 'mysql2',
    engine: mysql,
    async connect(dsn) {
      const driver = require('mysql2/promise');
      const connection = await driver.createConnection(dsn.replace(/^mariadb:/, 'mysql:'));
      return {
        query: (sql) => connection.query(sql),
        run: async ({ text, values }) => String((await connection.execute(text, values))[0].insertId),
        close: () => connection.end(),
      };
    },
  },
  {
    name: 'better-sqlite3',
    engine: sqlite,
    // In an app process of its own: see support/sqlite-app.js for why not in this one.
    async connect(dsn) {
      const app = fork(path.join(__dirname, '..', 'support', 'sqlite-app.js'), [dsn.slice('sqlite://'.length)]);
      const pending = new Map();
      let seq = 0;
      app.on('message', ({ seq: replyTo, result, error }) => {
        const { resolve, reject } = pending.get(replyTo);
        pending.delete(replyTo);
        if (error === undefined) resolve(result);
        else reject(new Error(error));
      });
      const call = (message) =>
        new Promise((resolve, reject) => {
          seq += 1;
          pending.set(seq, { resolve, reject });
          app.send({ seq, ...message });
        });
      return {
        query: (sql) => call({ op: 'exec', sql }),
        run: ({ text, values }) => call({ op: 'run', text, values }),
        close: async () => {
          const exited = new Promise((resolve) => app.once('exit', resolve));
          await call({ op: 'close' });
          await exited;
        },
      };
    },
  },
];

describe.each(drivers)('outbox with $name', ({ name, engine, connect }) => {
  const transports = [];
  const consumers = [];
  let dsn;
  let app;

  const open = (options = {}) => outboxTransport(engine, transports, options, dsn);

  beforeAll(async () => {
    dsn = engine.runDsn();
    await outboxTableReady(engine, dsn);
    app = await connect(dsn);
  });

  afterAll(async () => {
    await app?.close();
    engine.removeRunDsn(dsn);
  });

  afterEach(async () => {
    for (const consumer of consumers.splice(0)) await consumer.stop();
    await closeAll(transports);
  }, 15000);

  /** Runs the outbox statement of `envelope` in a transaction the app ends with `end`. */
  async function inTransaction(transport, envelope, end, between = async () => {}) {
    await app.query('BEGIN');
    const id = await app.run(transport.outboxStatement(envelope));
    await between();
    await app.query(end);
    return id;
  }

  it('commit: delivered once, with the id the driver read back, as the row send() writes', async () => {
    const queueName = uniqueName('ob');
    const transport = open({ queueName });
    const statement = transport.outboxStatement(envelopeOf('outboxed', 'p'));
    expect(statement.dialect).toBe(engine.name);

    const sent = await transport.send(envelopeOf('sent', 'p'));
    const outboxedId = await inTransaction(transport, envelopeOf('outboxed', 'p'), 'COMMIT');

    const rows = await engine.testAdmin(dsn).storedRows('messenger_messages', queueName);
    expect(rows.map((r) => r.id)).toEqual([idOf(sent), outboxedId]);
    const [viaSend, viaOutbox] = rows;
    expect(viaOutbox.queue_name).toBe(viaSend.queue_name);
    expect(JSON.parse(viaOutbox.headers)).toEqual(JSON.parse(viaSend.headers));
    expect(JSON.parse(viaOutbox.body)).toEqual({ ...JSON.parse(viaSend.body), id: 'outboxed' });
    expect(viaOutbox.delivered_at).toBeNull();
    expect(Math.abs(viaOutbox.delayMs)).toBeLessThan(5);

    const consumer = startAckingConsumer(transport);
    consumers.push(consumer);
    await pollUntil(() => consumer.received.length >= 2, { timeoutMs: 5000 });
    await sleep(300);
    expect(consumer.error).toBeUndefined();
    expect(consumer.ids().sort()).toEqual(['outboxed', 'sent']);
    const outboxed = consumer.received.find((e) => e.message.id === 'outboxed');
    expect(idOf(outboxed)).toBe(outboxedId);
    await consumer.stop();
    expect(await pollUntil(async () => (await transport.getMessageCount()) === 0)).toBe(true);
  }, 20000);

  it('rollback: never delivered', async () => {
    const transport = open({ queueName: uniqueName('ob') });
    await inTransaction(transport, envelopeOf('rolled-back'), 'ROLLBACK');
    expect(await receiveUpTo(transport, 1, 700)).toEqual([]);
    expect(await transport.getMessageCount()).toBe(0);
  }, 20000);

  it('a delayed envelope waits its delay on the database clock', async () => {
    const queueName = uniqueName('ob');
    const transport = open({ queueName });
    await inTransaction(transport, envelopeOf('later').with(new DelayStamp(1500)), 'COMMIT');
    const committedAt = Date.now();
    const [row] = await engine.testAdmin(dsn).storedRows('messenger_messages', queueName);
    expect(row.delayMs).toBeGreaterThanOrEqual(1499);
    expect(row.delayMs).toBeLessThan(1600);

    const consumer = startAckingConsumer(transport);
    consumers.push(consumer);
    await pollUntil(() => consumer.received.length >= 1, { timeoutMs: 6000 });
    const waited = Date.now() - committedAt;
    expect(consumer.ids()).toEqual(['later']);
    expect(waited).toBeGreaterThanOrEqual(1200);
  }, 20000);

  if (engine.name !== 'sqlite') {
    it('an upstream TypeScript worker consumes an outboxed row', async () => {
      const queueName = uniqueName('ob');
      const transport = open({ queueName });
      await inTransaction(transport, envelopeOf('for-upstream', 'u'), 'COMMIT');
      const upstream = new UpstreamSqlTransport({ dsn, queueName, serializer: serializer() });
      transports.push(upstream);
      const received = await receiveWithin(upstream, 3000);
      expect(received?.message).toEqual(envelopeOf('for-upstream', 'u').message);
      await upstream.ack(received);
      expect(await pollUntil(async () => (await transport.getMessageCount()) === 0)).toBe(true);
    }, 20000);
  }

  if (engine.name === 'postgres') {
    it('an idle consumer is woken at commit (NOTIFY), not before', async () => {
      const queueName = uniqueName('ob');
      // Polling alone would take 30 s: only the NOTIFY the statement sends can wake it.
      const transport = open({ queueName, pollIntervalMs: 30000, getNotifyTimeoutMs: 30000 });
      const consumer = startAckingConsumer(transport);
      consumers.push(consumer);
      await sleep(300);
      let committedAt;
      await inTransaction(transport, envelopeOf('woken'), 'COMMIT', async () => {
        await sleep(400);
        expect(consumer.received).toEqual([]);
        committedAt = Date.now();
      });
      await pollUntil(() => consumer.received.length >= 1, { timeoutMs: 3000 });
      expect(consumer.ids()).toEqual(['woken']);
      expect(Date.now() - committedAt).toBeLessThan(3000);
    }, 20000);

    it('without useNotify the statement sends no NOTIFY', () => {
      const transport = open({ queueName: uniqueName('ob'), useNotify: false });
      const { text, values } = transport.outboxStatement(envelopeOf('quiet'));
      expect(text).not.toMatch(/pg_notify/);
      expect(values).toHaveLength(4);
    });
  }

  it(`${name}: the statement is built without touching the database`, () => {
    const transport = new engine.Transport({ dsn: engine.dsnWith ? engine.dsnWith({ port: 1 }) : dsn, serializer: serializer() });
    transports.push(transport);
    const { text, values } = transport.outboxStatement(envelopeOf('offline'));
    expect(text).toMatch(/INSERT INTO messenger_messages/);
    expect(values[0]).toBe('default');
  });
});

// Knex numbers `?` itself on every dialect (PostgreSQL included): `{ placeholders: '?' }`.
describe.each([
  ['pg', postgres],
  ['mysql2', mysql],
])('outbox through Knex (%s)', (client, engine) => {
  const transports = [];
  let knex;

  beforeAll(async () => {
    await outboxTableReady(engine);
    knex = require('knex')({ client, connection: engine.dsn.replace(/^mariadb:/, 'mysql:'), pool: { min: 0, max: 2 } });
  });

  afterAll(async () => {
    await closeAll(transports);
    await knex?.destroy();
  });

  it('trx.raw inside knex.transaction: a commit delivers, a rollback does not', async () => {
    const transport = outboxTransport(engine, transports, { queueName: uniqueName('obk') });

    const statement = transport.outboxStatement(envelopeOf('via-knex'), { placeholders: '?' });
    expect(statement.text).not.toMatch(/\$\d/);
    expect(statement.values).toHaveLength(statement.text.split('?').length - 1);
    await knex.transaction(async (trx) => {
      await trx.raw(statement.text, statement.values);
    });
    await expect(
      knex.transaction(async (trx) => {
        const { text, values } = transport.outboxStatement(envelopeOf('rolled-back'), { placeholders: '?' });
        await trx.raw(text, values);
        throw new Error('the business write failed');
      }),
    ).rejects.toThrow('the business write failed');

    const received = await receiveUpTo(transport, 2, 1500);
    expect(received.map((e) => e.message.id)).toEqual(['via-knex']);
    await transport.ack(received[0]);
  }, 20000);

  it('an unknown placeholder style is refused', () => {
    const transport = new engine.Transport({ dsn: engine.dsn, serializer: serializer() });
    transports.push(transport);
    expect(() => transport.outboxStatement(envelopeOf('x'), { placeholders: '$' })).toThrow(/placeholders/);
  });
});
