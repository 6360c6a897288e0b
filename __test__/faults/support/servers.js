'use strict';

// Private servers for the fault tests, on free loopback ports picked at run time, in fresh
// temporary directories: a PostgreSQL cluster (initdb/pg_ctl, trust auth, run as the
// `postgres` OS user), a MariaDB on its own datadir (run as the `mysql` OS user), and
// redis-server with an fsync-always AOF. Each can be stopped, restarted (with a chosen time
// down) or crashed, and has an admin helper that kills every other client connection.
// PostgreSQL and MariaDB can also serve TLS with a given certificate (option `ssl`).
// They never touch the shared services on 5432/3306/6379. Every process started here is
// stopped by the test's afterAll and, whatever happens, killed when the jest worker exits.

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { execFile, spawn, spawnSync } = require('node:child_process');
const { waitForPort, startRedisServer, withIoredis } = require('../../support/redis-server');
const { freePort } = require('../../support/ports');

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;

// ---------------------------------------------------------------------------------------------
// Cleanup on exit: synchronous, so it also runs when jest tears the worker down.
// ---------------------------------------------------------------------------------------------

const exitHooks = new Set();
process.once('exit', () => {
  for (const hook of exitHooks) {
    try {
      hook();
    } catch {
      // best effort
    }
  }
});

function tempDir(prefix, owner) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  fs.chmodSync(dir, 0o700);
  if (isRoot && owner) {
    const result = spawnSync('chown', ['-R', `${owner}:${owner}`, dir], { encoding: 'utf8' });
    if (result.status !== 0) throw new Error(`chown ${dir} to ${owner} failed: ${result.stderr}`);
  }
  return dir;
}

/** Runs a command as `user` when we are root (servers refuse to run as root). */
function runAs(user, command, args, { timeout = 60_000 } = {}) {
  const [file, argv] = isRoot ? ['runuser', ['-u', user, '--', command, ...args]] : [command, args];
  const result = spawnSync(file, argv, { encoding: 'utf8', timeout });
  if (result.error !== undefined || result.status !== 0) {
    throw new Error(
      `${path.basename(command)} failed (status ${result.status}, ${result.error?.message ?? 'no spawn error'}):\n` +
        `${result.stdout}\n${result.stderr}`,
    );
  }
  return result;
}

/** runAs, without blocking the event loop (the load of a scenario goes on meanwhile). */
function runAsAsync(user, command, args, { timeout = 60_000 } = {}) {
  const [file, argv] = isRoot ? ['runuser', ['-u', user, '--', command, ...args]] : [command, args];
  return new Promise((resolve, reject) => {
    execFile(file, argv, { encoding: 'utf8', timeout }, (error, stdout, stderr) => {
      if (error) {
        reject(new Error(`${path.basename(command)} failed (${error.code ?? error.signal ?? error.message}):\n${stdout}\n${stderr}`));
      } else {
        resolve({ stdout, stderr });
      }
    });
  });
}

/**
 * Copies a server's certificate and key into its directory, owned by the server's OS user
 * (which cannot read the test's own temporary files), the key with mode 0600 (PostgreSQL
 * refuses a key others can read). Resolves to the copies' paths.
 * @param {string} dir the server's directory (owned by `owner`)
 * @param {string} owner
 * @param {{ cert: string, key: string }} ssl
 */
function installTlsFiles(dir, owner, ssl) {
  const tls = path.join(dir, 'tls');
  fs.mkdirSync(tls, { mode: 0o700 });
  const cert = path.join(tls, 'server.crt');
  const key = path.join(tls, 'server.key');
  fs.copyFileSync(ssl.cert, cert);
  fs.copyFileSync(ssl.key, key);
  fs.chmodSync(cert, 0o644);
  fs.chmodSync(key, 0o600);
  if (isRoot) {
    const result = spawnSync('chown', ['-R', `${owner}:${owner}`, tls], { encoding: 'utf8' });
    if (result.status !== 0) throw new Error(`chown ${tls} to ${owner} failed: ${result.stderr}`);
  }
  return { cert, key };
}

