'use strict';

// MySQL/MariaDB: a send that finds an idle consumer of the same queue in its process (on the
// same DSN) stores its messages already claimed and hands them to that consumer, so the
// wake-up costs the send's commit and no second one for a claim. What must hold: the row is
// claimed by the INSERT itself (within a stamp span of its created_at); the consumer settles it
// under that claim; and a consumer that stops waiting as a message is handed to it loses
// nothing: the message is claimable again at once, not after the lease.

const { mysql } = require('../support/engines');
const { sqlTable } = require('../support/sql-table');
const { leaveAsHandedOver } = require('../support/hand-off');
const { startProxy, viaProxy } = require('../faults/support/proxy');
const { serializer, envelopeOf, idOf, receiveOne, pollUntil } = require('../support/transport-helpers');

const { TABLE, db, track, queue } = sqlTable(mysql, { dsn: mysql.dsn, prefix: 'nmn_ho' });
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
/** The latest a claimed INSERT stamps its row after creating it, with an hour's lease (see `row`). */
const INSERT_STAMP_LATEST_MS = 110;

/** A transport on the file's table and `queueName`, closed after the test (a lease of an hour). */
function transport(queueName, options = {}) {
  return track(new mysql.Transport({ dsn: mysql.dsn, tableName: TABLE, queueName, serializer: serializer(), ...options }));
}

/**
 * The stored row of `id`: whether it is claimed, and how long after its creation (ms). A
 * claim stamped by the INSERT is at most a stamp span (100 ms with an hour's lease) and 10 ms
 * of allowed lateness later (src/engines/sql/mysql/claimed_insert.rs, `lateness_us`); a
 * consumer's own claim comes after its wake-up and its claim's round trips.
 */
async function row(id) {
  const [found] = await db.query(
    `SELECT delivered_at IS NOT NULL AS claimed, TIMESTAMPDIFF(MICROSECOND, created_at, delivered_at) / 1000 AS claimedAfterMs FROM ${TABLE} WHERE id = ?`,
    [id],
  );
  return found && { claimed: Number(found.claimed) === 1, claimedAfterMs: found.claimedAfterMs === null ? null : Number(found.claimedAfterMs) };
}

/** Claimed by the INSERT that stored it (see `row`). */
async function expectClaimedByItsInsert(id) {
  const stored = await row(id);
  expect(stored.claimed).toBe(true);
  expect(stored.claimedAfterMs).toBeGreaterThanOrEqual(0);
  expect(stored.claimedAfterMs).toBeLessThanOrEqual(INSERT_STAMP_LATEST_MS);
}

it('hands a send to the idle consumer of its queue, stored claimed by its own INSERT: no claim of its own', async () => {
  // Both on one DSN through a proxy that counts the consumer's claims.
  const proxy = await startProxy({ targetPort: Number(new URL(mysql.dsn).port) });
  try {
    const name = queue('handed');
    const dsn = viaProxy(mysql.dsn, proxy);
    const producer = transport(name, { dsn });
    const consumer = transport(name, { dsn });

    // Nobody waits: an ordinary send, unclaimed, and the consumer claims it.
    const unclaimed = await producer.send(envelopeOf('nobody-waits'));
    expect((await row(idOf(unclaimed))).claimed).toBe(false);
    const claimsBefore = proxy.count('FOR UPDATE SKIP LOCKED');
    await consumer.ack(await receiveOne(consumer));
    expect(claimsBefore.seen).toBeGreaterThan(0);

    // The consumer idles, then a message comes: it is claimed by the INSERT that stores it,
    // and reaches the consumer with no claim in between.
    const waiting = receiveOne(consumer, 5000);
    await sleep(300);
    const claims = proxy.count('FOR UPDATE SKIP LOCKED');
    const sent = await producer.send(envelopeOf('handed-over'));
    const received = await waiting;
    expect(claims.seen).toBe(0);
    expect(idOf(received)).toBe(idOf(sent));
    expect(received.message.id).toBe('handed-over');
    await expectClaimedByItsInsert(idOf(sent));

    // Settled under that claim: the ack removes it.
    await consumer.ack(received);
    await pollUntil(async () => (await row(idOf(sent))) === undefined);
    expect(await row(idOf(sent))).toBeUndefined();
    await producer.close();
    await consumer.close();
  } finally {
    await proxy.close();
  }
});

it('rejects a handed message under its claim: the copy is delivered again', async () => {
  const name = queue('rejected');
  const producer = transport(name);
  const consumer = transport(name);
  const waiting = receiveOne(consumer, 5000);
  await sleep(300);
  const sent = await producer.send(envelopeOf('to-reject'));
  const received = await waiting;
  await expectClaimedByItsInsert(idOf(sent));
  await consumer.reject(received);
  expect(await row(idOf(sent))).toBeUndefined();
  const copy = await receiveOne(consumer);
  expect(copy.message.id).toBe('to-reject');
  expect(idOf(copy)).not.toBe(idOf(sent));
  await consumer.ack(copy);
  await pollUntil(async () => (await db.count(TABLE, name)) === 0);
  expect(await db.count(TABLE, name)).toBe(0);
});

it('loses nothing when the consumer stops waiting as its message is handed over: claimable again at once', async () => {
  const name = queue('leaving');
  const { sent, received } = await leaveAsHandedOver(() => transport(name), transport(name));
  expect([...received].sort()).toEqual([...sent].sort());
  await pollUntil(async () => (await db.count(TABLE, name)) === 0);
  expect(await db.count(TABLE, name)).toBe(0);
});
