'use strict';

// Write-behind acks outlive nothing: a process that acks and then simply runs out of work (no
// close()) stays alive until its recorded deletes are written, as it would for a pending socket
// write, and then exits by itself. Each engine's deletes are held back by a lock the test takes
// (a table lock, an exclusive SQLite transaction, a Redis CLIENT PAUSE on a private server)
// while the consumer acks and returns: the process must still be there when the lock goes, and
// every acked message must be gone afterwards.

const path = require('node:path');
const { fork } = require('node:child_process');
const { WRITE_STALLS } = require('../support/write-stalls');
const { settleWithin } = require('../faults/support/account');

const CONSUMER = path.join(__dirname, 'support', 'ack-then-end.js');
const COUNT = 20;
/** How long the test keeps the deletes blocked after the consumer acked and returned. */
const HELD_MS = 1500;

describe.each(WRITE_STALLS)('$name: write-behind acks of a process that ends without close()', (engine) => {
  it('keeps the process alive until the acks are written, then it exits by itself', async () => {
    const setup = await engine.prepare();
    const child = fork(CONSUMER, [], {
      execArgv: [],
      silent: true,
      env: {
        ...process.env,
        KIND: engine.name === 'redis' ? 'redis' : 'sql',
        DSN: setup.dsn,
        TARGET: JSON.stringify(setup.target),
        COUNT: String(COUNT),
      },
    });
    let output = '';
    child.stdout.on('data', (chunk) => (output += chunk));
    child.stderr.on('data', (chunk) => (output += chunk));
    const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve(signal ?? code)));
    let unblock;
    try {
      const consumed = await settleWithin(new Promise((resolve) => child.once('message', resolve)), 20_000);
      if (consumed.timeout) throw new Error(`the consumer did not take its messages:\n${output}`);
      expect(consumed.value).toEqual({ consumed: COUNT });

      unblock = await setup.stallWrites();
      child.send('ack');
      const early = await settleWithin(exited, HELD_MS);
      await unblock();
      unblock = undefined;
      const exit = await settleWithin(exited, 15_000);
      if (exit.timeout) child.kill('SIGKILL');

      expect({
        exitedWhileAcksPending: !early.timeout,
        exit: exit.timeout ? 'still running' : exit.value,
        remaining: await setup.remaining(),
      }).toEqual({ exitedWhileAcksPending: false, exit: 0, remaining: 0 });
    } catch (error) {
      error.message += `\nconsumer output:\n${output}`;
      throw error;
    } finally {
      if (unblock) await unblock().catch(() => {});
      child.kill('SIGKILL');
      await setup.cleanup();
    }
  }, 60_000);
});
