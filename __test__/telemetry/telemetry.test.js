'use strict';

// OpenTelemetry metrics on every engine, read back through the SDK's in-memory
// exporter: exact sent and consumed counts, the send and receive (claim) durations, the
// messaging semantic conventions' names, units and attributes, `error.type` on a failed send;
// the stats() figures and the queue depth as gauges, summed over a destination's transports.
// And, in a process where `@opentelemetry/api` cannot be resolved, transports that work and
// look for it once, at load, never again.

const path = require('node:path');
const { metrics } = require('@opentelemetry/api');
const {
  AggregationTemporality,
  DataPointType,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
} = require('@opentelemetry/sdk-metrics');

// Registered before the package is required (the engines' Transport getters require it).
const exporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
const reader = new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 3_600_000 });
metrics.setGlobalMeterProvider(new MeterProvider({ readers: [reader] }));

const { version } = require('../../package.json');
const { postgres, mysql, sqlite, redis } = require('../support/engines');
const { closedPort } = require('../support/ports');
const { envelopeOf, receiveUpTo, serializer } = require('../support/transport-helpers');
const { engineTransports } = require('../support/engine-transports');
const { runChild } = require('../support/child');

const SYSTEMS = { postgres: 'postgresql', mysql: 'mysql', sqlite: 'sqlite', redis: 'redis' };
const SENDS = 5;
const GAUGES = [
  'nestjs_messenger.transport.in_flight',
  'nestjs_messenger.transport.buffered',
  'nestjs_messenger.transport.pending_acks',
  'nestjs_messenger.transport.stale_settles',
  'nestjs_messenger.transport.reconnects',
  'nestjs_messenger.queue.depth',
];

/** This package's metrics as exported now (cumulative since the provider was registered). */
async function exportedMetrics() {
  exporter.reset();
  await reader.forceFlush();
  const [exported] = exporter.getMetrics();
  return exported.scopeMetrics.find((scope) => scope.scope.name === 'nestjs-messenger-native');
}

/** The data points of metric `name` for one destination: `[attributes, value]` pairs. */
function pointsOf(scope, name, destination) {
  const metric = scope.metrics.find((m) => m.descriptor.name === name);
  return metric.dataPoints
    .filter((point) => point.attributes['messaging.destination.name'] === destination)
    .map((point) => [point.attributes, point.value]);
}

/** A transport on `target` whose sends fail: a refused port, or a file that cannot be opened. */
async function failingTransport(engine, target) {
  const dsn =
    engine.name === 'sqlite'
      ? 'sqlite:///nonexistent-nmn-dir/nested/queue.db'
      : engine.dsnWith({ port: await closedPort() });
  return new engine.Transport({ dsn, serializer: serializer(), connectTimeoutMs: 1000, ...target });
}

