'use strict';

// The `stats()` figures as OpenTelemetry observable gauges, read when the app's metric reader
// collects (never on a transport's own paths). Every transport made while a meter provider is
// registered is watched until it closes or is collected; figures are summed per destination
// (`messaging.system` and `messaging.destination.name`), as the other instruments are keyed,
// and read 0 once no transport of the process is left on a destination. The queue depth is the
// one figure that needs I/O: the count `health()` reads, asked of one transport per destination,
// within HEALTH_PROBE_MS, and left out when it does not answer (a cumulative export then keeps
// its last reading).

/** The bound on one queue-depth read at collection. */
const HEALTH_PROBE_MS = 1000;

/** The gauges read from `stats()` without I/O: instrument name, stats field, description, unit. */
const STATS_GAUGES = [
  ['nestjs_messenger.transport.in_flight', 'inFlight', 'Delivered messages whose handler has not acked or rejected them.', '{message}'],
  ['nestjs_messenger.transport.buffered', 'buffered', 'Claimed messages waiting in the prefetch buffer.', '{message}'],
  ['nestjs_messenger.transport.pending_acks', 'pendingAcks', 'Write-behind acks recorded and not yet written.', '{ack}'],
  ['nestjs_messenger.transport.stale_settles', 'staleSettles', 'Acks and rejects ignored because the claim had been taken over, since each transport was made.', '{settle}'],
  ['nestjs_messenger.transport.reconnects', 'reconnects', 'Times a consumer had its server back after a connection failure, since each transport was made.', '{reconnect}'],
];

/**
 * A transport's side of the gauges: what they read of it, held weakly (a transport dropped
 * without `close()` is still collected, and then no longer read).
 */
class WatchedTransport {
  #transport;

  /**
   * @param {{ stats(): import('../index').TransportStats, health(options: { timeoutMs: number }): Promise<import('../index').TransportHealth> }} transport
   * @param {Record<string, string>} attributes `messaging.system` and `messaging.destination.name`
   */
  constructor(transport, attributes) {
    this.#transport = new WeakRef(transport);
    this.attributes = attributes;
    this.key = JSON.stringify(attributes);
  }

  /** The transport, or undefined once it was collected. */
  get transport() {
    return this.#transport.deref();
  }
}

/**
 * Makes the gauges on `meter` and reads every watched transport at each collection.
 * @param {import('@opentelemetry/api').Meter} meter
 * @returns {{ watch(transport: object, attributes: Record<string, string>): WatchedTransport, unwatch(watched: WatchedTransport): void }}
 */
function transportGauges(meter) {
  /** @type {Set<WatchedTransport>} */
  const watched = new Set();
  const forget = new FinalizationRegistry((entry) => watched.delete(entry));
  const gauges = STATS_GAUGES.map(([name, field, description, unit]) => ({
    field,
    gauge: meter.createObservableGauge(name, { description, unit }),
  }));
  const depth = meter.createObservableGauge('nestjs_messenger.queue.depth', {
    description: 'Due messages not in flight, as getMessageCount() counts them (one transport per destination asked).',
    unit: '{message}',
  });

  /** The live watched transports, one list per destination key. */
  function byDestination() {
    const groups = new Map();
    for (const entry of watched) {
      const transport = entry.transport;
      if (transport === undefined) continue;
      const group = groups.get(entry.key) ?? { key: entry.key, attributes: entry.attributes, transports: [] };
      group.transports.push(transport);
      groups.set(entry.key, group);
    }
    return groups.values();
  }

  /** Destinations read at the last collection: key → attributes. */
  let lastRead = new Map();
  meter.addBatchObservableCallback(
    (result) => {
      const read = new Map();
      for (const { key, attributes, transports } of byDestination()) {
        read.set(key, attributes);
        const figures = transports.map((transport) => transport.stats());
        for (const { field, gauge } of gauges) {
          result.observe(gauge, figures.reduce((sum, stats) => sum + stats[field], 0), attributes);
        }
      }
      // A destination whose last transport closed reads 0 once: a cumulative export keeps an
      // attribute set's last value after it is no longer observed, and nothing of this process
      // is in flight there any more.
      for (const [key, attributes] of lastRead) {
        if (!read.has(key)) for (const { gauge } of gauges) result.observe(gauge, 0, attributes);
      }
      lastRead = read;
    },
    gauges.map(({ gauge }) => gauge),
  );

  depth.addCallback(async (result) => {
    const probes = [...byDestination()].map(async ({ attributes, transports }) => {
      const { status, details } = await transports[0].health({ timeoutMs: HEALTH_PROBE_MS });
      if (status === 'up') result.observe(details.messages, attributes);
    });
    await Promise.all(probes);
  });

  return {
    watch(transport, attributes) {
      const entry = new WatchedTransport(transport, attributes);
      watched.add(entry);
      forget.register(transport, entry, entry);
      return entry;
    },
    unwatch(entry) {
      watched.delete(entry);
      forget.unregister(entry);
    },
  };
}

module.exports = { transportGauges };
