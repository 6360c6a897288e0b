'use strict';

// MySQL/MariaDB: a send that finds an idle consumer of the same queue in its process (on the
// same DSN) stores its messages already claimed and hands them to that consumer, so the
// wake-up costs the send's commit and no second one for a claim. What must hold: the row is
// claimed by the INSERT itself (its delivered_at is its created_at); the consumer settles it
// under that claim; and a consumer that stops waiting as a message is handed to it loses
// nothing: the message is claimable again at once, not after the lease.

const { mysql } = require('../support/engines');
const { sqlTable } = require('../support/sql-table');
const { serializer, envelopeOf, idOf, receiveOne, receiveWithin, pollUntil } = require('../support/transport-helpers');

const { TABLE, db, track, queue } = sqlTable(mysql, { dsn: mysql.dsn, prefix: 'nmn_ho' });
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** A transport on the file's table and `queueName`, closed after the test (a lease of an hour). */
function transport(queueName, options = {}) {
  return track(new mysql.Transport({ dsn: mysql.dsn, tableName: TABLE, queueName, serializer: serializer(), ...options }));
}

/** The stored row of `id`: its claim stamp beside its creation time. */
async function row(id) {
  const [found] = await db.query(
    `SELECT CAST(created_at AS CHAR) AS created, CAST(delivered_at AS CHAR) AS delivered FROM ${TABLE} WHERE id = ?`,
    [id],
  );
  return found;
}

it('hands a send to the idle consumer of its queue, stored claimed by its own INSERT', async () => {
  const name = queue('handed');
  const producer = transport(name);
  const consumer = transport(name);

  // Nobody waits: an ordinary send, unclaimed.
  const unclaimed = await producer.send(envelopeOf('nobody-waits'));
  expect((await row(idOf(unclaimed))).delivered).toBeNull();
  await consumer.ack(await receiveOne(consumer));

  // The consumer idles, then a message comes: it is claimed in the INSERT that stores it.
  const waiting = receiveOne(consumer, 5000);
  await sleep(300);
  const sent = await producer.send(envelopeOf('handed-over'));
  const received = await waiting;
  expect(idOf(received)).toBe(idOf(sent));
  expect(received.message.id).toBe('handed-over');
  const stored = await row(idOf(sent));
  expect(stored.delivered).not.toBeNull();
  expect(stored.delivered).toBe(stored.created);

  // Settled under that claim: the ack removes it.
  await consumer.ack(received);
  await pollUntil(async () => (await row(idOf(sent))) === undefined);
  expect(await row(idOf(sent))).toBeUndefined();
});

it('rejects a handed message under its claim: the copy is delivered again', async () => {
  const name = queue('rejected');
  const producer = transport(name);
  const consumer = transport(name);
  const waiting = receiveOne(consumer, 5000);
  await sleep(300);
  const sent = await producer.send(envelopeOf('to-reject'));
  const received = await waiting;
  expect((await row(idOf(sent))).delivered).toBe((await row(idOf(sent))).created);
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
  const producer = transport(name);
  const sent = [];
  const received = [];
  // Each round ends a consumer's wait (its get() aborted) just as a send takes it at the desk:
  // the INSERT takes milliseconds, so the rows come back to the sender, which releases them.
  for (let round = 0; round < 12; round += 1) {
    const consumer = transport(name);
    const controller = new AbortController();
    const loop = (async () => {
      const got = [];
      for await (const envelope of consumer.get(controller.signal)) got.push(envelope);
      return got;
    })();
    await sleep(200);
    const sending = producer.send(envelopeOf(`leaving-${round}`));
    setImmediate(() => controller.abort());
    sent.push(idOf(await sending));
    for (const envelope of await loop) {
      received.push(idOf(envelope));
      await consumer.ack(envelope);
    }
    await consumer.close();
  }
  // What no consumer took is claimable now (the lease is an hour): another consumer gets it.
  const late = transport(name);
  for (;;) {
    const got = await receiveWithin(late, 1000);
    if (got === undefined) break;
    received.push(idOf(got));
    await late.ack(got);
  }
  expect([...received].sort()).toEqual([...sent].sort());
  await pollUntil(async () => (await db.count(TABLE, name)) === 0);
  expect(await db.count(TABLE, name)).toBe(0);
});
