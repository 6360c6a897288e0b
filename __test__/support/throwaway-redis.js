'use strict';

// A throwaway redis-server for one test file (or describe), for the Redis tests that pause,
// kill, crash or inspect their server, and the transports its tests open on it.

const { startRedisServer, withIoredis } = require('./redis-server');
const { serializer, settleWithin } = require('./transport-helpers');

/**
 * Registers the hooks: the server (`options` as for startRedisServer) is started before the
 * tests (within `startMs`) and stopped after them. `server` and `dsn` exist once the tests run;
 * `inspect(use)` runs `use` with a short-lived ioredis client on it (never the code under
 * test); `open(options)` makes a RedisStreamsTransport on it with the test serializer, and
 * `closeOpened(boundMs)` closes every one opened so far, each bounded.
 */
function throwawayRedis(options = {}, startMs = 20000) {
  const opened = [];
  const local = {
    server: undefined,
    dsn: undefined,
    inspect: (use) => withIoredis(local.dsn, use),
    open(transportOptions) {
      const { RedisStreamsTransport } = require('../..');
      const t = new RedisStreamsTransport({ dsn: local.dsn, serializer: serializer(), ...transportOptions });
      opened.push(t);
      return t;
    },
    closeOpened: (boundMs = 5000) => Promise.all(opened.splice(0).map((t) => settleWithin(t.close(), boundMs))),
  };
  beforeAll(async () => {
    local.server = await startRedisServer(options);
    local.dsn = `redis://127.0.0.1:${local.server.port}`;
  }, startMs);
  afterAll(async () => {
    await local.server?.stop();
  });
  return local;
}

module.exports = { throwawayRedis };
