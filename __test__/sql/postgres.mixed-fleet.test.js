'use strict';

// Mixed fleet on PostgreSQL: the shared cases (shared/mixed-fleet.suite.js: each side receives
// what the other sent, both consume one queue, the storage is the same), plus what only
// PostgreSQL has: NOTIFY wake-ups that cross implementations.

const { RedeliveryStamp } = require('@schally/nestjs-messenger');
const { postgres } = require('../support/engines');
const { idOf, outgoing } = require('../support/fleet');
const { waitFor } = require('../support/transport-helpers');
const { mixedFleetSuite } = require('../shared/mixed-fleet.suite');

const {
  harness: { ack, reject, receive },
  pair,
  startIdleConsumer,
  expectSameMessage,
  UPSTREAM_NAME,
  NATIVE_NAME,
} = mixedFleetSuite(postgres);

// ---------------------------------------------------------------------------
// NOTIFY wake-ups across implementations
// ---------------------------------------------------------------------------

describe('idle consumers wake on the other implementation’s NOTIFY', () => {
  // Without the NOTIFY, an idle consumer here would sleep 60 s (poll interval and notify
  // timeout both 60 s, and nothing is scheduled), so arrival within 1 s proves the wake-up.
  const WAKE_DEADLINE_MS = 1000;

  /** Per idle side: its transport in a pair, the other side's, its option key, its receiver name. */
  const SIDES = {
    upstream: { idler: 'up', other: 'ours', options: 'upstreamOptions', receiverName: UPSTREAM_NAME },
    native: { idler: 'ours', other: 'up', options: 'nativeOptions', receiverName: NATIVE_NAME },
  };

  /** A pair whose `idle` side polls every 60 s, so only a NOTIFY wakes it in time. */
  function idlePair(idle, prefix) {
    const side = SIDES[idle];
    const transports = pair(prefix, { [side.options]: { pollIntervalMs: 60000 } });
    return { idler: transports[side.idler], other: transports[side.other], receiverName: side.receiverName };
  }

  /** The first delivery to `consumer`, asserted to come within WAKE_DEADLINE_MS of `since`. */
  async function firstWakeUp(consumer, idle, since) {
    await waitFor(() => consumer.received.length > 0, WAKE_DEADLINE_MS, `the ${idle} consumer to wake`);
    const [{ envelope, at }] = consumer.received;
    expect(at - since).toBeLessThan(WAKE_DEADLINE_MS);
    return envelope;
  }

  test.each([
    ['idle upstream consumer (useNotify default) wakes on a native send', 'upstream', 'mf_wake_up', 1],
    ['idle native consumer (pollIntervalMs 60000) wakes on an upstream send', 'native', 'mf_wake_native', 2],
  ])('%s', async (_title, idle, prefix, n) => {
    const { idler, other, receiverName } = idlePair(idle, prefix);
    await other.getMessageCount(); // warm the sending side so the send is one statement
    const consumer = await startIdleConsumer(idler, idle);
    try {
      const envelope = outgoing(n, `wake up, ${idle}`);
      const sentAt = Date.now();
      const sent = await other.send(envelope);
      const received = await firstWakeUp(consumer, idle, sentAt);
      expectSameMessage(received, envelope, { id: idOf(sent), receiverName });
      await ack(idler, received);
    } finally {
      await consumer.stop();
    }
  }, 15000);

  test.each([
    ['idle upstream consumer wakes on a native reject copy', 'upstream', 'mf_wake_up_rej', 3, 'rejected by native'],
    ['idle native consumer wakes on an upstream reject copy', 'native', 'mf_wake_native_rej', 4, 'rejected by upstream'],
  ])('%s', async (_title, idle, prefix, n, text) => {
    const { idler, other, receiverName } = idlePair(idle, prefix);
    const envelope = outgoing(n, text);
    const sent = await other.send(envelope);
    const [held] = await receive(other, 1);
    expect(idOf(held)).toBe(idOf(sent));

    // The only row is in flight: the idle consumer finds nothing and nothing scheduled.
    const consumer = await startIdleConsumer(idler, idle);
    try {
      const rejectedAt = Date.now();
      await reject(other, held);
      const copy = await firstWakeUp(consumer, idle, rejectedAt);
      expectSameMessage(copy, envelope, { receiverName });
      expect(idOf(copy)).not.toBe(idOf(sent));
      expect(copy.last(RedeliveryStamp)?.retryCount).toBe(1);
      await ack(idler, copy);
    } finally {
      await consumer.stop();
    }
  }, 15000);

  test('idle native consumer wakes on an upstream reject copy', async () => {
    const transports = pair('mf_wake_native_rej', { nativeOptions: { pollIntervalMs: 60000 } });
    const envelope = outgoing(4, 'rejected by upstream');
    const sent = await transports.up.send(envelope);
    const [held] = await receive(transports.up, 1);
    expect(idOf(held)).toBe(idOf(sent));

    const consumer = await startIdleConsumer(transports.ours, 'native');
    try {
      const rejectedAt = Date.now();
      await reject(transports.up, held);
      await waitFor(() => consumer.received.length > 0, WAKE_DEADLINE_MS, 'the native consumer to wake');
      const [{ envelope: copy, at }] = consumer.received;
      expect(at - rejectedAt).toBeLessThan(WAKE_DEADLINE_MS);
      expectSameMessage(copy, envelope, { receiverName: NATIVE_NAME });
      expect(idOf(copy)).not.toBe(idOf(sent));
      expect(copy.last(RedeliveryStamp)?.retryCount).toBe(1);
      await ack(transports.ours, copy);
    } finally {
      await consumer.stop();
    }
  }, 15000);
});
