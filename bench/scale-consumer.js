'use strict';

// One consumer process of the multi-process run (workloads/scale.js): the core Worker on one
// transport of its own, started when the parent says go, reporting the ids it handled (in
// batches, so the parent can tell when every message is in) until the parent says stop.

const { Worker } = require('@schally/nestjs-messenger');
const { transportFactory } = require('./transports');
const { machineMs } = require('./workloads/wake');

/** How often the ids handled since the last report go to the parent. */
const REPORT_EVERY_MS = 100;

async function main() {
  const job = JSON.parse(process.argv[2]);
  const transport = transportFactory(job.engine, job.impl, job.queue)();
  const controller = new AbortController();
  let fresh = [];
  let first;
  let last;
  const bus = {
    dispatch: async (envelope) => {
      first ??= machineMs();
      // Ids repeat across the queues of a many-queue run: the queue's index tells them apart.
      fresh.push(`${job.index}:${envelope.message.id}`);
    },
  };
  const report = () => {
    if (fresh.length > 0 && process.connected) process.send({ ids: fresh });
    fresh = [];
  };
  let start;
  const go = new Promise((resolve) => (start = resolve));
  // 'stop' before 'go' (the run failed elsewhere) starts a Worker that returns at once.
  process.on('message', (message) => {
    if (message === 'stop') controller.abort();
    start();
  });
  // A parent that is gone cannot stop this process: it stops itself.
  process.once('disconnect', () => {
    controller.abort();
    start();
  });
  process.send('ready');
  await go;
  const reporting = setInterval(report, REPORT_EVERY_MS);
  try {
    await new Worker(transport, bus, {}, { onHandled: () => (last = machineMs()) }).run(controller.signal);
  } finally {
    clearInterval(reporting);
    await transport.close();
  }
  report();
  await new Promise((resolve) => process.send({ done: true, first, last }, resolve));
}

main().then(
  () => process.exit(0),
  (error) => {
    process.stderr.write(`${error.stack ?? error}\n`);
    process.exit(1);
  },
);
