'use strict';

const { ENGINES } = require('./engines');
const { TARGETS, WAKE_ALLOWANCE_MS } = require('./targets');

const ENGINE_LABEL = Object.fromEntries(Object.values(ENGINES).map((e) => [e.name, e.label]));

function median(values) {
  const sorted = values.filter((v) => Number.isFinite(v)).sort((a, b) => a - b);
  if (sorted.length === 0) return Number.NaN;
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

function fmt(value, digits = 0) {
  if (!Number.isFinite(value)) return '–';
  if (Math.abs(value) >= 1000) return `${(value / 1000).toFixed(1)}k`;
  return value.toFixed(digits);
}

/**
 * The rounds' pairs of `a` and `b` results (each result carries its `round`), as
 * `combine(a, b)`: native and upstream of a round run back to back, so a pair shares the
 * machine's state of that moment, which drifts over a run of half an hour. NaN-free.
 */
function pairedByRound(a, b, combine) {
  const byRound = new Map(b.map((r) => [r.round, r]));
  return a.flatMap((r) => {
    const other = byRound.get(r.round);
    const value = other === undefined ? Number.NaN : combine(r, other);
    return Number.isFinite(value) ? [value] : [];
  });
}

/**
 * One row per (engine, target): medians of native and upstream, the ratio and whether the
 * target is met. `results[engine][run][impl]` is a list of per-round results (runs: RUNS),
 * each with its `round`. The ratio is the median of the rounds' own ratios (the ratio of the
 * medians where no round has both). `floors[engine]` lists the wake-up floors measured in the
 * run's rounds (`{ round, send: { p50 } }`, beside that round's B4 runs): an `aboveFloor`
 * target is met when the median of the rounds' excesses of native p50 over their own floor's
 * send p50 is within `WAKE_ALLOWANCE_MS` (no floor: the target is not measured).
 */
function rows(results, floors = {}) {
  const out = [];
  for (const [engine, byRun] of Object.entries(results)) {
    for (const [key, spec] of Object.entries(TARGETS)) {
      const runs = byRun[spec.run ?? key];
      if (!runs) continue;
      const metric = (r) => r[spec.metric];
      const nativeValue = median((runs.native ?? []).map(metric));
      const upstreamValue = median((runs.upstream ?? []).map(metric));
      const roundRatios = pairedByRound(runs.native ?? [], runs.upstream ?? [], (n, u) => metric(n) / metric(u));
      const ratio = roundRatios.length > 0 ? median(roundRatios) : nativeValue / upstreamValue;
      let goal = '';
      let met;
      let upstreamFailed = false;
      let floorMissing = false;
      if (spec.aboveFloor?.includes(engine)) {
        const excesses = pairedByRound(runs.native ?? [], floors[engine] ?? [], (n, floor) => metric(n) - floor.send?.p50);
        const excess = median(excesses);
        floorMissing = !Number.isFinite(excess);
        const floor = median((floors[engine] ?? []).map((f) => f.send?.p50));
        goal = floorMissing
          ? `≤ floor + ${WAKE_ALLOWANCE_MS} ms`
          : `≤ floor + ${WAKE_ALLOWANCE_MS} ms: ${excess >= 0 ? '+' : '−'}${Math.abs(excess).toFixed(2)} ms (floor ${floor.toFixed(2)})`;
        met = floorMissing ? undefined : excess <= WAKE_ALLOWANCE_MS;
      } else if (spec.absolute?.[engine] !== undefined) {
        goal = `≤ ${spec.absolute[engine]} ms`;
        met = nativeValue <= spec.absolute[engine];
      } else if (spec.target?.[engine] !== undefined) {
        const t = spec.target[engine];
        goal = spec.lowerIsBetter ? `≤ 1/${Math.round(1 / t)}` : `≥ ${t}×`;
        // No upstream figure (its runs all failed: the upstream MySQL claim can deadlock under
        // competing consumers): nothing to compare, not a miss.
        upstreamFailed = ENGINES[engine].upstream === true && !Number.isFinite(upstreamValue);
        met = upstreamFailed ? undefined : spec.lowerIsBetter ? ratio <= t : ratio >= t;
      }
      // An engine with no TypeScript transport has no ratio to meet, only an absolute bound.
      if (!ENGINES[engine].upstream && spec.absolute?.[engine] === undefined) {
        goal = '';
        met = undefined;
      }
      out.push({ engine, label: spec.label, nativeValue, upstreamValue, ratio, goal, met, upstreamFailed, floorMissing, digits: ['p50', 'p99'].includes(spec.metric) ? 2 : spec.lowerIsBetter || spec.metric === 'mbPerSecond' ? 1 : 0 });
    }
  }
  return out;
}

/** The `met` column of a row. */
function metCell(row) {
  if (row.upstreamFailed) return 'not measured: upstream failed every round';
  if (row.floorMissing) return 'not measured: no wake-up floor in this run';
  if (row.met === undefined) return '';
  return row.met ? 'yes' : '**no**';
}

function markdown(results, extras, machine, floors = {}) {
  const lines = [
    '# Benchmark report',
    '',
    `${machine}`,
    '',
    'Native and upstream: medians over the rounds. Native ÷ upstream: the median of the rounds\' own ratios (each round runs the two back to back). B4 against its floor: the median of the rounds\' excesses of native p50 over the floor measured beside it in that round.',
    '',
    '| engine | workload | native | upstream | native ÷ upstream | target | met |',
    '|---|---|---|---|---|---|---|',
  ];
  for (const r of rows(results, floors)) {
    const ratio = Number.isFinite(r.ratio) ? `${r.ratio.toFixed(r.ratio < 1 ? 2 : 1)}×` : '–';
    const met = metCell(r);
    lines.push(
      `| ${ENGINE_LABEL[r.engine]} | ${r.label} | ${fmt(r.nativeValue, r.digits)} | ${fmt(r.upstreamValue, r.digits)} | ${ratio} | ${r.goal} | ${met} |`,
    );
  }
  for (const extra of extras) lines.push('', ...extra);
  return `${lines.join('\n')}\n`;
}

/** A horizontal bar chart of the ratios (log scale), one bar per engine and workload. */
function svg(results, floors = {}) {
  const data = rows(results, floors).filter((r) => Number.isFinite(r.ratio) && ENGINES[r.engine].upstream);
  const barHeight = 18;
  const left = 330;
  const width = 900;
  const height = 40 + data.length * (barHeight + 6);
  const scale = (ratio) => {
    const logMin = Math.log10(0.05);
    const logMax = Math.log10(200);
    return ((Math.log10(Math.min(200, Math.max(0.05, ratio))) - logMin) / (logMax - logMin)) * (width - left - 20);
  };
  const parts = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" font-family="sans-serif" font-size="12">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="10" y="18" font-size="14" font-weight="bold">native ÷ upstream (log scale; right of the 1× line is better; CPU and wake-up inverted)</text>`,
  ];
  const x1 = left + scale(1);
  parts.push(`<line x1="${x1}" y1="26" x2="${x1}" y2="${height - 4}" stroke="#888" stroke-dasharray="3,3"/>`);
  data.forEach((r, i) => {
    const y = 32 + i * (barHeight + 6);
    const better = TARGETSIsLower(r.label) ? 1 / r.ratio : r.ratio;
    const w = Math.max(1, scale(better));
    const color = r.met === false ? '#d9534f' : '#2c7fb8';
    parts.push(`<text x="10" y="${y + 13}">${ENGINE_LABEL[r.engine]} · ${escape(r.label)}</text>`);
    parts.push(`<rect x="${left}" y="${y}" width="${w}" height="${barHeight}" fill="${color}"/>`);
    parts.push(`<text x="${left + w + 4}" y="${y + 13}">${better.toFixed(better < 1 ? 2 : 1)}×</text>`);
  });
  parts.push('</svg>');
  return `${parts.join('\n')}\n`;
}

function TARGETSIsLower(label) {
  return Object.values(TARGETS).some((t) => t.label === label && t.lowerIsBetter);
}

function escape(text) {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;');
}

module.exports = { markdown, svg, median, rows };
