'use strict';

// Mixed fleets: the upstream TypeScript transports and ours on one queue or stream, as during a
// rolling migration. What every mixed-fleet file needs: the message class both sides (and the
// Redis child processes) register, an outgoing envelope with stamps, the sendable-stamps view,
// and per-test bookkeeping: deliveries the test has not settled are acked, and every
// transport is closed, after each test.

const {
  BusNameStamp,
  Envelope,
  JsonSerializer,
  ReceivedStamp,
  SentStamp,
  TransportMessageIdStamp,
} = require('@schally/nestjs-messenger');
const { settleWithin } = require('./transport-helpers');

/** The message class the senders, the receivers and the child processes all register. */
class FleetMessage {
  /**
   * @param {number} n
   * @param {string} [text]
   * @param {Record<string, unknown>} [meta]
   */
  constructor(n, text = '', meta = {}) {
    this.n = n;
    this.text = text;
    this.meta = meta;
  }
}

function fleetSerializer() {
  return new JsonSerializer([FleetMessage]);
}

function idOf(envelope) {
  const stamp = envelope.last(TransportMessageIdStamp);
  if (stamp === undefined) throw new Error('envelope has no TransportMessageIdStamp');
  return stamp.id;
}

/** The sendable stamps as they travel (class name + own props, Dates as ISO strings). */
function sendableStamps(envelope) {
  const out = [];
  for (const [type, stamps] of envelope.all()) {
    if (type === ReceivedStamp || type === TransportMessageIdStamp) continue;
    for (const stamp of stamps) out.push({ type: type.name, data: JSON.parse(JSON.stringify({ ...stamp })) });
  }
  return out;
}

/** A message with stamps, the way a bus would hand it to a transport. */
function outgoing(n, text = `message ${n}`, ...extraStamps) {
  return new Envelope(new FleetMessage(n, text, { origin: 'mixed-fleet', tags: ['a', 'ü', '🚀', 'quote " \\ \n\t'] }), [
    new BusNameStamp('messenger.bus.default'),
    new SentStamp('FleetMessage', 'async'),
    ...extraStamps,
  ]);
}

/**
 * The per-test resources of a mixed-fleet file, with its afterEach registered: deliveries not
 * yet settled by the test are acked (so close() can finish), then every transport is closed
 * (newest first), then `cleanup()` removes what the test stored; the first failure fails the
 * test.
 * @param {{ cleanup?: () => Promise<void>, onCloseTimeout?: (entry: { transport: any, label: string }) => void }} [options]
 */
function fleetHarness({ cleanup = async () => {}, onCloseTimeout = () => {} } = {}) {
  /** @type {{ transport: any, label: string }[]} */
  let openTransports = [];
  /** Deliveries not yet settled by the test, per transport. */
  let unsettled = new Map();

  afterEach(async () => {
    const failures = [];
    for (const [transport, envelopes] of unsettled) {
      for (const envelope of envelopes.values()) {
        const outcome = await settleWithin(transport.ack(envelope), 2000);
        if (outcome !== 'timeout' && outcome.error) failures.push(outcome.error);
      }
    }
    for (const entry of openTransports.reverse()) {
      const outcome = await settleWithin(entry.transport.close(), 5000);
      if (outcome === 'timeout') {
        failures.push(new Error(`${entry.label} close() did not finish within 5 s`));
        onCloseTimeout(entry);
      } else if (outcome.error) {
        failures.push(new Error(`${entry.label} close failed: ${outcome.error.message}`));
      }
    }
    openTransports = [];
    unsettled = new Map();
    await cleanup();
    if (failures.length > 0) throw failures[0];
  }, 30000);

  function open(transport, label) {
    openTransports.push({ transport, label });
    return transport;
  }

  function track(transport, envelope) {
    if (!unsettled.has(transport)) unsettled.set(transport, new Map());
    unsettled.get(transport).set(String(idOf(envelope)), envelope);
  }

  async function ack(transport, envelope) {
    await transport.ack(envelope);
    unsettled.get(transport)?.delete(String(idOf(envelope)));
  }

  async function reject(transport, envelope) {
    await transport.reject(envelope);
    unsettled.get(transport)?.delete(String(idOf(envelope)));
  }

  /**
   * Up to `count` deliveries of one get() loop within `timeoutMs`, as `{ envelope, at }`; the
   * loop then ends. Deliveries are tracked until the test settles them.
   */
  async function receiveTimed(transport, count, timeoutMs = 5000) {
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), timeoutMs);
    const received = [];
    try {
      for await (const envelope of transport.get(controller.signal)) {
        track(transport, envelope);
        received.push({ envelope, at: Date.now() });
        if (received.length >= count) break;
      }
    } finally {
      clearTimeout(timer);
      controller.abort();
    }
    return received;
  }

  /** Up to `count` envelopes of one get() loop within `timeoutMs` (tracked until settled). */
  async function receive(transport, count, timeoutMs = 5000) {
    return (await receiveTimed(transport, count, timeoutMs)).map((r) => r.envelope);
  }

  /**
   * A background get() loop recording `{ envelope, at, by, n, id }` into `sink`. With `autoAck`
   * every delivery is acked before the next is pulled (like the core Worker); otherwise
   * deliveries are tracked until the test settles them.
   */
  function startConsumer(transport, { label, sink = [], autoAck = false } = {}) {
    const controller = new AbortController();
    const done = (async () => {
      for await (const envelope of transport.get(controller.signal)) {
        sink.push({ envelope, at: Date.now(), by: label, n: envelope.message.n, id: String(idOf(envelope)) });
        if (autoAck) await transport.ack(envelope);
        else track(transport, envelope);
      }
    })();
    return {
      received: sink,
      done,
      async stop() {
        controller.abort();
        await done;
      },
    };
  }

  return { open, track, ack, reject, receive, receiveTimed, startConsumer };
}

module.exports = {
  FleetMessage,
  fleetSerializer,
  idOf,
  sendableStamps,
  outgoing,
  fleetHarness,
};
