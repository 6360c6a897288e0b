'use strict';

// Fault scenario: ambiguous writes. The proxy forwards a write to the private
// server and resets the client before the reply: the write ran, its outcome never arrived.
//
// Expected (docs/reliability.md):
// - a send either resolves with exactly one stored row, or rejects with
//   TransportConnectionError saying the message may have been stored; never two rows;
// - a claim whose reply was lost does not hide its rows for the lease: on Redis the entries it
//   took into the consumer's pending list are re-read by the next claim at once; on SQL the
//   next claim first releases them (MySQL by the ids and token it knew before COMMIT,
//   PostgreSQL by the stamp residue its claim chose); nothing is lost either way.

const { TransportConnectionError, TransportMessageIdStamp } = require('@schally/nestjs-messenger');
const { serverBehindProxy } = require('./support/behind-proxy');
const { uniqueQueue, stored: storedEntries, residue } = require('./support/engines');
const { faultEnvelope } = require('./support/messages');
const { settleWithin, sleep, consumeAndAck } = require('./support/account');

const LEASE_MS = 2000;
/** The claim test's lease: far longer than the bound below, so rows back "at the lease" fail it. */
const CLAIM_LEASE_MS = 60_000;
/**
 * How soon the rows of a claim whose reply was lost are delivered again. SQL: the consumer's
 * next claim (after its backoff) releases them first. Redis: the consumer re-reads its own
 * pending entries, usually within 0.2 s; when the cut read went over the shared command
 * connection, that connection's reconnect comes first, and its backoff is capped at 2 s.
 */
const CLAIM_BACK_MS = { postgres: 3000, mariadb: 3000, redis: 3000 };
/** Messages a Redis consumer still holds when a claim's reply is lost: more than a re-read's largest page (1,024). */
const HELD = 1500;

/** The client→server chunk that carries the cut send: the one holding its message's key. */
const SEND_WRITE = (chunk) => chunk.includes('"s:1"');
/**
 * The chunk that makes a claim take effect: the COMMIT of the claim's transaction (PostgreSQL,
 * MySQL: its rows are known before it, so exactly they are released), Redis's XREADGROUP.
 */
const CLAIM_WRITE = {
  postgres: 'COMMIT',
  mariadb: 'COMMIT',
  redis: 'XREADGROUP',
};

/** The statement that gives claimed rows back to the queue (its text is built per release, never prepared). */
const RELEASE_WRITE = 'SET delivered_at = NULL';

/** The statement of a send stored claimed for an idle consumer (its INSERT sets delivered_at), prepared on first use. */
const HANDED_INSERT = { mariadb: 'available_at, delivered_at) SELECT', postgres: 'available_at, delivered_at) VALUES' };

/**
 * Waits until every key was delivered or the deadline passed, and says when the last of them
 * came (Infinity when one never did).
 */
async function lastDelivery(keys, delivered, deadline) {
  while (Date.now() < deadline && keys.some((key) => !delivered.some((d) => d.key === key))) await sleep(50);
  return Math.max(...keys.map((key) => delivered.find((d) => d.key === key)?.at ?? Infinity));
}

/** The lost claim's messages came back in time, each once, and the consumer saw no error. */
function expectClaimedAgain(engine, { replied, errors, slowest, delivered }) {
  expect(replied).toBe(true);
  expect(errors).toEqual([]);
  expect(slowest).toBeLessThanOrEqual(CLAIM_BACK_MS[engine]);
  expect(new Set(delivered.map((d) => d.key)).size).toBe(delivered.length);
}

