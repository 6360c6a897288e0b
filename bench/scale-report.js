'use strict';

// B6 (consumer processes on one queue, and a queue per process) and B7 (many idle queues in
// one process): the runs they add to a round and their sections of the report.

const { median } = require('./report');
const { SETTLED_AFTER_MS } = require('./workloads/many-queues');

/**
 * The most messages an upstream B6 run drains: at its 100–1,000 msgs/s a run of this many lasts
 * 2–20 s, long enough for a rate, where the native side's count would take minutes.
 */
const UPSTREAM_SCALE_MESSAGES = 2000;

/** Runs B6 and B7 add to every round, keyed as the results keep them; none with `--no-scale`. */
function scaleRuns(options) {
  if (!options.scale) return {};
  const runs = {};
  const n = options.scaleMessages;
  const upstreamN = Math.min(n, UPSTREAM_SCALE_MESSAGES);
  for (const processes of options.processes) {
    runs[`scale${processes}`] = { workload: 'scale', n, upstreamN, processes, queues: 1 };
  }
  const most = Math.max(...options.processes);
  if (most > 1) runs[`scale${most}x${most}`] = { workload: 'scale', n, upstreamN, processes: most, queues: most };
  for (const queues of options.queues) {
    runs[`queues${queues}`] = { workload: 'manyQueues', n: queues, queues, idleMs: options.idleMs };
  }
  // The most queues again, spread over four consumer processes: the fleet's connections and
  // CPU (native only: upstream's pool per transport is what the one-process rows show).
  const mostQueues = Math.max(...options.queues);
  runs[`queues${mostQueues}x4`] = {
    workload: 'manyQueuesFleet',
    n: mostQueues,
    queues: mostQueues,
    processes: 4,
    idleMs: options.idleMs,
    engines: ['postgres', 'mysql', 'sqlite', 'redis'],
    impls: ['native'],
  };
  // B7 on Redis also on a throwaway three-master cluster, native only: the upstream transport
  // has no cluster mode.
  for (const queues of options.queues) {
    runs[`queues${queues}cluster`] = {
      workload: 'manyQueues',
      n: queues,
      queues,
      idleMs: options.idleMs,
      cluster: true,
      engines: ['redis'],
      impls: ['native'],
    };
  }
  return runs;
}

const fixed = (value, digits = 0) => (Number.isFinite(value) ? value.toFixed(digits) : '–');

/** Duplicates and missing summed over a run's rounds, as `d / m` (both must be 0). */
function dupMissing(runs) {
  if (runs.length === 0) return '–';
  const sum = (key) => runs.reduce((total, r) => total + r[key], 0);
  return `${sum('duplicates')} / ${sum('missing')}`;
}

/** The B6 section: per engine and run, the median rates, their ratio and dup/missing. */
function scaleLines(options, results, runs) {
  const keys = Object.keys(runs).filter((key) => runs[key].workload === 'scale');
  if (keys.length === 0) return [];
  const lines = [
    '## B6 consumer processes',
    '',
    `${options.scaleMessages} prefilled messages (upstream: ${Math.min(options.scaleMessages, UPSTREAM_SCALE_MESSAGES)}, which it takes seconds to drain) drained by P consumer processes (the core \`Worker\` each), on one queue or on a queue per process (the messages shared out); msgs/s from the first message handled to the last ack over all of them; duplicates / missing summed over the rounds from the union of the ids every process handled (both must be 0).`,
    '',
    '| engine | processes × queues | native msgs/s | × 1 process | upstream msgs/s | native ÷ upstream | native dup / missing | upstream dup / missing |',
    '|---|---|---|---|---|---|---|---|',
  ];
  for (const engine of options.engines) {
    const rate = (key, impl) => median((results[engine]?.[key]?.[impl] ?? []).map((r) => r.rate));
    const single = rate(`scale${Math.min(...options.processes)}`, 'native');
    for (const key of keys) {
      const { processes, queues } = runs[key];
      const native = rate(key, 'native');
      const upstream = rate(key, 'upstream');
      const ratio = native / upstream;
      lines.push(
        `| ${engine} | ${processes} × ${queues} | ${fixed(native)} | ${fixed(native / single, 2)} | ${fixed(upstream)} | ${Number.isFinite(ratio) ? `${ratio.toFixed(1)}×` : '–'} | ${dupMissing(results[engine]?.[key]?.native ?? [])} | ${dupMissing(results[engine]?.[key]?.upstream ?? [])} |`,
      );
    }
  }
  return lines;
}

/** One B7 cell group for an implementation's runs: medians, or why it could not run. */
function manyQueuesCells(runs, impl, queues) {
  if (runs.length === 0) return undefined;
  const failed = runs.find((r) => r.cannotOpen !== undefined);
  if (failed !== undefined) return `–: ${impl} cannot open ${queues} transports (${failed.cannotOpen})`;
  const of = (key) => median(runs.map((r) => r[key]));
  return [
    fixed(of('connections')),
    fixed(of('clientCpuPercent'), 2),
    `${fixed(of('serverCpuPercent'), 2)} (${fixed(of('serverCpuPercentBefore'), 2)})`,
    `${fixed(of('p50'), 2)} / ${fixed(of('p99'), 2)}`,
  ];
}

/** The B7 section: per engine, queue count and implementation, connections, idle CPU, wake-up. */
function manyQueuesLines(options, results, runs) {
  const keys = Object.keys(runs).filter((key) => runs[key].workload.startsWith('manyQueues'));
  if (keys.length === 0) return [];
  const lines = [
    '## B7 many queues',
    '',
    `One process (or, where said, four: the fleet's connections and client CPU summed), one transport per queue with the core \`Worker\` on it, one message handled per queue, then idling: the server connections this process holds (counted on the server, by this process's client ports; on a cluster, the most any node holds, and the CPU of all its nodes), its CPU and the server's over ${options.idleMs / 1000} s of idling from ${SETTLED_AFTER_MS / 1000} s after those messages, once V8's one-off collections after activity have run (% of one core; in brackets the server's before the run opened anything, its other users' share), then one message sent per queue 10 ms apart and the wake-up (send → handled) p50 / p99. Medians of the rounds. Transports are opened while the server keeps 20 connections for its other users.`,
    '',
    '| engine | queues | transport | connections | client CPU % idle | server CPU % idle (before) | wake-up p50 / p99 ms |',
    '|---|---|---|---|---|---|---|',
  ];
  for (const engine of options.engines) {
    for (const key of keys) {
      const { queues, cluster, processes } = runs[key];
      const where = processes === undefined ? '' : ` (${processes} processes)`;
      const label = cluster ? `${engine} cluster (3 masters)` : `${engine}${where}`;
      for (const impl of ['native', 'upstream']) {
        const cells = manyQueuesCells(results[engine]?.[key]?.[impl] ?? [], impl, queues);
        if (cells === undefined) continue;
        const row = typeof cells === 'string' ? [cells, '', '', ''] : cells;
        lines.push(`| ${label} | ${queues} | ${impl} | ${row.join(' | ')} |`);
      }
    }
  }
  return lines;
}

/** The report's B6 and B7 sections (no lines for what the run left out). */
function scaleSections(options, results) {
  const runs = scaleRuns(options);
  return [scaleLines(options, results, runs), manyQueuesLines(options, results, runs)].filter((lines) => lines.length > 0);
}

module.exports = { scaleRuns, scaleSections };
