'use strict';

// Write-behind acks that cannot be written: the failure is visible while it lasts (stats()
// `ackWriteFailingMs`, and a logger error once it outlasts the lease, when those messages are
// claimable again), close() says how many acks it could not write, and nothing is written
// after close() (the flusher stops with it instead of retrying against a closed pool).
// The deletes fail because the consumer's role loses its DELETE right after taking the
// messages; it gets it back after close().

const { SqlTransport } = require('../..');
const { postgres, requireServer, uniqueName } = require('../../bench/engines');
const { postgres: postgresTests } = require('../support/engines');
const { sleep } = require('../faults/support/account');
const { jobSerializer, sendThenTakeAll } = require('../support/jobs');

const COUNT = 20;

describe('PostgreSQL: write-behind acks that cannot be written', () => {
  it('are shown while failing, counted by close(), and not written after it', async () => {
    await requireServer(postgres);
    const table = uniqueName('nmn_unwritten');
    const admin = postgresTests.testAdmin();
    const owner = new SqlTransport({ dsn: postgres.dsn, tableName: table, queueName: 'q' });
    await owner.setup();
    await owner.close();
    const account = await admin.accountForTable(table);
    const lines = [];
    const logger = {
      log: (message) => lines.push(['log', message]),
      warn: (message) => lines.push(['warn', message]),
      error: (message) => lines.push(['error', message]),
    };
    const transport = new SqlTransport({
      dsn: account.dsn,
      tableName: table,
      queueName: 'q',
      serializer: jobSerializer(),
      redeliverTimeoutSeconds: 1,
      logger,
    });
    try {
      const taken = await sendThenTakeAll(transport, COUNT);
      await admin.query(`REVOKE DELETE ON ${table} FROM ${new URL(account.dsn).username}`);
      for (const envelope of taken) await transport.ack(envelope);
      // Past the 1 s lease the failure must have been reported as such.
      await sleep(2500);
      const failingMs = transport.stats().ackWriteFailingMs;
      let closeOutcome;
      const closed = await transport.close().then(
        () => 'closed',
        (error) => {
          closeOutcome = error.outcome;
          return error.message;
        },
      );
      await admin.query(`GRANT DELETE ON ${table} TO ${new URL(account.dsn).username}`);
      await sleep(1500);
      expect({
        failingAtLeast2s: failingMs >= 2000,
        toldLeaseOutlasted: lines.some(([level, message]) => level === 'error' && /longer than the lease/.test(message)),
        closeSaysHowMany: new RegExp(`^${COUNT} acknowledgement\\(s\\) could not be written before close`).test(closed),
        closeOutcome,
        remainingAfterClose: await admin.count(table, 'q'),
      }).toEqual({
        failingAtLeast2s: true,
        toldLeaseOutlasted: true,
        closeSaysHowMany: true,
        closeOutcome: 'unknown',
        remainingAfterClose: COUNT,
      });
    } finally {
      await transport.close().catch(() => {});
      await account.drop();
      await admin.dropTable(table, { ifExists: true });
    }
  }, 30_000);
});
