'use strict';

// A throwaway PostgreSQL cluster with password (SCRAM) authentication, for the tests that
// need a server which can refuse a password (the main test server uses trust auth).
// initdb refuses to run as root, so every server command runs as the `postgres` OS user.

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { freePort } = require('./ports');

/** The newest `/usr/lib/postgresql/<version>/bin` holding initdb and pg_ctl. */
function findPgBin() {
  const root = '/usr/lib/postgresql';
  const versions = fs.existsSync(root)
    ? fs
        .readdirSync(root)
        .filter((v) => fs.existsSync(path.join(root, v, 'bin', 'initdb')))
        .sort((a, b) => Number(b) - Number(a))
    : [];
  if (versions.length === 0) {
    throw new Error(`No PostgreSQL server binaries (initdb, pg_ctl) found under ${root}/*/bin.`);
  }
  return path.join(root, versions[0], 'bin');
}

/** Runs a command as the postgres OS user; throws with its output when it fails. */
function runAsPostgres(command, args, options = {}) {
  const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;
  const [file, argv] = isRoot ? ['runuser', ['-u', 'postgres', '--', command, ...args]] : [command, args];
  const result = spawnSync(file, argv, { encoding: 'utf8', timeout: 60_000, ...options });
  if (result.error !== undefined || result.status !== 0) {
    throw new Error(
      `${path.basename(command)} failed (status ${result.status}, ${result.error?.message ?? 'no spawn error'}):\n` +
        `${result.stdout}\n${result.stderr}`,
    );
  }
  return result;
}

function chownToPostgres(target) {
  if (typeof process.getuid === 'function' && process.getuid() === 0) {
    const result = spawnSync('chown', ['-R', 'postgres:postgres', target], { encoding: 'utf8' });
    if (result.status !== 0) throw new Error(`chown ${target} failed: ${result.stderr}`);
  }
}

/**
 * Starts a fresh cluster on a free loopback port whose superuser `postgres` has `password`
 * and must authenticate with SCRAM. Resolves to `{ port, dsn(password), stop() }`.
 * @param {{ password: string }} options
 */
async function startPasswordCluster({ password }) {
  const bin = findPgBin();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nmn-pg-'));
  fs.chmodSync(dir, 0o700);
  const data = path.join(dir, 'data');
  const pwfile = path.join(dir, 'pwfile');
  const log = path.join(dir, 'server.log');
  fs.writeFileSync(pwfile, `${password}\n`, { mode: 0o600 });
  chownToPostgres(dir);

  let started = false;
  const stop = () => {
    if (started) {
      try {
        runAsPostgres(path.join(bin, 'pg_ctl'), ['-D', data, '-m', 'immediate', '-w', 'stop']);
      } catch {
        // Already gone: nothing to stop.
      }
      started = false;
    }
    fs.rmSync(dir, { recursive: true, force: true });
  };

  try {
    runAsPostgres(path.join(bin, 'initdb'), [
      '-D',
      data,
      '-U',
      'postgres',
      '--auth=scram-sha-256',
      `--pwfile=${pwfile}`,
      '--no-sync',
      '--no-instructions',
      '-E',
      'UTF8',
      '--locale=C',
    ]);
    fs.rmSync(pwfile, { force: true });
    let port;
    for (let attempt = 0; attempt < 5 && !started; attempt += 1) {
      port = await freePort();
      try {
        runAsPostgres(path.join(bin, 'pg_ctl'), [
          '-D',
          data,
          '-l',
          log,
          '-w',
          '-t',
          '30',
          '-o',
          `-c listen_addresses=127.0.0.1 -p ${port} -k ${dir} -c fsync=off`,
          'start',
        ]);
        started = true;
      } catch (error) {
        // Lost a race for the port with another process: try another one.
        if (attempt === 4) throw error;
      }
    }
    return {
      port,
      /** DSN for the superuser with the given password, on the `postgres` database. */
      dsn: (pw) => `postgres://postgres:${encodeURIComponent(pw)}@127.0.0.1:${port}/postgres`,
      stop,
    };
  } catch (error) {
    stop();
    throw error;
  }
}

module.exports = { startPasswordCluster, findPgBin };
