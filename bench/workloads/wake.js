'use strict';

const path = require('node:path');
const { fork } = require('node:child_process');
const { performance } = require('node:perf_hooks');
const { setTimeout: sleep } = require('node:timers/promises');
const { BenchMessage, sendAsApp } = require('../message');
const { sqliteDsn, SQLITE_FILE_VAR } = require('../transports');

/** p50 and p99 of `samples` (ms), or undefined when there are none. */
function percentiles(samples) {
  if (samples.length === 0) return undefined;
  const sorted = [...samples].sort((a, b) => a - b);
  const at = (p) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
  return { p50: at(50), p99: at(99) };
}

/**
 * A B4 run's figures: the wake-ups' p50 and p99, and the sends' own (`sendP50`, `sendP99`),
 * which tell whether a slow wake-up was a slow store (the server) or a slow claim and
 * hand-over (the consumer).
 */
function wakeResult(latencies, sends) {
  const send = percentiles(sends);
  return { ...percentiles(latencies), sendP50: send.p50, sendP99: send.p99 };
}

/**
 * B4: a consumer idles on an empty queue; `count` messages are sent 10 ms apart by another
 * transport instance, as an app sends them (`sendAsApp`); the time from send() to the message
 * being yielded, p50 and p99, and the time send() itself took (`sendP50`, `sendP99`).
 */
async function wake({ makeTransport, count = 300, gapMs = 10 }) {
  const consumer = makeTransport();
  const producer = makeTransport();
  await sendAsApp(producer, new BenchMessage('warm-up'));
  const latencies = [];
  const controller = new AbortController();
  const consuming = (async () => {
    for await (const envelope of consumer.get(controller.signal)) {
      const { sentAt, id } = envelope.message;
      if (id !== 'warm-up') latencies.push(performance.now() - sentAt);
      await consumer.ack(envelope);
      if (latencies.length === count) break;
    }
  })();
  await sleep(500); // idle: the consumer has drained the warm-up and waits
  const sends = [];
  for (let i = 0; i < count; i += 1) {
    const sentAt = performance.now();
    await sendAsApp(producer, new BenchMessage(`w-${i}`, sentAt));
    sends.push(performance.now() - sentAt);
    await sleep(gapMs);
  }
  const deadline = setTimeout(() => controller.abort(), 10000);
  await consuming;
  clearTimeout(deadline);
  controller.abort();
  await Promise.all([consumer.close(), producer.close()]);
  if (latencies.length !== count) throw new Error(`woke for ${latencies.length} of ${count}`);
  return wakeResult(latencies, sends);
}

/** Milliseconds on the machine's monotonic clock: the same in every process here. */
const machineMs = () => Number(process.hrtime.bigint()) / 1e6;

/**
 * B4 across processes: as `wake`, but the messages come from a producer process of its own,
 * so nothing in this process knows they were sent (PostgreSQL: only the NOTIFY wakes the
 * consumer; Redis: the blocked read; MariaDB: the poll).
 */
async function wakeFromAnotherProcess({ makeTransport, job, queue, count = 300, gapMs = 10 }) {
  const consumer = makeTransport();
  const latencies = [];
  const controller = new AbortController();
  const consuming = (async () => {
    for await (const envelope of consumer.get(controller.signal)) {
      latencies.push(machineMs() - envelope.message.sentAt);
      await consumer.ack(envelope);
      if (latencies.length === count) break;
    }
  })();
  await sleep(500); // idle: the consumer waits on an empty queue
  // On SQLite the producer must write to this process's file, not a fresh one of its own.
  const env = job.engine === 'sqlite' ? { ...process.env, [SQLITE_FILE_VAR]: sqliteDsn() } : process.env;
  const producer = fork(path.join(__dirname, '..', 'wake-producer.js'), [JSON.stringify({ ...job, queue, count, gapMs })], {
    env,
  });
  let sends = [];
  producer.once('message', (times) => {
    sends = times;
  });
  const exited = new Promise((resolve, reject) => {
    producer.once('exit', (code) => (code === 0 ? resolve() : reject(new Error(`the producer exited with ${code}`))));
  });
  await exited;
  const deadline = setTimeout(() => controller.abort(), 10000);
  await consuming;
  clearTimeout(deadline);
  controller.abort();
  await consumer.close();
  if (latencies.length !== count) throw new Error(`woke for ${latencies.length} of ${count}`);
  if (sends.length !== count) throw new Error(`the producer reported ${sends.length} of ${count} sends`);
  return wakeResult(latencies, sends);
}

module.exports = { wake, wakeFromAnotherProcess, machineMs, percentiles };
