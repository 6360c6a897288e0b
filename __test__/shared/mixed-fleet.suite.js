'use strict';

// Mixed fleet on a SQL engine, written once and run by sql/<engine>.mixed-fleet.test.js: the
// upstream TypeScript SqlTransport (@schally/nestjs-messenger-transport-sql@1.2.0) and ours
// share the table `messenger_messages` and one queue, as during a rolling migration
// (reference/upstream-transports.md §1, §5.1). Each must receive what the other sent (plain,
// ordered, delayed, rejected, crashed, listed, found), claims must never overlap, and the
// storage must be the same. The engine adapter (support/engines/) supplies the upstream
// options, how to tell an idle consumer, stored delays and the shape of the upstream table.

const {
  DelayStamp,
  Envelope,
  ErrorDetailsStamp,
  ReceivedStamp,
  RedeliveryStamp,
  TransportMessageIdStamp,
  BusNameStamp,
  SentStamp,
} = require('@schally/nestjs-messenger');
const { SqlTransport: UpstreamSqlTransport } = require('@schally/nestjs-messenger-transport-sql');
const { SqlTransport: NativeSqlTransport } = require('../..');
const { uniqueName } = require('../support/engines');
const { CORE, runChild } = require('../support/child');
const { everyStamp } = require('../support/every-stamp');
const { FleetMessage, fleetSerializer, idOf, sendableStamps, outgoing, fleetHarness } = require('../support/fleet');
const { sleep, waitFor, collect } = require('../support/transport-helpers');

const TABLE = 'messenger_messages';
const DECIMAL_ID = /^\d+$/;
const UPSTREAM_NAME = 'upstream-worker';
const NATIVE_NAME = 'native-worker';

const directions = [
  { title: 'upstream → native', sender: 'up', receiver: 'ours', receiverName: NATIVE_NAME },
  { title: 'native → upstream', sender: 'ours', receiver: 'up', receiverName: UPSTREAM_NAME },
];

/**
 * Registers the shared mixed-fleet cases for one SQL engine and returns what its entry file
 * needs for its engine-only cases.
 * @param {object} engine a SQL engine adapter of support/engines
 */
