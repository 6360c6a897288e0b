'use strict';

// A private Redis Sentinel deployment for the failover tests: a master, one replica (or more)
// and three sentinels (quorum 2), all on free loopback ports picked at run time, never the shared server
// on 6379. Failovers can be graceful (SENTINEL FAILOVER) or hard (the master frozen with
// SIGSTOP, as a hung host would be). Every process is stopped by stop() and, whatever happens,
// killed when the jest worker exits.

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawn } = require('node:child_process');
const { Redis } = require('ioredis');
const { startRedisServer, waitForPort } = require('../../support/redis-server');
const { freePort } = require('../../support/ports');
const { killedAtExit, killNow } = require('../../support/killed-at-exit');
const { pollUntil } = require('../../support/transport-helpers');

const HOST = '127.0.0.1';
const START_TIMEOUT_MS = 30_000;

// Sentinel rewrites its config file, so each one has a directory of its own; removed at exit
// too, as startRedisServer's processes are killed then.
const dirs = new Set();
process.once('exit', () => {
  for (const dir of dirs) fs.rmSync(dir, { recursive: true, force: true });
});

/**
 * One command on a short-lived connection. The bound covers the whole exchange: a SIGSTOPped
 * server still accepts TCP connections (the kernel does) but never answers.
 */
async function ask(port, password, args, timeoutMs = 2000) {
  const redis = new Redis({
    host: HOST,
    port,
    password,
    lazyConnect: true,
    connectTimeout: timeoutMs,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
  });
  redis.on('error', () => {});
  let timer;
  try {
    return await Promise.race([
      redis.connect().then(() => redis.call(...args)),
      new Promise((_, reject) => {
        const error = new Error(`${args.join(' ')} on port ${port}: no answer within ${timeoutMs} ms`);
        timer = setTimeout(() => reject(error), timeoutMs);
      }),
    ]);
  } finally {
    clearTimeout(timer);
    redis.disconnect();
  }
}

/** Redis replies `[k1, v1, k2, v2, ...]` as an object. */
const fields = (flat) => Object.fromEntries(flat.flatMap((_, i) => (i % 2 === 0 ? [[flat[i], flat[i + 1]]] : [])));

