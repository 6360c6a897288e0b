'use strict';

// Server processes a test starts are killed when the jest worker exits, whatever happened to
// the test's afterAll: no private server outlives the run.

const live = new Set();
process.once('exit', () => {
  for (const child of live) {
    try {
      child.kill('SIGKILL');
    } catch {
      // already gone
    }
  }
});

/**
 * Kills `child` when this process exits, unless it exited first.
 * @param {import('node:child_process').ChildProcess} child
 * @returns {Promise<number | null>} its exit code, once it exited
 */
function killedAtExit(child) {
  live.add(child);
  const exited = new Promise((resolve) => child.once('exit', resolve));
  exited.then(() => live.delete(child));
  return exited;
}

/**
 * Kills `child` now (SIGKILL) unless it has exited, and waits until it has.
 * @param {import('node:child_process').ChildProcess} child
 * @param {Promise<unknown>} exited what `killedAtExit(child)` returned
 */
async function killNow(child, exited) {
  if (child.exitCode === null && child.signalCode === null) {
    child.kill('SIGKILL');
    await exited;
  }
}

module.exports = { killedAtExit, killNow };
