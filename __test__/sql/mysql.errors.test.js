'use strict';

// SqlTransport on MySQL/MariaDB when the server is not there or refuses us, and processes that
// exit by themselves after close(): the shared cases (shared/errors.suite.js) with a user of
// their own, plus the mariadb:// scheme, a database the user may not use, and server
// connections given back by close() (visible in the processlist by user).

const { TransportConnectionError } = require('@schally/nestjs-messenger');
const { mysql, uniqueName } = require('../support/engines');
const { serializer, envelopeOf, pollUntil, failure, expectNoSecret } = require('../support/transport-helpers');
const { errorsSuite } = require('../shared/errors.suite');
const { outcomesSuite } = require('../shared/outcomes.suite');

const { make, track, SECRET, unreachable } = errorsSuite(mysql);
outcomesSuite(mysql);

describe('unreachable server', () => {
  it('fails the same way on a mariadb:// DSN', async () => {
    const t = make(mysql.mariadb(unreachable().dsn));
    const { error, elapsedMs } = await failure(() => t.send(envelopeOf('x')));
    expect(error).toBeInstanceOf(TransportConnectionError);
    expect(elapsedMs).toBeLessThan(6000);
    expectNoSecret(error, SECRET);
  }, 10000);
});

describe('password authentication', () => {
  const RIGHT = 'rightpass';
  let auth;

  beforeAll(async () => {
    await mysql.requireServer();
    auth = await mysql.auth.start(RIGHT);
  });

  afterAll(async () => {
    await auth?.stop();
  });

  it('fails with TransportConnectionError for a database the user may not use', async () => {
    const t = make(auth.dsn(RIGHT, 'mysql'), { serializer: serializer() });
    const { error, elapsedMs } = await failure(() => t.send(envelopeOf('x')));
    expect(error).toBeInstanceOf(TransportConnectionError);
    expect(elapsedMs).toBeLessThan(6000);
    expect(error.message).toMatch(/access denied/i);
    expectNoSecret(error, RIGHT);
  });

  it.each([1, 2, 3])('closing all %i transports of a DSN gives back every server connection', async (n) => {
    const admin = mysql.admin();
    const connections = async () => {
      const [row] = await admin.query('SELECT COUNT(*) AS n FROM information_schema.processlist WHERE USER = ?', [
        auth.user,
      ]);
      return Number(row.n);
    };
    // Connections of an earlier case are gone first (or that case failed already).
    await pollUntil(async () => (await connections()) === 0, { timeoutMs: 3000 });
    const table = uniqueName('nmn_mrel');
    try {
      const group = Array.from({ length: n }, () =>
        track(new mysql.Transport({ dsn: auth.dsn(RIGHT), tableName: table, queueName: 'q', serializer: serializer() })),
      );
      await Promise.all(group.flatMap((t, i) => [t.send(envelopeOf(`r-${i}`)), t.getMessageCount()]));
      expect(await connections()).toBeGreaterThan(0);
      for (const t of group) await t.close();
      await pollUntil(async () => (await connections()) === 0, { timeoutMs: 3000 });
      expect([n, await connections()]).toEqual([n, 0]);
    } finally {
      await admin.dropTable(table, { ifExists: true });
    }
  }, 15000);
});