/** Starts one sentinel; `lines` is its config file (the first argument, Sentinel requires one). */
async function startSentinel(lines) {
  const port = await freePort();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nmn-sentinel-'));
  dirs.add(dir);
  const conf = path.join(dir, 'sentinel.conf');
  const own = [`port ${port}`, `bind ${HOST}`, `dir ${dir}`, 'daemonize no', 'logfile ""', `sentinel announce-port ${port}`];
  fs.writeFileSync(conf, `${[...own, ...lines].join('\n')}\n`);
  const child = spawn('redis-server', [conf, '--sentinel'], { stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  child.stdout.on('data', (chunk) => (log += chunk));
  child.stderr.on('data', (chunk) => (log += chunk));
  const exited = killedAtExit(child);
  const started = await Promise.race([waitForPort(port, true).then(() => 'up'), exited.then((code) => `exited with ${code}`)]);
  if (started !== 'up') throw new Error(`sentinel did not start (${started}):\n${log}`);
  return {
    port,
    get log() {
      return log;
    },
    async stop() {
      await killNow(child, exited);
      fs.rmSync(dir, { recursive: true, force: true });
      dirs.delete(dir);
    },
  };
}

/**
 * Starts a master, `replicas` replicas and three sentinels monitoring them as `name` (quorum 2),
 * and waits until every sentinel sees the master, the replicas and the two other sentinels.
 * @param {{ name?: string, replicas?: number, sentinelPassword?: string, masterPassword?: string,
 *   downAfterMs?: number, failoverTimeoutMs?: number }} [options]
 *   `sentinelPassword`: requirepass on the sentinels; `masterPassword`: requirepass and masterauth
 *   on both data nodes (and the sentinels' auth-pass); `downAfterMs`, `failoverTimeoutMs`: the
 *   sentinels' down-after-milliseconds and failover-timeout (no new failover of the same master
 *   by a sentinel within 2 × failoverTimeoutMs of one it led or voted for).
 */
async function startSentinelDeployment(options = {}) {
  const { name = 'mymaster', replicas = 1, sentinelPassword, masterPassword, downAfterMs = 1000, failoverTimeoutMs = 5000 } = options;
  // No 5 s wait (the default) before each full sync: a replica links as soon as it can.
  const nodeArgs = ['--repl-diskless-sync-delay', '0'];
  if (masterPassword !== undefined) nodeArgs.push('--requirepass', masterPassword, '--masterauth', masterPassword);
  const servers = [];
  const sentinels = [];
  const stopped = new Set();
  const logs = () =>
    [...servers.map((s) => [`redis ${s.port}`, s.log]), ...sentinels.map((s) => [`sentinel ${s.port}`, s.log])]
      .map(([what, log]) => `--- ${what}:\n${log.split('\n').slice(-30).join('\n')}`)
      .join('\n');
  const until = async (what, probe, timeoutMs) => {
    let last;
    const probed = () =>
      probe().catch((error) => {
        last = error;
        return false;
      });
    if (!(await pollUntil(probed, { timeoutMs, intervalMs: 100 }))) {
      throw new Error(`Sentinel deployment: ${what} not within ${timeoutMs} ms (${last?.message ?? 'not yet'})\n${logs()}`);
    }
  };
  const onNode = (port, ...args) => ask(port, masterPassword, args);
  const onSentinel = (sentinel, ...args) => ask(sentinel.port, sentinelPassword, args);
  const reportedMaster = async (sentinel) => Number((await onSentinel(sentinel, 'SENTINEL', 'GET-MASTER-ADDR-BY-NAME', name))[1]);
  const allReport = async (port) => (await Promise.all(sentinels.map(reportedMaster))).every((p) => p === port);
  const isMaster = async (port) => (await onNode(port, 'ROLE'))[0] === 'master';
  const nodeAt = (port) => servers.find((s) => s.port === port);
  const othersThan = (port) => servers.filter((s) => s.port !== port);
  /** The port every sentinel reports as the master once it is another than `from`, and a master. */
  const promotedFrom = async (from) => {
    const reported = await Promise.all(sentinels.map(reportedMaster));
    const to = reported[0];
    return to !== from && reported.every((p) => p === to) && (await isMaster(to)) && to;
  };
  const untilPromoted = async (from, timeoutMs) => {
    let to;
    await until(`every sentinel reporting a new master after ${from}`, async () => (to = await promotedFrom(from)), timeoutMs);
    return to;
  };

  /** The replica linked to `master`, as it and every sentinel see it (a promotable replica). */
  const replicaLinked = async (master, replica) => {
    const info = await onNode(replica, 'INFO', 'replication');
    const linked = /role:slave/.test(info) && info.includes(`master_port:${master}\r`) && /master_link_status:up/.test(info);
    if (!linked) return false;
    for (const sentinel of sentinels) {
      const replicas = (await onSentinel(sentinel, 'SENTINEL', 'REPLICAS', name)).map(fields);
      const seen = replicas.find((r) => Number(r.port) === replica);
      if (seen === undefined || seen.flags !== 'slave' || seen['master-link-status'] !== 'ok') return false;
    }
    return true;
  };

  const deployment = {};
  try {
    servers.push(await startRedisServer({ args: nodeArgs }));
    for (let i = 0; i < replicas; i += 1) {
      servers.push(await startRedisServer({ args: [...nodeArgs, '--replicaof', HOST, String(servers[0].port)] }));
    }
    // Linked before the sentinels start: a sentinel lists replicas from the master's INFO, which
    // it asks only every 10 s once it has asked once.
    const replicasUp = async () => {
      const infos = await Promise.all(servers.slice(1).map((r) => onNode(r.port, 'INFO', 'replication')));
      return infos.every((info) => /master_link_status:up/.test(info));
    };
    await until('the replicas linked', replicasUp, START_TIMEOUT_MS);
    const lines = [
      'sentinel resolve-hostnames no',
      `sentinel announce-ip ${HOST}`,
      ...(sentinelPassword === undefined ? [] : [`requirepass ${JSON.stringify(sentinelPassword)}`]),
      `sentinel monitor ${name} ${HOST} ${servers[0].port} 2`,
      `sentinel down-after-milliseconds ${name} ${downAfterMs}`,
      `sentinel failover-timeout ${name} ${failoverTimeoutMs}`,
      ...(masterPassword === undefined ? [] : [`sentinel auth-pass ${name} ${JSON.stringify(masterPassword)}`]),
    ];
    for (let i = 0; i < 3; i += 1) sentinels.push(await startSentinel(lines));
    // Sentinels find each other through hello messages on the master, every 2 s.
    const seeEachOther = async () =>
      (await Promise.all(sentinels.map((s) => onSentinel(s, 'SENTINEL', 'SENTINELS', name)))).every((others) => others.length === 2);
    const replicasLinked = async (master) => {
      for (const replica of othersThan(master)) if (!(await replicaLinked(master, replica.port))) return false;
      return true;
    };
    deployment.replicasLinked = replicasLinked;
    await until(
      'every sentinel seeing the master, the replicas and the two other sentinels',
      async () => (await allReport(servers[0].port)) && (await replicasLinked(servers[0].port)) && seeEachOther(),
      START_TIMEOUT_MS,
    );
  } catch (error) {
    await Promise.all([...servers, ...sentinels].map((s) => s.stop()));
    throw error;
  }

  Object.assign(deployment, {
    name,
    /** The sentinels as ioredis's `sentinels` option takes them. */
    sentinels: sentinels.map(({ port }) => ({ host: HOST, port })),
    /** The data nodes (the first one is the master at the start). */
    nodes: servers.map((server) => ({
      port: server.port,
      get pid() {
        return server.pid;
      },
    })),
    /** The last lines of every process's log (for a failing test's message). */
    logs,
    /** The current master's port, as the first sentinel tells it. */
    masterPort: () => reportedMaster(sentinels[0]),

    /**
     * Waits until the node that is not the master is its linked replica and every sentinel sees
     * it so (after a failover: WAIT has a replica again, another failover can promote it).
     * Sentinel turns an old master into a replica only once it has reported its master role
     * for 8 s (and it asks replicas for INFO every 10 s): 10 to 20 s after a failover or a
     * resume(). Until then the old master takes writes, and later drops them.
     * @param {{ timeoutMs?: number }} [options]
     */
    async waitForReplicaLink({ timeoutMs = 30_000 } = {}) {
      const master = await deployment.masterPort();
      await until(`every other node linked as a replica of ${master}`, () => deployment.replicasLinked(master), timeoutMs);
    },

    /**
     * SENTINEL FAILOVER: promotes the replica. Resolves once every sentinel reports it and it
     * has the master role (the old master is still one, and keeps its clients, until Sentinel
     * reconfigures it, see waitForReplicaLink: then CLIENT KILL closes its connections).
     * @param {{ timeoutMs?: number }} [options]
     * @returns {Promise<{ from: number, to: number }>} the old and new master's ports
     */
    async gracefulFailover({ timeoutMs = 20_000 } = {}) {
      const from = await deployment.masterPort();
      // NOGOODSLAVE / INPROG until a replica is promotable and an earlier failover is over.
      const accepted = async () => (await onSentinel(sentinels[0], 'SENTINEL', 'FAILOVER', name)) === 'OK';
      await until(`SENTINEL FAILOVER ${name} accepted`, accepted, timeoutMs);
      return { from, to: await untilPromoted(from, timeoutMs) };
    },

    /**
     * Freezes the master (SIGSTOP) and resolves once the sentinels promoted the replica:
     * about downAfterMs plus 2 s (agreement, election, the promoted node's INFO). Waits first
     * for a promotable replica (waitForReplicaLink).
     * @param {{ timeoutMs?: number }} [options]
     * @returns {Promise<{ from: number, to: number, resume: () => void, killOld: () => Promise<void> }>}
     *   `resume()` lets the old master run again (Sentinel then turns it into a replica);
     *   `killOld()` kills it for good instead (the deployment is left without a replica).
     */
    async hardFailover({ timeoutMs = 20_000 } = {}) {
      await deployment.waitForReplicaLink();
      const from = await deployment.masterPort();
      const old = nodeAt(from);
      process.kill(old.pid, 'SIGSTOP');
      stopped.add(old);
      const to = await untilPromoted(from, timeoutMs);
      const resume = () => {
        if (stopped.delete(old)) process.kill(old.pid, 'SIGCONT');
      };
      const killOld = () => {
        stopped.delete(old);
        return old.crash();
      };
      return { from, to, resume, killOld };
    },

    /** Kills every process (frozen ones are let run first) and removes the directories. */
    async stop() {
      for (const server of stopped) {
        try {
          process.kill(server.pid, 'SIGCONT');
        } catch {
          // already gone
        }
      }
      stopped.clear();
      await Promise.all([...servers, ...sentinels].map((s) => s.stop()));
    },
  });
  return deployment;
}

module.exports = { startSentinelDeployment };
