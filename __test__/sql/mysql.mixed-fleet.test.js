'use strict';

// Mixed fleet on MariaDB: the shared cases (shared/mixed-fleet.suite.js: each side receives
// what the other sent, both consume one queue, the storage is the same), plus what only MariaDB
// has: sends that must not fail (deadlock) while both sides claim, claims never held up by an
// uncommitted insert (§5.1.4), and DATETIMEs read in the same session time zone by both sides.

const { DelayStamp, Envelope } = require('@schally/nestjs-messenger');
const { mysql, uniqueName } = require('../support/engines');
const { FleetMessage, fleetSerializer, idOf, outgoing } = require('../support/fleet');
const { sleep, waitFor } = require('../support/transport-helpers');
const { mixedFleetSuite } = require('../shared/mixed-fleet.suite');

const {
  TABLE,
  directions,
  harness: { ack, startConsumer },
  pair,
  freshTable,
  expectRowsEventually,
  expectSameMessage,
  consumeBoth,
  expectExactlyOnce,
} = mixedFleetSuite(mysql);
const admin = mysql.admin();

describe('both implementations consuming one MariaDB queue at once', () => {
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
          side.send(new Envelope(new FleetMessage(n, `m${n}`))).then(
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
    const table = freshTable('mmf_locks');
    const transports = pair('mmf_uncommitted', {
      upstreamOptions: { tableName: table },
      nativeOptions: { tableName: table },
    });
    const consumer = transports[d.consumer];
    await transports.up.setup();
    const sent = [];
    for (let n = 0; n < 5; n += 1) sent.push(idOf(await transports[d.sender].send(outgoing(n, `m${n}`))));

    const otherQueue = d.where === 'the same queue' ? transports.queueName : uniqueName('mmf_uncommitted_other');
    const encoded = fleetSerializer().encode(outgoing(99, 'not committed yet'));
    const session = await require('mysql2/promise').createConnection(mysql.dsn);
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
    const url = new URL(mysql.dsn);
    url.username = user;
    url.password = '';
    return url.toString();
  }

  beforeAll(async () => {
    const host = new URL(mysql.dsn).hostname;
    for (const key of Object.keys(ZONES)) {
      users[key] = uniqueName(`nmn_tz_${key}`);
      await admin.query(`CREATE USER ?@? IDENTIFIED BY ''`, [users[key], host]);
      await admin.query(`GRANT ALL PRIVILEGES ON \`${new URL(mysql.dsn).pathname.slice(1)}\`.* TO ?@?`, [
        users[key],
        host,
      ]);
    }
    [{ value: savedInitConnect }] = await admin.query('SELECT @@global.init_connect AS value');
    const cases = Object.keys(ZONES)
      .map((key) => `WHEN '${users[key]}' THEN '${ZONES[key]}'`)
      .join(' ');
    await admin.query('SET GLOBAL init_connect = ?', [
      `SET time_zone = CASE SUBSTRING_INDEX(USER(), '@', 1) ${cases} ELSE @@session.time_zone END`,
    ]);
  }, 15000);

  afterAll(async () => {
    if (savedInitConnect !== undefined) await admin.query('SET GLOBAL init_connect = ?', [savedInitConnect]);
    const host = new URL(mysql.dsn).hostname;
    for (const user of Object.values(users)) await admin.query('DROP USER IF EXISTS ?@?', [user, host]);
  }, 15000);

  test.each([
    { ...directions[1], zone: 'east' },
    { ...directions[1], zone: 'west' },
    { ...directions[0], zone: 'east' },
    { ...directions[0], zone: 'west' },
  ])('$title, sessions starting in the $zone zone: a 2000 ms delay is honoured by the other side', async (d) => {
    const dsn = dsnOf(users[d.zone]);
    const [probe] = await mysql
      .admin(dsn)
      .query('SELECT @@session.time_zone AS zone, TIMESTAMPDIFF(MINUTE, UTC_TIMESTAMP(3), NOW(3)) AS offset_min');
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
      const [row] = await mysql.admin(dsn).query(
        `SELECT TIMESTAMPDIFF(MICROSECOND, NOW(3), available_at) AS due_in_us,
                TIMESTAMPDIFF(MICROSECOND, created_at, NOW(3)) AS age_us
           FROM ${TABLE} WHERE id = ?`,
        [idOf(sent)],
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
