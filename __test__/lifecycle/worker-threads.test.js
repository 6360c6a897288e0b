'use strict';

// A worker thread terminated while its sends are in flight. On a single Redis node a worker's
// sends are served on its own event loop (src/direct/sends.rs); terminating the worker tears
// its environment down with those sends unanswered. When the worker is the only thread that
// loaded the addon, napi-rs shuts its async runtime down before the transport's finalizer
// runs, so the finalizer must settle what it holds without the runtime. Either way the
// process must live on and exit normally: only a process of its own shows that.
//
// The sends are held unanswered by a private server whose clients' writes are paused
// (CLIENT PAUSE … WRITE), so they are in flight when the worker goes, every time.

const { spawn } = require('node:child_process');
const { redis } = require('../support/engines');
const { ROOT, CORE } = require('../support/child');
const { startRedisServer, withIoredis } = require('../support/redis-server');

jest.setTimeout(60000);

const WORKER = `
  const { parentPort, workerData } = require('node:worker_threads');
  const { RedisStreamsTransport } = require(${JSON.stringify(ROOT)});
  const { Envelope, JsonSerializer } = require(${JSON.stringify(CORE)});
  class M { constructor(n) { this.n = n; } }
  const t = new RedisStreamsTransport({
    dsn: workerData.dsn,
    stream: workerData.stream,
    serializer: new JsonSerializer([M]),
  });
  (async () => {
    await t.send(new Envelope(new M(0)));
    // Lets the direct send connection, opened in the background after the first send, come up.
    await new Promise((resolve) => setTimeout(resolve, 150));
    for (let n = 1; n < 20; n += 1) await t.send(new Envelope(new M(n)));
    parentPort.once('message', () => {
      // The first batches are written and wait for replies; the rest wait behind them.
      for (let n = 20; n < 60; n += 1) t.send(new Envelope(new M(n))).catch(() => {});
      parentPort.postMessage('sending');
    });
    parentPort.postMessage('warm');
  })().catch((error) => parentPort.postMessage(String(error)));
`;

const MAIN = `
  const { Worker } = require('node:worker_threads');
  const { Redis } = require('ioredis');
  if (process.env.MAIN_LOADS === '1') require(${JSON.stringify(ROOT)});
  const next = (worker) =>
    new Promise((resolve, reject) => {
      worker.once('message', resolve);
      worker.once('error', reject);
    });
  (async () => {
    const admin = new Redis(process.env.DSN);
    const rounds = Number(process.env.ROUNDS);
    for (let round = 0; round < rounds; round += 1) {
      const worker = new Worker(${JSON.stringify('WORKER')}, {
        eval: true,
        workerData: { dsn: process.env.DSN, stream: process.env.STREAM },
      });
      const warm = await next(worker);
      if (warm !== 'warm') throw new Error('worker: ' + warm);
      await admin.client('PAUSE', 5000, 'WRITE');
      worker.postMessage('go');
      const sending = await next(worker);
      if (sending !== 'sending') throw new Error('worker: ' + sending);
      // The writes reach the server (which holds them) before the worker goes.
      await new Promise((resolve) => setTimeout(resolve, 100));
      await worker.terminate();
      await admin.client('UNPAUSE');
    }
    admin.disconnect();
    console.log(JSON.stringify({ rounds }));
  })().catch((error) => {
    console.log(JSON.stringify({ error: String(error) }));
    process.exitCode = 1;
  });
`.replace(JSON.stringify('WORKER'), JSON.stringify(WORKER));

const ROUNDS = 2;

/** Runs MAIN in a process of its own: its exit status, signal and output. */
function runMain(env) {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['-e', MAIN], {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, ROUNDS: String(ROUNDS), ...env },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk) => (stdout += chunk));
    child.stderr.on('data', (chunk) => (stderr += chunk));
    const timer = setTimeout(() => child.kill('SIGKILL'), 60000);
    child.once('exit', (status, signal) => {
      clearTimeout(timer);
      resolve({ status, signal, stdout, stderr });
    });
  });
}

describe('a worker thread terminated with Redis sends in flight', () => {
  let server;

  beforeAll(async () => {
    server = await startRedisServer();
  });

  // A child that died before it could lift its pause leaves the server paused.
  afterEach(() => withIoredis(`redis://127.0.0.1:${server.port}`, (admin) => admin.client('UNPAUSE')));

  afterAll(() => server?.stop());

  test.each([
    ['the only thread that loaded the addon', '0'],
    ['one of two threads that loaded the addon', '1'],
  ])('%s: the process lives on and exits normally', async (_name, mainLoads) => {
    const result = await runMain({
      DSN: `redis://127.0.0.1:${server.port}`,
      STREAM: redis.uniqueStream('worker-terminated'),
      MAIN_LOADS: mainLoads,
    });
    // The whole outcome in one string, so a failure shows the child's output.
    const outcome = `status ${result.status}, signal ${result.signal}\nstdout: ${result.stdout}\nstderr: ${result.stderr}`;
    expect(outcome).toMatch(/^status 0, signal null\n/);
    expect(JSON.parse(result.stdout.trim().split('\n').pop())).toEqual({ rounds: ROUNDS });
    expect(result.stderr).not.toMatch(/panic|fatal/i);
  });
});
