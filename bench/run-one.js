'use strict';

// One measurement in a process of its own (fresh pools, fresh peak RSS). The parent passes a
// JSON job as argv[2] and reads one JSON line from stdout.

const { ENGINES } = require('./engines');
const { transportFactory, freshName } = require('./transports');
const { prefill } = require('./prefill');
const { BenchMessage } = require('./message');
const { serverCpu, settleBackends } = require('./server-cpu');
const { consume } = require('./workloads/consume');
const { sendSequential, sendConcurrent } = require('./workloads/send');
const { wake, wakeFromAnotherProcess } = require('./workloads/wake');
const { competing } = require('./workloads/competing');
const { soak } = require('./workloads/soak');

const WORKLOADS = { consume, sendSequential, sendConcurrent, wake, wakeFromAnotherProcess, competing, soak };
const PREFILLED = new Set(['consume', 'competing', 'soak']);

async function ensureSchema(engine, makeTransport) {
  if (ENGINES[engine].kind === 'redis') return;
  const transport = makeTransport();
  await transport.setup?.();
  await transport.close();
}

async function main() {
  const job = JSON.parse(process.argv[2]);
  if (job.payloadBytes !== undefined) BenchMessage.usePayloadBytes(job.payloadBytes);
  const queue = ENGINES[job.engine].kind === 'redis' ? `bench:{${freshName('s')}}` : freshName('bench');
  const makeTransport = transportFactory(job.engine, job.impl, queue);
  const nativeFactory = transportFactory(job.engine, 'native', queue);
  const readServerCpu = await serverCpu(job.engine);
  await ensureSchema(job.engine, nativeFactory);
  if (PREFILLED.has(job.workload)) await prefill(job.engine, queue, job.n, nativeFactory);
  await settleBackends();
  const serverCpuBefore = readServerCpu();
  const result = await WORKLOADS[job.workload]({ makeTransport, n: job.n, job, queue });
  await settleBackends();
  // Every message the workload moved, sent or consumed (the wake-up runs send `n` too).
  result.serverCpuPerMessage = (readServerCpu() - serverCpuBefore) / job.n;
  if (job.payloadBytes !== undefined && result.rate !== undefined) result.mbPerSecond = (result.rate * job.payloadBytes) / 1e6;
  result.peakRssMb = process.resourceUsage().maxRSS / 1024;
  await cleanup(job.engine, queue);
  process.stdout.write(`${JSON.stringify(result)}\n`);
}

/** Removes what the run left (nothing, normally: every message was consumed or is dropped here). */
async function cleanup(engine, queue) {
  const e = ENGINES[engine];
  if (e.kind === 'redis') {
    await e.admin().del([queue, `${queue}:delayed`]);
  } else if (e.server) {
    await e.admin().deleteQueues('messenger_messages', [queue]);
  }
}

main().then(
  () => process.exit(0),
  (error) => {
    process.stderr.write(`${error.stack ?? error}\n`);
    process.exit(1);
  },
);
