'use strict';

// npm run bench: the native transports and the upstream TypeScript transports side by side in
// one run on the same servers, alternating native and upstream for every workload of every
// round, each run in a fresh process on a fresh queue; medians and ratios; a markdown report
// and an SVG chart in bench/results/.

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { markdown, svg, median } = require('./report');
const { limitRuns, measureLimits, limitSection, hasWakeFloor, hasRoundTripFloor } = require('./limit-report');
const { ENGINES } = require('./engines');
const { RUNS } = require('./targets');
const { Progress } = require('../scripts/progress');
const { parseArgs, USAGE } = require('./args');
const { runFresh } = require('./child');
const { scaleRuns, scaleSections } = require('./scale-report');
const { startCluster } = require('./redis-cluster');

const runOnce = (job) => runFresh('run-one.js', job);

/**
 * One workload run, tried once more if it failed: the upstream MySQL transport's claim can
 * deadlock under competing consumers (its error ends that run), which must not end the
 * benchmark. A run that fails twice is left out (undefined) and said so on stderr.
 */
function runOne(job) {
  try {
    return runOnce(job);
  } catch (error) {
    process.stderr.write(`${job.engine} ${job.workload} ${job.impl} failed (${error.message.split('\n')[0]}); running it again\n`);
    try {
      return runOnce(job);
    } catch {
      process.stderr.write(`${job.engine} ${job.workload} ${job.impl} failed again: left out of this run's figures\n`);
      return undefined;
    }
  }
}

function machine() {
  const cpus = os.cpus();
  return `Machine: ${cpus.length} × ${cpus[0]?.model ?? 'cpu'}, ${(os.totalmem() / 2 ** 30).toFixed(0)} GiB, Node ${process.version}, ${os.platform()} ${os.release()}; servers on loopback. ${new Date().toISOString().slice(0, 10)}.`;
}

/**
 * A floor measured in this round just before the runs set against it (the machine's
 * latencies drift over a run: a floor is read beside its runs): the engine's wake-up floor
 * before B4, Redis's bare round trip before B2. Undefined, said on stderr, if it failed.
 */
function floorOf(kind, engine) {
  try {
    return runFresh('limit-one.js', { kind, engine });
  } catch (error) {
    process.stderr.write(`${engine} ${kind} floor failed: ${error.message.split('\n')[0]}\n`);
    return undefined;
  }
}

/** The floor measured before a round's run of `key` on `engine`, if any: [kind, label]. */
function floorBefore(options, engine, key) {
  if (key === 'wake' && hasWakeFloor(options, engine)) return ['floor', 'wake-up floor'];
  if (key === 'sendSequential' && hasRoundTripFloor(options, engine)) return ['roundTrip', 'round-trip floor'];
  return undefined;
}

/** The implementations a run measures on an engine (none where it does not apply). */
function implsOf(engine, run) {
  if (run.engines !== undefined && !run.engines.includes(engine)) return [];
  // Side by side where the upstream TypeScript transport exists for the engine.
  return run.impls ?? (ENGINES[engine].upstream ? ['native', 'upstream'] : ['native']);
}