describe.each(['postgres', 'mariadb', 'redis'])('%s: a write whose reply is lost', (engine) => {
  const f = serverBehindProxy(engine, { connectTimeoutMs: 2000, leaseMs: LEASE_MS });

  /**
   * A fresh queue with its storage set up, a producer on the server, and a consumer through the
   * proxy whose lease is far longer than CLAIM_BACK_MS (rows back "at the lease" fail the test).
   */
  async function openClaimTest() {
    const queue = uniqueQueue(engine, 'ambiguous');
    const producer = f.open({ dsn: f.server.dsn, queue });
    const consumer = f.open({ dsn: f.viaProxy(), queue, leaseMs: CLAIM_LEASE_MS });
    await producer.setup();
    return { queue, producer, consumer };
  }

  /**
   * Cuts the consumer's connection right after its next claim is written, and sends five
   * messages (`<prefix>:<n>`) meanwhile; once all are delivered (or CLAIM_BACK_MS + 5 s passed)
   * ends the consumer's loop (of consumeAndAck). Resolves whether the server had replied before
   * the cut, and the ms from the first send to the last delivery.
   */
  async function loseAClaimReply(producer, { delivered, controller, loop }, prefix) {
    const cut = f.proxy.cutAfter(CLAIM_WRITE[engine]);
    const sentAt = Date.now();
    const keys = [];
    for (let n = 0; n < 5; n += 1) {
      keys.push(`${prefix}:${n}`);
      await producer.send(faultEnvelope(`${prefix}:${n}`, n));
    }
    const { replied } = await settleWithin(cut, 5000).then((r) => r.value ?? {});
    const slowest = (await lastDelivery(keys, delivered, sentAt + CLAIM_BACK_MS[engine] + 5000)) - sentAt;
    controller.abort();
    await settleWithin(loop, 10_000);
    return { replied, slowest };
  }

  it('send(): one stored row and a resolved send, or a rejection that says it may have been stored; never two rows', async () => {
    const queue = uniqueQueue(engine, 'ambiguous');
    const t = f.open({ dsn: f.viaProxy(), queue });
    await t.setup();
    await t.send(faultEnvelope('s:0', 0)); // prepares the statement the cut send reuses

    const cut = f.proxy.cutAfter(SEND_WRITE);
    const outcome = await settleWithin(t.send(faultEnvelope('s:1', 1)), 20_000);
    const { replied } = await settleWithin(cut, 1000).then((r) => r.value ?? {});
    const after = await t.send(faultEnvelope('s:2', 2)).then(
      () => 'stored',
      (error) => `${error.constructor.name}: ${error.message}`,
    );
    const entries = await storedEntries(engine, { dsn: f.server.dsn, queue });
    const stored = entries.map((entry) => entry.key);
    const copies = stored.filter((key) => key === 's:1').length;
    console.log(
      `[ambiguous send ${engine}] server replied before the cut: ${replied}; send ${
        outcome.timeout ? 'never settled' : outcome.error ? `rejected: ${outcome.error.message}` : 'resolved'
      }; copies stored: ${copies}; next send: ${after}`,
    );

    expect(replied).toBe(true);
    expect(outcome.timeout).toBeUndefined();
    if (outcome.error === undefined) {
      // The id the send answers is the stored copy's, though its reply was lost.
      expect(outcome.value.last(TransportMessageIdStamp)?.id).toBe(entries.find((entry) => entry.key === 's:1')?.id);
      expect(copies).toBe(1);
    } else {
      expect(outcome.error).toBeInstanceOf(TransportConnectionError);
      expect(outcome.error.message).toMatch(/may have been stored/);
      expect(outcome.error.outcome).toBe('unknown');
      expect(copies).toBeLessThanOrEqual(1);
    }
    expect(after).toBe('stored');
    expect(stored.filter((key) => key === 's:0' || key === 's:2')).toEqual(['s:0', 's:2']);
  }, 60_000);

  it(`a claim whose reply is lost: its messages are delivered again within ${CLAIM_BACK_MS[engine]} ms, none lost`, async () => {
    const { queue, producer, consumer } = await openClaimTest();
    const consuming = consumeAndAck(consumer);
    const { delivered, errors } = consuming;
    // Idle after a first empty claim: the consumer has reached its server.
    await sleep(1000);

    const { replied, slowest } = await loseAClaimReply(producer, consuming, 'c');
    console.log(`[ambiguous claim ${engine}] server replied before the cut: ${replied}; all 5 delivered after ${slowest} ms`);

    expectClaimedAgain(engine, { replied, errors, slowest, delivered });
    // Its acks are write-behind: a flush that went over the cut connection is written again
    // after a pause; close() waits for it.
    await consumer.close();
    expect(await residue(engine, { dsn: f.server.dsn, queue })).toEqual([]);
  }, 60_000);

  if (engine === 'postgres') {
    it("a lost claim's release takes no other consumer's live claim, whatever its stamp", async () => {
      const { Client } = require('pg');
      const { queue, producer, consumer } = await openClaimTest();
      const admin = new Client({ connectionString: f.server.dsn });
      await admin.connect();
      try {
        const consuming = consumeAndAck(consumer);
        const { delivered, errors } = consuming;
        await sleep(1000);
        // Live claims of other consumers, stamped at each of the next 100 milliseconds: every
        // residue a lost claim's stamp can carry, all within the window it can have run in.
        await admin.query(
          `INSERT INTO messenger_messages (body, headers, queue_name, created_at, available_at, delivered_at)
           SELECT '{}', '{}', $1, now(), now(), now() + make_interval(secs => k / 1000.0) FROM generate_series(0, 99) AS k`,
          [queue],
        );
        const { replied, slowest } = await loseAClaimReply(producer, consuming, 'o');
        expectClaimedAgain(engine, { replied, errors, slowest, delivered });
        const { rows } = await admin.query(
          `SELECT count(*)::int AS held FROM messenger_messages WHERE queue_name = $1 AND body = '{}' AND delivered_at IS NOT NULL`,
          [queue],
        );
        expect(rows[0].held).toBe(100);
      } finally {
        await admin.end();
        await consumer.close();
      }
    }, 60_000);
  }

  // A SQL send that finds a consumer of its queue idle in its process (same DSN) stores its
  // message claimed for it, in one INSERT stamped with a residue of its choosing
  // (docs/semantics.md, "Hand-off"). Its reply lost: the send says it may have been stored,
  // and the row, found by that residue, is released by the sender at once, not at the lease.
  if (engine === 'mariadb' || engine === 'postgres') {
    it(`a send handed to an idle consumer whose reply is lost: rejected "may have been stored", delivered within ${CLAIM_BACK_MS[engine]} ms`, async () => {
      const queue = uniqueQueue(engine, 'ambiguous');
      const dsn = f.viaProxy();
      const producer = f.open({ dsn, queue });
      const consumer = f.open({ dsn, queue, leaseMs: CLAIM_LEASE_MS });
      await producer.setup();
      const { delivered, errors, controller, loop } = consumeAndAck(consumer);
      await sleep(1000);

      const handed = f.proxy.count(HANDED_INSERT[engine]);
      const cut = f.proxy.cutAfter((chunk) => chunk.includes('"h:1"'));
      const sentAt = Date.now();
      const outcome = await settleWithin(producer.send(faultEnvelope('h:1', 1)), 20_000);
      const { replied } = await settleWithin(cut, 5000).then((r) => r.value ?? {});
      const slowest = (await lastDelivery(['h:1'], delivered, sentAt + CLAIM_BACK_MS[engine] + 5000)) - sentAt;
      controller.abort();
      await settleWithin(loop, 10_000);
      console.log(`[ambiguous handed send ${engine}] server replied before the cut: ${replied}; send ${
        outcome.error ? `rejected: ${outcome.error.message}` : 'resolved'
      }; delivered after ${slowest} ms`);

      expect(handed.seen).toBe(1);
      expect(outcome.error).toBeInstanceOf(TransportConnectionError);
      expect(outcome.error.message).toMatch(/may have been stored/);
      expectClaimedAgain(engine, { replied, errors, slowest, delivered });
      await consumer.close();
      expect(await residue(engine, { dsn: f.server.dsn, queue })).toEqual([]);
    }, 60_000);
  }

  // A send stored claimed for an idle consumer that stopped waiting before the rows reached it
  // gives them back to the queue: the sender releases them after the send. If that release
  // fails (the server going away), the rows are owed a release: the queue's next claim in this
  // process makes it, whichever transport claims, and an idle consumer retries it soon; a
  // transport that only sends never claims, so the rows must not wait on it (nor on its close,
  // nor on the lease).
  if (engine === 'mariadb' || engine === 'postgres') {
    /**
     * A producer and an idle consumer through the proxy; the producer's send of `key` is
     * handed to the consumer, whose get() loop is aborted while the INSERT's reply is held, so
     * the row comes back to the sender. `beforeReply()` runs as soon as the INSERT has reached
     * the server, before the loop is aborted: at once, so that what it arms is in place before
     * the held reply arrives however long the loop then takes to end. Resolves the send's
     * outcome (and when it settled), with the transports and the queue.
     */
    async function handedToAConsumerThatLeft(key, beforeReply = () => {}) {
      const queue = uniqueQueue(engine, 'given-back');
      const dsn = f.viaProxy();
      const producer = f.open({ dsn, queue });
      const consumer = f.open({ dsn, queue, leaseMs: CLAIM_LEASE_MS });
      await producer.setup();
      const left = consumeAndAck(consumer);
      await sleep(1000);

      const handed = f.proxy.count(HANDED_INSERT[engine]);
      const held = f.proxy.holdReply((chunk) => chunk.includes(`"${key}"`), 500);
      const sending = settleWithin(producer.send(faultEnvelope(key, 1)), 20_000);
      await held;
      const armed = beforeReply();
      left.controller.abort();
      await settleWithin(left.loop, 5000);
      const outcome = await sending;
      expect(handed.seen).toBe(1);
      expect(outcome.error).toBeUndefined();
      expect(left.delivered).toEqual([]);
      expect(left.errors).toEqual([]);
      return { queue, consumer, armed, sentAt: Date.now() };
    }

    /** Consumes with `consumer` until `key` came or the bound passed; resolves when it came after `sentAt`. */
    async function deliveredAfter(consumer, key, sentAt) {
      const loop = consumeAndAck(consumer);
      const after = (await lastDelivery([key], loop.delivered, sentAt + CLAIM_BACK_MS[engine] + 5000)) - sentAt;
      loop.controller.abort();
      await settleWithin(loop.loop, 10_000);
      expect(loop.delivered.map((d) => d.key)).toEqual([key]);
      expect(loop.errors).toEqual([]);
      return after;
    }

    it(`a handed send whose consumer left for good: the sender gives it back, another process's consumer has it within ${CLAIM_BACK_MS[engine]} ms`, async () => {
      const { queue, sentAt } = await handedToAConsumerThatLeft('g:0');
      // On the server's own DSN: a pool of its own, as another process's consumer is.
      const other = f.open({ dsn: f.server.dsn, queue, leaseMs: CLAIM_LEASE_MS });
      const after = await deliveredAfter(other, 'g:0', sentAt);
      console.log(`[given-back send ${engine}] consumer gone: another consumer had it after ${after} ms`);

      expect(after).toBeLessThanOrEqual(CLAIM_BACK_MS[engine]);
      await other.close();
      expect(await residue(engine, { dsn: f.server.dsn, queue })).toEqual([]);
    }, 60_000);

    it(`a handed send whose consumer left and whose release fails: the send resolves, delivered within ${CLAIM_BACK_MS[engine]} ms`, async () => {
      // Neither the sender's release nor the consumer's first (before its first claim) reaches
      // the server: the consumer, idle, retries.
      const { queue, consumer, armed, sentAt } = await handedToAConsumerThatLeft('g:1', () => [
        f.proxy.refuseNext(RELEASE_WRITE),
        f.proxy.refuseNext(RELEASE_WRITE),
      ]);
      const after = await deliveredAfter(consumer, 'g:1', sentAt);
      const refused = await Promise.all(armed.map((trap) => settleWithin(trap, 5000).then((r) => r.timeout !== true)));
      console.log(`[given-back send ${engine}] releases refused: ${refused}; delivered after ${after} ms`);

      expect(refused).toEqual([true, true]);
      expect(after).toBeLessThanOrEqual(CLAIM_BACK_MS[engine]);
      await consumer.close();
      expect(await residue(engine, { dsn: f.server.dsn, queue })).toEqual([]);
    }, 60_000);
  }

  // Redis re-reads the consumer's own pending entries after a lost read. After an idle spell
  // the consumer's claims are sized down to one message, and the re-read after the lost claim
  // (grown again to 4 by the quick message before it) asked for that size too: it took back
  // the first of the lost entries and left the others pending until claimIdleMs.
  if (engine === 'redis') {
    it(`a claim of several messages whose reply is lost, after an idle spell: every one delivered again within ${CLAIM_BACK_MS[engine]} ms`, async () => {
      const { queue, producer, consumer } = await openClaimTest();
      const keys = ['c:1', 'c:2', 'c:3', 'c:4'];
      const delivered = [];
      const errors = [];
      let cut;
      let cutAt;
      const controller = new AbortController();
      const loop = (async () => {
        for await (const envelope of consumer.get(controller.signal)) {
          const { key } = envelope.message;
          delivered.push({ key, at: Date.now() });
          if (key === 'c:0') {
            // Sent while c:0 is handled: the consumer's next claim takes all four at once,
            // and the proxy loses its reply.
            cut = f.proxy.cutAfter(CLAIM_WRITE[engine]);
            cutAt = Date.now();
            for (const next of keys) await producer.send(faultEnvelope(next, 0));
          }
          await consumer.ack(envelope);
        }
      })().catch((error) => errors.push(error));
      await producer.send(faultEnvelope('w:0', 0));
      // A message, then an idle spell: the consumer's claims shrink to one message.
      await sleep(1000);
      await producer.send(faultEnvelope('c:0', 0));
      // cutAt is set once c:0 is handled.
      const slowest = (await lastDelivery(keys, delivered, Date.now() + CLAIM_BACK_MS[engine] + 5000)) - cutAt;
      controller.abort();
      await settleWithin(loop, 10_000);
      const { replied } = await settleWithin(cut, 1000).then((r) => r.value ?? {});
      console.log(`[ambiguous claim of several ${engine}] server replied before the cut: ${replied}; all 4 delivered ${slowest} ms after the cut`);

      expectClaimedAgain(engine, { replied, errors, slowest, delivered });
      await consumer.close();
      expect(await residue(engine, { dsn: f.server.dsn, queue })).toEqual([]);
    }, 60_000);

    // The re-read walks the consumer's whole pending list a page (at most 1,024) at a time:
    // messages it still holds (handed out, not settled) fill the first page and are skipped,
    // and the lost ones come after them. A re-read of the first page alone left them pending
    // until claimIdleMs (Infinity here).
    it(`a claim whose reply is lost behind ${HELD} messages still held: delivered again within ${CLAIM_BACK_MS[engine]} ms`, async () => {
      const { queue, producer, consumer } = await openClaimTest();
      const keys = ['c:1', 'c:2', 'c:3', 'c:4'];
      const held = [];
      const delivered = [];
      const errors = [];
      const controller = new AbortController();
      const loop = (async () => {
        for await (const envelope of consumer.get(controller.signal)) {
          const { key } = envelope.message;
          if (key.startsWith('h:')) held.push(envelope);
          else {
            delivered.push({ key, at: Date.now() });
            await consumer.ack(envelope);
          }
        }
      })().catch((error) => errors.push(error));
      await Promise.all(Array.from({ length: HELD }, (_, n) => producer.send(faultEnvelope(`h:${n}`, n))));
      const heldBy = Date.now() + 10_000;
      while (held.length < HELD && Date.now() < heldBy) await sleep(20);
      expect(held.length).toBe(HELD);
      // Idle, so that the next XREADGROUP the proxy sees is the claim of the messages below.
      await sleep(1000);
      const cut = f.proxy.cutAfter(CLAIM_WRITE[engine]);
      const cutAt = Date.now();
      for (const key of keys) await producer.send(faultEnvelope(key, 0));
      const { replied } = await settleWithin(cut, 5000).then((r) => r.value ?? {});
      const slowest = (await lastDelivery(keys, delivered, cutAt + CLAIM_BACK_MS[engine] + 5000)) - cutAt;
      await Promise.all(held.map((envelope) => consumer.ack(envelope)));
      controller.abort();
      await settleWithin(loop, 10_000);
      console.log(`[ambiguous claim behind held ${engine}] server replied before the cut: ${replied}; all 4 delivered ${slowest} ms after the cut`);

      expectClaimedAgain(engine, { replied, errors, slowest, delivered });
      await consumer.close();
      expect(await residue(engine, { dsn: f.server.dsn, queue })).toEqual([]);
    }, 60_000);
  }
});
