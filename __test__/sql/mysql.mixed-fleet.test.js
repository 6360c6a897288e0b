'use strict';

// Mixed fleet on MariaDB: the upstream TypeScript SqlTransport
// (@schally/nestjs-messenger-transport-sql@1.2.0, MySQL dialect over mysql2) and ours share
// the table `messenger_messages` and one queue, as during a rolling migration
// (reference/upstream-transports.md §1, §5.1). Each must receive what the other sent, claims
// must never overlap, both must read each other's DATETIMEs in the same time zone, and the
// storage must be the same.

const {
  BusNameStamp,
  DelayStamp,
  Envelope,
  ErrorDetailsStamp,
  JsonSerializer,
  ReceivedStamp,
  RedeliveryStamp,
  SentStamp,
  TransportMessageIdStamp,
} = require('@schally/nestjs-messenger');
const { SqlTransport: UpstreamSqlTransport } = require('@schally/nestjs-messenger-transport-sql');
const { SqlTransport: NativeSqlTransport } = require('../..');
const { MYSQL_DSN, requireServer, uniqueName } = require('../support/servers');
const { mysqlQuery } = require('../support/mysql');

const TABLE = 'messenger_messages';
const DECIMAL_ID = /^\d+$/;
const UPSTREAM_NAME = 'upstream-worker';
const NATIVE_NAME = 'native-worker';
/** Upstream's MySQL dialect polls; 20 ms keeps its idle latency small (brief). */
const UPSTREAM_POLL_MS = 20;

class YourMessage {
  constructor(n, text, meta = {}) {
    this.n = n;
    this.text = text;
    this.meta = meta;
  }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// ---------------------------------------------------------------------------
// Per-test resources: every transport is closed and every row removed afterwards.
// ---------------------------------------------------------------------------

/** @type {{ transport: object, label: string }[]} */
let openTransports = [];
/** Deliveries not yet settled by the test, per transport (acked before close so close() ends). */
let unsettled = new Map();
let queues = [];
let tables = [];

function serializer() {
  return new JsonSerializer([YourMessage]);
}

function upstream(queueName, options = {}) {
  const transport = new UpstreamSqlTransport({
    dsn: MYSQL_DSN,
    queueName,
    name: UPSTREAM_NAME,
    serializer: serializer(),
    pollIntervalMs: UPSTREAM_POLL_MS,
    ...options,
  });
  openTransports.push({ transport, label: 'upstream' });
  return transport;
}

function native(queueName, options = {}) {
  const transport = new NativeSqlTransport({
    dsn: MYSQL_DSN,
    queueName,
    name: NATIVE_NAME,
    serializer: serializer(),
    ...options,
  });
  openTransports.push({ transport, label: 'native' });
  return transport;
}

/** A fresh queue on the shared table, with one transport of each implementation. */
function pair(prefix, { upstreamOptions, nativeOptions } = {}) {
  const queueName = uniqueName(prefix);
  queues.push(queueName);
  return {
    queueName,
    up: upstream(queueName, upstreamOptions),
    ours: native(queueName, nativeOptions),
  };
}

function track(transport, envelope) {
  if (!unsettled.has(transport)) unsettled.set(transport, new Map());
  unsettled.get(transport).set(idOf(envelope), envelope);
}

async function ack(transport, envelope) {
  await transport.ack(envelope);
  unsettled.get(transport)?.delete(idOf(envelope));
}

async function reject(transport, envelope) {
  await transport.reject(envelope);
  unsettled.get(transport)?.delete(idOf(envelope));
}

beforeAll(async () => {
  await requireServer('mysql', MYSQL_DSN);
  // One after the other: the table normally exists already; this only makes sure.
  for (const make of [
    () => new UpstreamSqlTransport({ dsn: MYSQL_DSN }),
    () => new NativeSqlTransport({ dsn: MYSQL_DSN }),
  ]) {
    const transport = make();
    try {
      await transport.setup();
    } finally {
      await transport.close();
    }
  }
}, 15000);

afterEach(async () => {
  const failures = [];
  for (const [transport, envelopes] of unsettled) {
    for (const envelope of envelopes.values()) {
      await transport.ack(envelope).catch((error) => failures.push(error));
    }
  }
  for (const { transport, label } of openTransports.reverse()) {
    await transport.close().catch((error) => failures.push(new Error(`${label} close failed: ${error.message}`)));
  }
  if (queues.length > 0) {
    await mysqlQuery(`DELETE FROM ${TABLE} WHERE queue_name IN (?)`, [queues]);
  }
  for (const table of tables) {
    await mysqlQuery(`DROP TABLE IF EXISTS ${table}`);
  }
  openTransports = [];
  unsettled = new Map();
  queues = [];
  tables = [];
  if (failures.length > 0) throw failures[0];
}, 20000);

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

function idOf(envelope) {
  return envelope.last(TransportMessageIdStamp)?.id;
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
function outgoing(n, text, ...extraStamps) {
  return new Envelope(new YourMessage(n, text, { origin: 'mixed-fleet', tags: ['a', 'ü', '🚀'] }), [
    new BusNameStamp('messenger.bus.default'),
    new SentStamp('YourMessage', 'async'),
    ...extraStamps,
  ]);
}

/**
 * Pulls `count` messages from one `get()` loop, or fewer if `timeoutMs` passes first; the
 * loop is then ended through its signal. Deliveries are tracked until the test settles them.
 */
async function receive(transport, count, timeoutMs = 5000) {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), timeoutMs);
  const received = [];
  try {
    for await (const envelope of transport.get(controller.signal)) {
      track(transport, envelope);
      received.push(envelope);
      if (received.length >= count) break;
    }
  } finally {
    clearTimeout(timer);
    controller.abort();
  }
  return received;
}

