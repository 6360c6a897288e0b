'use strict';

// The table a SQL test file works in, with its life cycle: created before the file; after each
// test its consumers stopped, its transports closed and its queues' rows deleted; after the
// file the table (and any other table the file made) dropped, or the private SQLite file
// removed whole.

const { uniqueName } = require('./engines');
const { closeAll, startConsumer } = require('./transport-helpers');

/**
 * @param {object} engine a SQL engine adapter of support/engines
 * @param {{ dsn: string, prefix?: string }} options the file's database and its table's prefix
 */
function sqlTable(engine, { dsn, prefix = 'nmn_tr' }) {
  const db = engine.testAdmin(dsn);
  const TABLE = uniqueName(prefix);
  const tables = [TABLE];
  const transports = [];
  const queues = [];
  const consumers = [];

  beforeAll(async () => {
    await engine.requireServer();
    const t = new engine.Transport({ dsn, tableName: TABLE });
    await t.setup();
    await t.close();
  });

  // Longer than closeAll's own 5 s bound: a close that a failed test keeps waiting (a delivery
  // it never settled) is given up on, and the queues are still cleaned, within the hook.
  afterEach(async () => {
    for (const consumer of consumers.splice(0)) await consumer.stop();
    await closeAll(transports);
    const names = queues.splice(0);
    if (engine.rawAccess()) await db.deleteQueues(TABLE, names);
  }, 15000);

  afterAll(async () => {
    if (engine.server) {
      for (const table of tables) await db.dropTable(table, { ifExists: true });
    } else {
      engine.removeRunDsn(dsn);
    }
  });

  return {
    TABLE,
    db,
    queues,
    /** Closes `t` after the test. */
    track(t) {
      transports.push(t);
      return t;
    },
    /** A queue name of its own, its rows deleted after the test. */
    queue(prefix = 'q') {
      const name = uniqueName(prefix);
      queues.push(name);
      return name;
    },
    /** A table name of its own (dropped after the file on a server; a private file goes whole). */
    freshTable(prefix) {
      const name = uniqueName(prefix);
      tables.push(name);
      return name;
    },
    /** Drops a table of this name after the file too. */
    dropAfterwards(table) {
      tables.push(table);
    },
    /** A background consumer recording arrivals, stopped (its deliveries acked) after the test. */
    consume(t) {
      const consumer = startConsumer(t);
      consumers.push(consumer);
      return consumer;
    },
  };
}

module.exports = { sqlTable };
