'use strict';

/**
 * Soak: one native consumer through `n` prefilled messages (core Worker, no-op handler), RSS
 * sampled every 100,000 messages. Reported, not asserted.
 */
async function soak({ makeTransport, n }) {
  const transport = makeTransport();
  const samples = [];
  const controller = new AbortController();
  let handled = 0;
  const started = process.hrtime.bigint();
  for await (const envelope of transport.get(controller.signal)) {
    await transport.ack(envelope);
    handled += 1;
    if (handled % 100000 === 0) samples.push({ messages: handled, rssMb: process.memoryUsage().rss / 2 ** 20 });
    if (handled === n) break;
  }
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  await transport.close();
  return { rate: handled / seconds, samples };
}

module.exports = { soak };
