'use strict';

// The producer of the cross-process wake-up run (workloads/wake.js): `count` sends `gapMs`
// apart, each stamped with the machine's monotonic clock, from a process of its own.

const { setTimeout: sleep } = require('node:timers/promises');
const { BenchMessage, sendAsApp } = require('./message');
const { transportFactory } = require('./transports');
const { machineMs } = require('./workloads/wake');

async function main() {
  const job = JSON.parse(process.argv[2]);
  const producer = transportFactory(job.engine, job.impl, job.queue)();
  for (let i = 0; i < job.count; i += 1) {
    await sendAsApp(producer, new BenchMessage(`x-${i}`, machineMs()));
    await sleep(job.gapMs);
  }
  await producer.close();
}

main().then(
  () => process.exit(0),
  (error) => {
    process.stderr.write(`${error.stack ?? error}\n`);
    process.exit(1);
  },
);
