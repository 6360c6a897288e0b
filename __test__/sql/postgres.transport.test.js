'use strict';

// SqlTransport on PostgreSQL beyond the conformance suite: the shared SqlTransport cases
// (shared/sql-transport.suite.js), plus the PostgreSQL-only options. LISTEN/NOTIFY wake-ups
// are in postgres.listen.test.js.

const { InvalidArgumentError, TransportConnectionError } = require('@schally/nestjs-messenger');
const { SqlTransport } = require('../..');
const { postgres, mysql } = require('../support/engines');
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