async function main() {
  const options = parseArgs(process.argv.slice(2));
  if (options.help) {
    process.stdout.write(USAGE);
    return;
  }
  const results = {};
  /** Per engine, the rounds' wake-up floors and B2 round-trip floors, each with its `round`. */
  const floors = {};
  const roundTrips = {};
  const deep = Object.fromEntries(Object.keys(ENGINES).map((engine) => [engine, []]));
  const runs = { ...RUNS, ...scaleRuns(options) };
  const runsPerRound = options.engines.reduce(
    (sum, engine) =>
      sum +
      Object.values(runs).reduce((n, run) => n + implsOf(engine, run).length, 0) +
      (options.deep > 0 ? 1 : 0) +
      (hasWakeFloor(options, engine) ? 1 : 0) +
      (hasRoundTripFloor(options, engine) ? 1 : 0),
    0,
  );
  // A throwaway cluster for the runs that ask for one, started when the first does.
  let cluster;
  const clusterOf = async () => {
    cluster ??= await startCluster({ masters: 3 });
    return { dsn: cluster.dsn, nodes: cluster.nodes };
  };
  const runsInAll = options.rounds * runsPerRound + limitRuns(options);
  const progress = new Progress(runsInAll, process.stderr);
  let runsDone = 0;
  const ran = (label, result) => {
    runsDone += 1;
    if (result !== undefined) progress.log(`${label}: ${JSON.stringify(result)}`);
    progress.update(runsDone, `${runsDone}/${runsInAll} runs, last: ${label}`);
  };
  for (let round = 1; round <= options.rounds; round += 1) {
    for (const engine of options.engines) {
      results[engine] ??= {};
      for (const [key, run] of Object.entries(runs)) {
        const before = floorBefore(options, engine, key);
        if (before !== undefined) {
          const [kind, label] = before;
          const floor = floorOf(kind, engine);
          ran(`round ${round} ${engine} ${label}`, floor);
          if (floor !== undefined) ((kind === 'floor' ? floors : roundTrips)[engine] ??= []).push({ ...floor, round });
        }
        for (const impl of implsOf(engine, run)) {
          const { upstreamN, ...job } = run;
          const n = impl === 'upstream' && upstreamN !== undefined ? upstreamN : job.n;
          // The job names the cluster's DSN and nodes in place of `cluster: true`.
          const where = job.cluster ? { cluster: await clusterOf() } : {};
          const result = runOne({ engine, impl, ...job, n, ...where });
          ran(`round ${round} ${engine} ${key} ${impl}`, result);
          if (result === undefined) continue;
          ((results[engine][key] ??= {})[impl] ??= []).push({ ...result, round });
        }
      }
      if (options.deep > 0) {
        const result = runOne({ engine, impl: 'native', workload: 'consume', n: options.deep });
        ran(`round ${round} ${engine} consume@${options.deep} native`, result);
        if (result !== undefined) deep[engine].push(result);
      }
    }
  }
  await cluster?.stop();
  // After every workload run, so the limits' prefills do not load the servers under them.
  const measuredLimits = options.limits ? await measureLimits(options, ran) : {};
  progress.end();
  const extras = [...scaleSections(options, results)];
  if (options.deep > 0) {
    const lines = ['## B1 at depth', '', `| engine | native msgs/s at ${RUNS.consume.n} | at ${options.deep} | ratio (target ≥ 0.8) | peak RSS MB |`, '|---|---|---|---|---|'];
    for (const engine of options.engines) {
      const shallow = median((results[engine]?.consume?.native ?? []).map((r) => r.rate));
      const deepRate = median(deep[engine].map((r) => r.rate));
      const rss = median(deep[engine].map((r) => r.peakRssMb));
      lines.push(`| ${engine} | ${shallow.toFixed(0)} | ${deepRate.toFixed(0)} | ${(deepRate / shallow).toFixed(2)} | ${rss.toFixed(0)} |`);
    }
    extras.push(lines);
  }
  let limits;
  if (options.limits) {
    const nativeAt = (engine, depth) =>
      median((depth === RUNS.consume.n ? (results[engine]?.consume?.native ?? []) : deep[engine]).map((r) => r.rate));
    const nativeWakeAt = (engine, key) => median((results[engine]?.[key]?.native ?? []).map((r) => r.p50));
    const section = limitSection(options, measuredLimits, nativeAt, nativeWakeAt, floors, { roundTrips, results });
    if (section.lines.length > 0) extras.push(section.lines);
    limits = section.figures;
  }
  if (options.soak > 0) {
    const soak = runOne({ engine: 'postgres', impl: 'native', workload: 'soak', n: options.soak });
    extras.push(['## Soak', '', `One native consumer through ${options.soak} messages: RSS ${soak.samples.map((s) => `${s.messages}: ${s.rssMb.toFixed(0)} MB`).join(', ')}.`]);
  }
  const outDir = path.join(__dirname, 'results');
  fs.mkdirSync(outDir, { recursive: true });
  const report = markdown(results, extras, machine(), floors);
  fs.writeFileSync(path.join(outDir, 'report.md'), report);
  fs.writeFileSync(path.join(outDir, 'chart.svg'), svg(results, floors));
  fs.writeFileSync(path.join(outDir, 'raw.json'), `${JSON.stringify({ results, deep, limits }, null, 2)}\n`);
  process.stdout.write(report);
}

main().catch((error) => {
  process.stderr.write(`${error.stack ?? error}\n`);
  process.exitCode = 1;
});
