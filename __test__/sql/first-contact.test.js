'use strict';

// First contact with a SQL server: the server is checked on the pool's own first connection,
// with no throwaway connection beside it when that one opens promptly (each costs the server
// a backend or a thread). The unreachable-server cases are in faults/servers and blackhole.

const { SqlTransport } = require('../..');
const { postgres, mysql } = require('../support/engines');
const { startProxy, viaProxy } = require('../faults/support/proxy');

describe.each([
  ['PostgreSQL', postgres],
  ['MariaDB', mysql],
])('first contact on %s', (_label, engine) => {
  let proxy;

  beforeAll(async () => {
    await engine.requireServer?.();
  });

  beforeEach(async () => {
    proxy = await startProxy({ targetPort: Number(new URL(engine.dsn).port) });
  });

  afterEach(async () => {
    await proxy.close();
  });

  it('opens no connection of its own: every connection it opened stays in the pool', async () => {
    const transport = new SqlTransport({ dsn: viaProxy(engine.dsn, proxy), ...engine.target('fc') });
    try {
      await transport.setup();
      expect(await transport.getMessageCount()).toBe(0);
      // A probe would be a connection opened and closed again at once; let its close arrive.
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect(proxy.accepted).toBeGreaterThan(0);
      expect(proxy.connections).toBe(proxy.accepted);
    } finally {
      await transport.close();
    }
  });
});
