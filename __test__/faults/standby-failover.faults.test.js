'use strict';

// Fault scenario: a PostgreSQL failover with a real streaming standby (pg_basebackup -R). The
// primary is turned read-only in place (it stays up, its connections open), the standby is
// promoted, and the app's DSN follows in one of two ways: a name that is repointed at the new
// primary (a loopback proxy plays the DNS name: open connections stay where they were), or a
// DSN that lists both hosts, the standby first, with target_session_attrs=read-write (the
// transport picks the writer at start and after the failover). Judged per message: every send
// that resolved is delivered; a rejected one says it was not applied; sends resume within a
// few seconds of the promotion; get() never throws; and a consumer of another pool, idle on
// LISTEN all along (its poll a minute away, nothing of its own meeting the read-only server),
// is woken by a send made to the new primary: its LISTEN connection left the old one.

const { startPrimaryWithStandby } = require('./support/pg-standby');
const { startProxy, viaProxy } = require('./support/proxy');
const { makeTransport, stored } = require('./support/engines');
const { faultEnvelope } = require('./support/messages');
const { settleWithin, sleep, consumeAndAck, sendSteadily } = require('./support/account');

/** How soon after the promotion sends must succeed again. */
const RESUME_MS = 3000;
/** How soon a send made after the failover must reach the idle consumer (its poll: 60 s). */
const WAKE_MS = 20_000;
const SEND_EVERY_MS = 20;

/** The DSN of `server` with `hosts` (`host:port,…`) and `query` in place of its own. */
function withHosts(server, hosts, query) {
  const url = new URL(server.dsn);
  return `postgres://${url.username}@${hosts}${url.pathname}?${query}`;
}

const WAYS = [
  {
    name: 'a name repointed at the new primary',
    async dsn(pair, cleanups) {
      const proxy = await startProxy({ targetPort: pair.primary.port });
      cleanups.push(() => proxy.close());
      return { dsn: viaProxy(pair.primary.dsn, proxy), flip: () => proxy.retarget(pair.standby.port) };
    },
  },
  {
    name: 'both hosts in the DSN, the standby first, target_session_attrs=read-write',
    async dsn(pair) {
      const hosts = `127.0.0.1:${pair.standby.port},127.0.0.1:${pair.primary.port}`;
      return { dsn: withHosts(pair.primary, hosts, 'target_session_attrs=read-write'), flip: () => {} };
    },
  },
];

describe.each(WAYS)('PostgreSQL failover to a streaming standby: $name', (way) => {
  let pair;
  const cleanups = [];

  beforeAll(async () => {
    pair = await startPrimaryWithStandby();
  }, 180_000);

  afterAll(async () => {
    for (const cleanup of cleanups) await cleanup();
    await pair?.stop();
  }, 60_000);

  it(`sends resume within ${RESUME_MS} ms, the idle consumer is woken, nothing resolved is lost, get() never throws`, async () => {
    const queue = 'standby_failover';
    const { dsn, flip } = await way.dsn(pair, cleanups);
    const sender = makeTransport('postgres', { dsn, queue, connectTimeoutMs: 2000 });
    await sender.setup();
    const consumer = makeTransport('postgres', { dsn, queue, connectTimeoutMs: 2000 });
    const { delivered, errors, controller, loop } = consumeAndAck(consumer);
    // Another pool (its DSN differs by an application_name): only a NOTIFY wakes its consumer
    // within the test, so it is woken after the failover only if its LISTEN follows.
    const idleQueue = 'standby_failover_idle';
    const idleDsn = `${dsn}${dsn.includes('?') ? '&' : '?'}application_name=idle_consumer`;
    const idle = makeTransport('postgres', { dsn: idleDsn, queue: idleQueue, connectTimeoutMs: 2000, pollIntervalMs: 60_000, getNotifyTimeoutMs: 60_000 });
    const idleRun = consumeAndAck(idle);
    const idleSender = makeTransport('postgres', { dsn, queue: idleQueue, connectTimeoutMs: 2000 });
    const { sends, stop } = sendSteadily(sender, { prefix: 's', everyMs: SEND_EVERY_MS });
    let promotedAt;
    try {
      await sleep(1000);
      expect(delivered.length).toBeGreaterThan(0);
      await pair.demotePrimary();
      await pair.promote();
      flip();
      promotedAt = Date.now();
      await sleep(RESUME_MS + 2000);
      await stop();
      const wakeSentAt = Date.now();
      await idleSender.send(faultEnvelope('wake', 0));
      const deadline = wakeSentAt + WAKE_MS;
      while (idleRun.delivered.length === 0 && Date.now() < deadline) await sleep(50);
      const wokenAfter = idleRun.delivered[0] ? idleRun.delivered[0].at - wakeSentAt : 'never';
      controller.abort();
      idleRun.controller.abort();
      await Promise.all([settleWithin(loop, 10_000), settleWithin(idleRun.loop, 10_000)]);

      const afterFlip = sends.filter((s) => s.at >= promotedAt);
      const firstOk = afterFlip.find((s) => s.ok);
      const rejected = sends.filter((s) => !s.ok);
      const storedKeys = new Set([
        ...(await stored('postgres', { dsn: pair.standby.dsn, queue })).map((e) => e.key),
        ...delivered.map((d) => d.key),
      ]);
      const lost = sends.filter((s) => s.ok && !storedKeys.has(s.key)).map((s) => s.key);
      console.log(
        `[standby failover: ${way.name}] ${sends.length} sends, ${rejected.length} rejected (${[...new Set(rejected.map((r) => r.outcome))].join(', ') || 'none'}); first send stored ${firstOk ? firstOk.at - promotedAt : 'never'} ms after the promotion; ${delivered.length} delivered; the idle consumer woken ${wokenAfter} ms after its send`,
      );
      expect({
        resumed: firstOk !== undefined && firstOk.at - promotedAt <= RESUME_MS,
        lost,
        rejectedAs: [...new Set(rejected.map((r) => r.outcome))].filter((o) => o !== 'not-applied'),
        consumerErrors: [...errors, ...idleRun.errors],
        idleWoken: idleRun.delivered.map((d) => d.key),
      }).toEqual({ resumed: true, lost: [], rejectedAs: [], consumerErrors: [], idleWoken: ['wake'] });
    } finally {
      await stop();
      await Promise.all([sender, consumer, idle, idleSender].map((t) => settleWithin(t.close(), 5000)));
    }
  }, 150_000);
});
