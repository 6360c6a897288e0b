'use strict';

// The engine registry: every engine this package runs on, in one place. For each, its DSN
// (overridable from the environment), how to start its server when it is down, a short-lived
// admin connection for set-up and inspection (never the code under test), and the facts that
// decide which cases, workloads and options apply to it. The tests (__test__/), the benchmark
// (bench/) and the demo (demo/) all read engines from here. It lives in bench/ because bench/
// and demo/ should not reach into __test__/; none of the three is shipped (package.json
// "files"). Drivers (pg, mysql2, ioredis, the sqlite3 CLI) are loaded on first use, so the demo
// on SQLite needs none of them.

const crypto = require('node:crypto');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const { spawn, spawnSync } = require('node:child_process');

/** A table, queue or key name no other run uses. */
function uniqueName(prefix) {
  return `${prefix}_${crypto.randomBytes(5).toString('hex')}`;
}

// ---------------------------------------------------------------------------
// PostgreSQL
// ---------------------------------------------------------------------------

const postgres = {
  name: 'postgres',
  label: 'PostgreSQL',
  kind: 'sql',
  dsn: process.env.POSTGRES_DSN ?? 'postgres://postgres@127.0.0.1:5432/test',
  defaultPort: 5432,
  start: 'pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start',
  /** A server process (not a file): network failures, authentication, other pools. */
  server: true,
  /** The upstream TypeScript transport exists for it (mixed fleets, side-by-side benchmark). */
  upstream: true,
  /** Idle consumers are woken by the database (LISTEN/NOTIFY), not only by polling. */
  pushWakeup: true,
  /** Competing claims skip each other's locked rows (FOR UPDATE SKIP LOCKED). */
  skipLocked: true,

  /** A short-lived admin connection per call on `dsn` (set-up and inspection only). */
  admin(dsn = postgres.dsn) {
    /**
     * Runs `use(client)` with a short-lived `pg` client, then ends it.
     * @template T
     * @param {(client: import('pg').Client) => Promise<T>} use
     */
    async function withClient(use) {
      const { Client } = require('pg');
      const client = new Client({ connectionString: dsn });
      await client.connect();
      try {
        return await use(client);
      } finally {
        await client.end();
      }
    }
    /** Runs one statement ($1, $2 … parameters); resolves the rows. */
    const query = (sql, params = []) => withClient(async (client) => (await client.query(sql, params)).rows);
    return {
      dsn,
      withClient,
      query,
      /** The queue's rows in id order: id (decimal text), queue_name, body, headers, delivered_at. */
      rows: (table, queueName) =>
        query(
          `SELECT id::text AS id, queue_name, body, headers, delivered_at FROM ${table} WHERE queue_name = $1 ORDER BY ${table}.id`,
          [queueName],
        ),
      /** The row with this id, as a list of none or one. */
      rowsById: (table, id) =>
        query(`SELECT id::text AS id, queue_name, body, headers, delivered_at FROM ${table} WHERE id = $1::bigint`, [id]),
      /** A due row in upstream's form, written behind the transports' backs (as another writer would). */
      insertRaw: async (table, queueName, body, headers) => {
        await query(`INSERT INTO ${table} (queue_name, body, headers, available_at) VALUES ($1, $2, $3, now())`, [
          queueName,
          body,
          headers,
        ]);
      },
      count: async (table, queueName) =>
        (await query(`SELECT count(*)::int AS n FROM ${table} WHERE queue_name = $1`, [queueName]))[0].n,
      deleteQueues: async (table, queueNames) => {
        if (queueNames.length > 0) await query(`DELETE FROM ${table} WHERE queue_name = ANY($1::text[])`, [queueNames]);
      },
      dropTable: async (table, { ifExists = false } = {}) => {
        await query(`DROP TABLE ${ifExists ? 'IF EXISTS ' : ''}${table}`);
      },
      tableExists: async (table) => (await query('SELECT to_regclass($1) IS NOT NULL AS present', [table]))[0].present,
    };
  },
};

