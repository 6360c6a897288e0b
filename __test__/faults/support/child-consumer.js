'use strict';

// The parent's side of support/crash-consumer.js: forks it and follows its messages.

const path = require('node:path');
const { fork } = require('node:child_process');
const { settleWithin } = require('./account');

const CHILD = path.join(__dirname, 'crash-consumer.js');

const children = new Set();
process.once('exit', () => {
  for (const child of children) child.kill('SIGKILL');
});

/**
 * Forks the consumer of `engine` with transport options `options`, acking `ackFirst` messages
 * before it holds one. `ready`, `holding`, `settled` and `exited` are promises; `got` and
 * `acked` grow as it reports.
 */
function forkChild(engine, options, ackFirst) {
  const child = fork(CHILD, [], {
    cwd: path.join(__dirname, '..', '..', '..'),
    execArgv: [],
    silent: true,
    env: {
      ...process.env,
      FAULT_ENGINE: engine,
      FAULT_OPTIONS: JSON.stringify(options),
      FAULT_ACK_FIRST: String(ackFirst),
    },
  });
  children.add(child);
  const state = { child, got: [], acked: [], output: '', error: undefined };
  child.stdout.on('data', (chunk) => (state.output += chunk));
  child.stderr.on('data', (chunk) => (state.output += chunk));
  const signals = {};
  for (const name of ['ready', 'holding', 'settled']) state[name] = new Promise((resolve) => (signals[name] = resolve));
  state.exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve(signal ?? code)));
  state.exited.then(() => children.delete(child));
  child.on('message', (message) => {
    if (message.type === 'got') state.got.push(message);
    if (message.type === 'acked') state.acked.push({ ...message, at: Date.now() });
    if (message.type === 'error') state.error = message;
    signals[message.type]?.(message);
  });
  return state;
}

/** `promise`'s value, or an error naming what the child did not do within `ms`. */
async function within(promise, ms, what, state) {
  const result = await settleWithin(promise, ms);
  if (result.timeout) {
    throw new Error(`the child consumer did not ${what} within ${ms} ms: ${state.error?.message ?? ''}\n${state.output}`);
  }
  return result.value;
}

module.exports = { forkChild, within };
