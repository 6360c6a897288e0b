'use strict';

// Creates, uses and closes CYCLES transports one after the other (send one message, close, let
// go), with a keeper transport open throughout so the shared connections stay warm, and reports
// the growth of the process's RSS per cycle (the slope of samples taken after full GCs every
// SAMPLE_EVERY cycles past WARM_UP: the allocators settle in the first thousands), how many
// transports were finalized, and how many native queues are still alive once all are closed.
// Run with --expose-gc and KIND, DSN, TARGET (JSON) and CYCLES; prints one JSON line.

const { SqlTransport, RedisStreamsTransport } = require('../../..');
const { liveNativeQueues } = require('../../../binding.js');
const { Envelope, JsonSerializer } = require('@schally/nestjs-messenger');

const WARM_UP = 7000;
const SAMPLE_EVERY = 1000;

class Job {
  constructor(n) {
    this.n = n;
  }
}

async function fullGc() {
  for (let i = 0; i < 3; i += 1) {
    global.gc();
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** The least-squares slope of `[x, y]` points. */
function slope(points) {
  const mean = (values) => values.reduce((a, b) => a + b, 0) / values.length;
  const mx = mean(points.map(([x]) => x));
  const my = mean(points.map(([, y]) => y));
  const num = points.reduce((sum, [x, y]) => sum + (x - mx) * (y - my), 0);
  const den = points.reduce((sum, [x]) => sum + (x - mx) ** 2, 0);
  return num / den;
}

async function main() {
  const Transport = process.env.KIND === 'redis' ? RedisStreamsTransport : SqlTransport;
  const cycles = Number(process.env.CYCLES);
  const options = { dsn: process.env.DSN, ...JSON.parse(process.env.TARGET), serializer: new JsonSerializer([Job]) };
  let keeper = new Transport(options);
  await keeper.setup();
  // The keeper ran the DDL: the others need not (as an app's transports after a migration).
  const user = process.env.KIND === 'redis' ? options : { ...options, autoSetup: false };
  let finalized = 0;
  const registry = new FinalizationRegistry(() => (finalized += 1));
  const samples = [];
  for (let n = 1; n <= cycles; n += 1) {
    const transport = new Transport(user);
    registry.register(transport, n);
    await transport.send(new Envelope(new Job(n)));
    await transport.close();
    if (n >= WARM_UP && n % SAMPLE_EVERY === 0) {
      await fullGc();
      samples.push([n, process.memoryUsage().rss]);
    }
  }
  await keeper.close();
  keeper = undefined;
  await fullGc();
  console.log(
    JSON.stringify({
      cycles,
      finalized,
      liveNativeQueues: liveNativeQueues(),
      bytesPerCycle: Math.round(slope(samples)),
      samples,
    }),
  );
}

main().catch((error) => {
  console.error(error);
  process.exitCode = 1;
});
