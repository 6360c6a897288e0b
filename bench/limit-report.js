'use strict';

// The benchmark's "Engine limits": each engine's own-statements limit measured in the run, at
// B1's depth and at the deep run's, and native B1 as a share of it (target: ≥ 60%); and the
// wake-up floor native B4 is set against.

const { OWN_STATEMENTS, redisXaddLimit } = require('./limits');
const { WAKE_FLOORS, FLOOR_SENDS } = require('./limit-wake');
const { runFresh } = require('./child');
const { median } = require('./report');
const { RUNS, WAKE_ALLOWANCE_MS } = require('./targets');

/** The share of the limit native B1 should reach, in percent. */
const TARGET_PERCENT = 60;
/** Claim sizes limits are measured at: 100, and about the transport's largest (1,024). */
const BATCHES = [100, 1000];

/** The depths limits are measured at: B1's, and the deep B1 run's when there is one. */
function limitDepths(options) {
  return [...new Set([RUNS.consume.n, ...(options.deep > 0 ? [options.deep] : [])])];
}

/** The engines of this run that have an own-statements limit. */
function limitEngines(options) {
  return options.engines.filter((engine) => engine in OWN_STATEMENTS);
}

/** How many limit measurements `measureLimits` makes (for the progress bar). */
function limitRuns(options) {
  return options.limits ? options.rounds * limitEngines(options).length * limitDepths(options).length * BATCHES.length : 0;
}

/** Whether the run measures Redis's bare round trip (once a round, beside its B2 runs). */
function hasRoundTripFloor(options, engine) {
  return options.limits && engine === 'redis';
}

/** Whether the run measures `engine`'s wake-up floor (once a round, beside its B4 runs). */
function hasWakeFloor(options, engine) {
  return options.limits && limitEngines(options).includes(engine) && engine in WAKE_FLOORS;
}

/**
 * Each engine's limit at each depth, once a round (a run at 3,000 lasts ~0.1 s: medians, as
 * for the native figures), each measurement in a fresh process as B1 runs. A failed
 * measurement is said on stderr and left out.
 * @param {{ rounds: number, engines: string[], deep: number }} options
 * @param {(label: string, result: object | undefined) => void} ran
 * @returns {Promise<Record<string, Record<number, object[]>>>}
 */
async function measureLimits(options, ran) {
  const measured = {};
  for (let round = 1; round <= options.rounds; round += 1) {
    for (const engine of limitEngines(options)) {
      for (const depth of limitDepths(options)) {
        for (const batch of BATCHES) {
          let result;
          try {
            result = runFresh('limit-one.js', { kind: 'limit', engine, depth, batch });
            (((measured[engine] ??= {})[depth] ??= {})[batch] ??= []).push(result);
          } catch (error) {
            process.stderr.write(`${engine} limit at ${depth} by ${batch} failed: ${error.message.split('\n')[0]}\n`);
          }
          ran(`round ${round} ${engine} limit@${depth} by ${batch}`, result);
        }
      }
    }
  }
  return measured;
}

/**
 * The report's section and the figures for raw.json: per engine and depth, the median limit
 * (rows/s), the runs behind it, native B1's median rate at that depth and its share of the
 * limit. `nativeAt(engine, depth)` is native B1's median rate (NaN where not run); `floors`
 * the rounds' wake-up floors per engine; `roundTrips` Redis's B2 round-trip floors, set
 * against B2's `results`. No lines when the run has no engine with a limit.
 */
function limitSection(options, measured, nativeAt, nativeWakeAt, floors, { roundTrips, results }) {
  const depths = limitDepths(options);
  const figures = { batches: BATCHES, targetPercent: TARGET_PERCENT, ownStatements: {} };
  if (limitEngines(options).length === 0) return { lines: [], figures };
  const columns = depths.flatMap((depth) => BATCHES.map((batch) => ({ depth, batch })));
  const lines = [
    '## Engine limits',
    '',
    `One client driving the engine with the native transport's own consume statements (claims of ${BATCHES.join(' or ')} rows, each followed by the batched delete of its rows) on a queue prefilled as for B1; median of the run's measurements. Native B1 (whose claims grow to 1,024) as a share of it (target ≥ ${TARGET_PERCENT}%).`,
    '',
    `| engine | statements | ${columns.map(({ depth, batch }) => `limit rows/s at ${depth}, claims of ${batch} | native B1 ÷ it`).join(' | ')} |`,
    `|---|---|${columns.map(() => '---|---|').join('')}`,
  ];
  for (const engine of limitEngines(options)) {
    const cells = [];
    for (const { depth, batch } of columns) {
      const runs = (measured[engine]?.[depth]?.[batch] ?? []).map((r) => r.rowsPerSecond);
      const limit = median(runs);
      const native = nativeAt(engine, depth);
      const percent = (native / limit) * 100;
      ((figures.ownStatements[engine] ??= {})[depth] ??= {})[batch] = { limit, runs, native, percent };
      cells.push(Number.isFinite(limit) ? limit.toFixed(0) : '–', Number.isFinite(percent) ? `${percent.toFixed(0)}%` : '–');
    }
    lines.push(`| ${engine} | ${OWN_STATEMENTS[engine].label} | ${cells.join(' | ')} |`);
  }
  lines.push(...wakeFloorLines(options, floors, nativeWakeAt, figures));
  lines.push(...roundTripLines(roundTrips.redis ?? [], results.redis?.sendSequential ?? {}, figures));
  if (options.engines.includes('redis')) {
    figures.redisXaddPerSecond = redisXaddLimit();
    lines.push('', `Redis pipelined XADD (redis-benchmark -P 16): ${figures.redisXaddPerSecond.toFixed(0)} commands/s.`);
  }
  return { lines, figures };
}

