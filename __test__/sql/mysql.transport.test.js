'use strict';

// SqlTransport on MySQL/MariaDB beyond the conformance suite: the shared SqlTransport cases
// (shared/sql-transport.suite.js), plus what only MySQL has: the mariadb:// scheme for the
// same server, and max_allowed_packet (refused before writing, the limit itself, and an
// oversized message inside a group commit). LISTEN/NOTIFY has no MySQL counterpart.

const { TransportConnectionError, TransportError, TransportNotFoundError } = require('@schally/nestjs-messenger');
const { mysql } = require('../support/engines');
const {
  TestMessage,
  serializer,
  envelopeOf,
  idOf,
  receiveOne,
  pollUntil,
  rejectionOf,
} = require('../support/transport-helpers');
const { sqlTransportSuite } = require('../shared/sql-transport.suite');
const { startProxy, viaProxy } = require('../faults/support/proxy');

const { TABLE, db, transport, lastQueue, settledRows, freshTable } = sqlTransportSuite(mysql);

describe('construction and options', () => {
  it('accepts a mariadb:// DSN for the same server and table', async () => {
    const viaMaria = transport({ dsn: mysql.mariadb(mysql.dsn) });
    const viaMysql = transport({ queueName: lastQueue() });
    const sent = await viaMaria.send(envelopeOf('maria-1'));
    const received = await receiveOne(viaMysql);
    expect(idOf(received)).toBe(idOf(sent));
    expect(received.message).toEqual(new TestMessage('maria-1'));
    await viaMysql.ack(received);

    const back = await viaMysql.send(envelopeOf('maria-2'));
    const again = await receiveOne(viaMaria);
    expect(idOf(again)).toBe(idOf(back));
    await viaMaria.ack(again);
    expect(await settledRows(TABLE, lastQueue(), 0)).toHaveLength(0);
  });
});

describe('claims', () => {
  // A claim inlines the queue's name into its text (BEGIN and the SELECT travel together).
  it.each([["it's"], ['back\\slash'], ['ünïcødé 🚀'], ["'; SELECT 1; --"]])(
    'claims from a queue named %j and from no other',
    async (base) => {
      const queueName = `${base}-${process.hrtime.bigint()}`;
      const named = transport({ queueName });
      const neighbour = transport({ queueName: `${queueName}x` });
      await neighbour.send(envelopeOf('not-mine'));
      const sent = await named.send(envelopeOf('mine'));
      const received = await receiveOne(named);
      expect(idOf(received)).toBe(idOf(sent));
      expect(received.message).toEqual(new TestMessage('mine'));
      await named.ack(received);
      expect(await settledRows(TABLE, queueName, 0)).toHaveLength(0);
      expect(await db.count(TABLE, `${queueName}x`)).toBe(1);
    },
  );

  it('rolls back a claim the server refused and keeps its connection: no reconnect per attempt', async () => {
    // A consumer started before the migration that makes its table: every claim is refused
    // (no such table), and each attempt reuses the connection rather than opening another.
    const proxy = await startProxy({ targetPort: Number(new URL(mysql.dsn).port) });
    try {
      const consumer = transport({ dsn: viaProxy(mysql.dsn, proxy), tableName: `not_there_${process.hrtime.bigint()}`, autoSetup: false });
      for (let attempt = 0; attempt < 5; attempt += 1) {
        const error = await rejectionOf(receiveOne(consumer));
        expect(error).toBeInstanceOf(TransportNotFoundError);
      }
      expect(proxy.accepted).toBeLessThanOrEqual(2);
    } finally {
      await proxy.close();
    }
  });

  it('claims in two round trips: BEGIN travels with the SELECT, and no ROLLBACK follows the COMMIT', async () => {
    // The consumer's statements, counted at a proxy in front of the server (so no other
    // client of the server is counted).
    const proxy = await startProxy({ targetPort: Number(new URL(mysql.dsn).port) });
    try {
      const producer = transport();
      const consumer = transport({ dsn: viaProxy(mysql.dsn, proxy), queueName: lastQueue() });
      const claims = proxy.count('FOR UPDATE SKIP LOCKED');
      const begins = proxy.count('BEGIN');
      const rollbacks = proxy.count('ROLLBACK');
      for (let i = 0; i < 20; i += 1) {
        await producer.send(envelopeOf(`one-${i}`));
        await consumer.ack(await receiveOne(consumer));
      }
      await consumer.close();
      expect(claims.seen).toBeGreaterThanOrEqual(20);
      // sqlx's transaction sent BEGIN on its own and a ROLLBACK after each claim's COMMIT.
      expect(begins.seen).toBe(claims.seen);
      expect(rollbacks.seen).toBe(0);
    } finally {
      await proxy.close();
    }
  });
});

