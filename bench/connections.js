'use strict';

// The server connections this process holds, counted on the server (pg_stat_activity,
// information_schema.PROCESSLIST, CLIENT LIST) and kept to this process's own by their client
// ports: the servers are shared with other processes, so a count of all sessions would count
// theirs too. This process's ports are read from /proc (its socket fds matched against
// /proc/net/tcp and tcp6), so the count is Linux-only (NaN elsewhere).

const fs = require('node:fs');
const { ENGINES } = require('./engines');

/** Inodes of this process's sockets. */
function socketInodes() {
  const inodes = new Set();
  for (const fd of fs.readdirSync('/proc/self/fd')) {
    try {
      const match = /^socket:\[(\d+)\]$/.exec(fs.readlinkSync(`/proc/self/fd/${fd}`));
      if (match) inodes.add(match[1]);
    } catch {
      // Closed while listing: not held.
    }
  }
  return inodes;
}

/** Local ports of this process's established TCP connections to `remotePort`. */
function ownPorts(remotePort) {
  const inodes = socketInodes();
  const ports = [];
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text;
    try {
      text = fs.readFileSync(table, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const fields = line.trim().split(/\s+/);
      if (fields.length < 10) continue;
      const [, local, remote, state] = fields;
      const port = (address) => Number.parseInt(address.split(':').pop(), 16);
      // 01: ESTABLISHED.
      if (state === '01' && port(remote) === remotePort && inodes.has(fields[9])) ports.push(port(local));
    }
  }
  return ports;
}

const COUNTERS = {
  async postgres(ports) {
    const [{ n }] = await ENGINES.postgres
      .admin()
      .query('SELECT count(*)::int AS n FROM pg_stat_activity WHERE client_port = ANY($1::int[]) AND pid <> pg_backend_pid()', [ports]);
    return n;
  },
  async mysql(ports) {
    const rows = await ENGINES.mysql.admin().query('SELECT HOST AS host FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID()');
    const wanted = new Set(ports);
    return rows.filter((row) => wanted.has(Number(String(row.host).split(':').pop()))).length;
  },
  async redis(ports, dsn = ENGINES.redis.dsn) {
    const wanted = new Set(ports);
    return ENGINES.redis.admin(dsn).withClient(async (client) => {
      const [own, list] = await Promise.all([client.client('ID'), client.client('LIST')]);
      return list
        .split('\n')
        .map((line) => ({ id: Number(/(?:^|\s)id=(\d+)/.exec(line)?.[1]), port: Number(/(?:^|\s)addr=\S*:(\d+)/.exec(line)?.[1]) }))
        .filter((client_) => client_.id !== own && wanted.has(client_.port)).length;
    });
  },
};

/**
 * How many connections the engine's server holds for this process (undefined for an engine
 * without a server; NaN where /proc cannot be read); on a Redis `cluster` (`{ nodes }`), the
 * most any one node holds.
 * @param {'postgres' | 'mysql' | 'redis' | 'sqlite'} engine
 * @param {{ nodes: { port: number }[] }} [cluster]
 */
async function serverConnectionsOfThisProcess(engine, cluster) {
  const e = ENGINES[engine];
  if (!e.server) return undefined;
  if (cluster !== undefined) {
    let most = 0;
    for (const { port } of cluster.nodes) {
      let ports;
      try {
        ports = ownPorts(port);
      } catch {
        return Number.NaN;
      }
      most = Math.max(most, await COUNTERS.redis(ports, `redis://127.0.0.1:${port}`));
    }
    return most;
  }
  let ports;
  try {
    ports = ownPorts(Number(new URL(e.dsn).port || e.defaultPort));
  } catch {
    return Number.NaN;
  }
  return COUNTERS[engine](ports);
}

/**
 * Connections the server can still accept from anyone (its limit less every session it has),
 * so a workload opening many can stop before it takes the last ones from the other users of
 * a shared server. Infinity for Redis (its limit is in the thousands) and engines without a
 * server.
 */
async function freeConnectionSlots(engine) {
  if (engine === 'postgres') {
    const [{ n }] = await ENGINES.postgres.admin().query(
      `SELECT current_setting('max_connections')::int - current_setting('superuser_reserved_connections')::int
              - (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')::int AS n`,
    );
    return n;
  }
  if (engine === 'mysql') {
    const [{ max, used }] = await ENGINES.mysql.admin().query(
      "SELECT @@max_connections AS max, (SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'THREADS_CONNECTED') AS used",
    );
    return Number(max) - Number(used);
  }
  return Number.POSITIVE_INFINITY;
}

module.exports = { serverConnectionsOfThisProcess, freeConnectionSlots };
