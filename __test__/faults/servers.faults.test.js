'use strict';

// The private servers of the fault suite (support/servers.js), without the code under test:
// they start on a free port, keep their data across a restart, and the admin helper kills
// other client connections. A failure here is the harness's, not the product's.

const { Client } = require('pg');
const mysql = require('mysql2/promise');
const { Redis } = require('ioredis');
const { privateServer } = require('./support/servers');

const SHARED_PORTS = new Set([5432, 3306, 6379]);

/** An open client of the engine's own driver, with `run(sql|command)` and `closed()`. */
async function clientOf(server) {
  let lost = false;
  switch (server.engine) {
    case 'postgres': {
      const c = new Client({ connectionString: server.dsn });
      c.on('error', () => (lost = true));
      c.on('end', () => (lost = true));
      await c.connect();
      return { run: () => c.query('SELECT 1'), lost: () => lost, end: () => c.end().catch(() => {}) };
    }
    case 'mariadb': {
      const c = await mysql.createConnection(server.dsn);
      c.on('error', () => (lost = true));
      c.connection.stream.on('close', () => (lost = true));
      return { run: () => c.query('SELECT 1'), lost: () => lost, end: () => c.destroy() };
    }
    default: {
      const c = new Redis(server.dsn, { retryStrategy: () => null, maxRetriesPerRequest: 0 });
      c.on('error', () => {});
      c.on('close', () => (lost = true));
      await c.ping();
      // disconnect() on a connection already gone leaves ioredis's 2 s close timer running.
      return { run: () => c.ping(), lost: () => lost, end: () => c.status === 'end' || c.disconnect() };
    }
  }
}

async function writeMarker(server) {
  if (server.engine === 'redis') return server.admin((r) => r.set('marker', 'kept'));
  await server.query('CREATE TABLE marker (v VARCHAR(10))');
  await server.query("INSERT INTO marker VALUES ('kept')");
}

async function readMarker(server) {
  if (server.engine === 'redis') return server.admin((r) => r.get('marker'));
  const result = await server.query('SELECT v FROM marker');
  return (result.rows ?? result)[0]?.v;
}

describe.each(['postgres', 'mariadb', 'redis'])('%s', (engine) => {
  const serverOf = privateServer(engine);

  it('runs on a private loopback port and keeps its data across a restart', async () => {
    const server = serverOf();
    expect(SHARED_PORTS.has(server.port)).toBe(false);
    await writeMarker(server);
    await server.restart({ downMs: 200 });
    expect(await readMarker(server)).toBe('kept');
  }, 60_000);

  it('killBackends() drops the other client connections', async () => {
    const server = serverOf();
    const client = await clientOf(server);
    await client.run();
    const { killed } = await server.killBackends();
    expect(killed).toBeGreaterThanOrEqual(1);
    const deadline = Date.now() + 3000;
    while (!client.lost() && Date.now() < deadline) {
      await client.run().catch(() => {});
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    expect(client.lost()).toBe(true);
    await client.end();
  }, 30_000);
});
