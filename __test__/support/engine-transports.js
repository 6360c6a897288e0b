'use strict';

// Hooks for a file that runs one engine's transports on targets of their own: the server
// required, the file's DSN made (and removed), every transport closed and every target removed
// after each test. Jest's hooks, or those of another runner (support/nest-suite.js) given as
// `hooks`.

const { closeAll, serializer } = require('./transport-helpers');

/**
 * @param {object} engine an engine adapter (support/engines/)
 * @param {string} prefix names this file's DSN (SQLite) and targets
 * @param {{ beforeAll: Function, afterEach: Function, afterAll: Function }} [hooks] jest's by default
 */
function engineTransports(engine, prefix, { beforeAll, afterEach, afterAll } = globalThis) {
  const transports = [];
  const targets = [];
  let dsn;

  beforeAll(async () => {
    await engine.requireServer();
    dsn = engine.runDsn(`nmn-${prefix}`);
  });

  afterEach(async () => {
    await closeAll(transports);
    for (const target of targets.splice(0)) await engine.removeTarget(target, dsn);
  }, 15000);

  afterAll(() => engine.removeRunDsn?.(dsn));

  return {
    get dsn() {
      return dsn;
    },
    /** The target (queue or stream options) of the last transport opened. */
    get lastTarget() {
      return targets[targets.length - 1];
    },
    /** A transport on a target of its own (closed after the test); `options` override. */
    open(options = {}) {
      const target = engine.target(prefix);
      targets.push(target);
      return this.track(new engine.Transport({ dsn, serializer: serializer(), ...target, ...options }));
    },
    /** Closes `transport` after the test. */
    track(transport) {
      transports.push(transport);
      return transport;
    },
  };
}

module.exports = { engineTransports };
