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

  test('idle upstream consumer (useNotify default) wakes on a native send', async () => {
    const transports = pair('mf_wake_up', { upstreamOptions: { pollIntervalMs: 60000 } });
    await transports.ours.getMessageCount(); // warm the native side so the send is one statement
    const consumer = await startIdleConsumer(transports.up, 'upstream');
    try {
      const envelope = outgoing(1, 'wake up, upstream');
      const sentAt = Date.now();
      const sent = await transports.ours.send(envelope);
      await waitFor(() => consumer.received.length > 0, WAKE_DEADLINE_MS, 'the upstream consumer to wake');
      const [{ envelope: received, at }] = consumer.received;
      expect(at - sentAt).toBeLessThan(WAKE_DEADLINE_MS);
      expectSameMessage(received, envelope, { id: idOf(sent), receiverName: UPSTREAM_NAME });
      await ack(transports.up, received);
    } finally {
      await consumer.stop();
    }
  }, 15000);

  test('idle native consumer (pollIntervalMs 60000) wakes on an upstream send', async () => {
    const transports = pair('mf_wake_native', { nativeOptions: { pollIntervalMs: 60000 } });
    await transports.up.getMessageCount();
    const consumer = await startIdleConsumer(transports.ours, 'native');
    try {
      const envelope = outgoing(2, 'wake up, native');
      const sentAt = Date.now();
      const sent = await transports.up.send(envelope);
      await waitFor(() => consumer.received.length > 0, WAKE_DEADLINE_MS, 'the native consumer to wake');
      const [{ envelope: received, at }] = consumer.received;
      expect(at - sentAt).toBeLessThan(WAKE_DEADLINE_MS);
      expectSameMessage(received, envelope, { id: idOf(sent), receiverName: NATIVE_NAME });
      await ack(transports.ours, received);
    } finally {
      await consumer.stop();
    }
  }, 15000);

  test('idle upstream consumer wakes on a native reject copy', async () => {
    const transports = pair('mf_wake_up_rej', { upstreamOptions: { pollIntervalMs: 60000 } });
    const envelope = outgoing(3, 'rejected by native');
    const sent = await transports.ours.send(envelope);
    const [held] = await receive(transports.ours, 1);
    expect(idOf(held)).toBe(idOf(sent));

    // The only row is in flight: the upstream consumer finds nothing and nothing scheduled.
    const consumer = await startIdleConsumer(transports.up, 'upstream');
    try {
      const rejectedAt = Date.now();
      await reject(transports.ours, held);
      await waitFor(() => consumer.received.length > 0, WAKE_DEADLINE_MS, 'the upstream consumer to wake');
      const [{ envelope: copy, at }] = consumer.received;
      expect(at - rejectedAt).toBeLessThan(WAKE_DEADLINE_MS);
      expectSameMessage(copy, envelope, { receiverName: UPSTREAM_NAME });
      expect(idOf(copy)).not.toBe(idOf(sent));
      expect(copy.last(RedeliveryStamp)?.retryCount).toBe(1);
      await ack(transports.up, copy);
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
