'use strict';

const { ENGINES } = require('../engines');
const { BenchMessage, sendAsApp } = require('../message');
const { measure } = require('../cpu');

/** The name the native Redis transport's direct send connection gives itself (src/engines/redis/direct.rs). */
const DIRECT_SEND_CLIENT = 'nestjs-messenger-native:send';

/**
 * Connections Redis holds under the native direct send path's name, counted while the
 * transport is open: whether the sends could take the path served on the JavaScript thread.
 * Undefined where there is no such path (SQL engines, upstream).
 */
async function directSendConnections(job) {
  if (ENGINES[job.engine].kind !== 'redis' || job.impl !== 'native') return undefined;
  const list = await ENGINES.redis.admin().withClient((client) => client.client('LIST'));
  return list.split('\n').filter((line) => line.includes(` name=${DIRECT_SEND_CLIENT} `)).length;
}

/** What every send run reports: rates, CPU per send, and how the sends were made. */
function sendResult(n, took, job, direct) {
  return {
    rate: n / (took.elapsedMs / 1000),
    mainCpuPerMessage: took.mainCpuMicros / n,
    processCpuPerMessage: took.processCpuMicros / n,
    shape: job.shape ?? 'app',
    warmUp: job.warmUp ?? 1,
    ...(direct === undefined ? {} : { directSendConnections: direct }),
  };
}

/** Sends `count` messages one by one before the clock starts (the JIT and the connections warm). */
async function warmUp(transport, job) {
  for (let i = 0; i < (job.warmUp ?? 1); i += 1) await sendAsApp(transport, new BenchMessage(`warm-up-${i}`), job.shape);
}

/** B2: `n` sends as an app makes them (see `sendAsApp`), each awaited before the next. */
async function sendSequential({ makeTransport, n, job }) {
  const transport = makeTransport();
  await warmUp(transport, job);
  const clock = measure();
  for (let i = 0; i < n; i += 1) {
    await sendAsApp(transport, new BenchMessage(`s-${i}`), job.shape);
  }
  const took = clock.stop();
  const direct = await directSendConnections(job);
  await transport.close();
  return sendResult(n, took, job, direct);
}

/** B3: `n` sends as an app makes them, 64 in flight. */
async function sendConcurrent({ makeTransport, n, job, inFlight = 64 }) {
  const transport = makeTransport();
  await warmUp(transport, job);
  let next = 0;
  const clock = measure();
  const lane = async () => {
    while (next < n) {
      const i = next;
      next += 1;
      await sendAsApp(transport, new BenchMessage(`c-${i}`), job.shape);
    }
  };
  await Promise.all(Array.from({ length: inFlight }, lane));
  const took = clock.stop();
  const direct = await directSendConnections(job);
  await transport.close();
  return sendResult(n, took, job, direct);
}

module.exports = { sendSequential, sendConcurrent };
