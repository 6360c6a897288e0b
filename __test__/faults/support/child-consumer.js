'use strict';

// The parent's side of support/crash-consumer.js: forks it and follows its messages.

const path = require('node:path');
const { fork } = require('node:child_process');
const { LoadRun, settleWithin } = require('./account');
const { makeTransport, residue } = require('./engines');

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

/**
 * The start both child-consumer scenarios share: a producer and a survivor (not yet consuming)
 * on `base`, `messages` sent through a LoadRun; then the child forked (Redis consumer name
 * `<childName>-<pid>`), started, acking `ackFirst` messages and holding the next, its acks
 * recorded in the run. `scenario.run` and `scenario.state` are set as soon as they exist, so
 * that endScenario() cleans up after a failure half way; resolves the held message.
 */
async function startHoldingChild(scenario, engine, base, { messages, ackFirst, childName }) {
  const producer = makeTransport(engine, base);
  const survivor = makeTransport(engine, base);
  await producer.setup();
  const run = new LoadRun({ producers: [producer], consumers: [survivor], opBoundMs: 10_000 });
  scenario.run = run;
  await run.sendBatch(messages);

  const state = forkChild(engine, { ...base, ...(engine === 'redis' && { consumer: `${childName}-${process.pid}` }) }, ackFirst);
  scenario.state = state;
  await within(state.ready, 20_000, 'start', state);
  state.child.send({ type: 'start' });
  const holding = await within(state.holding, 20_000, 'hold a message', state);
  for (const acked of state.acked) run.recordDelivery({ key: acked.key, id: acked.id, consumer: 'child', at: acked.at });
  return holding;
}

/** Closes the scenario's run (bounded, 5 s): its account, and what is left in storage. */
async function closeScenario(scenario, engine, base) {
  const { run } = scenario;
  await run.close({ boundMs: 5000 });
  scenario.run = undefined;
  return { account: run.account(), left: await residue(engine, base) };
}

/** After each scenario: kills the child if it still runs (thawed first: it may be stopped), closes the run. */
async function endScenario(scenario) {
  const { run, state } = scenario;
  if (state && state.child.exitCode === null && state.child.signalCode === null) {
    state.child.kill('SIGCONT');
    state.child.kill('SIGKILL');
    await state.exited;
  }
  if (run) await run.close({ boundMs: 3000 });
  scenario.run = undefined;
  scenario.state = undefined;
}

module.exports = { forkChild, within, startHoldingChild, closeScenario, endScenario };