describe.each([postgres, mysql, sqlite, redis])('$name: OpenTelemetry metrics', (engine) => {
  const transports = engineTransports(engine, 'ot');

  it('counts sends and consumed messages, times sends and claims, with the conventions’ attributes', async () => {
    const t = transports.open();
    const target = transports.lastTarget;
    const destination = target.queueName ?? target.stream;
    for (let i = 0; i < SENDS; i += 1) await t.send(envelopeOf(`m${i}`));
    const failing = transports.track(await failingTransport(engine, target));
    const failure = await failing.send(envelopeOf('lost')).catch((error) => error);
    expect(failure).toBeInstanceOf(Error);

    const received = await receiveUpTo(t, SENDS, 5000);
    expect(received).toHaveLength(SENDS);
    for (const envelope of received) await t.ack(envelope);
    const { claims, lastClaimMs } = t.stats();
    expect(claims).toBe(1);

    const common = { 'messaging.system': SYSTEMS[engine.name], 'messaging.destination.name': destination };
    const send = { ...common, 'messaging.operation.name': 'send', 'messaging.operation.type': 'send' };
    const failed = { ...send, 'error.type': failure.name };
    const receive = { ...common, 'messaging.operation.name': 'receive', 'messaging.operation.type': 'receive' };
    expect(failure.name).toBe('TransportConnectionError');

    const scope = await exportedMetrics();
    expect(scope.scope.version).toBe(version);
    expect(pointsOf(scope, 'messaging.client.sent.messages', destination)).toEqual(
      expect.arrayContaining([
        [send, SENDS],
        [failed, 1],
      ]),
    );
    expect(pointsOf(scope, 'messaging.client.sent.messages', destination)).toHaveLength(2);
    expect(pointsOf(scope, 'messaging.client.consumed.messages', destination)).toEqual([[receive, SENDS]]);

    const durations = new Map(
      pointsOf(scope, 'messaging.client.operation.duration', destination).map(([attributes, value]) => [
        JSON.stringify(attributes),
        value,
      ]),
    );
    expect(durations.size).toBe(3);
    const sendDurations = durations.get(JSON.stringify(send));
    expect(sendDurations).toMatchObject({ count: SENDS });
    expect(sendDurations.sum).toBeGreaterThan(0);
    expect(durations.get(JSON.stringify(failed))).toMatchObject({ count: 1 });
    // The one claim: its statement's duration, in seconds.
    const claimDurations = durations.get(JSON.stringify(receive));
    expect(claimDurations).toMatchObject({ count: 1, min: lastClaimMs / 1000, max: lastClaimMs / 1000 });
    expect(claimDurations.sum).toBeGreaterThan(0);
  }, 20000);

  it('publishes the stats() figures as gauges, per destination, until the transport closes', async () => {
    const t = transports.open();
    const target = transports.lastTarget;
    const destination = target.queueName ?? target.stream;
    for (let i = 0; i < 4; i += 1) await t.send(envelopeOf(`g${i}`));
    // Two delivered and not settled; the loop's end gives back what it prefetched.
    const delivered = await receiveUpTo(t, 2, 5000);
    expect(delivered).toHaveLength(2);
    const depth = await t.getMessageCount();
    expect({ depth, ...t.stats() }).toMatchObject({ depth: 2, inFlight: 2, buffered: 0, pendingAcks: 0, staleSettles: 0, reconnects: 0 });

    const attributes = { 'messaging.system': SYSTEMS[engine.name], 'messaging.destination.name': destination };
    const gauges = async () => {
      const scope = await exportedMetrics();
      const of = (name) => (scope.metrics.some((m) => m.descriptor.name === name) ? pointsOf(scope, name, destination) : []);
      return Object.fromEntries(GAUGES.map((name) => [name, of(name)]));
    };
    expect(await gauges()).toEqual({
      'nestjs_messenger.transport.in_flight': [[attributes, 2]],
      'nestjs_messenger.transport.buffered': [[attributes, 0]],
      'nestjs_messenger.transport.pending_acks': [[attributes, 0]],
      'nestjs_messenger.transport.stale_settles': [[attributes, 0]],
      'nestjs_messenger.transport.reconnects': [[attributes, 0]],
      'nestjs_messenger.queue.depth': [[attributes, 2]],
    });

    // A second transport on the same destination adds its figures to the same points.
    const second = transports.track(new engine.Transport({ dsn: transports.dsn, serializer: serializer(), ...target }));
    const [third] = await receiveUpTo(second, 1, 5000);
    const summed = await gauges();
    expect(summed['nestjs_messenger.transport.in_flight']).toEqual([[attributes, 3]]);
    expect(summed['nestjs_messenger.queue.depth']).toEqual([[attributes, 1]]);

    for (const envelope of delivered) await t.ack(envelope);
    await second.ack(third);
    await t.close();
    await second.close();
    // Nothing of this process is on the destination any more: its figures read 0. (The depth
    // is no longer read; a cumulative export keeps its last value.)
    const closed = await gauges();
    for (const name of GAUGES.filter((g) => g.startsWith('nestjs_messenger.transport.'))) {
      expect([name, closed[name]]).toEqual([name, [[attributes, 0]]]);
    }
  }, 20000);

  it('names its instruments, units and meter per the conventions', async () => {
    const t = transports.open();
    await t.send(envelopeOf('x'));
    const descriptors = Object.fromEntries(
      (await exportedMetrics()).metrics.map(({ descriptor, dataPointType }) => [
        descriptor.name,
        [descriptor.unit, dataPointType],
      ]),
    );
    expect(descriptors).toEqual({
      'messaging.client.sent.messages': ['{message}', DataPointType.SUM],
      'messaging.client.consumed.messages': ['{message}', DataPointType.SUM],
      'messaging.client.operation.duration': ['s', DataPointType.HISTOGRAM],
      'nestjs_messenger.transport.in_flight': ['{message}', DataPointType.GAUGE],
      'nestjs_messenger.transport.buffered': ['{message}', DataPointType.GAUGE],
      'nestjs_messenger.transport.pending_acks': ['{ack}', DataPointType.GAUGE],
      'nestjs_messenger.transport.stale_settles': ['{settle}', DataPointType.GAUGE],
      'nestjs_messenger.transport.reconnects': ['{reconnect}', DataPointType.GAUGE],
      'nestjs_messenger.queue.depth': ['{message}', DataPointType.GAUGE],
    });
  });

  it('without @opentelemetry/api: works, and looks for it once, at load', async () => {
    transports.open();
    const result = runChild(
      `
      (async () => {
        const t = new Transport(transportOptions());
        for (const id of ['a', 'b', 'c']) await t.send(new Envelope(new M(id)));
        const got = [];
        for await (const envelope of t.get(new AbortController().signal)) {
          got.push(envelope.message.id);
          await t.ack(envelope);
          if (got.length === 3) break;
        }
        const { sent, claimed, acked } = t.stats();
        await t.close();
        console.log(JSON.stringify({ got, sent, claimed, acked, lookups: globalThis.hiddenModuleLookups }));
      })();
      `,
      {
        env: {
          KIND: engine.name === 'redis' ? 'redis' : 'sql',
          DSN: transports.dsn,
          TARGET: JSON.stringify(transports.lastTarget),
          NODE_OPTIONS: `--require ${path.join(__dirname, '..', 'support', 'hide-module.js')}`,
          HIDE_MODULE: '@opentelemetry/api',
        },
      },
    );
    expect(result.stderr).toBe('');
    expect(JSON.parse(result.stdout)).toEqual({ got: ['a', 'b', 'c'], sent: 3, claimed: 3, acked: 3, lookups: 1 });
  }, 15000);
});

