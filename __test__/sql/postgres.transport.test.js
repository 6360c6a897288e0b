'use strict';

// SqlTransport on PostgreSQL beyond the conformance suite: the shared SqlTransport cases
// (shared/sql-transport.suite.js), plus the PostgreSQL-only options. LISTEN/NOTIFY wake-ups
// are in postgres.listen.test.js.

const { Envelope, InvalidArgumentError, JsonSerializer, TransportConnectionError } = require('@schally/nestjs-messenger');
const { SqlTransport } = require('../..');
const { postgres, mysql, uniqueName } = require('../support/engines');
const { envelopeOf, idOf, receiveOne, serializer, settleWithin, throwsSync } = require('../support/transport-helpers');
const { sqlTransportSuite } = require('../shared/sql-transport.suite');

sqlTransportSuite(postgres);

describe('construction and options', () => {
  it('rejects the PostgreSQL-only options for a mysql DSN as InvalidArgumentError', () => {
    for (const extra of [{ useNotify: false }, { getNotifyTimeoutMs: 1000 }]) {
      const error = throwsSync(() => new SqlTransport({ dsn: mysql.dsn, ...extra }));
      expect(error).toBeInstanceOf(InvalidArgumentError);
    }
  });

  it.each([
    ['http://localhost/x'],
    ['redis://127.0.0.1:6379'],
    ['mongodb://localhost/test'],
  ])('rejects the unsupported scheme of %s as TransportConnectionError naming the supported ones', (dsn) => {
    const error = throwsSync(() => new SqlTransport({ dsn }));
    expect(error).toBeInstanceOf(TransportConnectionError);
    for (const scheme of ['postgres://', 'postgresql://', 'mysql://', 'mariadb://']) {
      expect(error.message).toContain(scheme);
    }
  });
});

describe('auto-setup on a table in use', () => {
  const admin = postgres.testAdmin();

  // CREATE INDEX IF NOT EXISTS locks the table before it finds the index there: a transport
  // starting next to an open transaction that wrote to the table (an outbox send inside a
  // long business transaction) would wait for it to end, and hold every write behind it.
  it('sends and receives at once while another transaction that wrote to the table is still open', async () => {
    const { Client } = require('pg');
    const tableName = uniqueName('busy');
    const queueName = uniqueName('q');
    const holder = new Client({ connectionString: postgres.dsn });
    const starter = new SqlTransport({ dsn: postgres.dsn, tableName, queueName: uniqueName('other') });
    let t;
    try {
      await starter.setup();
      await holder.connect();
      await holder.query('BEGIN');
      await holder.query(
        `INSERT INTO ${tableName} (body, headers, queue_name, available_at) VALUES ('{}', '{}', 'elsewhere', now())`,
      );

      t = new SqlTransport({ dsn: postgres.dsn, tableName, queueName, serializer: serializer() });
      const sent = await settleWithin(t.send(envelopeOf('beside-open-transaction')), 3000);
      expect(sent).not.toBe('timeout');
      expect(sent.error).toBeUndefined();
      const received = await receiveOne(t, 2000);
      expect(idOf(received)).toBe(idOf(sent.value));
      expect(await settleWithin(t.ack(received), 2000)).toEqual({ value: undefined });
    } finally {
      await holder.query('ROLLBACK').catch(() => {});
      await holder.end();
      await t?.close();
      await starter.close();
      await admin.query(`DROP TABLE IF EXISTS ${tableName}`);
    }
  });
});

describe('messages PostgreSQL text cannot hold', () => {
  it('refuses a message whose body contains NUL alone, as InvalidArgumentError; the sends beside it are stored', async () => {
    class Note {
      constructor(text) {
        this.text = text;
      }
    }
    const json = new JsonSerializer([Note]);
    // A serializer that writes the text raw, as a custom (non-JSON) one could.
    const raw = { encode: (envelope) => ({ body: envelope.message.text, headers: {} }), decode: (stored) => json.decode(stored) };
    const t = new SqlTransport({ dsn: postgres.dsn, queueName: uniqueName('nul'), serializer: raw });
    try {
      const results = await Promise.allSettled(
        ['before', 'with \u0000 inside', 'after'].map((text) => t.send(new Envelope(new Note(text)))),
      );
      expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
      expect(results[1].reason).toBeInstanceOf(InvalidArgumentError);
      expect(results[1].reason.message).toContain('NUL');
      expect(await t.getMessageCount()).toBe(2);
    } finally {
      await t.close();
    }
  });
});

describe('what a connection does where the DSN is silent', () => {
  class Blob {
    constructor(text) {
      this.text = text;
    }
  }
  const serializer = new JsonSerializer([Blob]);
  // About 120 KB of order lines: both methods compress it.
  const bigText = Array.from({ length: 3000 }, (_, i) => `{"line":${i},"sku":"item-${i % 50}","qty":${i % 7}}`).join(',');
  const admin = postgres.testAdmin();

  async function storedCompression(dsn) {
    const tableName = uniqueName('toast');
    const t = new SqlTransport({ dsn, tableName, serializer });
    try {
      await t.send(new Envelope(new Blob(bigText)));
      const rows = await admin.query(`SELECT pg_column_compression(body) AS method, body FROM ${tableName}`);
      expect(rows).toHaveLength(1);
      // Upstream's driver reads the value back as it was sent, whatever the method.
      expect(JSON.parse(rows[0].body).text).toBe(bigText);
      return rows[0].method;
    } finally {
      await t.close();
      await admin.query(`DROP TABLE IF EXISTS ${tableName}`);
    }
  }

  it('compresses a large body with lz4 (the server supports it), and keeps a method the DSN chose', async () => {
    expect(await storedCompression(postgres.dsn)).toBe('lz4');
    const chosen = postgres.dsnWith({ params: { options: '-c default_toast_compression=pglz' } });
    expect(await storedCompression(chosen)).toBe('pglz');
  });

  async function encrypted(params) {
    const application = uniqueName('tls');
    const t = new SqlTransport({ dsn: postgres.dsnWith({ params: { ...params, application_name: application } }), queueName: application });
    try {
      await t.getMessageCount();
      const rows = await admin.query(
        'SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE a.application_name = $1',
        [application],
      );
      expect(rows.length).toBeGreaterThan(0);
      return rows.every((r) => r.ssl === true);
    } finally {
      await t.close();
    }
  }

  // sslmode=no-verify: encrypted without verifying the server's certificate, as pg reads it
  // (the shared server's certificate is Debian's self-signed one; require would verify it).
  it('uses no TLS to a loopback host unless the DSN asks (sslmode=no-verify still encrypts)', async () => {
    const [{ ssl }] = await admin.query('SHOW ssl');
    if (ssl !== 'on') throw new Error('This test needs the server to accept TLS: set ssl = on in postgresql.conf (Debian ships a snakeoil certificate).');
    expect(await encrypted({})).toBe(false);
    expect(await encrypted({ sslmode: 'no-verify' })).toBe(true);
  });
});
