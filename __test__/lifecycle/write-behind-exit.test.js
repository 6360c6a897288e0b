'use strict';

// Write-behind acks outlive nothing: a process that acks and then simply runs out of work (no
// close()) stays alive until its recorded deletes are written, as it would for a pending socket
// write, and then exits by itself. Each engine's deletes are held back by a lock the test takes
// (a table lock, an exclusive SQLite transaction, a Redis CLIENT PAUSE on a private server)
// while the consumer acks and returns: the process must still be there when the lock goes, and
// every acked message must be gone afterwards.

const path = require('node:path');
const { fork } = require('node:child_process');
const { postgres, mysql, sqlite, redis, requireServer, uniqueName } = require('../../bench/engines');
const { startRedisServer } = require('../support/redis-server');
const { settleWithin } = require('../faults/support/account');

const CONSUMER = path.join(__dirname, 'support', 'ack-then-end.js');
const COUNT = 20;
/** How long the test keeps the deletes blocked after the consumer acked and returned. */
const HELD_MS = 1500;

/** Per engine: where the consumer works, and a way to block its deletes and to count rows. */
const ENGINES = [
  {
    name: 'postgres',
    async prepare() {
      await requireServer(postgres);
      const table = uniqueName('nmn_wbexit');
      const admin = postgres.admin();
      return {
        dsn: postgres.dsn,
        target: { tableName: table, queueName: 'q' },
        async blockDeletes() {
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
      const table = uniqueName('nmn_wbexit');
      const admin = mysql.admin();
      return {
        dsn: mysql.dsn,
        target: { tableName: table, queueName: 'q' },
        async blockDeletes() {
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
      const dsn = sqlite.temporaryDsn('nmn-wbexit');
      const file = dsn.slice('sqlite://'.length);
      const Database = require('better-sqlite3');
      return {
        dsn,
        target: { tableName: 'messenger_messages', queueName: 'q' },
        async blockDeletes() {
          const db = new Database(file);
          db.exec('BEGIN EXCLUSIVE');
          return async () => {
            db.exec('COMMIT');
            db.close();
          };
        },
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
      const stream = redis.uniqueStream('wbexit');
      return {
        dsn,
        target: { stream },
        async blockDeletes() {
          await admin.withClient((client) => client.call('CLIENT', 'PAUSE', String(HELD_MS * 4), 'WRITE'));
          return () => admin.withClient((client) => client.call('CLIENT', 'UNPAUSE'));
        },
        remaining: () => admin.withClient((client) => client.xlen(stream)),
        cleanup: () => server.stop(),
      };
    },
  },
];

describe.each(ENGINES)('$name: write-behind acks of a process that ends without close()', (engine) => {
  it('keeps the process alive until the acks are written, then it exits by itself', async () => {
    const setup = await engine.prepare();
    const child = fork(CONSUMER, [], {
      execArgv: [],
      silent: true,
      env: {
        ...process.env,
        KIND: engine.name === 'redis' ? 'redis' : 'sql',
        DSN: setup.dsn,
        TARGET: JSON.stringify(setup.target),
        COUNT: String(COUNT),
      },
    });
    let output = '';
    child.stdout.on('data', (chunk) => (output += chunk));
    child.stderr.on('data', (chunk) => (output += chunk));
    const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve(signal ?? code)));
    let unblock;
    try {
      const consumed = await settleWithin(new Promise((resolve) => child.once('message', resolve)), 20_000);
      if (consumed.timeout) throw new Error(`the consumer did not take its messages:\n${output}`);
      expect(consumed.value).toEqual({ consumed: COUNT });

      unblock = await setup.blockDeletes();
      child.send('ack');
      const early = await settleWithin(exited, HELD_MS);
      await unblock();
      unblock = undefined;
      const exit = await settleWithin(exited, 15_000);
      if (exit.timeout) child.kill('SIGKILL');

      expect({
        exitedWhileAcksPending: !early.timeout,
        exit: exit.timeout ? 'still running' : exit.value,
        remaining: await setup.remaining(),
      }).toEqual({ exitedWhileAcksPending: false, exit: 0, remaining: 0 });
    } catch (error) {
      error.message += `\nconsumer output:\n${output}`;
      throw error;
    } finally {
      if (unblock) await unblock().catch(() => {});
      child.kill('SIGKILL');
      await setup.cleanup();
    }
  }, 60_000);
});