// ---------------------------------------------------------------------------
// MySQL / MariaDB
// ---------------------------------------------------------------------------

const mysql = {
  name: 'mysql',
  label: 'MariaDB',
  kind: 'sql',
  dsn: process.env.MYSQL_DSN ?? 'mysql://root@127.0.0.1:3306/test',
  defaultPort: 3306,
  start: 'start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd',
  server: true,
  upstream: true,
  pushWakeup: false,
  skipLocked: true,

  /** A short-lived admin connection per call on `dsn` (set-up and inspection only). */
  admin(dsn = mysql.dsn) {
    /**
     * Runs `use(connection)` with a short-lived `mysql2/promise` connection, then ends it.
     * @template T
     * @param {(connection: import('mysql2/promise').Connection) => Promise<T>} use
     */
    async function withClient(use) {
      const driver = require('mysql2/promise');
      const connection = await driver.createConnection(dsn.replace(/^mariadb:/, 'mysql:'));
      try {
        return await use(connection);
      } finally {
        await connection.end();
      }
    }
    /** Runs one statement (? parameters); resolves the rows. */
    const query = (sql, params = []) => withClient(async (connection) => (await connection.query(sql, params))[0]);
    return {
      dsn,
      withClient,
      query,
      rows: (table, queueName) =>
        query(
          `SELECT CAST(id AS CHAR) AS id, queue_name, body, headers, delivered_at FROM ${table} WHERE queue_name = ? ORDER BY ${table}.id`,
          [queueName],
        ),
      rowsById: (table, id) =>
        query(`SELECT CAST(id AS CHAR) AS id, queue_name, body, headers, delivered_at FROM ${table} WHERE id = ?`, [id]),
      insertRaw: async (table, queueName, body, headers) => {
        await query(
          `INSERT INTO ${table} (queue_name, body, headers, created_at, available_at) VALUES (?, ?, ?, NOW(3), NOW(3))`,
          [queueName, body, headers],
        );
      },
      count: async (table, queueName) =>
        Number((await query(`SELECT COUNT(*) AS n FROM ${table} WHERE queue_name = ?`, [queueName]))[0].n),
      deleteQueues: async (table, queueNames) => {
        if (queueNames.length > 0) await query(`DELETE FROM ${table} WHERE queue_name IN (?)`, [queueNames]);
      },
      dropTable: async (table, { ifExists = false } = {}) => {
        await query(`DROP TABLE ${ifExists ? 'IF EXISTS ' : ''}${table}`);
      },
      tableExists: async (table) =>
        Number(
          (
            await query(
              'SELECT COUNT(*) AS n FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?',
              [table],
            )
          )[0].n,
        ) > 0,
    };
  },
};

// ---------------------------------------------------------------------------
// SQLite: no server; raw access goes through the sqlite3 CLI, a process of its own, as
// another writer would be.
// ---------------------------------------------------------------------------

const SQLITE3 = 'sqlite3';
let sqliteCli;

/** An SQL literal (the CLI takes no bound parameters). */
function lit(value) {
  if (value === null) return 'NULL';
  if (typeof value === 'number') return String(value);
  return `'${String(value).replace(/'/g, "''")}'`;
}

/** The file of a sqlite:// DSN (or the path itself). */
function sqlitePath(dsnOrPath) {
  return dsnOrPath.startsWith('sqlite://') ? dsnOrPath.slice('sqlite://'.length) : dsnOrPath;
}