/**
 * The wake-up floor table: per engine, medians over the rounds of the floor's p50 and p99
 * (ms), beside native B4's p50 in process and from another process
 * (`nativeWakeAt(engine, 'wake' | 'wakeRemote')`); the figures go to `figures.wakeFloor`.
 */
function wakeFloorLines(options, floors, nativeWakeAt, figures) {
  const engines = limitEngines(options).filter((engine) => engine in WAKE_FLOORS);
  if (engines.length === 0) return [];
  const ms = (value) => (Number.isFinite(value) ? value.toFixed(2) : '–');
  const lines = [
    '',
    `Wake-up floor: the message B4 sends (as an app sends it, stamps and all), stored by the engine's own Node client at B4's pace (one every 10 ms on an idle server), ${FLOOR_SENDS} times a round in a fresh process just before that round's B4 runs, and when a second connection learns of it; medians over the rounds. A same-process wake-up is that send and then a claim; one from another process, that notice and then a claim. B4's target is the send p50 + ${WAKE_ALLOWANCE_MS} ms, in process and (where the engine pushes wake-ups) from another process, each round's B4 set against its own round's floor.`,
    '',
    `| engine | floor | send p50 / p99 ms | seen by another connection p50 / p99 ms | B4 target ms (send p50 + ${WAKE_ALLOWANCE_MS}) | native B4 p50 ms: same process / other process |`,
    '|---|---|---|---|---|---|',
  ];
  figures.wakeFloor = {};
  for (const engine of engines) {
    const runs = floors[engine] ?? [];
    const of = (part, p) => median(runs.map((r) => r[part]?.[p]).filter((v) => v !== undefined));
    const floor = { send: { p50: of('send', 'p50'), p99: of('send', 'p99') }, seen: { p50: of('seen', 'p50'), p99: of('seen', 'p99') } };
    const native = { wake: nativeWakeAt(engine, 'wake'), wakeRemote: nativeWakeAt(engine, 'wakeRemote') };
    figures.wakeFloor[engine] = { ...floor, native, runs };
    lines.push(
      `| ${engine} | ${WAKE_FLOORS[engine].label} | ${ms(floor.send.p50)} / ${ms(floor.send.p99)} | ${ms(floor.seen.p50)} / ${ms(floor.seen.p99)} | ${ms(floor.send.p50 + WAKE_ALLOWANCE_MS)} | ${ms(native.wake)} / ${ms(native.wakeRemote)} |`,
    );
  }
  return lines;
}

/**
 * B2 on Redis against its round-trip floor: per round, native's and upstream's rates as a
 * share of the floor measured just before them; medians over the rounds. The figures go to
 * `figures.roundTrip`.
 */
function roundTripLines(floors, b2, figures) {
  if (floors.length === 0) return [];
  const share = (impl) =>
    median(
      (b2[impl] ?? []).map((run) => {
        const floor = floors.find((f) => f.round === run.round);
        return floor === undefined ? Number.NaN : (run.rate / floor.rate) * 100;
      }),
    );
  const floorRate = median(floors.map((f) => f.rate));
  const perSend = median(floors.map((f) => f.perSendMicros));
  figures.roundTrip = { redis: { rate: floorRate, perSendMicros: perSend, nativePercent: share('native'), upstreamPercent: share('upstream'), runs: floors } };
  const percent = (value) => (Number.isFinite(value) ? `${value.toFixed(0)}%` : '–');
  return [
    '',
    `B2's round-trip floor on Redis: the XADD of B2's message written as RESP on a bare Node socket and awaited before the next (no client library, envelope or serializer), as many times as B2 sends after the same warm-up, in a fresh process just before that round's B2 runs. A sequential send is at least this round trip; each B2 rate as a share of its own round's floor, medians over the rounds.`,
    '',
    '| engine | floor sends/s | floor µs per send | native B2 ÷ floor | upstream B2 ÷ floor |',
    '|---|---|---|---|---|',
    `| redis | ${floorRate.toFixed(0)} | ${perSend.toFixed(1)} | ${percent(share('native'))} | ${percent(share('upstream'))} |`,
  ];
}

module.exports = { limitRuns, measureLimits, limitSection, hasWakeFloor, hasRoundTripFloor };
