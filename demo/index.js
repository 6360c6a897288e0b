'use strict';

// The package's main job on the embedded default: a producer and a consumer through
// SqlTransport on a SQLite file (or any --dsn), with delayed messages and handlers that fail
// once and come back through reject().

const { performance } = require('node:perf_hooks');
const {
  DelayStamp,
  Envelope,
  JsonSerializer,
  RedeliveryStamp,
  Worker,
} = require('@schally/nestjs-messenger');
const { SqlTransport, RedisStreamsTransport } = require('..');
const { engineOfDsn } = require('../bench/engines');
const { parseArgs, USAGE } = require('./args');
const { redactDsn } = require('../lib/cli/redact-dsn');
const { Progress } = require('../scripts/progress');

/** The demo's message: a registered class, so it comes back as itself. */
class OrderPlaced {
  constructor(id, dueAt, failOnce, note) {
    this.id = id;
    this.dueAt = dueAt;
    this.failOnce = failOnce;
    this.note = note;
  }
}

function percentile(sorted, p) {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

async function produce(transport, options) {
  for (let i = 0; i < options.messages; i += 1) {
    const delayMs = Math.random() < options.delayed ? 50 + Math.floor(Math.random() * 450) : 0;
    const message = new OrderPlaced(`order-${i}`, performance.now() + delayMs, Math.random() < options.failing, 'x'.repeat(64));
    let envelope = new Envelope(message);
    if (delayMs > 0) envelope = envelope.with(new DelayStamp(delayMs));
    await transport.send(envelope);
  }
}

async function main() {
  const options = parseArgs(process.argv.slice(2));
  if (options.help) {
    process.stdout.write(USAGE);
    return;
  }
  const serializer = new JsonSerializer([OrderPlaced]);
  const queueName = `demo_${process.pid}_${Date.now()}`;
  process.stdout.write(`Demo on ${redactDsn(options.dsn)}: ${options.messages} messages, queue ${queueName}\n`);
  // The same program on any supported DSN: SQL engines by table queue, Redis by stream.
  const isRedis = engineOfDsn(options.dsn)?.kind === 'redis';
  const make = () =>
    isRedis
      ? new RedisStreamsTransport({ dsn: options.dsn, stream: `messenger:{${queueName}}`, name: 'demo', serializer })
      : new SqlTransport({ dsn: options.dsn, queueName, name: 'demo', serializer });
  const producer = make();
  const consumer = make();

  const latencies = [];
  const failedOnce = new Set();
  let handled = 0;
  let redeliveries = 0;
  const progress = new Progress(options.messages);
  const stop = new AbortController();
  const bus = {
    async dispatch(envelope) {
      const order = envelope.message;
      if ((envelope.last(RedeliveryStamp)?.retryCount ?? 0) > 0) redeliveries += 1;
      if (order.failOnce && !failedOnce.has(order.id)) {
        failedOnce.add(order.id);
        throw new Error(`simulated failure for ${order.id}`);
      }
      // Send-to-handle latency, counted from when the message was due.
      latencies.push(performance.now() - order.dueAt);
      handled += 1;
      progress.update(handled, `${handled}/${options.messages} handled, ${redeliveries} redelivered`);
      if (handled === options.messages) stop.abort();
    },
  };

  const started = performance.now();
  const worker = new Worker(consumer, bus).run(stop.signal);
  await produce(producer, options);
  await worker;
  const seconds = (performance.now() - started) / 1000;
  progress.end();
  await Promise.all([producer.close(), consumer.close()]);

  latencies.sort((a, b) => a - b);
  process.stdout.write(
    [
      '',
      `  messages      ${handled}`,
      `  redeliveries  ${redeliveries} (handlers that failed once, back through reject())`,
      `  throughput    ${Math.round(handled / seconds)} msgs/s (${seconds.toFixed(2)} s, sending and handling together)`,
      `  latency p50   ${percentile(latencies, 50).toFixed(2)} ms (send, or due time if delayed, to handle)`,
      `  latency p99   ${percentile(latencies, 99).toFixed(2)} ms`,
      '',
    ].join('\n'),
  );
}

main().catch((error) => {
  process.stderr.write(`demo failed: ${error.stack ?? error}\n`);
  process.exitCode = 1;
});
