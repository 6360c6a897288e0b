'use strict';

// Several OS processes sharing one SQLite file (docs/semantics.md, engine notes: WAL, busy
// timeout, one write transaction per claim, "so several processes can share a file safely").
// Consumers are forked node processes running __test__/support/sqlite-consumer.js; the parent
// sends, watches what each child reports over IPC, and checks the union: every message exactly
// once, none lost, and crash recovery across processes.

const fs = require('node:fs');
const path = require('node:path');
const { fork } = require('node:child_process');
const { DelayStamp } = require('@schally/nestjs-messenger');
const { SqlTransport } = require('../..');
const { sqlite, uniqueName } = require('../support/engines');
const { processEnvelope, processMessageSerializer } = require('../support/sqlite-consumer');
const { idOf, sleep, waitFor, collect } = require('../support/transport-helpers');

const CONSUMER_SCRIPT = path.join(__dirname, '..', 'support', 'sqlite-consumer.js');
const DECIMAL_ID = /^\d+$/;

// ---------------------------------------------------------------------------
// Per-test resources
// ---------------------------------------------------------------------------

let transports = [];
let children = [];
let directories = [];

afterEach(async () => {
  const failures = [];
  for (const child of children) {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGKILL');
      await child.exited;
    }
  }
  for (const transport of transports.reverse()) {
    await transport.close().catch((error) => failures.push(error));
  }
  for (const dir of directories) fs.rmSync(dir, { recursive: true, force: true });
  transports = [];
  children = [];
  directories = [];
  if (failures.length > 0) throw failures[0];
}, 20000);

function freshQueue(prefix) {
  const dsn = sqlite.temporaryDsn('nmn-proc');
  directories.push(path.dirname(dsn.slice('sqlite://'.length)));
  return { dsn, queueName: uniqueName(prefix) };
}

function parentTransport({ dsn, queueName }, options = {}) {
  const transport = new SqlTransport({
    dsn,
    queueName,
    name: 'parent',
    serializer: processMessageSerializer(),
    ...options,
  });
  transports.push(transport);
  return transport;
}

/**
 * Forks one consumer process and records what it reports. `ready`, `claimed`, `done` and
 * `exited` are promises; `got`/`acked` grow as the child reports.
 */
function forkConsumer(label, { dsn, queueName }, { mode = 'ack', redeliverTimeoutSeconds = 3600 } = {}) {
  const child = fork(CONSUMER_SCRIPT, [], {
    cwd: path.join(__dirname, '..', '..'),
    execArgv: [],
    silent: true,
    env: {
      ...process.env,
      CONSUMER_DSN: dsn,
      CONSUMER_QUEUE: queueName,
      CONSUMER_MODE: mode,
      CONSUMER_REDELIVER_TIMEOUT_SECONDS: String(redeliverTimeoutSeconds),
      CONSUMER_POLL_MS: '20',
      CONSUMER_IDLE_EXIT_MS: '20000',
    },
  });
  const consumer = {
    label,
    child,
    got: [],
    acked: [],
    errors: [],
    output: '',
  };
  child.stdout.on('data', (chunk) => {
    consumer.output += chunk;
  });
  child.stderr.on('data', (chunk) => {
    consumer.output += chunk;
  });
  let onReady;
  let onClaimed;
  let onDone;
  consumer.ready = new Promise((resolve) => (onReady = resolve));
  consumer.claimed = new Promise((resolve) => (onClaimed = resolve));
  consumer.done = new Promise((resolve) => (onDone = resolve));
  child.exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  consumer.exited = child.exited;
  child.on('message', (message) => {
    const at = Date.now();
    switch (message.type) {
      case 'ready':
        onReady();
        break;
      case 'got':
        consumer.got.push({ ...message, at, by: label });
        break;
      case 'acked':
        consumer.acked.push(message.id);
        break;
      case 'claimed':
        onClaimed({ ...message, at });
        break;
      case 'done':
        onDone(message);
        break;
      case 'error':
        consumer.errors.push(message);
        break;
      default:
        consumer.errors.push({ message: `unexpected report ${JSON.stringify(message)}` });
    }
  });
  children.push(child);
  return consumer;
}

