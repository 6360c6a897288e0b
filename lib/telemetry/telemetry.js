'use strict';

// lib/telemetry/: what a transport tells the app about itself, beside its messages:
// OpenTelemetry metrics (this file, and transport-gauges.js for the `stats()` figures), the
// events an operator must know pulled from the native side (event-log.js; by default to Nest's
// `Logger`, nest-logger.js, else as process warnings, warning-codes.js), and the
// @nestjs/terminus health indicator over `transport.health()` (transport-health-indicator.js).

// OpenTelemetry metrics, only when the app has `@opentelemetry/api` installed (an optional
// peer) and a meter provider registered before the transport is made. Otherwise
// `telemetryFor()` returns undefined and the transports record nothing.
// Names and attributes follow the OpenTelemetry messaging semantic conventions (client
// metrics). Nothing is ever added to a stored message: no propagation headers.

const { performance } = require('node:perf_hooks');
const { version } = require('../../package.json');
const { transportGauges } = require('./transport-gauges');

/** `@opentelemetry/api`, or undefined when the app does not have it. */
const api = optionalRequire('@opentelemetry/api');

/** Histogram buckets the conventions advise for `messaging.client.operation.duration`. */
const DURATION_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10];

/** The `messaging.system` value of each SQL dialect (`resolveSqlOptions().dialect`). */
const SQL_SYSTEMS = { postgres: 'postgresql', mysql: 'mysql', sqlite: 'sqlite' };

let instruments;

function optionalRequire(name) {
  try {
    return require(name);
  } catch {
    return undefined;
  }
}

/**
 * The process's instruments, made on first use (so a provider registered after require counts);
 * undefined while no meter provider is registered: a no-op meter records nothing, and timing
 * every send for it would cost every send. The next transport asks again.
 */
function meterInstruments() {
  const meter = api.metrics.getMeter('nestjs-messenger-native', version);
  if (meter instanceof api.createNoopMeter().constructor) return undefined;
  return {
    sent: meter.createCounter('messaging.client.sent.messages', {
      description: 'Messages this process sent (stored or failed).',
      unit: '{message}',
    }),
    consumed: meter.createCounter('messaging.client.consumed.messages', {
      description: 'Messages this process handed to its handlers.',
      unit: '{message}',
    }),
    duration: meter.createHistogram('messaging.client.operation.duration', {
      description: 'How long a send (until settled) or a claim (its statement) took.',
      unit: 's',
      advice: { explicitBucketBoundaries: DURATION_BUCKETS },
    }),
    gauges: transportGauges(meter),
  };
}

/** What one transport records: sends, consumed messages and claim durations; its gauges. */
class TransportTelemetry {
  #common;
  #send;
  #receive;
  #claimsSeen = 0;
  #watched;

  /**
   * @param {string} system `messaging.system`
   * @param {string} destination `messaging.destination.name`
   */
  constructor(system, destination) {
    const common = { 'messaging.system': system, 'messaging.destination.name': destination };
    this.#common = common;
    this.#send = { ...common, 'messaging.operation.name': 'send', 'messaging.operation.type': 'send' };
    this.#receive = { ...common, 'messaging.operation.name': 'receive', 'messaging.operation.type': 'receive' };
  }

  /**
   * Times a queued send until it settles: counts it as sent, with `error.type` if it failed.
   * @template T
   * @param {Promise<T>} sending
   * @returns {Promise<T>}
   */
  async send(sending) {
    const started = performance.now();
    let attributes = this.#send;
    try {
      return await sending;
    } catch (error) {
      attributes = { ...attributes, 'error.type': error?.name || '_OTHER' };
      throw error;
    } finally {
      instruments.sent.add(1, attributes);
      instruments.duration.record((performance.now() - started) / 1000, attributes);
    }
  }

  /** One message delivered to the application by get(). */
  consumed() {
    instruments.consumed.add(1, this.#receive);
  }

  /**
   * After a wait for messages: records the claim statement's duration if a claim returned rows
   * since the last look (not for rows an idle wait claimed: the queue times those as 0 ms).
   * @param {{ claims: number, lastClaimMs: number }} stats the native queue's stats()
   */
  filled({ claims, lastClaimMs }) {
    if (claims === this.#claimsSeen) return;
    this.#claimsSeen = claims;
    if (lastClaimMs > 0) instruments.duration.record(lastClaimMs / 1000, this.#receive);
  }

  /**
   * Publishes `transport`'s `stats()` figures (and its queue's depth) as gauges until `unwatch()`.
   * @param {import('../transports/native-transport').NativeTransport} transport
   */
  watch(transport) {
    this.#watched ??= instruments.gauges.watch(transport, this.#common);
  }

  /** No more gauge readings of the transport (it is closing). */
  unwatch() {
    if (this.#watched !== undefined) instruments.gauges.unwatch(this.#watched);
    this.#watched = undefined;
  }
}

/**
 * A transport's recorder, or undefined when `@opentelemetry/api` is not installed.
 * @param {string} system `messaging.system` (see `sqlSystem()`; `redis` for Redis)
 * @param {string} destination the queue name (SQL) or the stream (Redis)
 * @returns {TransportTelemetry | undefined}
 */
function telemetryFor(system, destination) {
  if (api === undefined) return undefined;
  instruments ??= meterInstruments();
  return instruments === undefined ? undefined : new TransportTelemetry(system, destination);
}

/** @param {string} dialect `resolveSqlOptions().dialect` */
const sqlSystem = (dialect) => SQL_SYSTEMS[dialect];

module.exports = { telemetryFor, sqlSystem };
