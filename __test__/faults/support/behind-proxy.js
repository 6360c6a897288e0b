'use strict';

// The fixture most fault scenarios share: a private server of the engine with the fault proxy
// in front of it, for one describe block, and the transports its tests open.

const { startServer } = require('./servers');
const { startProxy, viaProxy } = require('./proxy');
const { makeTransport } = require('./engines');
const { settleWithin } = require('./account');

/**
 * Starts a private `engine` server and a proxy in front of it before the block's tests and
 * stops both after them; transports made with `open()` are closed after each test.
 * @param {'postgres' | 'mariadb' | 'redis'} engine
 * @param {object} defaults options every `open()` starts from (see engines.js)
 */
function serverBehindProxy(engine, defaults = {}) {
  const transports = [];
  const fixture = {
    /** @type {{ dsn: string, port: number, stop: () => Promise<void> }} */
    server: undefined,
    /** @type {Awaited<ReturnType<typeof startProxy>>} */
    proxy: undefined,
    /** The server's DSN through the proxy. */
    viaProxy: () => viaProxy(fixture.server.dsn, fixture.proxy),
    /** A transport of the code under test, closed after the test. */
    open(options) {
      const t = makeTransport(engine, { ...defaults, ...options });
      transports.push(t);
      return t;
    },
  };

  beforeAll(async () => {
    fixture.server = await startServer(engine);
    fixture.proxy = await startProxy({ targetPort: fixture.server.port });
  }, 120_000);

  afterEach(async () => {
    await Promise.all(transports.splice(0).map((t) => settleWithin(t.close(), 5000)));
  });

  afterAll(async () => {
    await fixture.proxy?.close();
    await fixture.server?.stop();
  }, 60_000);

  return fixture;
}

module.exports = { serverBehindProxy };
