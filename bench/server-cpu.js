'use strict';

// The database server's own CPU time, for the benchmark's "server CPU per message": a shared
// database is the scarce resource in most deployments, and this is the cost its operators
// feel. Read from /proc on this machine (the servers run on loopback here):
// - PostgreSQL: the postmaster and every process it forked. A backend that exited was reaped
//   by the postmaster, so its time is in the postmaster's cutime/cstime; live ones (the
//   background writers, backends still open) are read one by one.
// - MariaDB: its one process (all its threads).
// - Redis: its one process, from its threads' scheduler run times (ns): /proc/<pid>/stat counts
//   in ticks of 10 ms, two or three ticks over a B1 run, which made its µs per message a
//   multiple of 3.3. Redis's threads live as long as it does, so their sum is the process's
//   time; MariaDB's connection threads may exit, taking their run time out of the sum, so it
//   keeps the ticks.
// NaN where /proc is not there or the server's process cannot be found.

const fs = require('node:fs');
const { ENGINES } = require('./engines');

/** Clock ticks per second of /proc/<pid>/stat times (USER_HZ: 100 on Linux). */
const TICKS_PER_SECOND = 100;

/** [ppid, utime, stime, cutime, cstime] of a process, in ticks; undefined if it is gone. */
function statOf(pid) {
  try {
    const text = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name (which may hold spaces), from field 3 (state) on.
    const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
    return { ppid: Number(fields[1]), own: Number(fields[11]) + Number(fields[12]), reaped: Number(fields[13]) + Number(fields[14]) };
  } catch {
    return undefined;
  }
}

/** CPU µs of `pid` and, when `withChildren`, of every process it forked (live or reaped). */
function processTreeMicros(pid, withChildren) {
  const root = statOf(pid);
  if (root === undefined) return Number.NaN;
  let ticks = root.own;
  if (withChildren) {
    ticks += root.reaped;
    for (const entry of fs.readdirSync('/proc')) {
      if (!/^\d+$/.test(entry)) continue;
      const child = statOf(entry);
      if (child?.ppid === pid) ticks += child.own;
    }
  }
  return (ticks * 1e6) / TICKS_PER_SECOND;
}

/**
 * CPU µs of `pid`'s live threads, from their scheduler statistics (ns); undefined where the
 * kernel keeps none.
 */
function threadsMicros(pid) {
  try {
    let nanos = 0;
    for (const task of fs.readdirSync(`/proc/${pid}/task`)) {
      nanos += Number(fs.readFileSync(`/proc/${pid}/task/${task}/schedstat`, 'utf8').split(' ')[0]);
    }
    return Number.isFinite(nanos) ? nanos / 1000 : undefined;
  } catch {
    return undefined;
  }
}

/** CPU µs of a server that is one process whose threads live as long as it does (Redis). */
const longLivedThreadsMicros = (pid) => threadsMicros(pid) ?? processTreeMicros(pid, false);

/** The pid of the engine's server process (PostgreSQL: the postmaster), or undefined. */
async function serverPid(engine) {
  if (engine === 'postgres') {
    // Read while the backend lives: its parent is the postmaster.
    return ENGINES.postgres.admin().withClient(async (client) => {
      const { rows } = await client.query('SELECT pg_backend_pid() AS pid');
      return statOf(rows[0].pid)?.ppid;
    });
  }
  if (engine === 'mysql') {
    const [{ file }] = await ENGINES.mysql.admin().query('SELECT @@pid_file AS file');
    return Number(fs.readFileSync(file, 'utf8').trim()) || undefined;
  }
  if (engine === 'redis') {
    const info = await ENGINES.redis.admin().withClient((client) => client.info('server'));
    return Number(/process_id:(\d+)/.exec(info)?.[1]) || undefined;
  }
  return undefined;
}

/**
 * A reader of the engine's server CPU time in µs (NaN when it cannot be read). PostgreSQL's
 * reading includes the backends that have exited: read it after the workload's connections
 * are closed and reaped (see `settleBackends`). On a Redis `cluster` (`{ nodes }` with their
 * pids), the sum over its nodes.
 */
async function serverCpu(engine, cluster) {
  if (cluster !== undefined) {
    return () => cluster.nodes.reduce((sum, node) => sum + longLivedThreadsMicros(node.pid), 0);
  }
  let pid;
  try {
    pid = await serverPid(engine);
  } catch {
    pid = undefined;
  }
  if (pid === undefined) return () => Number.NaN;
  if (engine === 'redis') return () => longLivedThreadsMicros(pid);
  return () => processTreeMicros(pid, engine === 'postgres');
}

/** Waits for closed PostgreSQL backends to exit and be reaped, so their time is counted. */
const settleBackends = () => new Promise((resolve) => setTimeout(resolve, 200));

module.exports = { serverCpu, settleBackends };
