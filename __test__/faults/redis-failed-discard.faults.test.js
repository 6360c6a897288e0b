'use strict';

// A Redis consumer's blocking read returns a good entry together with a foreign one (no
// body/headers). The foreign one is discarded (XACK + XDEL) over the shared command connection;
// when that discard fails, the read's good entry already sits in the consumer's pending list,
// handed to nobody. The next claim must re-read that list at once: before the fix, the entry
// stayed hidden until claimIdleMs (a minute here).

const { serverBehindProxy } = require('./support/behind-proxy');
const { uniqueQueue } = require('./support/engines');
const { faultEnvelope, faultSerializer } = require('./support/messages');
const { settleWithin, sleep } = require('./support/account');
const { withIoredis } = require('../support/redis-server');

/** Far longer than the bound below: an entry back only "at claimIdleMs" fails the test. */
const CLAIM_IDLE_MS = 60_000;
/** The shared connection reconnects (backoff capped at 2 s), then the re-read takes the entry. */
const BACK_WITHIN_MS = 4000;
/** Longer than the wait below: the entry must arrive while the consumer is blocked, not polling. */
const POLL_INTERVAL_MS = 10_000;

/** The consumer's blocking read (its claims read without BLOCK). */
const blockingRead = (chunk) => chunk.includes('XREADGROUP') && chunk.includes('BLOCK');
/** The discard of foreign entries: XACK and XDEL in one MULTI (fenced acks go by script). */
const discard = (chunk) => chunk.includes('XDEL');

describe('redis: a blocking read whose discard of foreign entries fails', () => {
  const f = serverBehindProxy('redis', { connectTimeoutMs: 2000 });

  it(`delivers the read's good entry within ${BACK_WITHIN_MS} ms, not at claimIdleMs`, async () => {
    const queue = uniqueQueue('redis', 'discard');
    const consumer = f.open({
      dsn: f.viaProxy(),
      queue,
      leaseMs: CLAIM_IDLE_MS,
      pollIntervalMs: POLL_INTERVAL_MS,
    });
    await consumer.setup();
    const delivered = [];
    const errors = [];
    const controller = new AbortController();
    const blocked = f.proxy.count(blockingRead);
    const loop = (async () => {
      for await (const envelope of consumer.get(controller.signal)) {
        delivered.push({ key: envelope.message.key, at: Date.now() });
        await consumer.ack(envelope);
      }
    })().catch((error) => errors.push(error));
    const deadline = Date.now() + 5000;
    while (blocked.seen === 0 && Date.now() < deadline) await sleep(20);
    expect(blocked.seen).toBe(1);
    await sleep(100);

    const cut = f.proxy.cutAfter(discard);
    const good = faultSerializer().encode(faultEnvelope('good', 1));
    const addedAt = Date.now();
    // One transaction: the blocked read is served once it ends, with both entries.
    await withIoredis(f.server.dsn, (admin) =>
      admin
        .multi()
        .xadd(queue, '*', 'foo', 'bar')
        .xadd(queue, '*', 'body', good.body, 'headers', JSON.stringify(good.headers))
        .exec(),
    );
    const { replied } = await settleWithin(cut, 5000).then((r) => r.value ?? {});
    while (delivered.length === 0 && Date.now() < addedAt + BACK_WITHIN_MS + 3000) await sleep(50);
    controller.abort();
    await settleWithin(loop, 10_000);
    const after = delivered.length > 0 ? `${delivered[0].at - addedAt} ms` : 'never';
    console.log(`[failed discard] discard replied before the cut: ${replied}; good entry delivered after ${after}`);

    expect(replied).toBe(true);
    expect(errors).toEqual([]);
    expect(delivered.map((d) => d.key)).toEqual(['good']);
    expect(delivered[0].at - addedAt).toBeLessThanOrEqual(BACK_WITHIN_MS);
  }, 60_000);
});
