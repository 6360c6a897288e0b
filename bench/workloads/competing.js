'use strict';

const { Worker } = require('@schally/nestjs-messenger');
const { measure } = require('../cpu');

/**
 * B5: `consumers` transports in one process drain one prefilled queue with the core Worker;
 * messages/s, and whether every message was delivered exactly once.
 */
async function competing({ makeTransport, n, consumers = 4 }) {
  const transports = Array.from({ length: consumers }, makeTransport);
  const seen = new Map();
  const controller = new AbortController();
  let handled = 0;
  const bus = {
    dispatch: async (envelope) => {
      const id = envelope.message.id;
      seen.set(id, (seen.get(id) ?? 0) + 1);
      handled += 1;
      if (handled >= n) controller.abort();
    },
  };
  const clock = measure();
  const deadline = setTimeout(() => controller.abort(), 120000);
  await Promise.all(transports.map((t) => new Worker(t, bus).run(controller.signal)));
  clearTimeout(deadline);
  const took = clock.stop();
  await Promise.all(transports.map((t) => t.close()));
  const duplicates = [...seen.values()].reduce((sum, count) => sum + count - 1, 0);
  return { rate: handled / (took.elapsedMs / 1000), duplicates, missing: n - seen.size };
}

module.exports = { competing };