/** A background `get()` loop that records (without settling) what it receives and when. */
function startConsumer(transport) {
  const controller = new AbortController();
  const received = [];
  const done = (async () => {
    for await (const envelope of transport.get(controller.signal)) {
      track(transport, envelope);
      received.push({ envelope, at: Date.now() });
    }
  })();
  return {
    received,
    async stop() {
      controller.abort();
      await done;
    },
  };
}

async function waitFor(predicate, timeoutMs, what) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await predicate()) return;
    if (Date.now() > deadline) throw new Error(`Timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(10);
  }
}

async function rowsOfQueue(queueName) {
  return mysqlQuery(
    `SELECT CAST(id AS CHAR) AS id, body, headers, delivered_at FROM ${TABLE} WHERE queue_name = ? ORDER BY id`,
    [queueName],
  );
}

/**
 * Acks are write-behind by default on our side (ackMode 'write-behind'): a row disappears a few
 * milliseconds after its ack resolved. Waits (up to 2 s) for the queue's rows to equal
 * `expected`, then asserts.
 */
async function expectRowsEventually(queueName, expected) {
  const deadline = Date.now() + 2000;
  let actual = await rowsOfQueue(queueName);
  while (Date.now() < deadline && JSON.stringify(actual) !== JSON.stringify(expected)) {
    await sleep(10);
    actual = await rowsOfQueue(queueName);
  }
  expect(actual).toEqual(expected);
}

/** available_at - created_at of each row of the queue, in ms (both set from one NOW(3)). */
async function storedDelaysOf(queueName) {
  const rows = await mysqlQuery(
    `SELECT CAST(id AS CHAR) AS id, TIMESTAMPDIFF(MICROSECOND, created_at, available_at) AS delay_us
       FROM ${TABLE} WHERE queue_name = ? ORDER BY id`,
    [queueName],
  );
  return rows.map((row) => ({ id: row.id, delayMs: Number(row.delay_us) / 1000 }));
}

async function drain(iterable) {
  const out = [];
  for await (const item of iterable) out.push(item);
  return out;
}

/** What every receiver must see for a message the other side sent. */
function expectSameMessage(received, sent, { id, receiverName } = {}) {
  expect(received.message).toBeInstanceOf(YourMessage);
  expect(received.message).toStrictEqual(sent.message);
  if (id !== undefined) {
    expect(idOf(received)).toBe(id);
    expect(received.all(TransportMessageIdStamp)).toHaveLength(1);
  }
  expect(typeof idOf(received)).toBe('string');
  expect(idOf(received)).toMatch(DECIMAL_ID);
  if (receiverName !== undefined) {
    expect(received.all(ReceivedStamp).map((s) => s.transportName)).toEqual([receiverName]);
  }
}

const directions = [
  { title: 'upstream → native', sender: 'up', receiver: 'ours', receiverName: NATIVE_NAME },
  { title: 'native → upstream', sender: 'ours', receiver: 'up', receiverName: UPSTREAM_NAME },
];

// ---------------------------------------------------------------------------
// 1. Each side receives what the other sent
// ---------------------------------------------------------------------------

describe('each implementation receives what the other sent (MariaDB)', () => {
  test.each(directions)('plain message, $title: payload, stamps and decimal string id intact', async (d) => {
    const transports = pair('mmf_plain');
    const sender = transports[d.sender];
    const receiver = transports[d.receiver];
    const envelope = outgoing(1, `hello from ${d.sender} "quoted" \\ \n ünïcødé 🚀`);

    const sent = await sender.send(envelope);
    const sentId = idOf(sent);
    expect(typeof sentId).toBe('string');
    expect(sentId).toMatch(DECIMAL_ID);
    expect(sent.all(TransportMessageIdStamp)).toHaveLength(1);

    const [received] = await receive(receiver, 1);
    expect(received).toBeDefined();
    expectSameMessage(received, envelope, { id: sentId, receiverName: d.receiverName });
    expect(sendableStamps(received)).toEqual(sendableStamps(envelope));

    await ack(receiver, received);
    await expectRowsEventually(transports.queueName, []);
  }, 15000);

  test.each(directions)('several messages, $title, arrive in send order and all of them', async (d) => {
    const transports = pair('mmf_order');
    const sender = transports[d.sender];
    const receiver = transports[d.receiver];
    const sentIds = [];
    for (let n = 0; n < 20; n += 1) sentIds.push(idOf(await sender.send(outgoing(n, `m${n}`))));
    expect(new Set(sentIds).size).toBe(20);
    for (const id of sentIds) expect(id).toMatch(DECIMAL_ID);

    const received = await receive(receiver, 20);
    expect(received.map((e) => e.message.n)).toEqual([...Array(20).keys()]);
    expect(received.map(idOf)).toEqual(sentIds);
    for (const envelope of received) await ack(receiver, envelope);
    await expectRowsEventually(transports.queueName, []);
  }, 15000);

  test.each(directions)(
    'delayed message (DelayStamp 300 ms), $title: not delivered early, delivered in time',
    async (d) => {
      const transports = pair('mmf_delay');
      const sender = transports[d.sender];
      const receiver = transports[d.receiver];
      // Warm both sides (setup memo, pools) so the send is one statement.
      await Promise.all([sender.getMessageCount(), receiver.getMessageCount()]);
      // The receiver is already polling when the message is stored.
      const consumer = startConsumer(receiver);
      try {
        await sleep(150);
        expect(consumer.received).toHaveLength(0);
        const envelope = outgoing(7, 'later', new DelayStamp(300));
        const sentAt = Date.now();
        const sent = await sender.send(envelope);

        // Not due yet: nobody counts it, both sides list it.
        expect(await receiver.getMessageCount()).toBe(0);
        expect(await sender.getMessageCount()).toBe(0);
        expect((await drain(receiver.list())).map(idOf)).toEqual([idOf(sent)]);
        expect(await storedDelaysOf(transports.queueName)).toEqual([{ id: idOf(sent), delayMs: 300 }]);

        await waitFor(() => consumer.received.length > 0, 300 + 1500, 'the delayed message');
        const [{ envelope: received, at }] = consumer.received;
        // available_at = NOW(3) + 300 ms on the server, whose clock is this machine's.
        expect(at - sentAt).toBeGreaterThanOrEqual(295);
        expectSameMessage(received, envelope, { id: idOf(sent), receiverName: d.receiverName });
        expect(received.last(DelayStamp)?.delayMs).toBe(300);
        expect(sendableStamps(received)).toEqual(sendableStamps(envelope));
        await ack(receiver, received);
        await sleep(100);
        expect(consumer.received).toHaveLength(1);
      } finally {
        await consumer.stop();
      }
      await expectRowsEventually(transports.queueName, []);
    },
    15000,
  );

  test.each([
    { title: 'native rejects, upstream gets the copy', rejecter: 'ours', other: 'up', otherName: UPSTREAM_NAME },
    { title: 'upstream rejects, native gets the copy', rejecter: 'up', other: 'ours', otherName: NATIVE_NAME },
  ])('rejected and redelivered: $title (RedeliveryStamp 1, new id)', async (d) => {
    const transports = pair('mmf_reject');
    const rejecter = transports[d.rejecter];
    const other = transports[d.other];
    // Sent by the side that will get the copy, so all three steps cross implementations.
    const envelope = outgoing(3, 'to be rejected');
    const sent = await other.send(envelope);

    const [first] = await receive(rejecter, 1);
    expect(first).toBeDefined();
    expect(idOf(first)).toBe(idOf(sent));
    expect(first.last(RedeliveryStamp)).toBeUndefined();
    await reject(rejecter, first);

    // Exactly one row left: the copy, under a new id (visible to both sides).
    const rows = await rowsOfQueue(transports.queueName);
    expect(rows).toHaveLength(1);
    expect(rows[0].id).not.toBe(idOf(sent));
    expect(rows[0].delivered_at).toBeNull();
    expect((await drain(other.list())).map(idOf)).toEqual([rows[0].id]);
    expect((await drain(rejecter.list())).map(idOf)).toEqual([rows[0].id]);

    const [copy] = await receive(other, 1);
    expect(copy).toBeDefined();
    expectSameMessage(copy, envelope, { id: rows[0].id, receiverName: d.otherName });
    expect(idOf(copy)).not.toBe(idOf(sent));
    expect(BigInt(idOf(copy))).toBeGreaterThan(BigInt(idOf(sent)));
    expect(copy.all(RedeliveryStamp)).toHaveLength(1);
    expect(copy.last(RedeliveryStamp).retryCount).toBe(1);
    expect(Number.isNaN(Date.parse(copy.last(RedeliveryStamp).redeliveredAt))).toBe(false);
    // The other stamps travelled unchanged.
    expect(sendableStamps(copy).filter((s) => s.type !== 'RedeliveryStamp')).toEqual(sendableStamps(envelope));

    // And back again: a reject by this side gives the first side retryCount 2.
    await reject(other, copy);
    const [second] = await receive(rejecter, 1);
    expect(second).toBeDefined();
    expect(second.message).toStrictEqual(envelope.message);
    expect(second.all(RedeliveryStamp)).toHaveLength(1);
    expect(second.last(RedeliveryStamp).retryCount).toBe(2);
    expect(new Set([idOf(sent), idOf(copy), idOf(second)]).size).toBe(3);
    await ack(rejecter, second);
    await expectRowsEventually(transports.queueName, []);
  }, 15000);

  test.each([
    { title: 'upstream sends, native rejects, upstream gets the copy', sender: 'up', rejecter: 'ours', other: 'up' },
    { title: 'native sends, upstream rejects, native gets the copy', sender: 'ours', rejecter: 'up', other: 'ours' },
  ])('a rejected delayed message re-applies its delay on the copy: $title', async (d) => {
    const transports = pair('mmf_reject_delay');
    const rejecter = transports[d.rejecter];
    const other = transports[d.other];
    const envelope = outgoing(4, 'delayed then rejected', new DelayStamp(300));
    const sent = await transports[d.sender].send(envelope);
    expect(await storedDelaysOf(transports.queueName)).toEqual([{ id: idOf(sent), delayMs: 300 }]);

    const [first] = await receive(rejecter, 1, 3000);
    expect(first).toBeDefined();
    expect(idOf(first)).toBe(idOf(sent));
    const rejectedAt = Date.now();
    await reject(rejecter, first);

    // The copy is stored 300 ms in the future again, and is not due yet for either side.
    const delays = await storedDelaysOf(transports.queueName);
    expect(delays).toHaveLength(1);
    expect(delays[0].id).not.toBe(idOf(sent));
    expect(delays[0].delayMs).toBe(300);
    expect(await transports.up.getMessageCount()).toBe(0);
    expect(await transports.ours.getMessageCount()).toBe(0);

    const consumer = startConsumer(other);
    try {
      await waitFor(() => consumer.received.length > 0, 300 + 1500, 'the redelivered copy');
      const [{ envelope: copy, at }] = consumer.received;
      expect(at - rejectedAt).toBeGreaterThanOrEqual(295);
      expect(idOf(copy)).toBe(delays[0].id);
      expect(copy.message).toStrictEqual(envelope.message);
      expect(copy.last(RedeliveryStamp).retryCount).toBe(1);
      expect(copy.last(DelayStamp).delayMs).toBe(300);
      await ack(other, copy);
    } finally {
      await consumer.stop();
    }
    await expectRowsEventually(transports.queueName, []);
  }, 15000);
});

// ---------------------------------------------------------------------------
// 2. Both consuming one queue at once
// ---------------------------------------------------------------------------

describe('both implementations consuming one MariaDB queue at once', () => {
  /**
   * Runs one upstream and one native get() loop, each acking every message, until `expected`
   * deliveries were seen in total (then a short grace period to catch late duplicates) or
   * the deadline passes.
   */
  function consumeBoth(transports, expected, { deadlineMs = 30000 } = {}) {
    const controller = new AbortController();
    const deliveries = [];
    const errors = [];
    let graceTimer;
    const hardTimer = setTimeout(() => controller.abort(), deadlineMs);
    const loop = async (transport, by) => {
      try {
        for await (const envelope of transport.get(controller.signal)) {
          track(transport, envelope);
          deliveries.push({
            by,
            id: idOf(envelope),
            n: envelope.message.n,
            receivedBy: envelope.last(ReceivedStamp)?.transportName,
          });
          await sleep(1); // a token of handler work, so that neither consumer can take it all alone
          await ack(transport, envelope);
          if (deliveries.length >= expected && graceTimer === undefined) {
            graceTimer = setTimeout(() => controller.abort(), 300);
          }
        }
      } catch (error) {
        errors.push(error);
        controller.abort();
      }
    };
    const done = Promise.all([loop(transports.up, 'upstream'), loop(transports.ours, 'native')]).finally(() => {
      clearTimeout(hardTimer);
      clearTimeout(graceTimer);
    });
    return { deliveries, errors, done, stop: () => controller.abort() };
  }

  async function sendHalfEach(transports, from, count) {
    const sends = [];
    for (let n = from; n < from + count; n += 1) {
      const side = n % 2 === 0 ? transports.up : transports.ours;
      sends.push(side.send(new Envelope(new YourMessage(n, `m${n}`))));
    }
    return (await Promise.all(sends)).map(idOf);
  }

  function expectExactlyOnce(deliveries, sentIds, total) {
    const ids = deliveries.map((d) => d.id);
    const ns = deliveries.map((d) => d.n);
    expect(deliveries).toHaveLength(total);
    expect(new Set(ids).size).toBe(total);
    expect(new Set(ns).size).toBe(total);
    expect([...ns].sort((a, b) => a - b)).toEqual([...Array(total).keys()]);
    expect(new Set(ids)).toEqual(new Set(sentIds));
    for (const d of deliveries) {
      expect(d.id).toMatch(DECIMAL_ID);
      expect(d.receivedBy).toBe(d.by === 'upstream' ? UPSTREAM_NAME : NATIVE_NAME);
    }
    // Both really took part.
    expect(deliveries.filter((d) => d.by === 'upstream').length).toBeGreaterThan(0);
    expect(deliveries.filter((d) => d.by === 'native').length).toBeGreaterThan(0);
  }

  test('300 messages sent half by each are delivered exactly once across both consumers', async () => {
    const transports = pair('mmf_both');
    // Warm both (setup memo, pools) so neither side gets a head start.
    await Promise.all([transports.up.getMessageCount(), transports.ours.getMessageCount()]);
    const total = 300;
    const sentIds = await sendHalfEach(transports, 0, total);
    expect(new Set(sentIds).size).toBe(total);
    for (const id of sentIds) expect(id).toMatch(DECIMAL_ID);
    expect(await transports.up.getMessageCount()).toBe(total);
    expect(await transports.ours.getMessageCount()).toBe(total);

    const run = consumeBoth(transports, total);
    await run.done;
    expect(run.errors).toEqual([]);
    expectExactlyOnce(run.deliveries, sentIds, total);

    await expectRowsEventually(transports.queueName, []);
    expect(await transports.up.getMessageCount()).toBe(0);
    expect(await transports.ours.getMessageCount()).toBe(0);
  }, 45000);

  test('sends by both sides continue while both consume: still exactly once, nothing left', async () => {
    const transports = pair('mmf_both_live');
    await Promise.all([transports.up.getMessageCount(), transports.ours.getMessageCount()]);
    const initial = 60;
    const rounds = 12;
    const perRound = 20;
    const total = initial + rounds * perRound;
    const sentIds = await sendHalfEach(transports, 0, initial);

    const run = consumeBoth(transports, total);
    for (let round = 0; round < rounds; round += 1) {
      sentIds.push(...(await sendHalfEach(transports, initial + round * perRound, perRound)));
      await sleep(round % 3 === 0 ? 80 : 5); // sometimes let both consumers go idle
    }
    expect(new Set(sentIds).size).toBe(total);
    await run.done;
    expect(run.errors).toEqual([]);
    expectExactlyOnce(run.deliveries, sentIds, total);

    await expectRowsEventually(transports.queueName, []);
    expect(await transports.up.getMessageCount()).toBe(0);
    expect(await transports.ours.getMessageCount()).toBe(0);
  }, 45000);

  test('no send by either side fails (e.g. with a deadlock) while both consume: 3000 messages in bursts', async () => {
    // Same scenario as above, longer. An upstream-only fleet (upstream claims lock one row by
    // primary-key equality) runs this without a single failed send; a send must not fail just
    // because consumers of the queue are claiming at the same time.
    const transports = pair('mmf_both_burst');
    await Promise.all([transports.up.getMessageCount(), transports.ours.getMessageCount()]);
    const rounds = 50;
    const perRound = 60;
    const total = rounds * perRound;
    const sentIds = [];
    const sendErrors = [];

    const run = consumeBoth(transports, total);
    for (let round = 0; round < rounds; round += 1) {
      const sends = [];
      for (let n = round * perRound; n < (round + 1) * perRound; n += 1) {
        const by = n % 2 === 0 ? 'upstream' : 'native';
        const side = by === 'upstream' ? transports.up : transports.ours;
        sends.push(
          side.send(new Envelope(new YourMessage(n, `m${n}`))).then(
            (sent) => sentIds.push(idOf(sent)),
            (error) => sendErrors.push({ by, n, error: `${error.name}: ${error.message}` }),
          ),
        );
      }
      await Promise.all(sends);
      await sleep(round % 2 === 0 ? 40 : 5); // often let both consumers go idle: bursts then claims
    }
    // Nothing more will come for the messages whose send failed: end the consumers once every
    // stored message was seen.
    const stored = sentIds.length;
    await waitFor(() => run.deliveries.length >= stored, 30000, `${stored} deliveries`);
    await sleep(300); // late duplicates would show up here
    run.stop();
    await run.done;
    expect(run.errors).toEqual([]);
    expect(sendErrors).toEqual([]);
    expectExactlyOnce(run.deliveries, sentIds, total);
    await expectRowsEventually(transports.queueName, []);
  }, 60000);

  // The cause behind the test above, made deterministic: a sender's insert that is not yet
  // committed (upstream's own INSERT between its two index writes, a batch insert of several
  // statements, or a send inside an application transaction) must not hold up claims. Upstream
  // claims lock rows by primary-key equality and SKIP LOCKED past anything else, so its
  // consumers go on; the same is required of ours (§5.1.4: never wait on other workers' locks).
  test.each([
    { title: 'upstream consumer (reference)', consumer: 'up', sender: 'ours', where: 'the same queue' },
    { title: 'upstream consumer (reference)', consumer: 'up', sender: 'ours', where: 'another queue' },
    { title: 'native consumer', consumer: 'ours', sender: 'up', where: 'the same queue' },
    { title: 'native consumer', consumer: 'ours', sender: 'up', where: 'another queue' },
  ])('$title: claims are not held up by an uncommitted insert into $where', async (d) => {
    // A table of its own, holding what a drained queue table holds (a handful of rows), so that
    // the outcome does not depend on what other tests left behind in messenger_messages (the
    // optimizer's plan for a claim's statements follows the table's statistics).
    const table = uniqueName('mmf_locks');
    tables.push(table);
    const transports = pair('mmf_uncommitted', {
      upstreamOptions: { tableName: table },
      nativeOptions: { tableName: table },
    });
    const consumer = transports[d.consumer];
    await transports.up.setup();
    const sent = [];
    for (let n = 0; n < 5; n += 1) sent.push(idOf(await transports[d.sender].send(outgoing(n, `m${n}`))));

    const otherQueue = d.where === 'the same queue' ? transports.queueName : uniqueName('mmf_uncommitted_other');
    const encoded = serializer().encode(outgoing(99, 'not committed yet'));
    const mysql = require('mysql2/promise');
    const session = await mysql.createConnection(MYSQL_DSN);
    let running;
    let whileUncommitted = [];
    try {
      await session.query('START TRANSACTION');
      // Exactly upstream's insert (§1.4), left uncommitted.
      await session.query(
        `INSERT INTO ${table} (queue_name, body, headers, created_at, available_at)
         VALUES (?, ?, ?, NOW(3), NOW(3) + INTERVAL ? MICROSECOND)`,
        [otherQueue, encoded.body, JSON.stringify(encoded.headers), 0],
      );

      running = startConsumer(consumer);
      await waitFor(() => running.received.length >= 5, 3000, '5 deliveries').catch(() => {});
      whileUncommitted = running.received.map((r) => idOf(r.envelope));
    } finally {
      // Rolled back before the consumer is stopped: a claim stuck on the lock ends with it.
      await session.query('ROLLBACK').catch(() => {});
      await session.end();
      await running?.stop();
    }
    for (const { envelope } of running.received) await ack(consumer, envelope);
    expect(whileUncommitted).toEqual(sent);
  }, 20000);
});

// ---------------------------------------------------------------------------
// 3. Time zone compatibility
// ---------------------------------------------------------------------------

describe('time zone compatibility (server default time_zone is not UTC)', () => {
  // mysql2 never sets time_zone, so upstream reads and writes DATETIMEs in the session zone the
  // server gives a new connection. The machine here runs in UTC, where a driver that forces
  // '+00:00' (sqlx's default) would go unnoticed. So both sides connect as dedicated users whose
  // sessions the server starts in a non-UTC zone (init_connect, which the server runs for
  // non-SUPER users on login, before the client's first statement; a driver that sets
  // time_zone itself overrides it, exactly as it would override a server default). Nothing
  // changes for other users (root included: init_connect is skipped for it), so other test
  // files running at the same time are unaffected.
  const DELAY_MS = 2000;
  const ZONES = { east: '+05:00', west: '-04:00' };
  const users = {};
  let savedInitConnect;

  function dsnOf(user) {
    const url = new URL(MYSQL_DSN);
    url.username = user;
    url.password = '';
    return url.toString();
  }

  beforeAll(async () => {
    const host = new URL(MYSQL_DSN).hostname;
    for (const key of Object.keys(ZONES)) {
      users[key] = uniqueName(`nmn_tz_${key}`);
      await mysqlQuery(`CREATE USER ?@? IDENTIFIED BY ''`, [users[key], host]);
      await mysqlQuery(`GRANT ALL PRIVILEGES ON \`${new URL(MYSQL_DSN).pathname.slice(1)}\`.* TO ?@?`, [
        users[key],
        host,
      ]);
    }
    [{ value: savedInitConnect }] = await mysqlQuery('SELECT @@global.init_connect AS value');
    const cases = Object.keys(ZONES)
      .map((key) => `WHEN '${users[key]}' THEN '${ZONES[key]}'`)
      .join(' ');
    await mysqlQuery('SET GLOBAL init_connect = ?', [
      `SET time_zone = CASE SUBSTRING_INDEX(USER(), '@', 1) ${cases} ELSE @@session.time_zone END`,
    ]);
  }, 15000);

  afterAll(async () => {
    if (savedInitConnect !== undefined) await mysqlQuery('SET GLOBAL init_connect = ?', [savedInitConnect]);
    const host = new URL(MYSQL_DSN).hostname;
    for (const user of Object.values(users)) await mysqlQuery('DROP USER IF EXISTS ?@?', [user, host]);
  }, 15000);

  test.each([
    { ...directions[1], zone: 'east' },
    { ...directions[1], zone: 'west' },
    { ...directions[0], zone: 'east' },
    { ...directions[0], zone: 'west' },
  ])('$title, sessions starting in the $zone zone: a 2000 ms delay is honoured by the other side', async (d) => {
    const dsn = dsnOf(users[d.zone]);
    const [probe] = await mysqlQuery(
      'SELECT @@session.time_zone AS zone, TIMESTAMPDIFF(MINUTE, UTC_TIMESTAMP(3), NOW(3)) AS offset_min',
      [],
      dsn,
    );
    expect(probe.zone).toBe(ZONES[d.zone]);
    expect(Math.abs(Number(probe.offset_min))).toBeGreaterThanOrEqual(4 * 60 - 1);

    const transports = pair('mmf_tz', { upstreamOptions: { dsn }, nativeOptions: { dsn } });
    const sender = transports[d.sender];
    const receiver = transports[d.receiver];
    await Promise.all([sender.getMessageCount(), receiver.getMessageCount()]);
    const consumer = startConsumer(receiver);
    try {
      const envelope = outgoing(9, `delayed 2 s by ${d.sender}`, new DelayStamp(DELAY_MS));
      const sentAt = Date.now();
      const sent = await sender.send(envelope);
      const sentDoneAt = Date.now();

      // Stored in the zone the server starts these sessions in: relative to NOW(3) of a fresh
      // session of the same user, the row is due in (0, 2000] ms, not hours away or hours ago.
      const [row] = await mysqlQuery(
        `SELECT TIMESTAMPDIFF(MICROSECOND, NOW(3), available_at) AS due_in_us,
                TIMESTAMPDIFF(MICROSECOND, created_at, NOW(3)) AS age_us
           FROM ${TABLE} WHERE id = ?`,
        [idOf(sent)],
        dsn,
      );
      expect(Number(row.due_in_us) / 1000).toBeGreaterThan(0);
      expect(Number(row.due_in_us) / 1000).toBeLessThanOrEqual(DELAY_MS);
      expect(Number(row.age_us) / 1000).toBeGreaterThanOrEqual(0);
      expect(Number(row.age_us) / 1000).toBeLessThan(DELAY_MS);
      expect(await receiver.getMessageCount()).toBe(0);

      await waitFor(() => consumer.received.length > 0, DELAY_MS + 2000, 'the delayed message');
      const [{ envelope: received, at }] = consumer.received;
      expect(at - sentAt).toBeGreaterThanOrEqual(1900);
      expect(at - sentDoneAt).toBeLessThanOrEqual(DELAY_MS + 2000);
      expectSameMessage(received, envelope, { id: idOf(sent), receiverName: d.receiverName });
      await ack(receiver, received);
    } finally {
      await consumer.stop();
    }
    await expectRowsEventually(transports.queueName, []);
  }, 20000);
});

