'use strict';

// The core's transport conformance scenarios (@schally/nestjs-messenger/testing) on one
// engine: a transport of the engine on a queue or stream of its own per scenario, removed
// again after it. The scenarios keep the core's own titles and jest's default 5 s per test
// and hook.

const { JsonSerializer } = require('@schally/nestjs-messenger');
const { runTransportConformanceTests, ConformanceMessage } = require('@schally/nestjs-messenger/testing');

/**
 * @param {object} engine an engine adapter of support/engines
 * @param {{ name: string, dsn?: () => string, options?: object, remove?: (target: object) => Promise<void> }} run
 *   `name` titles the scenarios; `dsn` defaults to the engine's; `options` are extra transport
 *   options (e.g. `{ cluster: true }`); `remove` replaces the engine's own removal of a target.
 */
function conformanceSuite(engine, { name, dsn, options = {}, remove }) {
  const dsnOf = dsn ?? (() => engine.dsn);
  beforeAll(async () => {
    // The registry's server, unless the file brings its own (a cluster it started).
    if (dsn === undefined) await engine.requireServer();
    if (engine.kind === 'sql') {
      // Create the shared table once so each scenario's setup stays well inside 5 s.
      const t = new engine.Transport({ dsn: dsnOf() });
      await t.setup();
      await t.close();
    }
  });

  runTransportConformanceTests({
    name,
    capabilities: { delayedDelivery: true, listable: true },
    async createTransport() {
      const target = engine.target('conformance');
      const transport = new engine.Transport({
        dsn: dsnOf(),
        ...target,
        ...options,
        name: 'conformance',
        serializer: new JsonSerializer([ConformanceMessage]),
      });
      return {
        transport,
        cleanup: async () => {
          await transport.close();
          await (remove ?? ((t) => engine.removeTarget(t, dsnOf())))(target);
        },
      };
    },
  });
}

module.exports = { conformanceSuite };
