'use strict';

// The producer of the cross-process wake-up run (workloads/wake.js): `count` sends `gapMs`
// apart, each stamped with the machine's monotonic clock, from a process of its own; it
// reports how long each send took to its parent over the IPC channel.

const { setTimeout: sleep } = require('node:timers/promises');
const { BenchMessage, sendAsApp } = require('./message');
const { transportFactory } = require('./transports');
const { machineMs } = require('./workloads/wake');

async function main() {
  const job = JSON.parse(process.argv[2]);
  const producer = transportFactory(job.engine, job.impl, job.queue)();
  const sends = [];
  for (let i = 0; i < job.count; i += 1) {
    const sentAt = machineMs();
    await sendAsApp(producer, new BenchMessage(`x-${i}`, sentAt));
    sends.push(machineMs() - sentAt);
    await sleep(job.gapMs);
  }
  await producer.close();
  // The sends' own times, for the consumer's report (a slow store or a slow claim).
  await new Promise((resolve, reject) => process.send(sends, (error) => (error ? reject(error) : resolve())));
}

main().then(
  () => process.exit(0),
  (error) => {
    process.stderr.write(`${error.stack ?? error}\n`);
    process.exit(1);
  },
);
