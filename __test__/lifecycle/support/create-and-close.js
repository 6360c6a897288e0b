'use strict';

// Creates, uses and lets go of CYCLES transports one after the other, with a keeper transport
// open throughout so the shared connections stay warm, and reports the growth per cycle of the
// memory the process holds (the slope of samples taken after full GCs every SAMPLE_EVERY cycles
// past WARM_UP: the allocators settle in the first thousands), how many transports were
// finalized, and how many native queues are still alive once all are let go. What the process
// holds is its RSS less the free room in V8's heap: V8 sizes its heap by how the program
// allocates and when its timers run, so after full GCs that leave the same live objects its
// heap can still step up by megabytes of free room. A leak shows all the same: native memory
// in the RSS, live JavaScript objects in the heap's used part. SHAPE says what a cycle is:
// - `closed`: send one message, close();
// - `dropped`: send one message and drop the transport without close();
// - `woken`: a consumer goes idle beside IDLE_BESIDE others (so it waits in the process's
//   shared read), is woken by the keeper's send, acks, and is closed.
// Run with --expose-gc and KIND, DSN, TARGET (JSON), CYCLES, SHAPE and WARM_UP; prints one
// JSON line.

const { SqlTransport, RedisStreamsTransport } = require('../../..');
const { liveNativeQueues } = require('../../../binding.js');
const { Envelope, JsonSerializer } = require('@schally/nestjs-messenger');

const WARM_UP = Number(process.env.WARM_UP ?? 7000);
const SAMPLE_EVERY = 1000;
const IDLE_BESIDE = 5;

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

/**
 * IDLE_BESIDE consumers idle on streams of their own for the whole run, so that every cycle's
 * consumer waits in the process's shared read rather than on a connection of its own.
 */
async function idleConsumers(Transport, options) {
  const controller = new AbortController();
  const consumers = Array.from({ length: IDLE_BESIDE }, (_, i) => new Transport({ ...options, stream: `${options.stream}:idle${i}` }));
  const loops = consumers.map(async (consumer) => {
    for await (const envelope of consumer.get(controller.signal)) await consumer.ack(envelope);
  });
  await new Promise((resolve) => setTimeout(resolve, 200));
  return {
    async stop() {
      controller.abort();
      await Promise.all(loops);
      await Promise.all(consumers.map((consumer) => consumer.close()));
    },
  };
}

/** `transport` goes idle, is woken by the keeper's send of job `n`, and acks it. */
async function wokenOnce(transport, keeper, n) {
  const controller = new AbortController();
  const received = (async () => {
    for await (const envelope of transport.get(controller.signal)) {
      await transport.ack(envelope);
      controller.abort();
    }
  })();
  // Let the consumer find the stream empty and go idle before the send wakes it.
  await new Promise((resolve) => setTimeout(resolve, 1));
  await keeper.send(new Envelope(new Job(n)));
  await received;
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
  const shape = process.env.SHAPE ?? 'closed';
  let idle = shape === 'woken' ? await idleConsumers(Transport, options) : undefined;
  // One cycle in a function of its own: a transport held in this loop's body can stay
  // referenced from this function's frame after the loop (V8 keeps the last one in a register:
  // on Node.js 22 in every run, on Node.js 20 when no GC ran in the last cycle), where it would
  // count as a native queue the addon left behind.
  const cycle = async (n) => {
    const transport = new Transport(user);
    registry.register(transport, n);
    if (shape === 'woken') {
      await wokenOnce(transport, keeper, n);
    } else {
      await transport.send(new Envelope(new Job(n)));
    }
    if (shape !== 'dropped') await transport.close();
  };
  for (let n = 1; n <= cycles; n += 1) {
    await cycle(n);
    if (n >= WARM_UP && n % SAMPLE_EVERY === 0) {
      await fullGc();
      const { rss, heapTotal, heapUsed } = process.memoryUsage();
      samples.push({ n, held: rss - (heapTotal - heapUsed), rss });
    }
  }
  await idle?.stop();
  idle = undefined;
  await keeper.close();
  keeper = undefined;
  await fullGc();
  console.log(
    JSON.stringify({
      cycles,
      finalized,
      liveNativeQueues: liveNativeQueues(),
      bytesPerCycle: Math.round(slope(samples.map(({ n, held }) => [n, held]))),
      rssBytesPerCycle: Math.round(slope(samples.map(({ n, rss }) => [n, rss]))),
      samples: samples.map(({ n, held, rss }) => [n, held, rss]),
    }),
  );
}

main().catch((error) => {
  console.error(error);
  process.exitCode = 1;
});
