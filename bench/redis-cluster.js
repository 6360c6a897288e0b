'use strict';

// A throwaway local Redis Cluster for the cluster tests (__test__/redis/redis.cluster.test.js)
// and the benchmark's many-queues runs on a cluster:
// three masters (and, if asked, replicas of each), on free loopback ports (each also needs its bus port, +10000),
// in a temporary directory that is removed again. Started with `redis-server` child processes
// and `redis-cli --cluster create`; stop() kills the processes and removes the directory, and
// an exit hook kills them if the test process ends without calling it.

const { spawn, execFile } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { Redis, Cluster } = require('ioredis');
const { freePortPair } = require('./ports');

const SLOTS = 16384;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function run(file, args, timeoutMs) {
  return new Promise((resolve, reject) => {
    execFile(file, args, { timeout: timeoutMs, maxBuffer: 4 * 1024 * 1024 }, (error, stdout, stderr) => {
      if (error) {
        reject(new Error(`${file} ${args.join(' ')} failed: ${error.message}\n${stdout}\n${stderr}`));
      } else {
        resolve(stdout);
      }
    });
  });
}

/** The CA (PEM) of the nodes that serve TLS, by port. */
const tlsCaByPort = new Map();

/** One command on one node, through a short-lived plain (non-cluster) connection. */
async function nodeCommand(port, command, ...args) {
  const ca = tlsCaByPort.get(port);
  const redis = new Redis({
    host: '127.0.0.1',
    port,
    ...(ca === undefined ? {} : { tls: { ca } }),
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    enableOfflineQueue: false,
    retryStrategy: () => null,
  });
  redis.on('error', () => {}); // reported through the command's promise
  try {
    await redis.connect();
    return await redis.call(command, ...args);
  } finally {
    redis.disconnect();
  }
}

/** `CLUSTER INFO` as an object. */
async function clusterInfo(port) {
  const text = String(await nodeCommand(port, 'CLUSTER', 'INFO'));
  const info = {};
  for (const line of text.split(/\r?\n/)) {
    const at = line.indexOf(':');
    if (at > 0) info[line.slice(0, at)] = line.slice(at + 1);
  }
  return info;
}

/** Slot → owning node's port, as `port` sees the cluster (`CLUSTER SLOTS`). */
async function slotMap(port) {
  const ranges = await nodeCommand(port, 'CLUSTER', 'SLOTS');
  const owners = new Array(SLOTS).fill(undefined);
  for (const [start, end, master] of ranges) {
    for (let slot = Number(start); slot <= Number(end); slot += 1) owners[slot] = Number(master[1]);
  }
  return owners;
}

/**
 * Starts a cluster of `masters` nodes and `replicas` replicas of each. Resolves to a handle:
 * `{ ports, seedPort, dsn, nodes: [{ port, id, pid }], dir, stop(), kill(port), … helpers }`
 * (`ports` lists every node, masters first as `redis-cli` made them). With `tls` (PEM file
 * paths `{ cert, key, ca }`), the nodes serve TLS only, their bus included, and `dsn` is
 * `rediss://`; clients are not asked for certificates, but nodes are (the bus always asks),
 * so the certificate must allow client authentication too.
 */
