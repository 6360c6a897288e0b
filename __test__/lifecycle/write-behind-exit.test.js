'use strict';

// Write-behind acks outlive nothing: a process that acks and then simply runs out of work (no
// close()) stays alive until its recorded deletes are written, as it would for a pending socket
// write, and then exits by itself. Each engine's deletes are held back by a lock the test takes
// (a table lock, an exclusive SQLite transaction, a Redis CLIENT PAUSE on a private server)
// while the consumer acks and returns: the process must still be there when the lock goes, and
// every acked message must be gone afterwards. Not for ever: when the deletes stay blocked past
// one write's bound (plus a second), the process reports the acks it could not write (a process
// warning: the consumer is a plain Node.js process, with no logger and no @nestjs/common) and
// exits by itself; the messages of acks that were not written are delivered again.

const path = require('node:path');
const { fork } = require('node:child_process');
const { WRITE_STALLS } = require('../support/write-stalls');
const { settleWithin } = require('../faults/support/account');

const CONSUMER = path.join(__dirname, 'support', 'ack-then-end.js');
const HIDE_MODULE = path.join(__dirname, '..', 'support', 'hide-module.js');
const COUNT = 20;
/** How long the test keeps the deletes blocked after the consumer acked and returned. */
const HELD_MS = 1500;
/** A short connect timeout, so that one write's bound (and the wait for a silent server) is short. */
const CONNECT_TIMEOUT_MS = 1000;
/** One write's bound with that connect timeout: SQL's connect timeout plus its 10 s statement bound, Redis's two connect timeouts plus 1 s. */
const WRITE_BOUND_MS = { postgres: 11_000, mysql: 11_000, sqlite: 11_000, redis: 3000 };

/** Forks the consumer for `setup` with more transport `options`; its output and its exit. */
function forkConsumer(engine, setup, options = {}) {
  const child = fork(CONSUMER, [], {
    execArgv: ['--require', HIDE_MODULE],
    silent: true,
    env: {
      ...process.env,
      HIDE_MODULE: '@nestjs/common',
      KIND: engine.name === 'redis' ? 'redis' : 'sql',
      DSN: setup.dsn,
      TARGET: JSON.stringify(setup.target),
      COUNT: String(COUNT),
      OPTIONS: JSON.stringify(options),
    },
  });
  const run = { child, output: '' };
  child.stdout.on('data', (chunk) => (run.output += chunk));
  child.stderr.on('data', (chunk) => (run.output += chunk));
  run.exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve(signal ?? code)));
  run.consumed = () => settleWithin(new Promise((resolve) => child.once('message', resolve)), 20_000);
  return run;
}

/**
 * Forks the consumer (with more transport `options`), lets it take its messages, stalls the
 * engine's writes and tells it to ack; then runs `afterAck` with the run, the setup and
 * `endStall()`. Cleans up whatever happens, and adds the consumer's output to a failure.
 */
async function ackWhileStalled(engine, options, afterAck) {
  const setup = await engine.prepare();
  const run = forkConsumer(engine, setup, options);
  let stalled;
  const endStall = async () => {
    const end = stalled;
    stalled = undefined;
    await end?.();
  };
  try {
    const consumed = await run.consumed();
    if (consumed.timeout) throw new Error('the consumer did not take its messages');
    expect(consumed.value).toEqual({ consumed: COUNT });
    stalled = await setup.stallWrites();
    run.child.send('ack');
    await afterAck({ run, setup, endStall });
  } catch (error) {
    error.message += `\nconsumer output:\n${run.output}`;
    throw error;
  } finally {
    await endStall().catch(() => {});
    run.child.kill('SIGKILL');
    await setup.cleanup();
  }
}

describe.each(WRITE_STALLS)('$name: write-behind acks of a process that ends without close()', (engine) => {
  it(`exits by itself within one write's bound plus a second when the acks cannot be written, saying how many`, async () => {
    await ackWhileStalled(engine, { connectTimeoutMs: CONNECT_TIMEOUT_MS }, async ({ run, setup, endStall }) => {
      const started = Date.now();
      const exit = await settleWithin(run.exited, WRITE_BOUND_MS[engine.name] + 6000);
      const exitedAfterMs = Date.now() - started;
      if (exit.timeout) run.child.kill('SIGKILL');
      await endStall();
      expect({
        exit: exit.timeout ? 'still running' : exit.value,
        withinBound: exitedAfterMs <= WRITE_BOUND_MS[engine.name] + 1000 + 3000,
        reported: new RegExp(`NMN_ACKS_UNWRITTEN.*${COUNT} acknowledgement\\(s\\) could not be confirmed written`).test(run.output),
        // A delete already sent may still run once the stall ends (the server does not notice
        // the client left while it waits on a lock): all or none, never some.
        remaining: [0, COUNT].includes(await setup.remaining()),
      }).toEqual({ exit: 0, withinBound: true, reported: true, remaining: true });
    });
  }, 60_000);

  it('keeps the process alive until the acks are written, then it exits by itself', async () => {
    await ackWhileStalled(engine, {}, async ({ run, setup, endStall }) => {
      const early = await settleWithin(run.exited, HELD_MS);
      await endStall();
      const exit = await settleWithin(run.exited, 15_000);
      if (exit.timeout) run.child.kill('SIGKILL');
      expect({
        exitedWhileAcksPending: !early.timeout,
        exit: exit.timeout ? 'still running' : exit.value,
        remaining: await setup.remaining(),
      }).toEqual({ exitedWhileAcksPending: false, exit: 0, remaining: 0 });
    });
  }, 60_000);
});
