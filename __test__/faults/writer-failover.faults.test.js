'use strict';

// Fault scenario: the writer moves. Two private servers stand for a primary and its promoted
// standby; the app's DSN names a proxy that plays the DNS name. Mid-traffic the old writer is
// turned read-only in place (PostgreSQL: default_transaction_read_only; MariaDB: read_only, for
// an app user that is not an administrator), and the name is repointed at the new writer (open
// connections stay where they were, as after a DNS flip), while the old one goes on answering.
// Judged per message: every send that resolved is stored on one of the two; a rejected one says
// it was not applied; sends resume within a few seconds of the flip; a consumer's get() never
// throws and receives what was sent to the new writer.

const { startServer } = require('./support/servers');
const { startProxy, viaProxy } = require('./support/proxy');
const { makeTransport, stored } = require('./support/engines');
const { settleWithin, sleep, consumeAndAck, sendSteadily } = require('./support/account');

/** How soon after the flip sends must succeed again. */
const RESUME_MS = 3000;
const SEND_EVERY_MS = 20;

/** Turns a server's writer read-only in place, for every session (existing ones included). */
const DEMOTE = {
  postgres: async (server) => {
    await server.query('ALTER SYSTEM SET default_transaction_read_only = on');
    await server.query('SELECT pg_reload_conf()');
  },
  mariadb: (server) => server.query('SET GLOBAL read_only = 1'),
};

/** A DSN for an app user that is not an administrator (MariaDB's read_only spares those). */
const APP_DSN = {
  postgres: async (server) => server.dsn,
  mariadb: async (server) => {
    await server.query("CREATE USER IF NOT EXISTS 'app'@'%' IDENTIFIED BY 'app-secret'");
    await server.query("GRANT ALL PRIVILEGES ON *.* TO 'app'@'%'");
    await server.query("REVOKE SUPER, READ_ONLY ADMIN ON *.* FROM 'app'@'%'").catch(() => server.query("REVOKE SUPER ON *.* FROM 'app'@'%'"));
    const url = new URL(server.dsn);
    url.username = 'app';
    url.password = 'app-secret';
    return url.toString();
  },
};

describe.each(['postgres', 'mariadb'])('%s: the writer moves while the old one still answers', (engine) => {
  let oldWriter;
  let newWriter;
  let proxy;

  beforeAll(async () => {
    [oldWriter, newWriter] = await Promise.all([startServer(engine), startServer(engine)]);
    proxy = await startProxy({ targetPort: oldWriter.port });
  }, 180_000);

  afterAll(async () => {
    await proxy?.close();
    await Promise.all([oldWriter?.stop(), newWriter?.stop()]);
  }, 60_000);

  it(`sends resume within ${RESUME_MS} ms of the flip, every resolved send is stored, and get() never throws`, async () => {
    const queue = `failover_${engine}`;
    const appDsn = await APP_DSN[engine](oldWriter);
    // The standby has the primary's table: made there beforehand.
    const standby = makeTransport(engine, { dsn: await APP_DSN[engine](newWriter), queue });
    await standby.setup();
    await standby.close();
    const dsn = viaProxy(appDsn, proxy);
    const sender = makeTransport(engine, { dsn, queue, connectTimeoutMs: 2000 });
    const consumer = makeTransport(engine, { dsn, queue, connectTimeoutMs: 2000, pollIntervalMs: 200 });
    const { delivered, errors, controller, loop } = consumeAndAck(consumer);
    let flippedAt;
    const { sends, stop } = sendSteadily(sender, { prefix: 'f', everyMs: SEND_EVERY_MS });
    try {
      await sleep(1000);
      await DEMOTE[engine](oldWriter);
      proxy.retarget(newWriter.port);
      flippedAt = Date.now();
      await sleep(RESUME_MS + 2000);
      await stop();
      await sleep(1000);
      controller.abort();
      await settleWithin(loop, 10_000);

      const afterFlip = sends.filter((s) => s.at >= flippedAt);
      const firstOk = afterFlip.find((s) => s.ok);
      const rejected = sends.filter((s) => !s.ok);
      const storedKeys = new Set([
        ...(await stored(engine, { dsn: oldWriter.dsn, queue })).map((e) => e.key),
        ...(await stored(engine, { dsn: newWriter.dsn, queue })).map((e) => e.key),
        ...delivered.map((d) => d.key),
      ]);
      const lost = sends.filter((s) => s.ok && !storedKeys.has(s.key)).map((s) => s.key);
      console.log(
        `[writer failover ${engine}] ${sends.length} sends, ${rejected.length} rejected (${[...new Set(rejected.map((r) => r.outcome))].join(', ') || 'none'}); first send stored ${firstOk ? firstOk.at - flippedAt : 'never'} ms after the flip; ${delivered.length} delivered`,
      );
      expect({
        resumed: firstOk !== undefined && firstOk.at - flippedAt <= RESUME_MS,
        lost,
        rejectedAs: [...new Set(rejected.map((r) => r.outcome))].filter((o) => o !== 'not-applied'),
        consumerErrors: errors,
        deliveredAfterFlip: delivered.some((d) => afterFlip.some((s) => s.ok && s.key === d.key)),
      }).toEqual({ resumed: true, lost: [], rejectedAs: [], consumerErrors: [], deliveredAfterFlip: true });
    } finally {
      await stop();
      await Promise.all([settleWithin(sender.close(), 5000), settleWithin(consumer.close(), 5000)]);
    }
  }, 90_000);
});