function requireBinary(file, how) {
  if (!fs.existsSync(file)) throw new Error(`${file} not found: the fault tests need it. ${how}`);
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL
// ---------------------------------------------------------------------------------------------

const PG_BIN = process.env.FAULTS_PG_BIN ?? '/usr/lib/postgresql/15/bin';

/**
 * A fresh PostgreSQL cluster with trust authentication on a free loopback port.
 * `dsn` is the superuser on database `postgres` (plaintext: `ssl` adds TLS, it does not
 * require it).
 * @param {{
 *   ssl?: { cert: string, key: string },
 *   settings?: Record<string, string | number | boolean>,
 *   initData?: (data: string) => unknown,
 *   prefix?: string,
 * }} [options] `ssl`: serve TLS (`ssl = on`) with this certificate and key; `settings`: extra
 *   server settings, each passed as `-c name=value` at every start; `initData`: fills the
 *   (not yet existing) data directory instead of initdb, as the `postgres` OS user (e.g.
 *   pg_basebackup of another cluster; it may return a promise); `prefix`: of the temporary
 *   directory's name
 */
/**
 * Runs `start(port)` on a free port, on another one when it fails (another process may have
 * taken the port meanwhile), `tries` times at most; `afterFailure()` runs after each failure.
 */
async function onAFreePort(tries, start, afterFailure = async () => {}) {
  for (let attempt = 1; ; attempt += 1) {
    const port = await freePort();
    try {
      await start(port);
      return;
    } catch (error) {
      await afterFailure();
      if (attempt >= tries) throw error;
    }
  }
}

/** Runs `use` on the connection `open()` resolves (a client with `end()`), then ends it whatever `use` did. */
async function usingConnection(open, use) {
  const connection = await open();
  try {
    return await use(connection);
  } finally {
    await connection.end().catch(() => {});
  }
}

async function startPostgres({ ssl, settings = {}, initData, prefix = 'nmn-fault-pg-' } = {}) {
  const how = 'Install the PostgreSQL 15 server (apt-get install postgresql-15) or set FAULTS_PG_BIN.';
  requireBinary(path.join(PG_BIN, 'initdb'), how);
  requireBinary(path.join(PG_BIN, 'pg_ctl'), how);
  const settingOptions = Object.entries(settings)
    .map(([name, value]) => {
      // pg_ctl hands `-o` to a shell: single-quote the value, refuse what cannot be quoted so.
      if (!/^[a-z_][a-z0-9_.]*$/i.test(name)) throw new Error(`bad PostgreSQL setting name ${JSON.stringify(name)}`);
      const text = typeof value === 'boolean' ? (value ? 'on' : 'off') : String(value);
      if (/['\\\n]/.test(text)) throw new Error(`PostgreSQL setting ${name}: unsupported value ${JSON.stringify(text)}`);
      return ` -c ${name}='${text}'`;
    })
    .join('');
  const dir = tempDir(prefix, 'postgres');
  const data = path.join(dir, 'data');
  const log = path.join(dir, 'server.log');
  const pgCtl = (args, options) => runAs('postgres', path.join(PG_BIN, 'pg_ctl'), ['-D', data, ...args], options);
  const pgCtlAsync = (args, options) => runAsAsync('postgres', path.join(PG_BIN, 'pg_ctl'), ['-D', data, ...args], options);
  let port;
  let running = false;
  const hook = () => {
    if (running) {
      try {
        pgCtl(['-m', 'immediate', '-w', 'stop'], { timeout: 10_000 });
      } catch {
        // already gone
      }
    }
    fs.rmSync(dir, { recursive: true, force: true });
  };
  exitHooks.add(hook);
  let tlsOptions = '';
  try {
    if (initData !== undefined) {
      await initData(data);
    } else {
      runAs('postgres', path.join(PG_BIN, 'initdb'), [
        '-D', data, '-U', 'postgres', '--auth=trust', '--no-sync', '--no-instructions', '-E', 'UTF8', '--locale=C',
      ]);
    }
    if (ssl !== undefined) {
      const files = installTlsFiles(dir, 'postgres', ssl);
      tlsOptions = ` -c ssl=on -c ssl_cert_file=${files.cert} -c ssl_key_file=${files.key}`;
    }
  } catch (error) {
    hook();
    exitHooks.delete(hook);
    throw error;
  }

  const start = async () => {
    await pgCtlAsync([
      '-l', log, '-w', '-t', '30',
      '-o', `-c listen_addresses=127.0.0.1 -p ${port} -k ${dir} -c fsync=off -c max_connections=200${tlsOptions}${settingOptions}`,
      'start',
    ]);
    running = true;
  };
  try {
    await onAFreePort(5, async (free) => {
      port = free;
      await start();
    });
  } catch (error) {
    hook();
    exitHooks.delete(hook);
    throw error;
  }

  const { Client } = require('pg');
  const dsn = `postgres://postgres@127.0.0.1:${port}/postgres`;
  const admin = (use) =>
    usingConnection(async () => {
      const client = new Client({ connectionString: dsn, connectionTimeoutMillis: 5000 });
      client.on('error', () => {});
      await client.connect();
      return client;
    }, use);

  return {
    engine: 'postgres',
    port,
    dsn,
    dir,
    data,
    /** Runs `pg_ctl -D <data> …args` as the `postgres` OS user, without blocking. */
    pgCtl: pgCtlAsync,
    get log() {
      return fs.existsSync(log) ? fs.readFileSync(log, 'utf8') : '';
    },
    /** Runs one statement on a short-lived admin connection. */
    query: (sql, params = []) => admin((client) => client.query(sql, params)),
    /** `pg_ctl stop -m fast`, `downMs` down, start again on the same port. */
    async restart({ downMs = 0 } = {}) {
      if (downMs === 0) {
        await pgCtlAsync(['-l', log, '-m', 'fast', '-w', '-t', '30', 'restart']);
        return;
      }
      await pgCtlAsync(['-m', 'fast', '-w', '-t', '30', 'stop']);
      running = false;
      await sleep(downMs);
      await start();
    },
    /** The postmaster and every backend die at once (`pg_ctl stop -m immediate`). */
    async crash() {
      await pgCtlAsync(['-m', 'immediate', '-w', 'stop']);
      running = false;
    },
    start,
    /**
     * pg_terminate_backend of every other client backend, LISTEN connections included.
     * Resolves to `{ killed, listeners }`.
     */
    killBackends: () =>
      admin(async (client) => {
        const { rows } = await client.query(
          `SELECT pid, query FROM pg_stat_activity
            WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'`,
        );
        for (const { pid } of rows) await client.query('SELECT pg_terminate_backend($1)', [pid]);
        return { killed: rows.length, listeners: rows.filter((r) => /^\s*LISTEN/i.test(r.query)).length };
      }),
    async stop() {
      if (running) {
        try {
          pgCtl(['-m', 'immediate', '-w', 'stop']);
        } catch {
          // already gone
        }
        running = false;
      }
      fs.rmSync(dir, { recursive: true, force: true });
      exitHooks.delete(hook);
    },
  };
}

// ---------------------------------------------------------------------------------------------
// MariaDB
// ---------------------------------------------------------------------------------------------

const MARIADBD = process.env.FAULTS_MARIADBD ?? '/usr/sbin/mariadbd';
const MARIADB_INSTALL_DB = process.env.FAULTS_MARIADB_INSTALL_DB ?? '/usr/bin/mariadb-install-db';

/**
 * A fresh MariaDB on its own datadir and a free loopback port; `root` has no password.
 * `dsn` is root on database `test` (plaintext: `ssl` adds TLS, it does not require it).
 * @param {{ ssl?: { cert: string, key: string } }} [options] `ssl`: serve TLS with this
 *   certificate and key
 */
async function startMariadb({ ssl } = {}) {
  const how = 'Install the MariaDB server (apt-get install mariadb-server) or set FAULTS_MARIADBD / FAULTS_MARIADB_INSTALL_DB.';
  requireBinary(MARIADBD, how);
  requireBinary(MARIADB_INSTALL_DB, how);
  const dir = tempDir('nmn-fault-mdb-', 'mysql');
  const data = path.join(dir, 'data');
  const userArgs = isRoot ? ['--user=mysql'] : [];
  const install = spawnSync(
    MARIADB_INSTALL_DB,
    ['--no-defaults', `--datadir=${data}`, ...userArgs, '--auth-root-authentication-method=normal', '--skip-test-db'],
    { encoding: 'utf8', timeout: 120_000 },
  );
  if (install.status !== 0) {
    fs.rmSync(dir, { recursive: true, force: true });
    throw new Error(`mariadb-install-db failed (status ${install.status}):\n${install.stdout}\n${install.stderr}`);
  }
  let tlsArgs = [];
  if (ssl !== undefined) {
    const files = installTlsFiles(dir, 'mysql', ssl);
    tlsArgs = [`--ssl-cert=${files.cert}`, `--ssl-key=${files.key}`];
  }

  let child;
  let port;
  let output = '';
  const hook = () => {
    if (child && child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    fs.rmSync(dir, { recursive: true, force: true });
  };
  exitHooks.add(hook);

  const mysql = require('mysql2/promise');
  async function connect(database) {
    return mysql.createConnection({ host: '127.0.0.1', port, user: 'root', database, connectTimeout: 5000 });
  }

  async function launch() {
    child = spawn(
      MARIADBD,
      [
        '--no-defaults',
        `--datadir=${data}`,
        `--port=${port}`,
        '--bind-address=127.0.0.1',
        `--socket=${path.join(dir, 'mysqld.sock')}`,
        `--pid-file=${path.join(dir, 'mysqld.pid')}`,
        `--log-error=${path.join(dir, 'error.log')}`,
        `--tmpdir=${dir}`,
        ...userArgs,
        '--skip-name-resolve',
        '--innodb-buffer-pool-size=32M',
        '--innodb-log-file-size=16M',
        '--innodb-flush-log-at-trx-commit=2',
        '--skip-log-bin',
        '--performance-schema=OFF',
        '--max-connections=300',
        ...tlsArgs,
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    child.stdout.on('data', (chunk) => (output += chunk));
    child.stderr.on('data', (chunk) => (output += chunk));
    const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve(signal ?? code)));
    child.exited = exited;
    const up = (async () => {
      const deadline = Date.now() + 30_000;
      for (;;) {
        try {
          const c = await connect();
          await c.end();
          return 'up';
        } catch (error) {
          if (Date.now() > deadline) return `not ready after 30 s (${error.message})`;
          await sleep(100);
        }
      }
    })();
    const started = await Promise.race([up, exited.then((code) => `exited with ${code}`)]);
    if (started !== 'up') {
      const errorLog = fs.existsSync(path.join(dir, 'error.log')) ? fs.readFileSync(path.join(dir, 'error.log'), 'utf8') : '';
      throw new Error(`mariadbd did not start (${started}):\n${output}\n${errorLog.slice(-3000)}`);
    }
  }

  async function terminate(signal, patienceMs = 30_000) {
    if (child === undefined || child.exitCode !== null || child.signalCode !== null) return;
    child.kill(signal);
    let timer;
    const done = await Promise.race([
      child.exited.then(() => true),
      new Promise((resolve) => (timer = setTimeout(() => resolve(false), patienceMs))),
    ]);
    clearTimeout(timer);
    if (!done) {
      child.kill('SIGKILL');
      await child.exited;
    }
  }

  try {
    await onAFreePort(
      3,
      async (free) => {
        port = free;
        await launch();
      },
      () => terminate('SIGKILL'),
    );
    const c = await connect();
    await c.query('CREATE DATABASE IF NOT EXISTS test');
    await c.end();
  } catch (error) {
    hook();
    exitHooks.delete(hook);
    throw error;
  }

  const admin = (use) => usingConnection(() => connect('test'), use);

  return {
    engine: 'mariadb',
    port,
    dsn: `mysql://root@127.0.0.1:${port}/test`,
    dir,
    get pid() {
      return child?.pid;
    },
    query: (sql, params = []) => admin(async (c) => (await c.query(sql, params))[0]),
    /** Orderly shutdown (SIGTERM), `downMs` down, start again on the same port. */
    async restart({ downMs = 0 } = {}) {
      await terminate('SIGTERM');
      await sleep(downMs);
      await launch();
    },
    /** kill -9 of the server. */
    async crash() {
      await terminate('SIGKILL');
    },
    start: launch,
    /** KILL of every other client connection. Resolves to `{ killed }`. */
    killBackends: () =>
      admin(async (c) => {
        const [rows] = await c.query(
          `SELECT ID FROM information_schema.PROCESSLIST
            WHERE ID <> CONNECTION_ID() AND USER <> 'system user' AND COMMAND <> 'Daemon'`,
        );
        let killed = 0;
        for (const { ID } of rows) {
          try {
            await c.query(`KILL CONNECTION ${Number(ID)}`);
            killed += 1;
          } catch {
            // gone meanwhile
          }
        }
        return { killed };
      }),
    async stop() {
      await terminate('SIGKILL');
      fs.rmSync(dir, { recursive: true, force: true });
      exitHooks.delete(hook);
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Redis
// ---------------------------------------------------------------------------------------------

/** redis-server with `appendonly yes`, `appendfsync always` on a free port and its own dir. */
async function startRedis() {
  const which = spawnSync('redis-server', ['--version'], { encoding: 'utf8' });
  if (which.error !== undefined) {
    throw new Error('redis-server not found on PATH: the fault tests need it (apt-get install redis-server).');
  }
  const server = await startRedisServer({ args: ['--appendonly', 'yes', '--appendfsync', 'always'] });
  const dsn = `redis://127.0.0.1:${server.port}`;
  const admin = (use) => withIoredis(dsn, use);
  return {
    engine: 'redis',
    port: server.port,
    dsn,
    get log() {
      return server.log;
    },
    admin,
    /** kill -9, `downMs` down, start again on the same port (the AOF brings the data back). */
    async restart({ downMs = 0 } = {}) {
      await server.crash();
      await sleep(downMs);
      await server.restart();
    },
    crash: () => server.crash(),
    start: () => server.restart(),
    /** CLIENT KILL TYPE normal (every other client). Resolves to `{ killed }`. */
    killBackends: () =>
      admin(async (redis) => ({ killed: Number(await redis.client('KILL', 'TYPE', 'normal', 'SKIPME', 'yes')) })),
    stop: () => server.stop(),
  };
}

/**
 * Starts the private server of `engine` ('postgres' | 'mariadb' | 'redis'); `options` go to
 * the SQL servers' starters (`ssl`).
 */
function startServer(engine, options = {}) {
  switch (engine) {
    case 'postgres':
      return startPostgres(options);
    case 'mariadb':
      return startMariadb(options);
    case 'redis':
      return startRedis();
    default:
      throw new Error(`no private server for engine ${engine}`);
  }
}

/**
 * Jest hooks for a describe block: a private `engine` server started before its tests and
 * stopped after them, then `afterStop()` run (stopping the server first ends whatever the code
 * under test still waits on). Returns the server's getter (it exists once the tests run).
 * @param {'postgres' | 'mariadb' | 'redis'} engine
 * @param {{ afterStop?: () => Promise<unknown> | undefined }} [options]
 */
function privateServer(engine, { afterStop } = {}) {
  let server;
  beforeAll(async () => {
    server = await startServer(engine);
  }, 120_000);
  afterAll(async () => {
    await server?.stop();
    await afterStop?.();
  }, 60_000);
  return () => server;
}

module.exports = {
  startPostgres,
  startMariadb,
  startRedis,
  startServer,
  privateServer,
  waitForPort,
  freePort,
  // for the harnesses built on these servers (pg-standby.js)
  PG_BIN,
  runAsAsync,
  requireBinary,
  sleep,
};
