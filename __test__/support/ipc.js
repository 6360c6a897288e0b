'use strict';

// The child's side of a forked test process's IPC channel: messages to the parent, and the
// one way such a child reports the error it ends on.

/** Sends `message` to the parent; resolves once it is written (at once when the channel is gone). */
function toParent(message) {
  return new Promise((resolve) => {
    if (!process.connected) return resolve();
    process.send(message, () => resolve());
  });
}

/** Tells the parent `{ type: 'error', message, stack }`, sets exit code 1 and lets the process end. */
async function reportError(error) {
  await toParent({ type: 'error', message: String(error?.message ?? error), stack: String(error?.stack) });
  process.exitCode = 1;
  if (process.connected) process.disconnect();
}

module.exports = { toParent, reportError };
