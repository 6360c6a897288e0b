'use strict';

// transport.health() across a server stop, on a private server of the suite's
// own: up before; down, within its bound and without throwing, while the server is stopped;
// up again once it is back, on the same transport instance (a terminus check that keeps
// polling it sees the outage and the recovery).

const { privateServer } = require('./support/servers');
const { makeTransport, uniqueQueue } = require('./support/engines');
const { sleep } = require('./support/account');

const DOWN_MS = 3000;
const PROBE_TIMEOUT_MS = 500;

/** Probes every 100 ms until `status` is seen or `withinMs` passed; resolves what was seen. */
async function probeUntil(transport, status, withinMs) {
  const deadline = Date.now() + withinMs;
  const seen = [];
  for (;;) {
    const started = Date.now();
    const health = await transport.health({ timeoutMs: PROBE_TIMEOUT_MS });
    seen.push({ ...health, ms: Date.now() - started });
    if (health.status === status || Date.now() >= deadline) return seen;
    await sleep(100);
  }
}

describe.each(['postgres', 'mariadb', 'redis'])('%s: health() across a server stop', (engine) => {
  const serverOf = privateServer(engine);

  it('up, then down while the server is stopped, then up again', async () => {
    const server = serverOf();
    const transport = makeTransport(engine, { dsn: server.dsn, queue: uniqueQueue(engine, 'health'), connectTimeoutMs: 1000 });
    try {
      expect((await transport.health()).status).toBe('up');

      const restarted = server.restart({ downMs: DOWN_MS });
      const whileDown = await probeUntil(transport, 'down', DOWN_MS);
      const down = whileDown[whileDown.length - 1];
      expect(down.status).toBe('down');
      expect(down.details.error).toEqual(expect.any(String));
      // Bounded: no probe outlasted its timeout by more than scheduling slack.
      for (const probe of whileDown) expect(probe.ms).toBeLessThan(PROBE_TIMEOUT_MS + 1000);
      await restarted;

      const afterwards = await probeUntil(transport, 'up', 10_000);
      const up = afterwards[afterwards.length - 1];
      console.log(
        `[health ${engine}] down after ${whileDown.length} probe(s): ${down.details.error}; ` +
          `up again after ${afterwards.length} probe(s) once the server was back (${up.details.latencyMs?.toFixed(1)} ms)`,
      );
      expect(up.status).toBe('up');
    } finally {
      await transport.close();
    }
  }, 60_000);
});
