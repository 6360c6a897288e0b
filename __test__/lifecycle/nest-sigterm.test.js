'use strict';

// SIGTERM to a Nest app with enableShutdownHooks(), on SQLite: when a provider closes the
// transport in onApplicationShutdown (as MessengerModule does), the handler running at the
// signal finishes and its write-behind ack is written, the prefetched rows are given back at
// once, and the process then ends by the signal Nest re-raises. When nobody closes the
// transport, Nest re-raises the signal at once: the running handler's message and the
// prefetched rows stay claimed until their lease. docs/nestjs.md describes both. The app runs
// with no `logger` option, so its transport's lines go to Nest's Logger, which the app created
// with `logger: false`: nothing is printed. Run by jest with the repository's NestJS and by
// `npm run test:nest` with NestJS 10, 11 and 12 (the forked app inherits the NODE_OPTIONS that
// resolve NestJS from that major's install; it reports the version it loaded).

const assert = require('node:assert/strict');
const path = require('node:path');
const { fork } = require('node:child_process');
const { describe, it, beforeAll, afterAll, nest } = require('../support/nest-suite');
const { SqlTransport } = require('../..');
const { sqlite } = require('../support/engines');
const { settleWithin } = require('../faults/support/account');

const APP = path.join(__dirname, 'support', 'nest-sigterm.js');
const COUNT = 5;
const HANDLER_MS = 600;

/** Runs the app, SIGTERMs it once its first handler runs; what it said and how it ended. */
async function sigtermDuringHandler(dsn, target, env = {}) {
  const child = fork(APP, [], {
    execArgv: [],
    silent: true,
    env: { ...process.env, DSN: dsn, TARGET: JSON.stringify(target), COUNT: String(COUNT), HANDLER_MS: String(HANDLER_MS), ...env },
  });
  let output = '';
  child.stdout.on('data', (chunk) => (output += chunk));
  child.stderr.on('data', (chunk) => (output += chunk));
  const said = [];
  const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve(signal ?? code)));
  const handling = new Promise((resolve) => {
    child.on('message', (message) => {
      said.push(message);
      if ('handling' in message) resolve(message);
    });
  });
  try {
    const started = await settleWithin(handling, 20_000);
    if (started.timeout) throw new Error(`the app did not start handling:\n${output}`);
    child.kill('SIGTERM');
    const exit = await settleWithin(exited, 15_000);
    return { said, exit: exit.timeout ? 'still running' : exit.value, output };
  } finally {
    child.kill('SIGKILL');
  }
}

describe(`sqlite: SIGTERM to a Nest app (@nestjs/core ${nest.versions.core}) with shutdown hooks`, () => {
  let dsn;
  beforeAll(async () => {
    await sqlite.requireServer();
    dsn = sqlite.runDsn('nmn-ns');
  });
  afterAll(() => sqlite.removeRunDsn(dsn));

  /** Due messages nobody holds, read by a transport of the test's own. */
  async function claimable(target) {
    const reader = new SqlTransport({ dsn, ...target });
    try {
      return await reader.getMessageCount();
    } finally {
      await reader.close();
    }
  }

  it('closed in onApplicationShutdown: the handler finishes, its ack is written, the prefetched rows are given back', async () => {
    const target = sqlite.target('ns');
    const { said, exit, output } = await sigtermDuringHandler(dsn, target);
    assert.deepEqual({ exit, said: said.map((m) => Object.keys(m)[0]) }, { exit: 'SIGTERM', said: ['handling', 'handled', 'closed'] });
    assert.equal(said[0].nest, nest.versions.core);
    assert.ok(said[0].buffered > 0, `buffered: ${said[0].buffered}`);
    assert.deepEqual({ claimable: await claimable(target), output }, { claimable: COUNT - 1, output: '' });
  }, 40_000);

  it('not closed: the process ends at once, the handled and prefetched messages stay claimed', async () => {
    const target = sqlite.target('ns');
    const { said, exit } = await sigtermDuringHandler(dsn, target, { NO_CLOSE: '1' });
    assert.deepEqual({ exit, said: said.map((m) => Object.keys(m)[0]) }, { exit: 'SIGTERM', said: ['handling'] });
    assert.equal(await claimable(target), COUNT - 1 - said[0].buffered);
  }, 40_000);
});
