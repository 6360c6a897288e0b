'use strict';

// Mixed fleet on PostgreSQL: the upstream TypeScript SqlTransport
// (@schally/nestjs-messenger-transport-sql@1.2.0) and ours share the table
// `messenger_messages` and one queue, as during a rolling migration
// (reference/upstream-transports.md §5.1). Each must receive what the other sent, claims must
// never overlap, NOTIFY wake-ups must cross implementations, and the storage must be the same.

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
const { POSTGRES_DSN, requireServer, uniqueName } = require('../support/servers');
const { pgQuery } = require('../support/pg');

const TABLE = 'messenger_messages';
const DECIMAL_ID = /^\d+$/;
const UPSTREAM_NAME = 'upstream-worker';
const NATIVE_NAME = 'native-worker';

class MixedFleetMessage {
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
  return new JsonSerializer([MixedFleetMessage]);
}

function upstream(queueName, options = {}) {
  const transport = new UpstreamSqlTransport({
    dsn: POSTGRES_DSN,
    queueName,
    name: UPSTREAM_NAME,
    serializer: serializer(),
    ...options,
  });
  openTransports.push({ transport, label: 'upstream' });
  return transport;
}

function native(queueName, options = {}) {
  const transport = new NativeSqlTransport({
    dsn: POSTGRES_DSN,
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
  await requireServer('postgres', POSTGRES_DSN);
  // One after the other: the table normally exists already; this only makes sure.
  for (const make of [
    () => new UpstreamSqlTransport({ dsn: POSTGRES_DSN }),
    () => new NativeSqlTransport({ dsn: POSTGRES_DSN }),
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
    await pgQuery(`DELETE FROM ${TABLE} WHERE queue_name = ANY($1::text[])`, [queues]);
  }
  for (const table of tables) {
    await pgQuery(`DROP TABLE IF EXISTS ${table}`);
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
  return new Envelope(new MixedFleetMessage(n, text, { origin: 'mixed-fleet', tags: ['a', 'ü', '🚀'] }), [
    new BusNameStamp('messenger.bus.default'),
    new SentStamp('MixedFleetMessage', 'async'),
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

async function listenerPids(kind) {
  // upstream (pg): `LISTEN messenger_messages`; ours (sqlx PgListener): `LISTEN "messenger_messages";`
  const pattern = kind === 'upstream' ? `LISTEN ${TABLE}` : `LISTEN "${TABLE}"%`;
  const { rows } = await pgQuery(
    'SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query LIKE $1',
    [pattern],
  );
  return new Set(rows.map((row) => row.pid));
}

/**
 * Starts a consumer and returns once it is idle: its LISTEN connection exists and it had time
 * to run its empty claim and its "next due" peek.
 */
async function startIdleConsumer(transport, kind) {
  const before = await listenerPids(kind);
  const consumer = startConsumer(transport);
  await waitFor(
    async () => [...(await listenerPids(kind))].some((pid) => !before.has(pid)),
    5000,
    `the ${kind} consumer's LISTEN connection`,
  );
  await sleep(300);
  expect(consumer.received).toHaveLength(0);
  return consumer;
}

/**
 * Acks are write-behind by default: a row disappears a few milliseconds after its ack resolved.
 * Waits (up to 2 s) for the queue's rows, mapped by `pick`, to equal `expected`, then asserts.
 */
async function expectRowsEventually(queueName, expected, pick = (rows) => rows) {
  const deadline = Date.now() + 2000;
  let actual = pick(await rowsOfQueue(queueName));
  while (Date.now() < deadline && JSON.stringify(actual) !== JSON.stringify(expected)) {
    await new Promise((resolve) => setTimeout(resolve, 10));
    actual = pick(await rowsOfQueue(queueName));
  }
  expect(actual).toEqual(expected);
}

async function rowsOfQueue(queueName) {
  const { rows } = await pgQuery(
    `SELECT id::text AS id, body, headers, delivered_at FROM ${TABLE} WHERE queue_name = $1 ORDER BY id`,
    [queueName],
  );
  return rows;
}

async function drain(iterable) {
  const out = [];
  for await (const item of iterable) out.push(item);
  return out;
}

/** What every receiver must see for a message the other side sent. */
function expectSameMessage(received, sent, { id, receiverName } = {}) {
  expect(received.message).toBeInstanceOf(MixedFleetMessage);
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

// ---------------------------------------------------------------------------
// 1. Each side receives what the other sent
// ---------------------------------------------------------------------------

describe('each implementation receives what the other sent', () => {
  const directions = [
    { title: 'upstream → native', sender: 'up', receiver: 'ours', receiverName: NATIVE_NAME, other: 'up' },
    { title: 'native → upstream', sender: 'ours', receiver: 'up', receiverName: UPSTREAM_NAME, other: 'ours' },
  ];

  test.each(directions)('plain message, $title: payload, stamps and decimal string id intact', async (d) => {
    const transports = pair('mf_plain');
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
    const transports = pair('mf_order');
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
      const transports = pair('mf_delay');
      const sender = transports[d.sender];
      const receiver = transports[d.receiver];
      // The receiver is already idle and listening: the send's NOTIFY wakes it, and it must
      // still wait until the message is due.
      const consumer = await startIdleConsumer(receiver, d.receiver === 'up' ? 'upstream' : 'native');
      try {
        const envelope = outgoing(7, 'later', new DelayStamp(300));
        const sentAt = Date.now();
        const sent = await sender.send(envelope);

        // Not due yet: nobody counts it, both sides list it.
        expect(await receiver.getMessageCount()).toBe(0);
        expect(await sender.getMessageCount()).toBe(0);
        expect((await drain(receiver.list())).map(idOf)).toEqual([idOf(sent)]);

        await waitFor(() => consumer.received.length > 0, 300 + 1500, 'the delayed message');
        const [{ envelope: received, at }] = consumer.received;
        // available_at = DB now() + 300 ms, stored to the millisecond; allow rounding only.
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
    const transports = pair('mf_reject');
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

  test('a rejected delayed message keeps its delay on the copy, across implementations', async () => {
    const transports = pair('mf_reject_delay');
    const envelope = outgoing(4, 'delayed then rejected', new DelayStamp(300));
    const sent = await transports.up.send(envelope);
    const [first] = await receive(transports.ours, 1, 3000);
    expect(idOf(first)).toBe(idOf(sent));
    await reject(transports.ours, first);

    // The copy is not due yet for either side.
    expect(await transports.up.getMessageCount()).toBe(0);
    expect(await transports.ours.getMessageCount()).toBe(0);
    const [{ wait_ms: waitMs }] = (
      await pgQuery(
        `SELECT extract(epoch FROM (available_at - created_at)) * 1000 AS wait_ms FROM ${TABLE} WHERE queue_name = $1`,
        [transports.queueName],
      )
    ).rows;
    expect(Number(waitMs)).toBe(300);

    const [copy] = await receive(transports.up, 1, 3000);
    expect(copy).toBeDefined();
    expect(copy.last(RedeliveryStamp).retryCount).toBe(1);
    expect(copy.last(DelayStamp).delayMs).toBe(300);
    await ack(transports.up, copy);
  }, 15000);

  test.each([
    { title: 'native claimed and crashed, upstream recovers it', crashed: 'ours', other: 'up', otherName: UPSTREAM_NAME },
    { title: 'upstream claimed and crashed, native recovers it', crashed: 'up', other: 'ours', otherName: NATIVE_NAME },
  ])('crash redelivery after redeliverTimeoutSeconds: $title (same id, no RedeliveryStamp)', async (d) => {
    const options = { redeliverTimeoutSeconds: 1 };
    const transports = pair('mf_crash', { upstreamOptions: options, nativeOptions: options });
    const envelope = outgoing(5, 'claimed, never settled');
    const sent = await transports[d.other].send(envelope);

    const [claimed] = await receive(transports[d.crashed], 1);
    expect(idOf(claimed)).toBe(idOf(sent));
    // In flight on the crashed side: the other side cannot have it yet.
    expect(await receive(transports[d.other], 1, 300)).toEqual([]);

    await sleep(1100);
    const [recovered] = await receive(transports[d.other], 1, 3000);
    expect(recovered).toBeDefined();
    expectSameMessage(recovered, envelope, { id: idOf(sent), receiverName: d.otherName });
    expect(recovered.last(RedeliveryStamp)).toBeUndefined();
    await ack(transports[d.other], recovered);
    await expectRowsEventually(transports.queueName, []);
    // The crashed side's late ack is a harmless no-op.
    await ack(transports[d.crashed], claimed);
  }, 15000);

  test('list(), find() and getMessageCount() on either side see what both sides sent', async () => {
    const transports = pair('mf_list');
    const envelopes = [outgoing(0, 'by upstream'), outgoing(1, 'by native'), outgoing(2, 'by upstream again')];
    const sent = [
      await transports.up.send(envelopes[0]),
      await transports.ours.send(envelopes[1]),
      await transports.up.send(envelopes[2]),
    ];
    const ids = sent.map(idOf);

    for (const side of [transports.up, transports.ours]) {
      const listed = await drain(side.list());
      expect(listed.map(idOf)).toEqual(ids);
      listed.forEach((envelope, i) => {
        expectSameMessage(envelope, envelopes[i], { id: ids[i] });
        expect(sendableStamps(envelope)).toEqual(sendableStamps(envelopes[i]));
      });
      expect((await drain(side.list(2))).map(idOf)).toEqual(ids.slice(0, 2));

      for (const [i, id] of ids.entries()) {
        const found = await side.find(id);
        expect(found).toBeDefined();
        expectSameMessage(found, envelopes[i], { id });
        expect(sendableStamps(found)).toEqual(sendableStamps(envelopes[i]));
      }
      expect(await side.find(String(BigInt(ids[2]) + 1000000n))).toBeUndefined();
      expect(await side.find('not-a-number')).toBeUndefined();
      expect(await side.getMessageCount()).toBe(3);
    }

    // A message claimed by one side stays listed on both, and is no longer counted by either
    // (upstream claims exactly one row).
    const [claimed] = await receive(transports.up, 1);
    expect(idOf(claimed)).toBe(ids[0]);
    expect(await transports.up.getMessageCount()).toBe(2);
    expect(await transports.ours.getMessageCount()).toBe(2);
    expect((await drain(transports.ours.list())).map(idOf)).toEqual(ids);
    await ack(transports.up, claimed);
    expect((await drain(transports.ours.list())).map(idOf)).toEqual(ids.slice(1));
    expect(await transports.ours.find(ids[0])).toBeUndefined();

    // The native side claims in batches; once its get() loop has ended, what it prefetched
    // but never yielded is claimable again for upstream consumers, right away.
    const [nativeClaimed] = await receive(transports.ours, 1);
    expect(idOf(nativeClaimed)).toBe(ids[1]);
    await waitFor(async () => (await transports.up.getMessageCount()) === 1, 1000, 'the prefetched row to be released');
    const [rest] = await receive(transports.up, 1, 1000);
    expect(idOf(rest)).toBe(ids[2]);
    await ack(transports.ours, nativeClaimed);
    await ack(transports.up, rest);
    await expectRowsEventually(transports.queueName, []);
  }, 15000);

  test.each([
    { title: 'native acks what upstream sent', sender: 'up', finder: 'ours' },
    { title: 'upstream acks what native sent', sender: 'ours', finder: 'up' },
  ])('ack of a find() result deletes it: $title', async (d) => {
    const transports = pair('mf_find_ack');
    const keep = await transports[d.sender].send(outgoing(0, 'keep'));
    const sent = await transports[d.sender].send(outgoing(1, 'remove me'));
    const finder = transports[d.finder];

    const found = await finder.find(idOf(sent));
    expect(found).toBeDefined();
    expect(found.message.text).toBe('remove me');
    await finder.ack(found);

    await expectRowsEventually(transports.queueName, [idOf(keep)], (rows) => rows.map((r) => r.id));
    expect(await transports[d.sender].find(idOf(sent))).toBeUndefined();
    expect((await drain(transports[d.sender].list())).map(idOf)).toEqual([idOf(keep)]);
    // Idempotent: a second ack is a no-op and leaves the other row alone.
    await finder.ack(found);
    await expectRowsEventually(transports.queueName, [idOf(keep)], (rows) => rows.map((r) => r.id));
  }, 15000);
});

// ---------------------------------------------------------------------------
// 2. Both consuming one queue at once
// ---------------------------------------------------------------------------

describe('both implementations consuming one queue at once', () => {
  /**
   * Runs one upstream and one native get() loop, each acking every message, until `expected`
   * deliveries were seen in total (then a short grace period to catch late duplicates) or
   * the deadline passes.
   */
  function consumeBoth(transports, expected, { deadlineMs = 25000 } = {}) {
    const controller = new AbortController();
    const deliveries = [];
    const errors = [];
    let graceTimer;
    const hardTimer = setTimeout(() => controller.abort(), deadlineMs);
    const loop = async (transport, by) => {
      try {
        for await (const envelope of transport.get(controller.signal)) {
          track(transport, envelope);
          deliveries.push({ by, id: idOf(envelope), n: envelope.message.n, receivedBy: envelope.last(ReceivedStamp)?.transportName });
          await ack(transport, envelope);
          if (deliveries.length >= expected && graceTimer === undefined) {
            graceTimer = setTimeout(() => controller.abort(), 250);
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
    return { deliveries, errors, done };
  }

  async function sendHalfEach(transports, from, count) {
    const sends = [];
    for (let n = from; n < from + count; n += 1) {
      const side = n % 2 === 0 ? transports.up : transports.ours;
      sends.push(side.send(new Envelope(new MixedFleetMessage(n, `m${n}`))));
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
    const transports = pair('mf_both');
    // Warm both (setup memo, pools) so neither side gets a head start.
    await Promise.all([transports.up.getMessageCount(), transports.ours.getMessageCount()]);
    const total = 300;
    const sentIds = await sendHalfEach(transports, 0, total);
    expect(new Set(sentIds).size).toBe(total);
    expect(await transports.up.getMessageCount()).toBe(total);

    const run = consumeBoth(transports, total);
    await run.done;
    expect(run.errors).toEqual([]);
    expectExactlyOnce(run.deliveries, sentIds, total);

    await expectRowsEventually(transports.queueName, []);
    expect(await transports.up.getMessageCount()).toBe(0);
    expect(await transports.ours.getMessageCount()).toBe(0);
  }, 40000);

  test('sends by both sides continue while both consume: still exactly once, nothing left', async () => {
    const transports = pair('mf_both_live');
    await Promise.all([transports.up.getMessageCount(), transports.ours.getMessageCount()]);
    const initial = 60;
    const rounds = 12;
    const perRound = 20;
    const total = initial + rounds * perRound;
    const sentIds = await sendHalfEach(transports, 0, initial);

    const run = consumeBoth(transports, total);
    for (let round = 0; round < rounds; round += 1) {
      sentIds.push(...(await sendHalfEach(transports, initial + round * perRound, perRound)));
      await sleep(round % 3 === 0 ? 60 : 5); // sometimes let both consumers go idle
    }
    expect(new Set(sentIds).size).toBe(total);
    await run.done;
    expect(run.errors).toEqual([]);
    expectExactlyOnce(run.deliveries, sentIds, total);

    await expectRowsEventually(transports.queueName, []);
    expect(await transports.up.getMessageCount()).toBe(0);
    expect(await transports.ours.getMessageCount()).toBe(0);
  }, 40000);
});

// ---------------------------------------------------------------------------
// 3. NOTIFY wake-ups across implementations
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

// ---------------------------------------------------------------------------
// 4. Storage identity
// ---------------------------------------------------------------------------

describe('storage identity', () => {
  async function describeTable(table) {
    const columns = (
      await pgQuery(
        `SELECT column_name, ordinal_position, data_type, udt_name, character_maximum_length,
                numeric_precision, datetime_precision, is_nullable, column_default,
                is_identity, identity_generation, identity_start, identity_increment,
                identity_maximum, identity_minimum, identity_cycle, is_generated, collation_name
           FROM information_schema.columns
          WHERE table_schema = current_schema() AND table_name = $1
          ORDER BY ordinal_position`,
        [table],
      )
    ).rows;
    const placeholder = (text) => (text === null ? null : text.split(table).join('<table>'));
    const indexes = (
      await pgQuery(
        `SELECT indexname, indexdef FROM pg_indexes
          WHERE schemaname = current_schema() AND tablename = $1 ORDER BY indexname`,
        [table],
      )
    ).rows.map((row) => ({ indexname: placeholder(row.indexname), indexdef: placeholder(row.indexdef) }));
    const constraints = (
      await pgQuery(
        `SELECT conname, contype, pg_get_constraintdef(oid) AS definition
           FROM pg_constraint WHERE conrelid = $1::regclass ORDER BY conname`,
        [table],
      )
    ).rows.map((row) => ({ ...row, conname: placeholder(row.conname) }));
    return { columns, indexes, constraints };
  }

  test('setup() by native creates exactly the table and index upstream setup() creates', async () => {
    const oursTable = uniqueName('mf_ddl_native');
    const upTable = uniqueName('mf_ddl_upstream');
    tables.push(oursTable, upTable);
    const ours = native('mf_ddl', { tableName: oursTable });
    const up = upstream('mf_ddl', { tableName: upTable });

    await ours.setup();
    await up.setup();
    const oursShape = await describeTable(oursTable);
    const upShape = await describeTable(upTable);

    expect(oursShape.columns.length).toBe(7);
    expect(oursShape).toEqual(upShape);
    // And that shape is the documented one, not merely the same on both sides.
    expect(
      oursShape.columns.map((c) => [
        c.column_name,
        c.data_type,
        c.character_maximum_length,
        c.datetime_precision === null ? null : Number(c.datetime_precision),
        c.is_nullable,
        c.column_default,
        c.is_identity,
        c.identity_generation,
      ]),
    ).toEqual([
      ['id', 'bigint', null, null, 'NO', null, 'YES', 'ALWAYS'],
      ['body', 'text', null, null, 'NO', null, 'NO', null],
      ['headers', 'text', null, null, 'NO', null, 'NO', null],
      ['queue_name', 'character varying', 190, null, 'NO', null, 'NO', null],
      ['created_at', 'timestamp with time zone', null, 3, 'NO', 'now()', 'NO', null],
      ['available_at', 'timestamp with time zone', null, 3, 'NO', null, 'NO', null],
      ['delivered_at', 'timestamp with time zone', null, 3, 'YES', null, 'NO', null],
    ]);
    expect(oursShape.indexes.map((i) => i.indexname)).toEqual(['<table>_claim_idx', '<table>_pkey']);
    expect(oursShape.indexes[0].indexdef).toMatch(
      /^CREATE INDEX <table>_claim_idx ON \S*<table> USING btree \(queue_name, available_at, delivered_at, id\)$/,
    );
    expect(oursShape.constraints).toEqual([{ conname: '<table>_pkey', contype: 'p', definition: 'PRIMARY KEY (id)' }]);

    // Either side's setup() on the other's table is a no-op: no second (differently named)
    // index, nothing altered.
    const upOnOurs = upstream('mf_ddl', { tableName: oursTable });
    const oursOnUp = native('mf_ddl', { tableName: upTable });
    await upOnOurs.setup();
    await oursOnUp.setup();
    expect(await describeTable(oursTable)).toEqual(oursShape);
    expect(await describeTable(upTable)).toEqual(upShape);
  }, 15000);

  test('rows written by native and by upstream for the same envelope are the same', async () => {
    const transports = pair('mf_rows');
    const message = new MixedFleetMessage(42, 'same bytes? "yes" \\ \n\t ünïcødé 🚀 \u2028', {
      nested: { list: [1, 2.5, null, true], empty: {} },
      html: '<b>&amp;</b>',
    });
    const envelope = new Envelope(message, [
      new BusNameStamp('messenger.bus.default'),
      new SentStamp('MixedFleetMessage', 'async'),
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
    const { rows } = await pgQuery(
      `SELECT id::text AS id, queue_name, body, headers, delivered_at,
              extract(epoch FROM (available_at - created_at)) * 1000 AS delay_ms
         FROM ${TABLE} WHERE id = ANY($1::bigint[])`,
      [[upId, oursId]],
    );
    const upRow = rows.find((r) => r.id === upId);
    const oursRow = rows.find((r) => r.id === oursId);
    expect(upRow).toBeDefined();
    expect(oursRow).toBeDefined();

    expect(Buffer.from(oursRow.body, 'utf8').equals(Buffer.from(upRow.body, 'utf8'))).toBe(true);
    expect(oursRow.body).toBe(upRow.body);
    expect(JSON.parse(oursRow.headers)).toEqual(JSON.parse(upRow.headers));
    expect(oursRow.queue_name).toBe(transports.queueName);
    expect(upRow.queue_name).toBe(transports.queueName);
    expect(oursRow.delivered_at).toBeNull();
    expect(upRow.delivered_at).toBeNull();
    expect(Number(oursRow.delay_ms)).toBe(1500);
    expect(Number(upRow.delay_ms)).toBe(1500);

    // And both are the JsonSerializer wire form (body verbatim, headers JSON-encoded once more).
    const encoded = serializer().encode(envelope);
    expect(oursRow.body).toBe(encoded.body);
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
  }, 15000);
});
