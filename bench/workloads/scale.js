'use strict';

const path = require('node:path');
const { fork } = require('node:child_process');
const { setTimeout: sleep } = require('node:timers/promises');
const { sqliteDsn, SQLITE_FILE_VAR } = require('../transports');

/** A run whose handled count has not grown for this long is over: what is not in is missing. */
const STALL_MS = 30000;

/**
 * B6: `processes` consumer processes (bench/scale-consumer.js, the core Worker each) drain
 * `n` messages prefilled on `queues.length` queues (process i on queue i mod the count); the
 * rate from the first message handled to the last ack, over every process (the machine's
 * monotonic clock is the same in every process), and duplicates and missing counted from the
 * union of the ids every process handled.
 */
async function scale({ n, job, queues }) {
  const processes = job.processes;
  // On SQLite the consumers must open this process's file, not a fresh one each.
  const env = job.engine === 'sqlite' ? { ...process.env, [SQLITE_FILE_VAR]: sqliteDsn() } : process.env;
  const seen = new Map();
  let lastGrowth = Date.now();
  const children = Array.from({ length: processes }, (_, i) => {
    const index = i % queues.length;
    const child = fork(path.join(__dirname, '..', 'scale-consumer.js'), [JSON.stringify({ engine: job.engine, impl: job.impl, queue: queues[index], index })], {
      env,
      stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
    });
    const state = { child, ready: undefined, done: undefined, exited: undefined };
    state.ready = new Promise((resolve) => child.once('message', resolve));
    state.done = new Promise((resolve) =>
      child.on('message', (message) => {
        if (message.ids) {
          for (const id of message.ids) seen.set(id, (seen.get(id) ?? 0) + 1);
          lastGrowth = Date.now();
        }
        if (message.done) resolve(message);
      }),
    );
    state.exited = new Promise((resolve, reject) =>
      child.once('exit', (code) => (code === 0 ? resolve() : reject(new Error(`consumer process ${i} exited with ${code}`)))),
    );
    // A consumer that fails ends the run (its promise is awaited below); not unhandled meanwhile.
    state.exited.catch(() => undefined);
    return state;
  });
  try {
    await Promise.race([Promise.all(children.map((c) => c.ready)), Promise.all(children.map((c) => c.exited))]);
    for (const { child } of children) child.send('go');
    lastGrowth = Date.now();
    await new Promise((resolve, reject) => {
      const check = setInterval(() => {
        if (seen.size >= n || Date.now() - lastGrowth > STALL_MS) {
          clearInterval(check);
          resolve();
        }
      }, 20);
      // A consumer process that dies ends the wait at once.
      for (const c of children) {
        c.exited.catch((error) => {
          clearInterval(check);
          reject(error);
        });
      }
    });
  } finally {
    for (const { child } of children) if (child.connected) child.send('stop');
  }
  const reports = await Promise.all(
    children.map((c, i) =>
      Promise.race([
        c.done,
        c.exited
          .then(() => sleep(2000))
          .then(() => {
            throw new Error(`consumer process ${i} exited without its report`);
          }),
      ]),
    ),
  );
  await Promise.all(children.map((c) => c.exited));
  const first = Math.min(...reports.map((r) => r.first ?? Number.POSITIVE_INFINITY));
  const last = Math.max(...reports.map((r) => r.last ?? Number.NEGATIVE_INFINITY));
  const duplicates = [...seen.values()].reduce((sum, count) => sum + count - 1, 0);
  return {
    rate: seen.size / ((last - first) / 1000),
    processes,
    queues: queues.length,
    duplicates,
    missing: n - seen.size,
  };
}

module.exports = { scale };