async function startCluster({ masters = 3, replicas = 0, tls, readyTimeoutMs = 30000 } = {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nmn-redis-cluster-'));
  /** @type {{ port: number, child: import('node:child_process').ChildProcess, id?: string }[]} */
  const nodes = [];
  let stopped = false;

  const killAll = () => {
    for (const node of nodes) {
      if (node.child.exitCode === null && node.child.signalCode === null) {
        try {
          node.child.kill('SIGKILL');
        } catch {
          // already gone
        }
      }
    }
  };
  process.once('exit', killAll);

  async function stop() {
    if (stopped) return;
    stopped = true;
    process.removeListener('exit', killAll);
    await Promise.all(
      nodes.map(
        (node) =>
          new Promise((resolve) => {
            if (node.child.exitCode !== null || node.child.signalCode !== null) return resolve();
            node.child.once('exit', () => resolve());
            node.child.kill('SIGKILL');
          }),
      ),
    );
    for (const node of nodes) tlsCaByPort.delete(node.port);
    fs.rmSync(dir, { recursive: true, force: true });
  }

  /**
   * Spawns one node on a port picked at run time whose bus port (+10000) is free too;
   * resolves once it answers PING.
   */
  async function spawnNode() {
    for (let attempt = 0; attempt < 20; attempt += 1) {
      const port = await freePortPair(10000);
      const listen = tls === undefined
        ? ['--port', String(port)]
        : [
          '--port', '0',
          '--tls-port', String(port),
          '--tls-cluster', 'yes',
          '--tls-cert-file', tls.cert,
          '--tls-key-file', tls.key,
          '--tls-ca-cert-file', tls.ca,
          '--tls-auth-clients', 'no',
        ];
      if (tls !== undefined) tlsCaByPort.set(port, fs.readFileSync(tls.ca, 'utf8'));
      const child = spawn(
        'redis-server',
        [
          ...listen,
          '--cluster-enabled', 'yes',
          '--cluster-config-file', path.join(dir, `nodes-${port}.conf`),
          '--cluster-node-timeout', '2000',
          '--save', '',
          '--appendonly', 'no',
          '--bind', '127.0.0.1',
          '--daemonize', 'no',
          '--dir', dir,
          '--logfile', path.join(dir, `redis-${port}.log`),
        ],
        { stdio: 'ignore' },
      );
      const node = { port, child };
      nodes.push(node);
      const deadline = Date.now() + 10000;
      for (;;) {
        if (child.exitCode !== null || child.signalCode !== null) break; // lost the port race
        try {
          if ((await nodeCommand(port, 'PING')) === 'PONG') return node;
        } catch {
          // not listening yet
        }
        if (Date.now() > deadline) throw new Error(`redis-server on port ${port} did not answer PING`);
        await sleep(50);
      }
      nodes.splice(nodes.indexOf(node), 1);
      tlsCaByPort.delete(port);
    }
    throw new Error('no redis-server node could be started on a free port pair');
  }

  try {
    for (let i = 0; i < masters * (1 + replicas); i += 1) await spawnNode();
    await run(
      'redis-cli',
      [
        ...(tls === undefined ? [] : ['--tls', '--cacert', tls.ca]),
        '--cluster', 'create', ...nodes.map((n) => `127.0.0.1:${n.port}`), '--cluster-replicas', String(replicas), '--cluster-yes',
      ],
      60000,
    );
    for (const node of nodes) node.id = String(await nodeCommand(node.port, 'CLUSTER', 'MYID'));
    // Ready: every node says ok and sees every slot owned by one of the masters.
    const deadline = Date.now() + readyTimeoutMs;
    for (;;) {
      let ready = true;
      for (const node of nodes) {
        const info = await clusterInfo(node.port);
        const owners = await slotMap(node.port);
        if (info.cluster_state !== 'ok' || owners.some((o) => o === undefined) || Number(info.cluster_known_nodes) !== nodes.length) {
          ready = false;
          break;
        }
      }
      // A replica can take over only once it is in sync with its master.
      for (const node of nodes) {
        if (!ready) break;
        const replication = String(await nodeCommand(node.port, 'INFO', 'replication'));
        if (/role:slave/.test(replication) && !/master_link_status:up/.test(replication)) ready = false;
      }
      if (ready) break;
      if (Date.now() > deadline) throw new Error(`cluster not ready within ${readyTimeoutMs} ms`);
      await sleep(100);
    }
  } catch (error) {
    await stop();
    throw error;
  }

  const ports = nodes.map((n) => n.port);
  const idOf = (port) => nodes.find((n) => n.port === port).id;

  /** Kills the node on `port` (SIGKILL), as a crash would; resolves once it has exited. */
  async function kill(port) {
    const { child } = nodes.find((n) => n.port === port);
    if (child.exitCode !== null || child.signalCode !== null) return;
    await new Promise((resolve) => {
      child.once('exit', () => resolve());
      child.kill('SIGKILL');
    });
  }

  /** The hash slot of `key` (`CLUSTER KEYSLOT`). */
  async function keyslot(key) {
    return Number(await nodeCommand(ports[0], 'CLUSTER', 'KEYSLOT', key));
  }

  /** Port of the master owning `slot`, as `askPort` sees it. */
  async function ownerOf(slot, askPort = ports[0]) {
    return (await slotMap(askPort))[slot];
  }

  /** Polls until every node agrees that `slot` belongs to `port`. */
  async function waitOwner(slot, port, timeoutMs = 10000) {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const views = await Promise.all(ports.map((p) => ownerOf(slot, p)));
      if (views.every((v) => v === port)) return;
      if (Date.now() > deadline) throw new Error(`slot ${slot}: owners seen ${views.join(',')}, want ${port}`);
      await sleep(50);
    }
  }

  /**
   * Moves `slot` to the master on `toPort` with the documented manual sequence: SETSLOT
   * IMPORTING on the target, MIGRATING on the source, MIGRATE every key of the slot, then
   * SETSLOT NODE on every master (target first). Resolves once all nodes agree.
   * `between` (optional) runs after the slot is MIGRATING, before keys move; `afterMove`
   * after the keys moved, before the slot is handed over (the source then answers ASK).
   */
  async function migrateSlot(slot, toPort, { between, afterMove } = {}) {
    const fromPort = await ownerOf(slot);
    if (fromPort === toPort) throw new Error(`slot ${slot} already on ${toPort}`);
    const fromId = idOf(fromPort);
    const toId = idOf(toPort);
    await nodeCommand(toPort, 'CLUSTER', 'SETSLOT', String(slot), 'IMPORTING', fromId);
    await nodeCommand(fromPort, 'CLUSTER', 'SETSLOT', String(slot), 'MIGRATING', toId);
    if (between) await between();
    const moved = [];
    for (;;) {
      const keys = await nodeCommand(fromPort, 'CLUSTER', 'GETKEYSINSLOT', String(slot), '100');
      if (keys.length === 0) break;
      await nodeCommand(fromPort, 'MIGRATE', '127.0.0.1', String(toPort), '', '0', '5000', 'KEYS', ...keys);
      moved.push(...keys);
    }
    if (afterMove) await afterMove();
    await nodeCommand(toPort, 'CLUSTER', 'SETSLOT', String(slot), 'NODE', toId);
    await nodeCommand(fromPort, 'CLUSTER', 'SETSLOT', String(slot), 'NODE', toId);
    for (const port of ports) {
      if (port !== toPort && port !== fromPort) await nodeCommand(port, 'CLUSTER', 'SETSLOT', String(slot), 'NODE', toId);
    }
    await waitOwner(slot, toPort);
    return { fromPort, toPort, moved };
  }

  /** A cluster-aware ioredis client for set-up and inspection; call `disconnect()` after. */
  function admin() {
    const ca = tlsCaByPort.get(ports[0]);
    return new Cluster([{ host: '127.0.0.1', port: ports[0] }], {
      redisOptions: { maxRetriesPerRequest: 1, ...(ca === undefined ? {} : { tls: { ca } }) },
    });
  }

  return {
    dir,
    ports,
    seedPort: ports[0],
    dsn: `${tls === undefined ? 'redis' : 'rediss'}://127.0.0.1:${ports[0]}`,
    nodes: nodes.map(({ port, id, child }) => ({ port, id, pid: child.pid })),
    idOf,
    stop,
    kill,
    keyslot,
    ownerOf,
    waitOwner,
    migrateSlot,
    admin,
    nodeCommand,
  };
}

module.exports = { startCluster, nodeCommand };
