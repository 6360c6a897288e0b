'use strict';

const { setMaxListeners } = require('node:events');
const { performance } = require('node:perf_hooks');
const { setTimeout: sleep } = require('node:timers/promises');
const { Worker } = require('@schally/nestjs-messenger');
const { BenchMessage, sendAsApp } = require('../message');
const { serverCpu } = require('../server-cpu');
const { serverConnectionsOfThisProcess, freeConnectionSlots } = require('../connections');
const { percentiles } = require('./wake');

/** Connections left to the server's other users: opening stops before taking them. */
const SPARE_CONNECTIONS = 20;
/** Transports opened between two looks at the server's free connections. */
const OPEN_STEP = 5;
/** Time for a step's idle loops to open their connections before the next look. */
const SETTLE_MS = 300;
const GAP_MS = 10;
/**
 * Quiet time between the first messages and the idle window. About 8 s after a process's
 * last activity V8's memory reducer runs its one-off full collections (here, of what opening
 * the transports and Workers left); the window measures the idle cost that goes on after it.
 */
const SETTLED_AFTER_MS = 10000;

/**
 * B7: one process, one transport per queue (`queues`, on the engine's DSN as an app would
 * configure them, or on `job.cluster`'s), each with the core Worker on its queue, which gets
 * one message first and then idles. Reports the server connections this process then holds,
 * the process's and the server's CPU over `idleMs` of idling, from `SETTLED_AFTER_MS` after
 * those messages (% of one core; the server's also over `idleMs / 2` before anything was
 * opened, its other users' share), and the wake-up when one message per queue is sent 10 ms
 * apart (send → handled, p50 and p99). Transports are opened a few at a time while the server
 * keeps `SPARE_CONNECTIONS` free for its other users; one that would take them (upstream's
 * pool per transport) ends the run with `cannotOpen` saying why, rather than exhausting a
 * shared server.
 */
async function manyQueues({ job, queues, makeTransportOn }) {
  const idleMs = job.idleMs ?? 10000;
  const transports = [];
  const latencies = [];
  let warmedUp = 0;
  const controller = new AbortController();
  // One Worker per queue listens on it.
  setMaxListeners(queues.length + 10, controller.signal);
  const loops = [];
  let loopError;
  const bus = {
    dispatch: async (envelope) => {
      if (envelope.message.id.startsWith('warm-up')) warmedUp += 1;
      else latencies.push(performance.now() - envelope.message.sentAt);
    },
  };
  const readServerCpu = await serverCpu(job.engine, job.cluster);
  // The server's CPU before this process opens anything: its other users' share of the figure.
  const baseline = await serverCpuPercentOver(readServerCpu, idleMs / 2);
  try {
    for (let i = 0; i < queues.length; i += 1) {
      const transport = makeTransportOn(queues[i]);
      transports.push(transport);
      await transport.setup?.();
      loops.push(
        new Worker(transport, bus).run(controller.signal).catch((error) => {
          loopError ??= error;
        }),
      );
      if ((i + 1) % OPEN_STEP === 0 || i === queues.length - 1) {
        await sleep(SETTLE_MS);
        if (loopError !== undefined) return { queues: queues.length, opened: i + 1, cannotOpen: firstLine(loopError) };
        const free = await freeConnectionSlots(job.engine);
        if (free < SPARE_CONNECTIONS && i < queues.length - 1) {
          const held = await serverConnectionsOfThisProcess(job.engine);
          return {
            queues: queues.length,
            opened: i + 1,
            cannotOpen: `${i + 1} transports hold ${held} connections and the server has ${free} left: ${queues.length} would exhaust it`,
          };
        }
      }
    }
    // One message per queue first, as an app's first sends: what connects on first use
    // (a send path's own connection) is not counted in the idle wake-up below.
    for (let i = 0; i < transports.length; i += 1) await sendAsApp(transports[i], new BenchMessage(`warm-up-${i}`));
    const warmDeadline = Date.now() + 10000;
    while (warmedUp < transports.length && Date.now() < warmDeadline && loopError === undefined) await sleep(5);
    const connections = await serverConnectionsOfThisProcess(job.engine, job.cluster);
    await sleep(SETTLED_AFTER_MS);
    const clientBefore = process.cpuUsage();
    const idleStarted = performance.now();
    const serverPercent = await serverCpuPercentOver(readServerCpu, idleMs);
    const client = process.cpuUsage(clientBefore);
    const idleFor = (performance.now() - idleStarted) * 1000;
    const connectionsAfterIdle = await serverConnectionsOfThisProcess(job.engine, job.cluster);
    for (let i = 0; i < transports.length; i += 1) {
      await sendAsApp(transports[i], new BenchMessage(`q-${i}`, performance.now()));
      await sleep(GAP_MS);
    }
    const deadline = Date.now() + 10000;
    while (latencies.length < transports.length && Date.now() < deadline && loopError === undefined) await sleep(5);
    if (loopError !== undefined) return { queues: queues.length, opened: transports.length, cannotOpen: firstLine(loopError) };
    return {
      queues: queues.length,
      opened: transports.length,
      connections,
      connectionsAfterIdle,
      clientCpuPercent: ((client.user + client.system) / idleFor) * 100,
      serverCpuPercent: serverPercent,
      serverCpuPercentBefore: baseline,
      woke: latencies.length,
      ...percentiles(latencies),
    };
  } catch (error) {
    return { queues: queues.length, opened: transports.length, cannotOpen: firstLine(error) };
  } finally {
    controller.abort();
    await Promise.all(loops);
    await Promise.all(transports.map((t) => t.close().catch(() => undefined)));
  }
}