const sqlite = {
  name: 'sqlite',
  label: 'SQLite',
  kind: 'sql',
  /** The embedded default has no fixed DSN: each run makes a file of its own (temporaryDsn). */
  dsn: process.env.SQLITE_DSN,
  start: 'nothing to start (the embedded engine); raw access needs the sqlite3 CLI: apt-get install -y sqlite3',
  server: false,
  upstream: false,
  pushWakeup: false,
  skipLocked: false,

  /** A fresh file DSN in a new temporary directory. */
  temporaryDsn(prefix = 'nmn') {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), `${prefix}-`));
    return `sqlite://${path.join(dir, 'queue.db')}`;
  },
  /** Whether the sqlite3 CLI is installed (raw access needs it). */
  hasCli() {
    sqliteCli ??= spawnSync(SQLITE3, ['-version'], { encoding: 'utf8' }).status === 0;
    return sqliteCli;
  },
  /** Fails (never skips) with an install hint when the CLI is missing. */
  requireCli() {
    if (!sqlite.hasCli()) throw new Error('This needs the sqlite3 CLI: apt-get install -y sqlite3');
  },
  /** `strftime` of SQLite's clock in the stored form (UTC text, milliseconds). */
  NOW: "strftime('%Y-%m-%d %H:%M:%f', 'now')",
  lit,
  /** The sqlite3 CLI on the file of `dsn` (a DSN or a path), one process per call. */
  admin(dsn = sqlite.dsn) {
    const file = sqlitePath(dsn);
    /**
     * Runs SQL with the sqlite3 CLI (a separate connection, as another process would have);
     * resolves the rows of a SELECT (none for other statements).
     */
    function query(statements) {
      sqlite.requireCli();
      return new Promise((resolve, reject) => {
        const child = spawn(SQLITE3, ['-bail', '-cmd', '.timeout 5000', '-json', file], { stdio: ['pipe', 'pipe', 'pipe'] });
        let out = '';
        let err = '';
        child.stdout.setEncoding('utf8').on('data', (chunk) => (out += chunk));
        child.stderr.setEncoding('utf8').on('data', (chunk) => (err += chunk));
        child.on('error', reject);
        child.on('close', (code) => {
          if (code !== 0) reject(new Error(`sqlite3 exited with ${code}: ${err}`));
          else resolve(out.trim() === '' ? [] : JSON.parse(out));
        });
        child.stdin.end(statements);
      });
    }
    return {
      dsn,
      file,
      query,
      rows: (table, queueName) =>
        query(
          `SELECT CAST(id AS TEXT) AS id, queue_name, body, headers, delivered_at FROM ${table}
            WHERE queue_name = ${lit(queueName)} ORDER BY ${table}.id;`,
        ),
      rowsById: (table, id) =>
        query(`SELECT CAST(id AS TEXT) AS id, queue_name, body, headers, delivered_at FROM ${table} WHERE id = ${Number(id)};`),
      insertRaw: async (table, queueName, body, headers) => {
        await query(
          `INSERT INTO ${table} (queue_name, body, headers, created_at, available_at)
           VALUES (${lit(queueName)}, ${lit(body)}, ${lit(headers)}, ${sqlite.NOW}, ${sqlite.NOW});`,
        );
      },
      count: async (table, queueName) =>
        (await query(`SELECT COUNT(*) AS n FROM ${table} WHERE queue_name = ${lit(queueName)};`))[0].n,
      deleteQueues: async (table, queueNames) => {
        if (queueNames.length > 0) await query(`DELETE FROM ${table} WHERE queue_name IN (${queueNames.map(lit).join(', ')});`);
      },
      dropTable: async (table, { ifExists = false } = {}) => {
        await query(`DROP TABLE ${ifExists ? 'IF EXISTS ' : ''}${table};`);
      },
      tableExists: async (table) =>
        (await query(`SELECT COUNT(*) AS n FROM sqlite_master WHERE type = 'table' AND name = ${lit(table)};`))[0].n > 0,
      /**
       * Another process (the sqlite3 CLI) holding the file's write lock in an open transaction;
       * `release(sql)` runs `sql` in that transaction, then commits.
       */
      async holdWriteLock() {
        sqlite.requireCli();
        const child = spawn(SQLITE3, [file], { stdio: ['pipe', 'pipe', 'pipe'] });
        let out = '';
        child.stdout.setEncoding('utf8').on('data', (chunk) => (out += chunk));
        child.stderr.setEncoding('utf8').on('data', (chunk) => (out += chunk));
        const exited = new Promise((resolve) => child.once('close', resolve));
        child.stdin.write(".timeout 5000\nBEGIN IMMEDIATE;\nSELECT 'locked';\n");
        const deadline = Date.now() + 5000;
        while (!out.includes('locked')) {
          if (Date.now() > deadline) throw new Error(`sqlite3 did not take the lock: ${out}`);
          await new Promise((resolve) => setTimeout(resolve, 5));
        }
        return {
          async release(sql = '') {
            child.stdin.end(`${sql}COMMIT;\n`);
            await exited;
          },
        };
      },
    };
  },
};

