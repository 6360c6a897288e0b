'use strict';

// Throwaway redis-server processes for the Redis tests that need a server of their own (a
// password, TLS, a restart): started on a free loopback port, stopped by the test's afterAll,
// and killed in any case when the jest worker exits.

const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const { spawn } = require('node:child_process');
const { freePort } = require('./ports');
const { killedAtExit } = require('./killed-at-exit');

function canConnect(port) {
  return new Promise((resolve) => {
    const socket = net.connect({ host: '127.0.0.1', port });
    const done = (ok) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(500, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}

async function waitForPort(port, open, timeoutMs = 10000) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if ((await canConnect(port)) === open) return;
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  throw new Error(`port ${port} did not become ${open ? 'open' : 'closed'} within ${timeoutMs} ms`);
}

/**
 * Starts `redis-server` on 127.0.0.1 without persistence.
 * @param {{ port?: number, tls?: { cert: string, key: string, ca: string }, args?: string[] }} [options]
 *   `tls`: serve TLS only (plain port 0) on `port`, client certificates not required (files from
 *   tls-files.js).
 */
async function startRedisServer(options = {}) {
  const port = options.port ?? (await freePort());
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nmn-redis-'));
  const args = ['--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir, '--daemonize', 'no'];
  if (options.tls) {
    args.push(
      '--port', '0',
      '--tls-port', String(port),
      '--tls-cert-file', options.tls.cert,
      '--tls-key-file', options.tls.key,
      '--tls-ca-cert-file', options.tls.ca,
      '--tls-auth-clients', 'no',
    );
  } else {
    args.push('--port', String(port));
  }
  args.push(...(options.args ?? []));

  let child;
  let log = '';
  async function launch() {
    child = spawn('redis-server', args, { stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout.on('data', (chunk) => {
      log += chunk;
    });
    child.stderr.on('data', (chunk) => {
      log += chunk;
    });
    const exited = killedAtExit(child);
    child.exited = exited;
    const started = await Promise.race([
      waitForPort(port, true).then(() => 'up'),
      exited.then((code) => `exited with ${code}`),
    ]);
    if (started !== 'up') throw new Error(`redis-server did not start (${started}):\n${log}`);
  }

  async function kill(signal) {
    if (child === undefined || child.exitCode !== null || child.signalCode !== null) return;
    child.kill(signal);
    await child.exited;
  }

  await launch();
  return {
    port,
    get pid() {
      return child.pid;
    },
    get log() {
      return log;
    },
    /** Kills the server at once (no shutdown), as a crash would. */
    crash: () => kill('SIGKILL'),
    /** Starts it again on the same port (after crash()). */
    restart: async () => {
      await kill('SIGKILL');
      await launch();
    },
    /** Stops it for good and removes its directory. */
    stop: async () => {
      await kill('SIGKILL');
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * Runs `use(redis)` with a short-lived ioredis client on `dsn` (set-up and inspection only,
 * never the code under test), then disconnects it.
 * @template T
 * @param {string} dsn
 * @param {(redis: import('ioredis').Redis) => Promise<T>} use
 * @returns {Promise<T>}
 */
async function withIoredis(dsn, use) {
  const { Redis } = require('ioredis');
  const redis = new Redis(dsn, { lazyConnect: true, maxRetriesPerRequest: 1, retryStrategy: () => null, connectTimeout: 5000 });
  redis.on('error', () => {});
  await redis.connect();
  try {
    return await use(redis);
  } finally {
    redis.disconnect();
  }
}

module.exports = { waitForPort, startRedisServer, withIoredis };
