'use strict';

// First contact with a SQL server: the server is checked on the pool's own first connection,
// with no throwaway connection beside it when that one opens promptly (each costs the server
// a backend or a thread). The unreachable-server cases are in faults/servers and blackhole.

const { SqlTransport } = require('../..');
const { postgres, mysql } = require('../support/engines');
const { startProxy, viaServerProxy } = require('../faults/support/proxy');

/** How long first contact waits for the pool's first connection before it probes (src/engines/sql/target.rs). */
const PROBE_GRACE_MS = 50;

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

  it('opens no connection of its own while the first one opens promptly: every connection stays in the pool', async () => {
    const transport = new SqlTransport({ dsn: viaServerProxy(engine.dsn, proxy), ...engine.target('fc') });
    try {
      await transport.setup();
      expect(await transport.getMessageCount()).toBe(0);
      // A probe would be a connection opened and closed again at once; let its close arrive.
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect(proxy.accepted).toBeGreaterThan(0);
      const probes = proxy.accepted - proxy.connections;
      if (probes > 0) {
        // Only the fallback for a first connection slower than the grace (50 ms, as a loaded
        // machine may take): one probe, opened once the grace had passed, never at once.
        const [first, second] = proxy.acceptedAt;
        expect(probes).toBe(1);
        expect(second - first).toBeGreaterThanOrEqual(PROBE_GRACE_MS - 5);
      }
    } finally {
      await transport.close();
    }
  });
});
