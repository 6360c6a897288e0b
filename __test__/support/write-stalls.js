'use strict';

// Each engine with a way for a test to stall its writes on demand, without touching the code
// under test: a table lock (PostgreSQL, MariaDB), an exclusive SQLite transaction held by
// another process, a Redis CLIENT PAUSE WRITE on a private server. `prepare()` gives the DSN
// and target to use, `stallWrites()` (resolving to the function that ends the stall),
// `remaining()` (messages left in the queue) and `cleanup()`.

const { postgres, mysql, sqlite, redis, requireServer, uniqueName } = require('../../bench/engines');
const { startRedisServer } = require('./redis-server');

/** The longest a Redis stall lasts if nobody ends it (CLIENT PAUSE needs a bound). */
const REDIS_PAUSE_MS = 6000;

/**
 * Holds an exclusive SQLite transaction on `file` in another process until the returned
 * function is called. Not in this one: SQLite's locks are POSIX advisory locks, which do not
 * conflict between two copies of SQLite in one process (better-sqlite3's and the addon's), so a
 * lock taken here would stall nothing.
 */
async function holdExclusiveElsewhere(file) {
  const { spawn } = require('node:child_process');
  const script = `
    const Database = require(${JSON.stringify(require.resolve('better-sqlite3'))});
    const db = new Database(process.argv[1]);
    db.exec('BEGIN EXCLUSIVE');
    process.stdout.write('locked\\n');
    process.stdin.once('data', () => { db.exec('COMMIT'); db.close(); process.exit(0); });
  `;
  const child = spawn(process.execPath, ['-e', script, file], { stdio: ['pipe', 'pipe', 'inherit'] });
  await new Promise((resolve, reject) => {
    child.stdout.once('data', resolve);
    child.once('error', reject);
    child.once('exit', (code) => reject(new Error(`the SQLite lock holder exited (${code}) before locking`)));
  });
  return () =>
    new Promise((resolve) => {
      child.once('exit', resolve);
      child.stdin.end('go\n');
    });
}

const WRITE_STALLS = [
  {
    name: 'postgres',
    async prepare() {
      await requireServer(postgres);
      const table = uniqueName('nmn_stall');
      const admin = postgres.admin();
      return {
        dsn: postgres.dsn,
        target: { tableName: table, queueName: 'q' },
        async stallWrites() {
          const { Client } = require('pg');
          const client = new Client({ connectionString: postgres.dsn });
          await client.connect();
          await client.query('BEGIN');
          await client.query(`LOCK TABLE ${table} IN SHARE ROW EXCLUSIVE MODE`);
          return async () => {
            await client.query('COMMIT');
            await client.end();
          };
        },
        remaining: () => admin.count(table, 'q'),
        cleanup: () => admin.dropTable(table, { ifExists: true }),
      };
    },
  },
  {
    name: 'mysql',
    async prepare() {
      await requireServer(mysql);
      const table = uniqueName('nmn_stall');
      const admin = mysql.admin();
      return {
        dsn: mysql.dsn,
        target: { tableName: table, queueName: 'q' },
        async stallWrites() {
          const driver = require('mysql2/promise');
          const connection = await driver.createConnection(mysql.dsn);
          await connection.query(`LOCK TABLES ${table} WRITE`);
          return async () => {
            await connection.query('UNLOCK TABLES');
            await connection.end();
          };
        },
        remaining: () => admin.count(table, 'q'),
        cleanup: () => admin.dropTable(table, { ifExists: true }),
      };
    },
  },
  {
    name: 'sqlite',
    async prepare() {
      const dsn = sqlite.temporaryDsn('nmn-stall');
      const file = dsn.slice('sqlite://'.length);
      const Database = require('better-sqlite3');
      return {
        dsn,
        target: { tableName: 'messenger_messages', queueName: 'q' },
        stallWrites: () => holdExclusiveElsewhere(file),
        async remaining() {
          const db = new Database(file, { readonly: true });
          try {
            return db.prepare("SELECT count(*) AS n FROM messenger_messages WHERE queue_name = 'q'").get().n;
          } finally {
            db.close();
          }
        },
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
