'use strict';

const { Worker } = require('@schally/nestjs-messenger');
const { measure } = require('../cpu');

/**
 * B1: the core Worker drains `n` prefilled messages as it really runs: one sequential
 * `for await (get)` → no-op handler → `await ack`.
 */
async function consume({ makeTransport, n }) {
  const transport = makeTransport();
  const bus = { dispatch: async () => undefined };
  const clock = measure();
  const { processed } = await new Worker(transport, bus, { maxMessages: n }).run(new AbortController().signal);
  const took = clock.stop();
  await transport.close();
  if (processed !== n) throw new Error(`consumed ${processed} of ${n}`);
  return {
    rate: n / (took.elapsedMs / 1000),
    mainCpuPerMessage: took.mainCpuMicros / n,
    processCpuPerMessage: took.processCpuMicros / n,
  };
}

module.exports = { consume };