/** The server's CPU over the next `ms`, in % of one core (NaN where it cannot be read). */
async function serverCpuPercentOver(readServerCpu, ms) {
  const before = readServerCpu();
  const started = performance.now();
  await sleep(ms);
  return ((readServerCpu() - before) / ((performance.now() - started) * 1000)) * 100;
}

function firstLine(error) {
  return String(error?.message ?? error).split('\n')[0];
}

/**
 * B7 across a fleet: `job.processes` consumer processes share `queues` (the first here, the
 * others each a `run-one` of its own), all opening, idling and measuring at once. The
 * connections and the client CPU are the fleet's sums; the server's CPU is this process's
 * reading over its idle window, which the others' windows overlap (the whole fleet's cost);
 * the wake-up is this process's queues'.
 */
async function manyQueuesFleet({ job, queues, makeTransportOn }) {
  const processes = job.processes ?? 4;
  const share = Math.ceil(queues.length / processes);
  const others = Array.from({ length: processes - 1 }, () =>
    runOneInChild({ ...job, workload: 'manyQueues', queues: share, n: share, processes: undefined }),
  );
  const own = await manyQueues({ job, queues: queues.slice(0, share), makeTransportOn });
  const results = [own, ...(await Promise.all(others))];
  const failed = results.find((r) => r.cannotOpen !== undefined);
  if (failed !== undefined) return { ...failed, queues: queues.length };
  const sum = (key) => results.reduce((total, r) => total + r[key], 0);
  return {
    ...own,
    queues: queues.length,
    processes,
    opened: sum('opened'),
    connections: sum('connections'),
    connectionsAfterIdle: sum('connectionsAfterIdle'),
    clientCpuPercent: sum('clientCpuPercent'),
    woke: sum('woke'),
  };
}

/** `job` in a `run-one` process of its own; its one JSON line. */
function runOneInChild(job) {
  const { execFile } = require('node:child_process');
  const path = require('node:path');
  return new Promise((resolve, reject) => {
    execFile(process.execPath, [path.join(__dirname, '..', 'run-one.js'), JSON.stringify(job)], { maxBuffer: 1 << 20 }, (error, stdout) => {
      if (error) return reject(error);
      resolve(JSON.parse(stdout.trim().split('\n').pop()));
    });
  });
}

module.exports = { manyQueues, manyQueuesFleet, SETTLED_AFTER_MS };
