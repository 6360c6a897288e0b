'use strict';

// Delivery: crash recovery and prefetch release, reject and redelivery, list/find/count, idle
// waits, get() and close(). Part of the shared SqlTransport suite (../sql-transport.suite.js),
// which supplies `ctx`.

const { DelayStamp, ReceivedStamp, RedeliveryStamp } = require('@schally/nestjs-messenger');
const { uniqueName } = require('../../support/engines');
const {
  TestMessage,
  serializer,
  envelopeOf,
  idOf,
  receiveUpTo,
  receiveWithin,
  receiveOne,
  pollUntil,
  settleWithin,
  collect,
  expectArrival,
} = require('../../support/transport-helpers');

/** Registers the cases of this part for the engine of `ctx`. */
function deliveryCases(ctx) {
  const { engine, DSN, OTHER_DSN, TABLE, db, consume, LONG_IDLE, titles, transport, lastQueue, settledRows } = ctx;

  describe('crash recovery and prefetch', () => {
    /**
     * A "crashed" instance holding the one message it sent (`envelope`, received as `first`), and
     * a reaper on its queue with `redeliverTimeoutSeconds`.
     */
    async function crashedHolding(envelope, redeliverTimeoutSeconds) {
      const crashed = transport();
      const queueName = lastQueue();
      const reaper = transport({ queueName, redeliverTimeoutSeconds });
      const sent = await crashed.send(envelope);
      const first = await receiveOne(crashed);
      return { crashed, queueName, reaper, sent, first };
    }

    it(
      titles(
        'staleRedelivery',
        'redelivers a message left in flight beyond redeliverTimeoutSeconds 0 (same id, no RedeliveryStamp)',
      ),
      async () => {
        const { crashed, queueName, reaper, sent, first } = await crashedHolding(envelopeOf('orphan', 'data'), 0);
        expect(idOf(first)).toBe(idOf(sent));

        // delivered_at has millisecond precision: let the DB clock move past it.
        expect(await pollUntil(() => db.isStale(TABLE, idOf(first)), { timeoutMs: 1000 })).toBe(true);

        const second = await receiveOne(reaper);
        expect(idOf(second)).toBe(idOf(first));
        expect(second.message).toEqual(new TestMessage('orphan', 'data'));
        expect(second.last(RedeliveryStamp)).toBeUndefined();
        await reaper.ack(second);
        expect(await settledRows(TABLE, queueName, 0)).toHaveLength(0);

        // The "crashed" instance's late ack is a harmless no-op, and lets it close.
        await crashed.ack(first);
      },
    );

    it('redelivers after redeliverTimeoutSeconds 1, not before', async () => {
      const { crashed, reaper, first } = await crashedHolding(envelopeOf('orphan-1s'), 1);
      const claimedAt = Date.now();

      expect(await receiveWithin(reaper, 500)).toBeUndefined();
      const second = await receiveOne(reaper, 4000);
      const elapsed = Date.now() - claimedAt;
      expect(elapsed).toBeGreaterThanOrEqual(900);
      expect(elapsed).toBeLessThan(3500);
      expect(idOf(second)).toBe(idOf(first));
      expect(second.last(RedeliveryStamp)).toBeUndefined();
      await reaper.ack(second);
      await crashed.ack(first);
    }, 10000);

    it('makes no copy when the crashed instance rejects a message the reaper already acked', async () => {
      const { crashed, queueName, reaper, first } = await crashedHolding(envelopeOf('taken-over'), 0);
      expect(await pollUntil(() => db.isStale(TABLE, idOf(first)), { timeoutMs: 1000 })).toBe(true);
      const second = await receiveOne(reaper);
      await reaper.ack(second);

      await crashed.reject(first);
      expect(await settledRows(TABLE, queueName, 0)).toHaveLength(0);
      expect(await settleWithin(crashed.close(), 3000)).toEqual({ value: undefined });
    });

    it('releases prefetched rows as soon as the get() loop is left', async () => {
      const t = transport();
      const queueName = lastQueue();
      const ids = [];
      for (let i = 0; i < 5; i += 1) ids.push(idOf(await t.send(envelopeOf(`pf-${i}`))));

      let first;
      for await (const envelope of t.get(new AbortController().signal)) {
        first = envelope;
        break;
      }
      expect(idOf(first)).toBe(ids[0]);

      // Released before get() finished: no waiting needed.
      const stored = await db.rows(TABLE, queueName);
      const others = stored.filter((r) => r.id !== ids[0]);
      expect(others.map((r) => r.id)).toEqual(ids.slice(1));
      expect(others.every((r) => r.delivered_at === null)).toBe(true);
      const [firstRow] = stored.filter((r) => r.id === ids[0]);
      expect(firstRow.delivered_at).not.toBeNull();

      const other = transport({ queueName });
      const rest = await receiveUpTo(other, 4, 2000);
      expect(rest.map(idOf)).toEqual(ids.slice(1));
      for (const e of rest) await other.ack(e);
      await t.ack(first);
      expect(await settledRows(TABLE, queueName, 0)).toHaveLength(0);
    });

    it('releases prefetched rows on close()', async () => {
      const t = transport();
      const queueName = lastQueue();
      const ids = [];
      for (let i = 0; i < 5; i += 1) ids.push(idOf(await t.send(envelopeOf(`pfc-${i}`))));

      const iterator = t.get(new AbortController().signal);
      const { value: first } = await iterator.next();
      expect(idOf(first)).toBe(ids[0]);
      await t.ack(first);
      await t.close();

      const stored = await db.rows(TABLE, queueName);
      expect(stored.map((r) => r.id)).toEqual(ids.slice(1));
      expect(stored.every((r) => r.delivered_at === null)).toBe(true);
      expect(await iterator.next()).toEqual({ value: undefined, done: true });

      const other = transport({ queueName });
      const rest = await receiveUpTo(other, 4, 2000);
      expect(rest.map(idOf)).toEqual(ids.slice(1));
      for (const e of rest) await other.ack(e);
    });
  });

  describe('reject and redelivery', () => {
    it('re-applies the DelayStamp of a rejected message to its copy (new id, RedeliveryStamp 1)', async () => {
      const t = transport();
      const queueName = lastQueue();
      const sent = await t.send(envelopeOf('delayed', 'd', [new DelayStamp(300)]));
      const first = await receiveOne(t, 3000);
      expect(idOf(first)).toBe(idOf(sent));

      const rejectedAt = Date.now();
      await t.reject(first);
      const copy = await receiveOne(t, 3000);
      const elapsed = Date.now() - rejectedAt;

      expect(elapsed).toBeGreaterThanOrEqual(250);
      expect(idOf(copy)).not.toBe(idOf(first));
      expect(Number(idOf(copy))).toBeGreaterThan(Number(idOf(first)));
      expect(copy.message).toEqual(new TestMessage('delayed', 'd'));
      expect(copy.last(RedeliveryStamp).retryCount).toBe(1);
      expect(copy.last(DelayStamp)).toEqual(new DelayStamp(300));
      expect((await db.rows(TABLE, queueName)).map((r) => r.id)).toEqual([idOf(copy)]);
      await t.ack(copy);
    });

    const roundTrips = [
      ['round-trips through two redeliveries', {}],
      // With push wake-up switched off, the copies are found by polling.
      ...(engine.pushWakeup ? [['round-trips, including a redelivery, with useNotify disabled', { useNotify: false }]] : []),
    ];
    for (const [title, options] of roundTrips) {
      it(title, async () => {
        const t = transport(options);
        const sent = await t.send(envelopeOf('again'));
        const first = await receiveOne(t);
        expect(idOf(first)).toBe(idOf(sent));
        await t.reject(first);
        const second = await receiveOne(t);
        expect(idOf(second)).not.toBe(idOf(first));
        expect(second.last(RedeliveryStamp).retryCount).toBe(1);
        await t.reject(second);
        const third = await receiveOne(t);
        expect(third.last(RedeliveryStamp).retryCount).toBe(2);
        await t.ack(third);
        expect(await collect(t.list())).toEqual([]);
      });
    }

    it('does nothing when rejecting an envelope this instance did not deliver', async () => {
      const t = transport();
      const other = transport({ queueName: lastQueue() });
      const sent = await t.send(envelopeOf('not-mine'));
      await other.reject(sent);
      await other.reject(await other.find(idOf(sent)));
      const received = await receiveOne(t);
      await other.reject(received);
      expect((await db.rows(TABLE, lastQueue())).map((r) => r.id)).toEqual([idOf(sent)]);
      expect((await collect(t.list())).map(idOf)).toEqual([idOf(sent)]);
      await t.ack(received);
    });
  });

  describe('list, find and getMessageCount', () => {
    it('lists, finds and counts without consuming; an ack of a found message deletes it', async () => {
      const a = transport();
      const b = transport();
      const m1 = idOf(await a.send(envelopeOf('m1')));
      const inFlight = await receiveOne(a);
      expect(idOf(inFlight)).toBe(m1);
      const m2 = idOf(await a.send(envelopeOf('m2', '', [new DelayStamp(60000)])));
      const m3 = idOf(await a.send(envelopeOf('m3')));
      const m4 = idOf(await b.send(envelopeOf('m4')));

      const listed = await collect(a.list());
      expect(listed.map(idOf)).toEqual([m1, m3, m2]);
      expect(listed.map((e) => e.message.id)).toEqual(['m1', 'm3', 'm2']);
      // Stamped as upstream's list() stamps them: as received by this transport, like get().
      for (const e of listed) expect(e.all(ReceivedStamp)).toEqual([inFlight.last(ReceivedStamp)]);
      expect((await collect(a.list(2))).map(idOf)).toEqual([m1, m3]);
      expect((await collect(b.list())).map(idOf)).toEqual([m4]);

      // Due and not in flight: m3 only (m1 is in flight, m2 is delayed).
      expect(await a.getMessageCount()).toBe(1);
      expect(await b.getMessageCount()).toBe(1);

      // find() sees every queue of the table.
      const foreign = await a.find(m4);
      expect(foreign.message).toEqual(new TestMessage('m4'));
      expect(idOf(foreign)).toBe(m4);
      const delayed = await a.find(m2);
      expect(delayed.last(DelayStamp)).toEqual(new DelayStamp(60000));
      for (const id of ['abc', '99999999999999999999', '0', '-1', '', '1.5', ' 1', '1e3']) {
        expect(await a.find(id)).toBeUndefined();
      }

      await a.ack(delayed);
      expect(await a.find(m2)).toBeUndefined();
      expect((await collect(a.list())).map(idOf)).toEqual([m1, m3]);

      // Nothing above consumed anything.
      const next = await receiveOne(a);
      expect(idOf(next)).toBe(m3);
      await a.ack(next);
      await a.ack(inFlight);
      const other = await receiveOne(b);
      expect(idOf(other)).toBe(m4);
      await b.ack(other);
      expect(await a.getMessageCount()).toBe(0);
      expect(await collect(a.list())).toEqual([]);
    });

    it('find() accepts only plain decimal ids, as upstream (/^\\d+$/): "+<id>" finds nothing', async () => {
      const t = transport();
      const id = idOf(await t.send(envelopeOf('plus')));
      expect(idOf(await t.find(id))).toBe(id);
      expect(await t.find(`+${id}`)).toBeUndefined();
    });

    it('lists 100 messages by default and honours an explicit limit', async () => {
      const t = transport();
      const encoded = serializer().encode(envelopeOf('template'));
      // bulk-1 … bulk-105, each due 1 ms after the one before.
      await db.insertSpread(TABLE, lastQueue(), 105, JSON.stringify(encoded.headers));
      const all = await collect(t.list());
      expect(all).toHaveLength(100);
      expect(all.map((e) => e.message.id)).toEqual(Array.from({ length: 100 }, (_, i) => `bulk-${i + 1}`));
      expect((await collect(t.list(3))).map((e) => e.message.id)).toEqual(['bulk-1', 'bulk-2', 'bulk-3']);
      expect(await collect(t.list(500))).toHaveLength(105);
    });
  });

  describe('idle waits', () => {
    /** A consumer of `t`, whose queue is empty (asserted), once it reached its idle wait (nothing done within `ms`). */
    async function idleConsumerOf(t, ms) {
      const consumer = consume(t);
      expect(await t.getMessageCount()).toBe(0);
      // Let the consumer reach its idle wait (its empty claim is done by now).
      expect(await settleWithin(consumer.done, ms)).toBe('timeout');
      return consumer;
    }

    /** The ms from `sender`'s send of `envelope` to its arrival at `consumer` (asserted within `timeoutMs`). */
    async function arrivalAfterSend(sender, envelope, consumer, timeoutMs) {
      const sentAt = Date.now();
      const sent = await sender.send(envelope);
      const { elapsed } = await expectArrival(consumer, sent, sentAt, timeoutMs);
      return elapsed;
    }

    it.each([
      ['the consuming transport itself', false],
      ['another transport on the same DSN', true],
    ])('an in-process send from %s wakes an idle consumer at once (pollIntervalMs 60000)', async (_, separate) => {
      const queueName = uniqueName('q');
      const consuming = transport({ queueName, ...LONG_IDLE });
      const sender = separate ? transport({ queueName }) : consuming;
      const consumer = await idleConsumerOf(consuming, 300);
      expect(await arrivalAfterSend(sender, envelopeOf('wake'), consumer, 2000)).toBeLessThan(300);
    });

    it('delivers an in-process delayed send on time to an idle consumer although pollIntervalMs is 60 s', async () => {
      const t = transport(LONG_IDLE);
      const consumer = await idleConsumerOf(t, 300);
      const elapsed = await arrivalAfterSend(t, envelopeOf('delayed', '', [new DelayStamp(400)]), consumer, 3000);
      expect(elapsed).toBeGreaterThanOrEqual(350);
      expect(elapsed).toBeLessThanOrEqual(1500);
    }, 10000);

    if (!engine.pushWakeup) {
      // Nothing wakes the consumer in these two: the sender is another pool, and the engine has
      // no push. (With push wake-up, the engine's own file covers the same.)
      it(`bounds the idle wait by the next available_at for a delayed message sent on ${engine.otherDsnNoun} (another pool)`, async () => {
        // The consumer's idle wait after its empty claim is bounded by the row's available_at.
        const queueName = uniqueName('q');
        const sender = transport({ queueName, dsn: OTHER_DSN });
        await sender.getMessageCount();
        const sentAt = Date.now();
        const sent = await sender.send(envelopeOf('delayed-other', '', [new DelayStamp(400)]));
        const consumer = consume(transport({ queueName, pollIntervalMs: 60000 }));
        const { elapsed } = await expectArrival(consumer, sent, sentAt, 3000);
        expect(elapsed).toBeGreaterThanOrEqual(350);
        expect(elapsed).toBeLessThanOrEqual(1500);
      }, 10000);

      it(`finds a message sent on ${engine.otherDsnNoun} by polling at pollIntervalMs`, async () => {
        const queueName = uniqueName('q');
        const sender = transport({ queueName, dsn: OTHER_DSN });
        const consuming = transport({ queueName, pollIntervalMs: 300 });
        await sender.getMessageCount();
        const consumer = await idleConsumerOf(consuming, 100);
        expect(await arrivalAfterSend(sender, envelopeOf('polled'), consumer, 3000)).toBeLessThan(1200);
      });
    }
  });

  describe('get() and close()', () => {
    it('get() with an already-aborted signal returns at once and claims nothing', async () => {
      const t = transport();
      const queueName = lastQueue();
      await t.send(envelopeOf('untouched'));
      const iterator = t.get(AbortSignal.abort());
      expect(await settleWithin(iterator.next(), 500)).toEqual({ value: { value: undefined, done: true } });
      const [row] = await db.rows(TABLE, queueName);
      expect(row.delivered_at).toBeNull();
      expect(await t.getMessageCount()).toBe(1);
    });

    it('close() ends a consumer blocked on an idle wait promptly, without throwing', async () => {
      const t = transport(LONG_IDLE);
      const yielded = [];
      const consumer = (async () => {
        for await (const envelope of t.get(new AbortController().signal)) yielded.push(envelope);
        return 'ended';
      })();
      // Once the table has been set up and counted, the consumer has had its empty claim.
      expect(await t.getMessageCount()).toBe(0);
      expect(await settleWithin(consumer, 200)).toBe('timeout');

      const started = Date.now();
      const closed = t.close();
      expect(await settleWithin(consumer, 1000)).toEqual({ value: 'ended' });
      expect(Date.now() - started).toBeLessThan(1000);
      expect(await settleWithin(closed, 2000)).toEqual({ value: undefined });
      expect(yielded).toEqual([]);
    });

    it('aborting the signal ends a consumer blocked on an idle wait promptly', async () => {
      const t = transport(LONG_IDLE);
      const controller = new AbortController();
      const consumer = (async () => {
        for await (const envelope of t.get(controller.signal)) void envelope;
        return 'ended';
      })();
      expect(await t.getMessageCount()).toBe(0);
      expect(await settleWithin(consumer, 200)).toBe('timeout');
      const started = Date.now();
      controller.abort();
      expect(await settleWithin(consumer, 1000)).toEqual({ value: 'ended' });
      expect(Date.now() - started).toBeLessThan(1000);
    });

    it('accepts ack and reject after the get() iterator was disposed', async () => {
      const t = transport();
      const queueName = lastQueue();
      await t.send(envelopeOf('late-settle'));
      let first;
      for await (const envelope of t.get(new AbortController().signal)) {
        first = envelope;
        break;
      }
      await t.reject(first);
      // A second reject of the same delivery stays a no-op after disposal too.
      await t.reject(first);
      const stored = await db.rows(TABLE, queueName);
      expect(stored).toHaveLength(1);
      expect(stored[0].id).not.toBe(idOf(first));

      let copy;
      for await (const envelope of t.get(new AbortController().signal)) {
        copy = envelope;
        break;
      }
      expect(copy.last(RedeliveryStamp).retryCount).toBe(1);
      await t.ack(copy);
      expect(await settledRows(TABLE, queueName, 0)).toHaveLength(0);
      expect(await settleWithin(t.close(), 3000)).toEqual({ value: undefined });
    });
  });
}

module.exports = { deliveryCases };
