'use strict';

// Fault scenario: a table's shared poll stops answering. Idle consumers of a table without push
// wake-ups (MariaDB; PostgreSQL with useNotify off) run no statement of their own while the
// table's one poll answers for them. When that poll's connection goes slow while the others
// stay fine, the consumers must not wait on it: within the poll's stale window (ten intervals,
// at least 1 s) they are woken to claim on their own, so a row another process stores
// meanwhile is delivered long before the poll answers again.
//
// The poll is held at the proxy by what only its statement carries: its parameter, the JSON
// list of the queue names it answers for.

const { serverBehindProxy } = require('./support/behind-proxy');
const { uniqueQueue } = require('./support/engines');
const { faultEnvelope } = require('./support/messages');
const { settleWithin, sleep, consumeAndAck } = require('./support/account');

/** How long the poll's connection is held: longer than the bound below by far. */
const HOLD_MS = 12_000;
/** The stale window (1 s at a 100 ms interval), a claim, and slack for a loaded CI host. */
const DELIVERED_WITHIN_MS = 5000;

describe.each(['mariadb', 'postgres'])('%s: a shared poll that stops answering', (engine) => {
  // The poll's bound (connect timeout + 10 s) outlasts the hold: the poll answers late, it
  // does not fail (a failed poll wakes the consumers by itself).
  const f = serverBehindProxy(engine, { connectTimeoutMs: 5000, leaseMs: 60_000 });

  it('wakes its idle consumer to claim on its own meanwhile', async () => {
    const queue = uniqueQueue(engine, 'stall');
    const options = { queue, pollIntervalMs: 100, ...(engine === 'postgres' && { useNotify: false }) };
    // The producer plays another process: another DSN, so it wakes no consumer in this one.
    const producer = f.open({ ...options, dsn: f.server.dsn });
    await producer.setup();
    const consumer = f.open({ ...options, dsn: f.viaProxy() });

    const { delivered, errors, controller, loop } = consumeAndAck(consumer);
    try {
      // Idle on the shared poll by now.
      await sleep(1000);
      const { value: caught } = await settleWithin(f.proxy.holdBack(`["${queue}"]`, HOLD_MS), 3000);
      expect(caught).toBeDefined();

      const sentAt = Date.now();
      await producer.send(faultEnvelope('stall:1', 1));
      while (delivered.length === 0 && Date.now() < sentAt + HOLD_MS - 1000) await sleep(20);

      expect(errors).toEqual([]);
      expect(delivered.map((d) => d.key)).toEqual(['stall:1']);
      expect(delivered[0].at - sentAt).toBeLessThanOrEqual(DELIVERED_WITHIN_MS);
    } finally {
      controller.abort();
      await settleWithin(loop, 5000);
    }
  }, 60_000);
});
