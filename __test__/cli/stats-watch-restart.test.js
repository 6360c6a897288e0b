'use strict';

// `stats --watch` through a server restart, on a private redis-server (never the shared one):
// the samples before the crash, the failures while the server is down (on stderr, with the
// command still running), and the samples again once it is back, until Ctrl-C ends it with 0.

const path = require('node:path');
const { spawn } = require('node:child_process');
const { startRedisServer, withIoredis } = require('../support/redis-server');
const { uniqueName } = require('./cli-support');

jest.setTimeout(60000);

const BIN = path.join(__dirname, '..', '..', 'bin', 'nestjs-messenger-native.js');

/** A stream with the transport's default group and `entries` entries in it. */
async function seed(dsn, stream, entries) {
  await withIoredis(dsn, async (redis) => {
    await redis.xgroup('CREATE', stream, 'messenger', '$', 'MKSTREAM');
    for (let i = 0; i < entries; i += 1) await redis.xadd(stream, '*', 'body', `{"n":${i}}`);
  });
}

/** Resolves once `predicate(text)` holds for what `read()` returns, polling. */
async function until(read, predicate, what, timeoutMs = 20000) {
  const deadline = Date.now() + timeoutMs;
  while (!predicate(read())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; got:\n${read()}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

describe('stats --watch through a restart', () => {
  let server;

  afterAll(async () => {
    await server?.stop();
  });

  test('keeps sampling while the server is down and reports it back once it returns', async () => {
    server = await startRedisServer();
    const dsn = `redis://127.0.0.1:${server.port}`;
    const stream = uniqueName('nmn_watch');
    await seed(dsn, stream, 2);

    const child = spawn(
      process.execPath,
      [BIN, 'stats', '--stream', stream, '--watch', '150ms', '--connect-timeout', '500ms', '--json'],
      { env: { ...process.env, MESSENGER_DSN: dsn } },
    );
    let out = '';
    let err = '';
    child.stdout.on('data', (chunk) => (out += chunk));
    child.stderr.on('data', (chunk) => (err += chunk));
    const closed = new Promise((resolve) => child.on('close', (code, signal) => resolve({ code, signal })));
    const samples = () => out.trim().split('\n').filter(Boolean).map((line) => JSON.parse(line));
    const readies = () => samples().map((s) => s.queues[0]?.ready);

    try {
      await until(() => out, () => samples().length >= 1, 'the first sample');
      expect(readies()[0]).toBe(2);

      await server.crash();
      await until(() => err, (text) => text.split('\n').filter(Boolean).length >= 2, 'two failed samples');
      expect(child.exitCode).toBeNull();
      const printedWhileDown = samples().length;

      // The server comes back empty (no persistence): the stream is made again, with 3 entries.
      await server.restart();
      await seed(dsn, stream, 3);
      await until(() => out, () => readies().includes(3), 'a sample after the restart');
      expect(samples().length).toBeGreaterThan(printedWhileDown);
    } finally {
      child.kill('SIGINT');
    }
    const { code } = await closed;
    expect(code).toBe(0);
    expect(err).toMatch(/stats: .*\(sampling goes on\)/);
    expect(err).not.toContain('Usage');
  });
});
