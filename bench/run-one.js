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
const { scale } = require('./workloads/scale');
const { manyQueues, manyQueuesFleet } = require('./workloads/many-queues');

const WORKLOADS = { consume, sendSequential, sendConcurrent, wake, wakeFromAnotherProcess, competing, soak, scale, manyQueues, manyQueuesFleet };
const PREFILLED = new Set(['consume', 'competing', 'soak', 'scale']);

/** A queue (SQL) or stream (Redis) name of its own for one run. */
function queueName(engine) {
  return ENGINES[engine].kind === 'redis' ? `bench:{${freshName('s')}}` : freshName('bench');
}

/** `n` messages shared out over `count` queues, the first ones taking the remainder. */
const share = (n, count, i) => Math.floor(n / count) + (i < n % count ? 1 : 0);

async function ensureSchema(engine, makeTransport) {
  if (ENGINES[engine].kind === 'redis') return;
  const transport = makeTransport();
  await transport.setup?.();
  await transport.close();
}

async function main() {
  const job = JSON.parse(process.argv[2]);
  if (job.payloadBytes !== undefined) BenchMessage.usePayloadBytes(job.payloadBytes);
  // Most runs use one queue; the multi-queue ones (`job.queues`) as many as they say.
  const queues = Array.from({ length: job.queues ?? 1 }, () => queueName(job.engine));
  const [queue] = queues;
  const makeTransport = transportFactory(job.engine, job.impl, queue, job.cluster);
  const makeTransportOn = (name) => transportFactory(job.engine, job.impl, name, job.cluster)();
  const nativeFactory = transportFactory(job.engine, 'native', queue, job.cluster);
  const readServerCpu = await serverCpu(job.engine, job.cluster);
  await ensureSchema(job.engine, nativeFactory);
  if (PREFILLED.has(job.workload)) {
    for (let i = 0; i < queues.length; i += 1) {
      await prefill(job.engine, queues[i], share(job.n, queues.length, i), transportFactory(job.engine, 'native', queues[i]));
    }
  }
  await settleBackends();
  const serverCpuBefore = readServerCpu();
  let result;
  try {
    result = await WORKLOADS[job.workload]({ makeTransport, makeTransportOn, n: job.n, job, queue, queues });
  } catch (error) {
    if (job.cluster === undefined) await cleanup(job.engine, queues);
    throw error;
  }
  await settleBackends();
  // Every message the workload moved, sent or consumed (the wake-up runs send `n` too).
  result.serverCpuPerMessage = (readServerCpu() - serverCpuBefore) / job.n;
  if (job.payloadBytes !== undefined && result.rate !== undefined) result.mbPerSecond = (result.rate * job.payloadBytes) / 1e6;
  result.peakRssMb = process.resourceUsage().maxRSS / 1024;
  // A throwaway cluster goes with everything on it.
  if (job.cluster === undefined) await cleanup(job.engine, queues);
  process.stdout.write(`${JSON.stringify(result)}\n`);
}

/** Removes what the run left (nothing, normally: every message was consumed or is dropped here). */
async function cleanup(engine, queues) {
  const e = ENGINES[engine];
  if (e.kind === 'redis') {
    await e.admin().del(queues.flatMap((queue) => [queue, `${queue}:delayed`]));
  } else if (e.server) {
    await e.admin().deleteQueues('messenger_messages', queues);
  }
}

main().then(
  () => process.exit(0),
  (error) => {
    process.stderr.write(`${error.stack ?? error}\n`);
    process.exit(1);
  },
);