// ---------------------------------------------------------------------------
// 4. Storage identity
// ---------------------------------------------------------------------------

describe('storage identity (MariaDB)', () => {
  async function showCreateTable(table) {
    const [row] = await mysqlQuery(`SHOW CREATE TABLE ${table}`);
    return row['Create Table'].split(table).join('<table>');
  }

  test('setup() by native creates exactly the table upstream setup() creates (SHOW CREATE TABLE)', async () => {
    const oursTable = uniqueName('mmf_ddl_native');
    const upTable = uniqueName('mmf_ddl_upstream');
    tables.push(oursTable, upTable);
    const ours = native('mmf_ddl', { tableName: oursTable });
    const up = upstream('mmf_ddl', { tableName: upTable });

    await ours.setup();
    await up.setup();
    const oursDdl = await showCreateTable(oursTable);
    const upDdl = await showCreateTable(upTable);
    expect(oursDdl).toBe(upDdl);
    // And that is the documented shape, not merely the same on both sides.
    expect(oursDdl).toContain('`id` bigint(20) unsigned NOT NULL AUTO_INCREMENT');
    expect(oursDdl).toContain('`created_at` datetime(3) NOT NULL,');
    expect(oursDdl).toContain('`delivered_at` datetime(3) DEFAULT NULL');
    expect(oursDdl).toContain('KEY `<table>_claim_idx` (`queue_name`,`available_at`,`delivered_at`,`id`)');
    expect(oursDdl).toMatch(/ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci$/);

    // Either side's setup() on the other's table is a no-op.
    const upOnOurs = upstream('mmf_ddl', { tableName: oursTable });
    const oursOnUp = native('mmf_ddl', { tableName: upTable });
    await upOnOurs.setup();
    await oursOnUp.setup();
    expect(await showCreateTable(oursTable)).toBe(oursDdl);
    expect(await showCreateTable(upTable)).toBe(upDdl);
  }, 15000);

  test('rows written by native and by upstream for the same envelope are the same', async () => {
    const transports = pair('mmf_rows');
    const message = new YourMessage(42, 'same bytes? "yes" \\ \n\t ünïcødé 🚀 \u2028 \u0000', {
      nested: { list: [1, 2.5, null, true], empty: {} },
      html: '<b>&amp;</b>',
      quote: "it's",
    });
    const envelope = new Envelope(message, [
      new BusNameStamp('messenger.bus.default'),
      new SentStamp('YourMessage', 'async'),
      new RedeliveryStamp(2, new Date('2026-01-02T03:04:05.678Z')),
      new ErrorDetailsStamp('Error', 'boom "quoted"\nsecond line', 42),
      new DelayStamp(1500),
      new BusNameStamp('second.bus'),
      // Non-sendable: must not be stored by either side.
      new ReceivedStamp('elsewhere'),
      new TransportMessageIdStamp('999'),
    ]);

    const upId = idOf(await transports.up.send(envelope));
    const oursId = idOf(await transports.ours.send(envelope));
    const rows = await mysqlQuery(
      `SELECT CAST(id AS CHAR) AS id, queue_name, body, HEX(body) AS body_hex, headers, delivered_at,
              TIMESTAMPDIFF(MICROSECOND, created_at, available_at) AS delay_us
         FROM ${TABLE} WHERE id IN (?)`,
      [[upId, oursId]],
    );
    const upRow = rows.find((r) => r.id === upId);
    const oursRow = rows.find((r) => r.id === oursId);
    expect(upRow).toBeDefined();
    expect(oursRow).toBeDefined();

    expect(oursRow.body_hex).toBe(upRow.body_hex);
    expect(oursRow.body).toBe(upRow.body);
    expect(JSON.parse(oursRow.headers)).toEqual(JSON.parse(upRow.headers));
    expect(oursRow.queue_name).toBe(transports.queueName);
    expect(upRow.queue_name).toBe(transports.queueName);
    expect(oursRow.delivered_at).toBeNull();
    expect(upRow.delivered_at).toBeNull();
    expect(Number(oursRow.delay_us)).toBe(1500 * 1000);
    expect(Number(upRow.delay_us)).toBe(1500 * 1000);

    // And both are the JsonSerializer wire form (body verbatim, headers JSON-encoded once more).
    const encoded = serializer().encode(envelope);
    expect(oursRow.body).toBe(encoded.body);
    expect(oursRow.body_hex).toBe(Buffer.from(encoded.body, 'utf8').toString('hex').toUpperCase());
    expect(JSON.parse(oursRow.headers)).toEqual(encoded.headers);
    const stamps = JSON.parse(JSON.parse(oursRow.headers)['X-Message-Stamps']);
    expect(stamps.map((s) => s.type)).toEqual([
      'BusNameStamp',
      'BusNameStamp',
      'SentStamp',
      'RedeliveryStamp',
      'ErrorDetailsStamp',
      'DelayStamp',
    ]);

    // Each side decodes the other's row to the same envelope.
    for (const side of [transports.up, transports.ours]) {
      for (const id of [upId, oursId]) {
        const found = await side.find(id);
        expect(found).toBeDefined();
        expect(found.message).toStrictEqual(message);
        expect(sendableStamps(found)).toEqual(sendableStamps(envelope));
      }
    }
  }, 15000);
});
