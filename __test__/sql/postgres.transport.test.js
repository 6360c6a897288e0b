'use strict';

// SqlTransport on PostgreSQL beyond the conformance suite: the shared SqlTransport cases
// (shared/sql-transport.suite.js), plus the PostgreSQL-only options. LISTEN/NOTIFY wake-ups
// are in postgres.listen.test.js.

const { Envelope, InvalidArgumentError, JsonSerializer, TransportConnectionError } = require('@schally/nestjs-messenger');
const { SqlTransport } = require('../..');
const { postgres, mysql, uniqueName } = require('../support/engines');
const { throwsSync } = require('../support/transport-helpers');
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
