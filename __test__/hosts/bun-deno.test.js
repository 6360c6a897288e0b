'use strict';

// The transports under JavaScript runtimes other than Node.js that load Node-API addons: Bun
// and Deno, from their npm packages (devDependencies). Each runs smoke.cjs (send, get, ack,
// reject) on every engine in a process of its own. Those runtimes export libuv's names as
// stubs, so the send path served on Node.js's own event loop (src/direct/sends.rs, chosen in
// lib/native/host.js) must stay off there: on Redis it aborted Bun and crashed Deno.

const fs = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { postgres, mysql, sqlite, redis, uniqueName } = require('../support/engines');
const { ROOT } = require('../support/child');

jest.setTimeout(120000);

const BIN = path.join(ROOT, 'node_modules', '.bin');
const RUNTIMES = [
  // The same script under Node.js, where the direct path is on: the script's own check.
  ['node', [process.execPath]],
  ['bun', [path.join(BIN, 'bun')]],
  ['deno', [path.join(BIN, 'deno'), 'run', '--allow-all']],
];
const SMOKE = path.join(__dirname, 'smoke.cjs');
/** What smoke.cjs sends: 24 one by one, then 24 at once. */
const SENT = 48;

/** The engines, each with a target of its own per run and how to remove it. */
const ENGINES = [
  [
    'sqlite',
    sqlite,
    () => {
      const dsn = sqlite.temporaryDsn('nmn-hosts');
      const cleanup = () => fs.rmSync(path.dirname(dsn.slice('sqlite://'.length)), { recursive: true, force: true });
      return { dsn, target: { tableName: uniqueName('nmn_host'), queueName: 'smoke' }, cleanup };
    },
  ],
  ...[
    ['postgres', postgres],
    ['mariadb', mysql],
  ].map(([name, engine]) => [
    name,
    engine,
    () => {
      const tableName = uniqueName('nmn_host');
      const cleanup = () => engine.admin().dropTable(tableName, { ifExists: true });
      return { dsn: engine.dsn, target: { tableName, queueName: 'smoke' }, cleanup };
    },
  ]),
  [
    'redis',
    redis,
    () => {
      const stream = redis.uniqueStream('host-smoke');
      const cleanup = () => redis.admin().del([stream, `${stream}:delayed`]);
      return { dsn: redis.dsn, target: { stream }, cleanup };
    },
  ],
];

describe.each(RUNTIMES)('under %s', (runtime, command) => {
  test.each(ENGINES)('%s: send, get, ack and reject', async (_name, engine, targetOf) => {
    await engine.requireServer();
    const { dsn, target, cleanup } = targetOf();
    try {
      const result = spawnSync(command[0], [...command.slice(1), SMOKE], {
        cwd: ROOT,
        encoding: 'utf8',
        timeout: 60000,
        killSignal: 'SIGKILL',
        env: {
          ...process.env,
          KIND: engine.kind,
          DSN: dsn,
          TARGET: JSON.stringify(target),
          DENO_NO_UPDATE_CHECK: '1',
          NO_COLOR: '1',
        },
      });
      // The whole outcome in one string, so a failure shows what the runtime printed.
      const outcome = `${runtime}: status ${result.status}, signal ${result.signal}\nstdout: ${result.stdout}\nstderr: ${result.stderr}${result.error ? `\nnot started: ${result.error.message} (npm ci installs bun and deno as devDependencies)` : ''}`;
      expect(outcome).toMatch(new RegExp(`^${runtime}: status 0, signal null\\n`));
      const report = JSON.parse(result.stdout.trim().split('\n').pop());
      expect(report).toEqual({
        ok: true,
        sent: SENT,
        distinctIds: SENT,
        received: Array.from({ length: SENT }, (_, n) => n),
        acked: SENT - 1,
        rejected: 1,
        // The rejected message, back for a retry (the transports' default retry strategy).
        left: 1,
      });
    } finally {
      await cleanup();
    }
  });
});