// ---------------------------------------------------------------------------
// Redis
// ---------------------------------------------------------------------------

const redis = {
  name: 'redis',
  label: 'Redis',
  kind: 'redis',
  dsn: process.env.REDIS_DSN ?? 'redis://127.0.0.1:6379',
  defaultPort: 6379,
  start:
    'redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log',
  server: true,
  upstream: true,
  /** Idle consumers block in XREADGROUP … BLOCK and wake on the entry. */
  pushWakeup: true,
  skipLocked: false,

  /** A stream key no other run uses (hash-tagged, so it also works on a cluster). */
  uniqueStream(prefix = 'test') {
    return `messenger:{${prefix}-${crypto.randomBytes(5).toString('hex')}}`;
  },
  /** A short-lived ioredis client per call on `dsn` (set-up and inspection only). */
  admin(dsn = redis.dsn) {
    /**
     * Runs `use(client)` with a short-lived ioredis client, then disconnects it.
     * @template T
     * @param {(client: import('ioredis').Redis) => Promise<T>} use
     */
    async function withClient(use) {
      const { Redis } = require('ioredis');
      const client = new Redis(dsn, { lazyConnect: true, maxRetriesPerRequest: 1 });
      await client.connect();
      try {
        return await use(client);
      } finally {
        client.disconnect();
      }
    }
    return {
      dsn,
      withClient,
      /** XRANGE of the whole stream as [{ id, fields: [f, v, …] }]. */
      entries: async (stream) =>
        (await withClient((client) => client.xrange(stream, '-', '+'))).map(([id, fields]) => ({ id, fields })),
      /** Appends an entry with exactly these fields (a foreign or poison entry, or upstream's form). */
      xadd: (stream, fields) => withClient((client) => client.xadd(stream, '*', ...fields)),
      del: async (keys) => {
        if (keys.length > 0) await withClient((client) => client.del(...keys));
      },
    };
  },
};

// ---------------------------------------------------------------------------
// The registry
// ---------------------------------------------------------------------------

/** Every engine, in the order reports list them. */
const ENGINES = { postgres, mysql, redis, sqlite };

/** The engine a DSN belongs to, by its scheme (undefined for an unsupported one). */
function engineOfDsn(dsn) {
  const scheme = /^([a-z]+):/.exec(String(dsn))?.[1];
  return {
    postgres,
    postgresql: postgres,
    mysql,
    mariadb: mysql,
    sqlite,
    redis,
    rediss: redis,
  }[scheme];
}

/**
 * Fails with a message that says how to start the engine's server when its port is closed
 * (resolves at once for an engine without a server).
 * @param {string | { name: string }} engine
 */
async function requireServer(engine, dsn) {
  const e = typeof engine === 'string' ? ENGINES[engine] : engine;
  if (!e.server) return;
  const url = new URL(dsn ?? e.dsn);
  const port = Number(url.port || e.defaultPort);
  const host = url.hostname || '127.0.0.1';
  await new Promise((resolve, reject) => {
    const socket = net.connect({ host, port });
    socket.setTimeout(2000);
    const fail = (why) => {
      socket.destroy();
      reject(new Error(`${e.label} is not reachable at ${host}:${port} (${why}). Start it with: ${e.start}`));
    };
    socket.once('connect', () => {
      socket.end();
      resolve();
    });
    socket.once('timeout', () => fail('timeout'));
    socket.once('error', (error) => fail(error.code ?? error.message));
  });
}

module.exports = { ENGINES, postgres, mysql, sqlite, redis, engineOfDsn, requireServer, uniqueName };
