'use strict';

// transport.health() on every engine, against the shared servers: up with the
// queue's message count and the probe's latency; down, within its bound and without throwing,
// for a refused port, a server that accepts and never answers, and a closed transport; never a
// password in what it reports. A server stopped and started again under a live transport is in
// the fault suite (faults/health.faults.test.js).

const net = require('node:net');
const { InvalidArgumentError } = require('@schally/nestjs-messenger');
const { postgres, mysql, sqlite, redis } = require('../support/engines');
const { closedPort } = require('../support/ports');
const { envelopeOf, serializer } = require('../support/transport-helpers');
const { engineTransports } = require('../support/engine-transports');

const SECRET = 'h3alth-s3cret';

/** A TCP server that accepts connections and never says a word. */
async function silentServer() {
  const sockets = new Set();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => {});
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: server.address().port,
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

describe.each([postgres, mysql, sqlite, redis])('$name: health()', (engine) => {
  const transports = engineTransports(engine, 'hl');
  const open = (options = {}) => transports.open({ name: 'orders', ...options });

  it('up: the message count and the latency', async () => {
    const t = open();
    await t.send(envelopeOf('a'));
    await t.send(envelopeOf('b'));
    const health = await t.health();
    expect(health).toEqual({ status: 'up', details: { transport: 'orders', messages: 2, latencyMs: expect.any(Number) } });
    expect(health.details.latencyMs).toBeGreaterThan(0);
  });

  it('down after close(), without touching the storage', async () => {
    const t = open();
    await t.close();
    expect(await t.health()).toEqual({ status: 'down', details: { transport: 'orders', error: expect.stringMatching(/closed/) } });
  });

  it('refuses a timeout that is not a positive number', async () => {
    const t = open();
    for (const timeoutMs of [0, -1, Number.NaN, '1000']) {
      await expect(t.health({ timeoutMs })).rejects.toBeInstanceOf(InvalidArgumentError);
    }
  });

  if (engine.name === 'sqlite') {
    it('down for a file it cannot open, with the reason', async () => {
      const t = transports.track(new engine.Transport({ dsn: 'sqlite:///nonexistent-nmn-dir/nested/queue.db', serializer: serializer() }));
      const health = await t.health();
      expect(health.status).toBe('down');
      expect(health.details.error).toEqual(expect.any(String));
    });
    return;
  }

  it('down for a refused port, with the reason and no password', async () => {
    const t = transports.track(
      new engine.Transport({
        dsn: engine.dsnWith({ port: await closedPort(), user: 'u', password: SECRET }),
        serializer: serializer(),
        connectTimeoutMs: 1000,
        ...engine.target('hl'),
      }),
    );
    const health = await t.health({ timeoutMs: 3000 });
    expect(health.status).toBe('down');
    expect(health.details.error).toEqual(expect.any(String));
    expect(JSON.stringify(health)).not.toContain(SECRET);
  });

  it('down within its bound for a server that never answers', async () => {
    const silent = await silentServer();
    try {
      const t = transports.track(
        new engine.Transport({
          dsn: engine.dsnWith({ port: silent.port, user: 'u', password: SECRET }),
          serializer: serializer(),
          connectTimeoutMs: 5000,
          ...engine.target('hl'),
        }),
      );
      const started = Date.now();
      const health = await t.health({ timeoutMs: 500 });
      const took = Date.now() - started;
      expect(health.status).toBe('down');
      expect(took).toBeGreaterThanOrEqual(450);
      expect(took).toBeLessThan(3000);
      expect(JSON.stringify(health)).not.toContain(SECRET);
    } finally {
      await silent.close();
    }
  }, 15000);
});