function mixedFleetSuite(engine) {
  const db = engine.testAdmin(engine.dsn);
  const fleet = engine.fleet;
  let queues = [];
  let tables = [];
  const harness = fleetHarness({
    async cleanup() {
      await db.deleteQueues(TABLE, queues.splice(0));
      for (const table of tables.splice(0)) await db.dropTable(table, { ifExists: true });
    },
  });
  const { open, ack, reject, receive, startConsumer } = harness;

  function upstream(queueName, options = {}) {
    return open(
      new UpstreamSqlTransport({
        dsn: engine.dsn,
        queueName,
        name: UPSTREAM_NAME,
        serializer: fleetSerializer(),
        ...fleet.upstreamOptions,
        ...options,
      }),
      'upstream',
    );
  }

  function native(queueName, options = {}) {
    return open(
      new NativeSqlTransport({ dsn: engine.dsn, queueName, name: NATIVE_NAME, serializer: fleetSerializer(), ...options }),
      'native',
    );
  }

  /**
   * Claims one message of `queueName` with the native transport in a process of its own, which
   * then exits at once (a crash: nothing settled, nothing closed). Returns the claimed id.
   */
  function claimInCrashingProcess(queueName, options) {
    const child = runChild(
      `
      class FleetMessage { constructor(n, text, meta) { Object.assign(this, { n, text, meta }); } }
      const { TransportMessageIdStamp } = require(${JSON.stringify(CORE)});
      (async () => {
        const transport = new Transport({ ...transportOptions(${JSON.stringify(options)}), serializer: new JsonSerializer([FleetMessage]) });
        for await (const envelope of transport.get()) {
          require('node:fs').writeSync(3, String(envelope.last(TransportMessageIdStamp).id));
          process.exit(0);
        }
      })();
      `,
      { env: { KIND: 'sql', DSN: engine.dsn, TARGET: JSON.stringify({ queueName }) }, fd3: true },
    );
    if (child.status !== 0) throw new Error(`the crashing consumer failed: ${child.stderr}`);
    return child.report;
  }

  /** A fresh queue on the shared table, with one transport of each implementation. */
  function pair(prefix, { upstreamOptions, nativeOptions } = {}) {
    const queueName = uniqueName(prefix);
    queues.push(queueName);
    return { queueName, up: upstream(queueName, upstreamOptions), ours: native(queueName, nativeOptions) };
  }

  /** A table of its own for one test (dropped after it). */
  function freshTable(prefix) {
    const table = uniqueName(prefix);
    tables.push(table);
    return table;
  }

  /**
   * Starts a consumer on `transport` and returns once it is idle (LISTEN up, or given time to
   * run its empty claim and its "next due" peek), having received nothing.
   */
  async function startIdleConsumer(transport, kind) {
    const consumer = await fleet.whenIdle(kind, () => startConsumer(transport));
    expect(consumer.received).toHaveLength(0);
    return consumer;
  }

  /**
   * Acks are written behind by default on our side: a row disappears a few milliseconds after
   * its ack resolved. Waits (up to 2 s) for the queue's rows, mapped by `pick`, to equal
   * `expected`, then asserts.
   */
  async function expectRowsEventually(queueName, expected, pick = (rows) => rows) {
    const deadline = Date.now() + 2000;
    let actual = pick(await db.rows(TABLE, queueName));
    while (Date.now() < deadline && JSON.stringify(actual) !== JSON.stringify(expected)) {
      await sleep(10);
      actual = pick(await db.rows(TABLE, queueName));
    }
    expect(actual).toEqual(expected);
  }

  /** What every receiver must see for a message the other side sent. */
  function expectSameMessage(received, sent, { id, receiverName } = {}) {
    expect(received.message).toBeInstanceOf(FleetMessage);
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

  beforeAll(async () => {
    await engine.requireServer();
    // One after the other: the table normally exists already; this only makes sure.
    for (const make of [() => new UpstreamSqlTransport({ dsn: engine.dsn }), () => new NativeSqlTransport({ dsn: engine.dsn })]) {
      const transport = make();
      try {
        await transport.setup();
      } finally {
        await transport.close();
      }
    }
  }, 15000);

  // -------------------------------------------------------------------------
  // 1. Each side receives what the other sent
  // -------------------------------------------------------------------------

  describe(`each implementation receives what the other sent${fleet.label}`, () => {
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
        // Warm both sides (setup memo, pools) so the send is one statement.
        await Promise.all([sender.getMessageCount(), receiver.getMessageCount()]);
        // The receiver is already idle when the message is stored (woken by it where the engine
        // pushes, polling otherwise), and it must still wait until the message is due.
        const consumer = await startIdleConsumer(receiver, d.receiver === 'up' ? 'upstream' : 'native');
        try {
          const envelope = outgoing(7, 'later', new DelayStamp(300));
          const sentAt = Date.now();
          const sent = await sender.send(envelope);

          // Not due yet: nobody counts it, both sides list it.
          expect(await receiver.getMessageCount()).toBe(0);
          expect(await sender.getMessageCount()).toBe(0);
          expect((await collect(receiver.list())).map(idOf)).toEqual([idOf(sent)]);
          expect(await fleet.storedDelays(db, transports.queueName)).toEqual([{ id: idOf(sent), delayMs: 300 }]);

          await waitFor(() => consumer.received.length > 0, 300 + 1500, 'the delayed message');
          const [{ envelope: received, at }] = consumer.received;
          // available_at = the database's now + 300 ms, stored to the millisecond; allow rounding only.
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
      const rows = await db.rows(TABLE, transports.queueName);
      expect(rows).toHaveLength(1);
      expect(rows[0].id).not.toBe(idOf(sent));
      expect(rows[0].delivered_at).toBeNull();
      expect((await collect(other.list())).map(idOf)).toEqual([rows[0].id]);
      expect((await collect(rejecter.list())).map(idOf)).toEqual([rows[0].id]);

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

    for (const d of fleet.rejectedDelayCases) {
      test(d.title, async () => {
        const transports = pair('mf_reject_delay');
        const rejecter = transports[d.rejecter];
        const other = transports[d.other];
        const envelope = outgoing(4, 'delayed then rejected', new DelayStamp(300));
        const sent = await transports[d.sender].send(envelope);
        expect(await fleet.storedDelays(db, transports.queueName)).toEqual([{ id: idOf(sent), delayMs: 300 }]);

        const [first] = await receive(rejecter, 1, 3000);
        expect(first).toBeDefined();
        expect(idOf(first)).toBe(idOf(sent));
        const rejectedAt = Date.now();
        await reject(rejecter, first);

        // The copy is stored 300 ms in the future again, and is not due yet for either side.
        const delays = await fleet.storedDelays(db, transports.queueName);
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
    }

    test.each([
      { title: 'native claimed and crashed, upstream recovers it', crashed: 'ours', other: 'up', otherName: UPSTREAM_NAME },
      { title: 'upstream claimed and crashed, native recovers it', crashed: 'up', other: 'ours', otherName: NATIVE_NAME },
    ])('crash redelivery after redeliverTimeoutSeconds: $title (same id, no RedeliveryStamp)', async (d) => {
      const options = { redeliverTimeoutSeconds: 1 };
      const transports = pair('mf_crash', { upstreamOptions: options, nativeOptions: options });
      const envelope = outgoing(5, 'claimed, never settled');
      const sent = await transports[d.other].send(envelope);

      // A live native worker renews the claim of the message its handler holds (no second
      // delivery while it lives), so the native side crashes for real: a process of its own
      // that claims the message and exits without settling or closing.
      let claimed;
      const claimedId =
        d.crashed === 'ours'
          ? claimInCrashingProcess(transports.queueName, options)
          : idOf((claimed = (await receive(transports.up, 1))[0]));
      expect(claimedId).toBe(idOf(sent));
      // In flight on the crashed side: the other side cannot have it yet.
      expect(await receive(transports[d.other], 1, 300)).toEqual([]);

      await sleep(1100);
      const [recovered] = await receive(transports[d.other], 1, 3000);
      expect(recovered).toBeDefined();
      expectSameMessage(recovered, envelope, { id: idOf(sent), receiverName: d.otherName });
      expect(recovered.last(RedeliveryStamp)).toBeUndefined();
      await ack(transports[d.other], recovered);
      await expectRowsEventually(transports.queueName, []);
      // The crashed side's late ack (upstream's; the native one is gone) is a harmless no-op.
      if (d.crashed === 'up') await ack(transports.up, claimed);
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
        const listed = await collect(side.list());
        expect(listed.map(idOf)).toEqual(ids);
        listed.forEach((envelope, i) => {
          expectSameMessage(envelope, envelopes[i], { id: ids[i] });
          expect(sendableStamps(envelope)).toEqual(sendableStamps(envelopes[i]));
        });
        expect((await collect(side.list(2))).map(idOf)).toEqual(ids.slice(0, 2));

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
      expect((await collect(transports.ours.list())).map(idOf)).toEqual(ids);
      await ack(transports.up, claimed);
      expect((await collect(transports.ours.list())).map(idOf)).toEqual(ids.slice(1));
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

    test('list(), find() and get() yield every stamp upstream yields, in its order, on the same rows', async () => {
      const transports = pair('mf_stamps');
      // Upstream under the native side's name: the ReceivedStamp carries the transport's name.
      const upstreamAsNative = upstream(transports.queueName, { name: NATIVE_NAME });
      const stamped = [
        new RedeliveryStamp(2, new Date('2026-01-02T03:04:05.678Z')),
        new ErrorDetailsStamp('Error', 'boom', 42),
        new BusNameStamp('second.bus'),
      ];
      const ids = [
        idOf(await transports.up.send(outgoing(0, 'by upstream', ...stamped))),
        idOf(await transports.ours.send(outgoing(1, 'by native', ...stamped))),
      ];

      const upstreamListed = await collect(upstreamAsNative.list());
      const nativeListed = await collect(transports.ours.list());
      expect(nativeListed.map(idOf)).toEqual(ids);
      expect(nativeListed.map(everyStamp)).toEqual(upstreamListed.map(everyStamp));
      for (const [i, id] of ids.entries()) {
        const upstreamFound = await upstreamAsNative.find(id);
        const nativeFound = await transports.ours.find(id);
        expect(everyStamp(nativeFound)).toEqual(everyStamp(upstreamFound));
        expect(everyStamp(nativeFound)).toEqual(everyStamp(nativeListed[i]));
        // Spelled out: upstream's decode appends the ReceivedStamp, then the id.
        expect(everyStamp(nativeFound).slice(-2)).toEqual([
          { type: 'ReceivedStamp', data: { transportName: NATIVE_NAME } },
          { type: 'TransportMessageIdStamp', data: { id } },
        ]);
      }

      // get() stamps a claimed row as find() does (both sides' decode is one rule).
      const received = await receive(transports.ours, 2);
      expect(received.map(idOf)).toEqual(ids);
      expect(received.map(everyStamp)).toEqual(upstreamListed.map(everyStamp));
      for (const envelope of received) await ack(transports.ours, envelope);
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
      expect((await collect(transports[d.sender].list())).map(idOf)).toEqual([idOf(keep)]);
      // Idempotent: a second ack is a no-op and leaves the other row alone.
      await finder.ack(found);
      await expectRowsEventually(transports.queueName, [idOf(keep)], (rows) => rows.map((r) => r.id));
    }, 15000);
  });

  // -------------------------------------------------------------------------
  // 2. Both consuming one queue at once
  // -------------------------------------------------------------------------

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
          harness.track(transport, envelope);
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
      sends.push(side.send(new Envelope(new FleetMessage(n, `m${n}`))));
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

  /** Once `run` (consumeBoth) is done: each of `sentIds` delivered once, nothing left on either side. */
  async function expectAllConsumedOnce(transports, run, sentIds, total) {
    await run.done;
    expect(run.errors).toEqual([]);
    expectExactlyOnce(run.deliveries, sentIds, total);

    await expectRowsEventually(transports.queueName, []);
    expect(await transports.up.getMessageCount()).toBe(0);
    expect(await transports.ours.getMessageCount()).toBe(0);
  }

  describe(`both implementations consuming one ${fleet.queueWord} at once`, () => {
    test('300 messages sent half by each are delivered exactly once across both consumers', async () => {
      const transports = pair('mf_both');
      // Warm both (setup memo, pools) so neither side gets a head start.
      await Promise.all([transports.up.getMessageCount(), transports.ours.getMessageCount()]);
      const total = 300;
      const sentIds = await sendHalfEach(transports, 0, total);
      expect(new Set(sentIds).size).toBe(total);
      for (const id of sentIds) expect(id).toMatch(DECIMAL_ID);
      expect(await transports.up.getMessageCount()).toBe(total);
      expect(await transports.ours.getMessageCount()).toBe(total);

      const run = consumeBoth(transports, total);
      await expectAllConsumedOnce(transports, run, sentIds, total);
    }, 45000);

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
        await sleep(round % 3 === 0 ? 80 : 5); // sometimes let both consumers go idle
      }
      expect(new Set(sentIds).size).toBe(total);
      await expectAllConsumedOnce(transports, run, sentIds, total);
    }, 45000);
  });

  // -------------------------------------------------------------------------
  // 3. Storage identity
  // -------------------------------------------------------------------------

  describe(`storage identity${fleet.label}`, () => {
    test(fleet.ddlTitle, async () => {
      const oursTable = freshTable('mf_ddl_native');
      const upTable = freshTable('mf_ddl_upstream');
      const ours = native('mf_ddl', { tableName: oursTable });
      const up = upstream('mf_ddl', { tableName: upTable });

      await ours.setup();
      await up.setup();
      const oursShape = await fleet.tableShape(db, oursTable);
      const upShape = await fleet.tableShape(db, upTable);
      expect(oursShape).toEqual(upShape);
      // And that shape is the documented one, not merely the same on both sides.
      fleet.expectDocumentedShape(oursShape);

      // Either side's setup() on the other's table is a no-op: no second (differently named)
      // index, nothing altered.
      const upOnOurs = upstream('mf_ddl', { tableName: oursTable });
      const oursOnUp = native('mf_ddl', { tableName: upTable });
      await upOnOurs.setup();
      await oursOnUp.setup();
      expect(await fleet.tableShape(db, oursTable)).toEqual(oursShape);
      expect(await fleet.tableShape(db, upTable)).toEqual(upShape);
    }, 15000);

    test('rows written by native and by upstream for the same envelope are the same', async () => {
      const transports = pair('mf_rows');
      const message = new FleetMessage(42, 'same bytes? "yes" \\ \n\t ünïcødé 🚀 \u2028 \u0000', {
        nested: { list: [1, 2.5, null, true], empty: {} },
        html: '<b>&amp;</b>',
        quote: "it's",
      });
      const envelope = new Envelope(message, [
        new BusNameStamp('messenger.bus.default'),
        new SentStamp('FleetMessage', 'async'),
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
      const rows = await fleet.storedRowsById(db, [upId, oursId]);
      const upRow = rows.find((r) => r.id === upId);
      const oursRow = rows.find((r) => r.id === oursId);
      expect(upRow).toBeDefined();
      expect(oursRow).toBeDefined();

      expect(oursRow.bodyHex).toBe(upRow.bodyHex);
      expect(oursRow.body).toBe(upRow.body);
      expect(JSON.parse(oursRow.headers)).toEqual(JSON.parse(upRow.headers));
      expect(oursRow.queue_name).toBe(transports.queueName);
      expect(upRow.queue_name).toBe(transports.queueName);
      expect(oursRow.delivered_at).toBeNull();
      expect(upRow.delivered_at).toBeNull();
      expect(oursRow.delayMs).toBe(1500);
      expect(upRow.delayMs).toBe(1500);

      // And both are the JsonSerializer wire form (body verbatim, headers JSON-encoded once more).
      const encoded = fleetSerializer().encode(envelope);
      expect(oursRow.body).toBe(encoded.body);
      expect(oursRow.bodyHex).toBe(Buffer.from(encoded.body, 'utf8').toString('hex').toUpperCase());
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

  return {
    db,
    TABLE,
    directions,
    UPSTREAM_NAME,
    NATIVE_NAME,
    harness,
    pair,
    freshTable,
    startIdleConsumer,
    expectRowsEventually,
    expectSameMessage,
    consumeBoth,
    expectExactlyOnce,
  };
}

module.exports = { mixedFleetSuite };
