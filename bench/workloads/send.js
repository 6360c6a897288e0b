'use strict';

const { Envelope } = require('@schally/nestjs-messenger');
const { BenchMessage } = require('../message');
const { measure } = require('../cpu');

/** B2: `n` sends, each awaited before the next. */
async function sendSequential({ makeTransport, n }) {
  const transport = makeTransport();
  await transport.send(new Envelope(new BenchMessage('warm-up')));
  const clock = measure();
  for (let i = 0; i < n; i += 1) {
    await transport.send(new Envelope(new BenchMessage(`s-${i}`)));
  }
  const took = clock.stop();
  await transport.close();
  return { rate: n / (took.elapsedMs / 1000), mainCpuPerMessage: took.mainCpuMicros / n };
}

/** B3: `n` sends with 64 in flight. */
async function sendConcurrent({ makeTransport, n, inFlight = 64 }) {
  const transport = makeTransport();
  await transport.send(new Envelope(new BenchMessage('warm-up')));
  let next = 0;
  const clock = measure();
  const lane = async () => {
    while (next < n) {
      const i = next;
      next += 1;
      await transport.send(new Envelope(new BenchMessage(`c-${i}`)));
    }
  };
  await Promise.all(Array.from({ length: inFlight }, lane));
  const took = clock.stop();
  await transport.close();
  return { rate: n / (took.elapsedMs / 1000), mainCpuPerMessage: took.mainCpuMicros / n };
}

module.exports = { sendSequential, sendConcurrent };
