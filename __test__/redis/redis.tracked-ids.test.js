'use strict';

// What a Redis consumer keeps of its claims (`stats().trackedIds`: the pending entries it holds,
// which re-reads of its pending list and XAUTOCLAIM passes skip) stays bounded by what it holds
// now, whatever it gave up or lost:
// - a message given up without a write (its reject could not encode the copy) stays in the
//   consumer's pending list; XAUTOCLAIM hands it back to that consumer after claimIdleMs, and it
//   is delivered again (it used to be skipped on every pass, and kept forever);
// - entries another consumer took over (a shorter claimIdleMs than the holder's renewal period)
//   are forgotten by the holder once its renewal finds them gone, and the stuck handler's late
//   ack is stale (it used to keep them forever).
// Runs on the shared server, each case on a stream of its own.

const { RedisStreamsTransport } = require('../..');
const { redis } = require('../support/engines');
const { withIoredis } = require('../support/redis-server');
const { serializer, envelopeOf, sleep, pollUntil, settleWithin, startAckingConsumer } = require('../support/transport-helpers');

const transports = [];
let target;

beforeAll(async () => {
  await redis.requireServer();
});

beforeEach(() => {
  target = redis.target('tracked');
});

afterEach(async () => {
  await Promise.all(transports.splice(0).map((t) => settleWithin(t.close(), 5000)));
  await redis.removeTarget(target);
});

function transport(options) {
  const t = new RedisStreamsTransport({ dsn: redis.dsn, ...target, serializer: serializer(), ...options });
  transports.push(t);
  return t;
}

/** Entries left in the stream. */
const streamLength = () => withIoredis(redis.dsn, (admin) => admin.xlen(target.stream));

it('messages given up without a write come back through XAUTOCLAIM after claimIdleMs, and trackedIds returns to 0', async () => {
  const CLAIM_IDLE_MS = 500;
  const COUNT = 20;
  const t = transport({ claimIdleMs: CLAIM_IDLE_MS });
  await t.setup();
  for (let n = 0; n < COUNT; n += 1) await t.send(envelopeOf(`g:${n}`));

  const deliveries = new Map();
  const givenUp = [];
  let peak = 0;
  const controller = new AbortController();
  const startedAt = Date.now();
  let lastAt = 0;
  const loop = (async () => {
    for await (const envelope of t.get(controller.signal)) {
      const { id } = envelope.message;
      const times = (deliveries.get(id) ?? 0) + 1;
      deliveries.set(id, times);
      peak = Math.max(peak, t.stats().trackedIds);
      if (times === 1) {
        // The copy cannot be encoded: the reject fails and the delivery is given up, no write.
        envelope.message.payload = 1n;
        await t.reject(envelope).catch((error) => givenUp.push(error));
      } else {
        lastAt = Date.now();
        await t.ack(envelope);
      }
    }
  })();

  const allTwice = () => deliveries.size === COUNT && [...deliveries.values()].every((n) => n >= 2);
  const back = await pollUntil(allTwice, { timeoutMs: 20_000, intervalMs: 50 });
  const drained = await pollUntil(() => t.stats().trackedIds === 0, { timeoutMs: 5000 });
  controller.abort();
  await settleWithin(loop, 10_000);
  const { trackedIds, staleSettles } = t.stats();
  console.log(
    `[given up] ${givenUp.length} given up; all delivered again: ${back} (last after ${lastAt - startedAt} ms); trackedIds peak ${peak}, then ${trackedIds}`,
  );

  expect(givenUp).toHaveLength(COUNT);
  expect(back).toBe(true);
  expect([...deliveries.values()]).toEqual(Array(COUNT).fill(2));
  expect(drained).toBe(true);
  expect(trackedIds).toBe(0);
  expect(staleSettles).toBe(0);
  await t.close();
  expect(await streamLength()).toBe(0);
}, 40_000);

it('entries another consumer took over are forgotten by their holder, whose late ack is stale', async () => {
  const COUNT = 40;
  // Renews every second: the other consumer's 100 ms takes its entries over in between.
  const holder = transport({ consumer: 'holder', claimIdleMs: 3000 });
  const taker = transport({ consumer: 'taker', claimIdleMs: 100 });
  await holder.setup();
  for (let n = 0; n < COUNT; n += 1) await holder.send(envelopeOf(`l:${n}`));

  let release;
  const stuck = new Promise((resolve) => {
    release = resolve;
  });
  const held = [];
  const holderController = new AbortController();
  const holderLoop = (async () => {
    for await (const envelope of holder.get(holderController.signal)) {
      held.push(envelope.message.id);
      await stuck;
      await holder.ack(envelope);
    }
  })();
  expect(await pollUntil(() => held.length === 1, { timeoutMs: 5000 })).toBe(true);
  const before = holder.stats();

  const taking = startAckingConsumer(taker);
  const allTaken = await pollUntil(() => new Set(taking.ids()).size === COUNT, { timeoutMs: 10_000 });
  // Within the holder's next renewal or two (and before its 5 s hand-back of a stalled buffer).
  const forgotten = await pollUntil(() => holder.stats().trackedIds === 0, { timeoutMs: 2500 });
  const after = holder.stats();
  release();
  const stale = await pollUntil(() => holder.stats().staleSettles === 1, { timeoutMs: 5000 });
  holderController.abort();
  await Promise.all([settleWithin(holderLoop, 10_000), settleWithin(taking.stop(), 10_000)]);
  console.log(
    `[taken over] holder held ${before.trackedIds} (buffered ${before.buffered}, in flight ${before.inFlight}); taker took ${new Set(taking.ids()).size}; holder then tracks ${after.trackedIds} (buffered ${after.buffered}, in flight ${after.inFlight}); late ack stale: ${stale}`,
  );

  expect(before.inFlight).toBe(1);
  expect(before.buffered).toBeGreaterThan(0);
  expect(before.trackedIds).toBe(before.buffered + before.inFlight);
  expect(allTaken).toBe(true);
  expect(forgotten).toBe(true);
  expect(after).toMatchObject({ trackedIds: 0, buffered: 0, inFlight: 0 });
  expect(stale).toBe(true);
  expect(held).toHaveLength(1);
  await sleep(100);
  expect(await streamLength()).toBe(0);
}, 40_000);
