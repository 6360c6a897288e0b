'use strict';

// PostgreSQL: a send that finds an idle consumer of the same queue in its process (on the same
// DSN) stores its message already claimed and hands it to that consumer, so the wake-up costs
// the send's commit and no claim after it. What must hold: the row is claimed by the INSERT
// itself (no UPDATE ever touched it: in a fresh table, its tuple is still the first one); the
// consumer settles it under that claim; a consumer that stops waiting as its message is handed
// over loses nothing. (MySQL/MariaDB: mysql.hand-off.test.js.)

const { postgres } = require('../support/engines');
const { sqlTable } = require('../support/sql-table');
const { leaveAsHandedOver } = require('../support/hand-off');
const { serializer, envelopeOf, idOf, receiveOne, pollUntil } = require('../support/transport-helpers');

const { TABLE, db, track, queue, freshTable } = sqlTable(postgres, { dsn: postgres.dsn, prefix: 'nmn_pho' });
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** A transport on `tableName` and `queueName`, closed after the test (a lease of an hour). */
function transport(queueName, options = {}) {
  return track(new postgres.Transport({ dsn: postgres.dsn, tableName: TABLE, queueName, serializer: serializer(), ...options }));
}

it('hands a send to the idle consumer of its queue, stored claimed by its own INSERT: no UPDATE of the row', async () => {
  const table = freshTable('nmn_pho_fresh');
  const name = queue('handed');
  const producer = transport(name, { tableName: table });
  const consumer = transport(name, { tableName: table });
  await producer.setup();

  const waiting = receiveOne(consumer, 5000);
  await sleep(300);
  const sent = await producer.send(envelopeOf('handed-over'));
  const received = await waiting;
  expect(idOf(received)).toBe(idOf(sent));
  expect(received.message.id).toBe('handed-over');
  // The first tuple of a fresh table is (0,1); a claim's UPDATE would have written (0,2).
  const [stored] = await db.query(`SELECT ctid::text AS ctid, delivered_at IS NOT NULL AS claimed FROM ${table} WHERE id = $1`, [idOf(sent)]);
  expect(stored).toEqual({ ctid: '(0,1)', claimed: true });

  // Settled under that claim: the ack removes it.
  await consumer.ack(received);
  await pollUntil(async () => (await db.query(`SELECT id FROM ${table} WHERE id = $1`, [idOf(sent)])).length === 0);
  expect(await db.query(`SELECT id FROM ${table}`)).toEqual([]);
});

it('loses nothing when the consumer stops waiting as its message is handed over: claimable again at once', async () => {
  const name = queue('leaving');
  const { sent, received } = await leaveAsHandedOver(() => transport(name), transport(name));
  expect([...received].sort()).toEqual([...sent].sort());
});
