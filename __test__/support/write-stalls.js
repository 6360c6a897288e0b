'use strict';

// Each engine with a way for a test to stall its writes on demand, without touching the code
// under test: a table lock (PostgreSQL, MariaDB), a write transaction held open by the sqlite3
// CLI (another process: SQLite's locks are POSIX advisory locks, which do not conflict between
// two copies of SQLite in one process), a Redis CLIENT PAUSE WRITE on a private server.
// `prepare()` gives the DSN and target to use, `stallWrites()` (resolving to the function that
// ends the stall), `remaining()` (messages left in the queue) and `cleanup()`. Nothing here
// loads a native module of its own, so the helpers run on any Node.js that loads the addon.

const { postgres, mysql, sqlite, redis, requireServer, uniqueName } = require('../../bench/engines');
const { startRedisServer } = require('./redis-server');

/** The longest a Redis stall lasts if nobody ends it (CLIENT PAUSE needs a bound). */
const REDIS_PAUSE_MS = 6000;

/**
 * The stall of a server engine (PostgreSQL, MariaDB) on a table of its own: `lockTable(table)`
 * takes a lock that stalls every write to it and resolves to the function that ends the lock.
 */
function tableLockStall(name, engine, lockTable) {
  return {
    name,
    async prepare() {
      await requireServer(engine);
      const table = uniqueName('nmn_stall');
      const admin = engine.admin();
      return {
        dsn: engine.dsn,
        target: { tableName: table, queueName: 'q' },
        stallWrites: () => lockTable(table),
        remaining: () => admin.count(table, 'q'),
        cleanup: () => admin.dropTable(table, { ifExists: true }),
      };
    },
  };
}

const WRITE_STALLS = [
  tableLockStall('postgres', postgres, async (table) => {
    const { Client } = require('pg');
    const client = new Client({ connectionString: postgres.dsn });
    await client.connect();
    await client.query('BEGIN');
    await client.query(`LOCK TABLE ${table} IN SHARE ROW EXCLUSIVE MODE`);
    return async () => {
      await client.query('COMMIT');
      await client.end();
    };
  }),
  tableLockStall('mysql', mysql, async (table) => {
    const driver = require('mysql2/promise');
    const connection = await driver.createConnection(mysql.dsn);
    await connection.query(`LOCK TABLES ${table} WRITE`);
    return async () => {
      await connection.query('UNLOCK TABLES');
      await connection.end();
    };
  }),
  {
    name: 'sqlite',
    async prepare() {
      const dsn = sqlite.temporaryDsn('nmn-stall');
      const admin = sqlite.admin(dsn);
      const table = 'messenger_messages';
      return {
        dsn,
        target: { tableName: table, queueName: 'q' },
        async stallWrites() {
          // The file is in WAL mode (the addon sets it): the held write transaction stalls every
          // other writer and no reader.
          const lock = await admin.holdWriteLock();
          return () => lock.release();
        },
        remaining: () => admin.count(table, 'q'),
        cleanup: async () => {},
      };
    },
  },
  {
    name: 'redis',
    async prepare() {
      const server = await startRedisServer();
      const dsn = `redis://127.0.0.1:${server.port}`;
      const admin = redis.admin(dsn);
      const stream = redis.uniqueStream('stall');
      return {
        dsn,
        target: { stream },
        async stallWrites() {
          await admin.withClient((client) => client.call('CLIENT', 'PAUSE', String(REDIS_PAUSE_MS), 'WRITE'));
          return () => admin.withClient((client) => client.call('CLIENT', 'UNPAUSE'));
        },
        remaining: () => admin.withClient((client) => client.xlen(stream)),
        cleanup: () => server.stop(),
      };
    },
  },
];

module.exports = { WRITE_STALLS };
