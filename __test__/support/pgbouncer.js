'use strict';

// Throwaway PgBouncer processes in front of the test PostgreSQL server: started on a free
// loopback port with the settings as the installed version ships them (but for the pool mode
// and what a case names), stopped by the test's afterAll, and killed in any case when the
// jest worker exits. PgBouncer refuses to run as root: as root it runs as the postgres user.

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawn, spawnSync } = require('node:child_process');
const { freePort } = require('./ports');
const { killedAtExit, killNow } = require('./killed-at-exit');
const { waitForPort } = require('./redis-server');

const INSTALL = 'PgBouncer is not installed: apt-get install -y pgbouncer (npm test installs it when run as root).';

/** The pgbouncer executable (Debian puts it in /usr/sbin, often not on a user's PATH). */
function pgbouncerBinary() {
  for (const dir of [...(process.env.PATH ?? '').split(path.delimiter), '/usr/sbin', '/usr/local/sbin']) {
    const candidate = path.join(dir, 'pgbouncer');
    if (dir !== '' && fs.existsSync(candidate)) return candidate;
  }
  throw new Error(INSTALL);
}

/** The installed version as [major, minor], e.g. [1, 18]. */
function pgbouncerVersion() {
  const result = spawnSync(pgbouncerBinary(), ['--version'], { encoding: 'utf8' });
  const match = /PgBouncer (\d+)\.(\d+)/.exec(`${result.stdout}${result.stderr}`);
  if (match === null) throw new Error(`Cannot read the PgBouncer version:\n${result.stdout}${result.stderr}`);
  return [Number(match[1]), Number(match[2])];
}

/** Whether the installed PgBouncer has `max_prepared_statements` (1.21 and later). */
function hasProtocolPreparedStatements() {
  const [major, minor] = pgbouncerVersion();
  return major > 1 || (major === 1 && minor >= 21);
}

/**
 * Starts PgBouncer on 127.0.0.1 in front of `serverDsn`'s server, for its database and user
 * (trust authentication, as the test server has). Resolves to `{ port, dsn(query), log, stop() }`:
 * `dsn(query)` is `serverDsn` through PgBouncer with `query` appended.
 * @param {{ serverDsn: string, poolMode: 'session' | 'transaction', settings?: Record<string, string | number> }} options
 *   `settings`: more `[pgbouncer]` settings (say `default_pool_size`).
 */
async function startPgBouncer({ serverDsn, poolMode, settings = {} }) {
  const binary = pgbouncerBinary();
  const server = new URL(serverDsn);
  const database = decodeURIComponent(server.pathname.slice(1));
  const user = decodeURIComponent(server.username);
  const port = await freePort();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nmn-pgbouncer-'));
  fs.chmodSync(dir, 0o755);
  const authFile = path.join(dir, 'users.txt');
  fs.writeFileSync(authFile, `"${user}" ""\n`, { mode: 0o644 });
  const lines = [
    '[databases]',
    `${database} = host=${server.hostname} port=${server.port || 5432} dbname=${database}`,
    '[pgbouncer]',
    'listen_addr = 127.0.0.1',
    `listen_port = ${port}`,
    'unix_socket_dir =',
    'auth_type = trust',
    `auth_file = ${authFile}`,
    `pool_mode = ${poolMode}`,
    ...Object.entries(settings).map(([key, value]) => `${key} = ${value}`),
  ];
  const ini = path.join(dir, 'pgbouncer.ini');
  fs.writeFileSync(ini, `${lines.join('\n')}\n`, { mode: 0o644 });

  const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;
  const child = spawn(binary, [...(isRoot ? ['-u', 'postgres'] : []), ini], { stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  child.stdout.on('data', (chunk) => {
    log += chunk;
  });
  child.stderr.on('data', (chunk) => {
    log += chunk;
  });
  const exited = killedAtExit(child);
  const started = await Promise.race([
    waitForPort(port, true).then(() => 'up'),
    exited.then((code) => `exited with ${code}`),
  ]);
  if (started !== 'up') throw new Error(`pgbouncer did not start (${started}):\n${log}`);

  const through = new URL(serverDsn);
  through.hostname = '127.0.0.1';
  through.port = String(port);
  return {
    port,
    /** @param {string} [query] DSN query parameters, e.g. `pgbouncer=true` */
    dsn: (query = '') => `${through.toString()}${query === '' ? '' : `${through.search === '' ? '?' : '&'}${query}`}`,
    get log() {
      return log;
    },
    async stop() {
      await killNow(child, exited);
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

module.exports = { startPgBouncer, hasProtocolPreparedStatements, pgbouncerVersion };
