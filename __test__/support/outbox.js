'use strict';

// What the outbox tests (sql/outbox.test.js, sql/outbox-orm.test.js) do before an app writes
// its first outbox statement.

const { serializer } = require('./transport-helpers');

/** Requires `engine`'s server and creates the default table on `dsn`, as a migration would. */
async function outboxTableReady(engine, dsn = engine.dsn) {
  await engine.requireServer();
  const t = new engine.Transport({ dsn });
  await t.setup();
  await t.close();
}

/** A consuming transport on `dsn` (polling every 50 ms, `options` on top), added to `transports`. */
function outboxTransport(engine, transports, options = {}, dsn = engine.dsn) {
  const t = new engine.Transport({ dsn, serializer: serializer(), pollIntervalMs: 50, ...options });
  transports.push(t);
  return t;
}

module.exports = { outboxTableReady, outboxTransport };