/** Rejects with the child's output if it exits before `promise` settles or `ms` passes. */
async function expectFrom(consumer, promise, ms, what) {
  let timer;
  let settled = false;
  const failure = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${consumer.label}: no ${what} within ${ms} ms\n${consumer.output}`)), ms);
    // (after a moment: a report sent just before exiting may still be on its way)
    consumer.exited.then(async ({ code, signal }) => {
      await sleep(500);
      if (settled) return;
      reject(
        new Error(
          `${consumer.label} exited (${code ?? signal}) before ${what}: ${JSON.stringify(consumer.errors)}\n${consumer.output}`,
        ),
      );
    });
  });
  try {
    return await Promise.race([promise, failure]);
  } finally {
    settled = true;
    clearTimeout(timer);
  }
}

/** Sends messages n in [from, from + count), every fourth delayed 100–300 ms; returns id → n. */
async function sendRange(transport, from, count) {
  const sends = [];
  for (let n = from; n < from + count; n += 1) {
    const stamps = n % 4 === 0 ? [new DelayStamp(100 + (n % 3) * 100)] : [];
    sends.push(transport.send(processEnvelope(n, stamps)).then((sent) => [idOf(sent), n]));
  }
  return new Map(await Promise.all(sends));
}

/** Stops every consumer, waits for its final report and a clean exit. */
async function stopAll(consumers) {
  for (const consumer of consumers) {
    if (consumer.child.connected) consumer.child.send({ type: 'stop' });
  }
  const reports = [];
  for (const consumer of consumers) {
    const done = await expectFrom(consumer, consumer.done, 10000, 'final report');
    let timer;
    const exit = await Promise.race([
      consumer.exited,
      new Promise((resolve) => {
        timer = setTimeout(() => resolve('did not exit within 10 s'), 10000);
      }),
    ]).finally(() => clearTimeout(timer));
    expect({ label: consumer.label, exit }).toEqual({ label: consumer.label, exit: { code: 0, signal: null } });
    expect(consumer.errors).toEqual([]);
    reports.push(done);
  }
  return reports;
}

/** Forks two consumers of `target` and starts them once both are ready. */
async function startTwoConsumers(target) {
  const consumers = [forkConsumer('child-1', target), forkConsumer('child-2', target)];
  for (const consumer of consumers) await expectFrom(consumer, consumer.ready, 10000, 'ready');
  for (const consumer of consumers) consumer.child.send({ type: 'start' });
  return consumers;
}

/**
 * Waits until `consumers` acked every message of `sent`, stops them, and asserts that each was
 * handled exactly once, that every consumer took part and that `parent` sees the queue empty.
 */
async function expectSharedExactlyOnce(parent, consumers, sent) {
  const total = sent.size;
  await waitFor(
    () => consumers.reduce((sum, c) => sum + c.acked.length, 0) >= total || consumers.some((c) => c.child.exitCode !== null),
    30000,
    `${total} acks from the ${consumers.length} processes`,
    20,
  );
  await sleep(300); // late duplicates would show up here
  const reports = await stopAll(consumers);
  expectExactlyOnce(consumers, reports, sent);
  // Every process really took part.
  for (const consumer of consumers) expect(consumer.got.length).toBeGreaterThan(0);

  expect(await collect(parent.list(total))).toEqual([]);
  expect(await parent.getMessageCount()).toBe(0);
}

/** Every sent id handled exactly once over all consumers, each report consistent. */
function expectExactlyOnce(consumers, reports, sent) {
  const deliveries = consumers.flatMap((c) => c.got);
  const ids = deliveries.map((d) => d.id);
  const counts = new Map();
  for (const id of ids) counts.set(id, (counts.get(id) ?? 0) + 1);
  const twice = [...counts].filter(([, count]) => count > 1).map(([id]) => id);
  expect(twice).toEqual([]);
  const missing = [...sent.keys()].filter((id) => !counts.has(id));
  expect(missing).toEqual([]);
  const unknown = ids.filter((id) => !sent.has(id));
  expect(unknown).toEqual([]);
  expect(deliveries).toHaveLength(sent.size);
  for (const d of deliveries) {
    expect(d.id).toMatch(DECIMAL_ID);
    expect(d.n).toBe(sent.get(d.id));
    expect(d.redelivery).toBe(0);
  }
  consumers.forEach((consumer, i) => {
    // What each process says it acked is what it reported receiving, in order.
    expect(reports[i].handled).toEqual(consumer.got.map((d) => d.id));
    expect(consumer.acked).toEqual(reports[i].handled);
  });
  // The union of the processes' acks is exactly the sent ids.
  const union = reports.flatMap((r) => r.handled);
  expect(union).toHaveLength(sent.size);
  expect(new Set(union)).toEqual(new Set(sent.keys()));
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

describe('SQLite file shared by several processes', () => {
  test('two processes drain 1000 messages (some delayed): every id exactly once, none lost', async () => {
    const target = freshQueue('proc_drain');
    const parent = parentTransport(target);
    await parent.setup();

    const total = 1000;
    const sent = new Map();
    for (let from = 0; from < total; from += 100) {
      for (const [id, n] of await sendRange(parent, from, 100)) sent.set(id, n);
    }
    expect(sent.size).toBe(total);
    expect((await collect(parent.list(total + 10))).length).toBe(total);

    await expectSharedExactlyOnce(parent, await startTwoConsumers(target), sent);
  }, 60000);

  test('the parent keeps sending while two processes consume: every id exactly once, none lost', async () => {
    const target = freshQueue('proc_live');
    const parent = parentTransport(target);
    await parent.setup();

    const consumers = await startTwoConsumers(target);

    const total = 1000;
    const perRound = 50;
    const sent = new Map();
    for (let round = 0; round * perRound < total; round += 1) {
      for (const [id, n] of await sendRange(parent, round * perRound, perRound)) sent.set(id, n);
      await sleep(round % 5 === 0 ? 150 : 10); // sometimes let both consumers go idle
    }
    expect(sent.size).toBe(total);

    await expectSharedExactlyOnce(parent, consumers, sent);
  }, 60000);

  test('a process killed (SIGKILL) before acking: its messages reach the other process after redeliverTimeoutSeconds', async () => {
    const target = freshQueue('proc_crash');
    const parent = parentTransport(target, { redeliverTimeoutSeconds: 1 });
    await parent.setup();

    const doomed = forkConsumer('doomed', target, { mode: 'hold', redeliverTimeoutSeconds: 1 });
    const survivor = forkConsumer('survivor', target, { redeliverTimeoutSeconds: 1 });
    await expectFrom(doomed, doomed.ready, 10000, 'ready');
    await expectFrom(survivor, survivor.ready, 10000, 'ready');

    const sent = new Map();
    for (let n = 0; n < 5; n += 1) sent.set(idOf(await parent.send(processEnvelope(n))), n);
    const [firstId] = sent.keys();

    doomed.child.send({ type: 'start' });
    const claimed = await expectFrom(doomed, doomed.claimed, 10000, 'claim');
    expect(claimed.id).toBe(firstId);
    expect(claimed.n).toBe(0);
    doomed.child.kill('SIGKILL');
    expect(await doomed.exited).toEqual({ code: null, signal: 'SIGKILL' });

    // The claimed row is still in the file, in flight: not counted, still listed.
    expect((await collect(parent.list())).map(idOf)).toContain(firstId);

    survivor.child.send({ type: 'start' });
    await waitFor(
      () => survivor.acked.length >= sent.size || survivor.child.exitCode !== null,
      15000,
      'the survivor to handle every message',
      20,
    );
    await sleep(300);
    const [report] = await stopAll([survivor]);
    expectExactlyOnce([survivor], [report], sent);

    // The message the dead process held comes back with the same id and no RedeliveryStamp
    // (expectExactlyOnce checked redelivery 0), once its claim is older than the timeout.
    const recovered = survivor.got.find((d) => d.id === firstId);
    expect(recovered).toBeDefined();
    expect(recovered.at - claimed.at).toBeGreaterThanOrEqual(900);

    expect(await collect(parent.list())).toEqual([]);
    expect(await parent.getMessageCount()).toBe(0);
  }, 40000);
});
