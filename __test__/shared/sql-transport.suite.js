'use strict';

// SqlTransport beyond the conformance suite, written once and run on every SQL engine by
// sql/<engine>.transport.test.js: options, typed errors, schema life cycle (autoSetup,
// dropped tables), poison rows, storage format, batched and concurrent sends, queue isolation,
// FIFO, crash recovery, prefetch release, fenced settles, delayed redelivery, list/find/count, idle waits,
// get()/close(). The engine adapter (support/engines/) supplies its DSNs, raw row access in its
// own SQL and the facts a case depends on (pushWakeup, server, skipLocked, …); a case that
// holds on some engines only asks for the fact, never for the engine's name. Engine-only cases
// (LISTEN, max_allowed_packet, DSN forms, busy files …) stay in the engine's own files. The
// cases live in sql-transport/, one file per concern; this file builds what they share.

const { SqlTransport } = require('../..');
const { uniqueName } = require('../support/engines');
const { sqlTable } = require('../support/sql-table');
const { pollUntil, serializer } = require('../support/transport-helpers');
const { optionsCases } = require('./sql-transport/options.cases');
const { schemaCases } = require('./sql-transport/schema.cases');
const { storageCases } = require('./sql-transport/storage.cases');
const { deliveryCases } = require('./sql-transport/delivery.cases');
const { fencingCases } = require('./sql-transport/fencing.cases');

/**
 * Registers the shared SqlTransport cases for one engine and returns what its entry file
 * needs for its engine-only cases.
 * @param {ReturnType<typeof import('../support/engines').postgres>} engine a SQL engine adapter
 */
function sqlTransportSuite(engine) {
  /** The database of this file: the shared server database, or a private SQLite file. */
  const DSN = engine.runDsn('nmn-str');
  /** The same database under another DSN string: a pool of its own, whose sends wake nobody here. */
  const OTHER_DSN = engine.otherDsn(DSN);
  /** The table most tests share (each on its own queue); DDL tests use their own tables. */
  const { TABLE, db, queues, track, freshTable, dropAfterwards, consume } = sqlTable(engine, { dsn: DSN });
  /** Options that keep an idle consumer idle for a minute (no poll, no notify timeout). */
  const LONG_IDLE = { pollIntervalMs: 60000, ...(engine.pushWakeup ? { getNotifyTimeoutMs: 60000 } : {}) };
  const titles = (key, fallback) => engine.titles?.[key] ?? fallback;


  /** A transport on DSN and TABLE (unless overridden), closed after the test. */
  function transport(options = {}) {
    const queueName = options.queueName ?? uniqueName('q');
    queues.push(queueName);
    return track(new SqlTransport({ dsn: DSN, tableName: TABLE, serializer: serializer(), ...options, queueName }));
  }

  function lastQueue() {
    return queues[queues.length - 1];
  }

  /**
   * The queue's rows once there are `count` of them, or as they are after 2 s: acks are
   * written behind (recorded at once, deleted by the next flush), so a raw look at the table
   * right after an ack polls.
   */
  async function settledRows(table, queueName, count) {
    let last;
    await pollUntil(
      async () => {
        last = await db.rows(table, queueName);
        return last.length === count;
      },
      { timeoutMs: 2000 },
    );
    return last;
  }

  const ctx = {
    engine,
    DSN,
    OTHER_DSN,
    TABLE,
    db,
    queues,
    track,
    freshTable,
    dropAfterwards,
    consume,
    LONG_IDLE,
    titles,
    transport,
    lastQueue,
    settledRows,
  };
  optionsCases(ctx);
  schemaCases(ctx);
  storageCases(ctx);
  deliveryCases(ctx);
  fencingCases(ctx);

  return { DSN, OTHER_DSN, TABLE, db, transport, lastQueue, freshTable, consume, settledRows };
}

module.exports = { sqlTransportSuite };