describe('a meter provider registered after the first transport', () => {
  it('counts for the transports made after it; one made before it records nothing', () => {
    // Without a provider the API's meter is a no-op: a transport made then times nothing (no
    // cost per send), and the next transport looks again.
    const result = runChild(
      `
      const { metrics } = require('@opentelemetry/api');
      const sdk = require('@opentelemetry/sdk-metrics');
      (async () => {
        const before = new Transport(transportOptions({ queueName: 'before' }));
        const exporter = new sdk.InMemoryMetricExporter(sdk.AggregationTemporality.CUMULATIVE);
        const reader = new sdk.PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 3600000 });
        metrics.setGlobalMeterProvider(new sdk.MeterProvider({ readers: [reader] }));
        const after = new Transport(transportOptions({ queueName: 'after' }));
        for (const t of [before, after]) for (const id of ['a', 'b']) await t.send(new Envelope(new M(id)));
        await reader.forceFlush();
        const scope = exporter.getMetrics()[0]?.scopeMetrics.find((s) => s.scope.name === 'nestjs-messenger-native');
        const sent = scope?.metrics.find((m) => m.descriptor.name === 'messaging.client.sent.messages');
        const points = (sent?.dataPoints ?? []).map((p) => [p.attributes['messaging.destination.name'], p.value]);
        await before.close();
        await after.close();
        console.log(JSON.stringify(points));
      })();
      `,
      { env: { KIND: 'sql', DSN: sqlite.runDsn('nmn-otel-late') } },
    );
    expect(result.stderr).toBe('');
    expect(JSON.parse(result.stdout)).toEqual([['after', 2]]);
  }, 15000);
});