describe('max_allowed_packet', () => {
  async function maxAllowedPacket() {
    const [row] = await db.query('SELECT CAST(@@max_allowed_packet AS UNSIGNED) AS max');
    return Number(row.max);
  }

  it('refuses a message larger than max_allowed_packet before writing anything, saying to raise it', async () => {
    const max = await maxAllowedPacket();
    const t = transport();
    const queueName = lastQueue();
    expect(await t.getMessageCount()).toBe(0);

    const error = await rejectionOf(t.send(envelopeOf('huge', 'x'.repeat(max + 1024))));
    expect(error).toBeInstanceOf(TransportError);
    expect(error).not.toBeInstanceOf(TransportConnectionError);
    expect(error).not.toBeInstanceOf(TransportNotFoundError);
    expect(error.message).toMatch(/^MySQL transport failed during "send": /);
    expect(error.message).toMatch(/raise max_allowed_packet/);
    expect(await db.count(TABLE, queueName)).toBe(0);

    // The transport is not harmed by it.
    const sent = await t.send(envelopeOf('after-huge'));
    const received = await receiveOne(t);
    expect(idOf(received)).toBe(idOf(sent));
    await t.ack(received);
  }, 30000);

  it('stores and delivers a message just under max_allowed_packet', async () => {
    const max = await maxAllowedPacket();
    const t = transport();
    const payload = 'y'.repeat(max - 256 * 1024);
    const sent = await t.send(envelopeOf('almost', payload));
    const [stored] = await db.query(`SELECT LENGTH(body) AS bytes FROM ${TABLE} WHERE id = ?`, [idOf(sent)]);
    expect(Number(stored.bytes)).toBe(Buffer.byteLength(serializer().encode(envelopeOf('almost', payload)).body));
    const received = await receiveOne(t, 10000);
    expect(idOf(received)).toBe(idOf(sent));
    expect(received.message.payload === payload).toBe(true);
    await t.ack(received);
  }, 30000);

  it('fails only the oversized message when it is sent together with others (they share a group commit)', async () => {
    const max = await maxAllowedPacket();
    const t = transport();
    const queueName = lastQueue();
    expect(await t.getMessageCount()).toBe(0);

    // Hold the table so that the first send's INSERT waits: the sends made meanwhile queue
    // up and are flushed together, as concurrent sends of a busy process are.
    const results = await db.withClient(async (locker) => {
      await locker.query(`LOCK TABLES ${TABLE} WRITE`);
      const first = t.send(envelopeOf('first'));
      const waiting = await pollUntil(() => db.running(`INSERT INTO ${TABLE} `), { timeoutMs: 3000 });
      expect(waiting).toBe(true);
      const together = [
        t.send(envelopeOf('small-a')),
        t.send(envelopeOf('huge', 'x'.repeat(max + 1024))),
        t.send(envelopeOf('small-b')),
      ];
      await locker.query('UNLOCK TABLES');
      return Promise.allSettled([first, ...together]);
    });

    const [firstResult, a, huge, b] = results;
    expect(firstResult.status).toBe('fulfilled');
    expect(huge.status).toBe('rejected');
    expect(huge.reason.message).toMatch(/raise max_allowed_packet/);
    // Upstream sends each message on its own: the other sends must not fail with it.
    expect([a.status, a.reason?.message]).toEqual(['fulfilled', undefined]);
    expect([b.status, b.reason?.message]).toEqual(['fulfilled', undefined]);
    const stored = await db.rows(TABLE, queueName);
    expect(stored.map((r) => JSON.parse(r.body).id)).toEqual(['first', 'small-a', 'small-b']);
  }, 30000);
});

describe('message text', () => {
  const TEXT = 'café 中文 😀 \u00a0end';

  async function storedHex(table, id) {
    const [row] = await db.query(`SELECT HEX(body) AS hex FROM ${table} WHERE id = ?`, [id]);
    return row.hex;
  }

  const encodedBody = (id) => serializer().encode(envelopeOf(id, TEXT)).body;

  it('stores non-ASCII text as its UTF-8 bytes in the utf8mb4 table, sent and redelivered', async () => {
    const t = transport();
    const sent = await t.send(envelopeOf('utf8', TEXT));
    expect(await storedHex(TABLE, idOf(sent))).toBe(Buffer.from(encodedBody('utf8'), 'utf8').toString('hex').toUpperCase());
    const received = await receiveOne(t);
    expect(received.message).toEqual(new TestMessage('utf8', TEXT));

    await t.reject(received);
    const [copy] = await db.rows(TABLE, lastQueue());
    const stored = await storedHex(TABLE, copy.id);
    expect(Buffer.from(stored, 'hex').toString('utf8')).toBe(encodedBody('utf8'));
    const again = await receiveOne(t);
    expect(again.message).toEqual(new TestMessage('utf8', TEXT));
    await t.ack(again);
  });

  it('keeps the server converting text into a table whose text columns are not utf8mb4', async () => {
    // A table made by a migration of its own, in latin1: UTF-8 bytes stored as they are
    // would read back as "cafÃ©".
    const table = freshTable('nmn_latin1');
    await db.query(
      `CREATE TABLE ${table} (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, body LONGTEXT NOT NULL, ` +
        `headers LONGTEXT NOT NULL, queue_name VARCHAR(190) NOT NULL, created_at DATETIME(3) NOT NULL, ` +
        `available_at DATETIME(3) NOT NULL, delivered_at DATETIME(3) NULL, ` +
        `INDEX ${table}_claim_idx (queue_name, available_at, delivered_at, id)) ENGINE=InnoDB DEFAULT CHARSET=latin1`,
    );
    const t = transport({ tableName: table });
    const sent = await t.send(envelopeOf('latin1', 'café'));
    const body = serializer().encode(envelopeOf('latin1', 'café')).body;
    expect(await storedHex(table, idOf(sent))).toBe(Buffer.from(body, 'latin1').toString('hex').toUpperCase());
    const [row] = await db.query(`SELECT body FROM ${table} WHERE id = ?`, [idOf(sent)]);
    expect(row.body).toBe(body);
    const received = await receiveOne(t);
    expect(received.message).toEqual(new TestMessage('latin1', 'café'));
    await t.ack(received);
  });
});
