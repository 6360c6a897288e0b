'use strict';

// What the CLI prints: the doctor's lines, the stats table and the rates between samples.
// Pure functions of their input (no I/O), so the layout is one place.

const { envelopeOf, textOf } = require('../native/native-error');

/** What a native failure says (the message of its envelope, see lib/native/native-error.js). */
function messageOf(error) {
  const text = textOf(error);
  return envelopeOf(text)?.message ?? text;
}

/**
 * The doctor's report as text: one line per check, then a summary line.
 * @param {{ ok: boolean, checks: { name: string, status: string, detail: string }[] }} report
 * @returns {string}
 */
function formatChecks(report) {
  const width = Math.max(...report.checks.map((c) => c.name.length), 5);
  const lines = report.checks.map((c) => `${c.status.padEnd(5)} ${c.name.padEnd(width)}  ${c.detail}`);
  const failed = report.checks.filter((c) => c.status === 'FAIL').length;
  const warned = report.checks.filter((c) => c.status === 'warn').length;
  const notes = warned > 0 ? `, ${warned} warning${warned === 1 ? '' : 's'}` : '';
  lines.push(
    failed > 0
      ? `${failed} of ${report.checks.length} checks failed${notes}`
      : `all ${report.checks.length} checks passed${notes}`,
  );
  return `${lines.join('\n')}\n`;
}

/**
 * A duration for people: `850ms`, `12.3s`, `4m05s`, `2h10m`; `-` when there is none.
 * @param {number | null | undefined} ms
 */
function formatAge(ms) {
  if (ms === null || ms === undefined) return '-';
  if (ms < 1000) return `${Math.round(ms)}ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)}s`;
  const minutes = Math.floor(ms / 60000);
  if (minutes < 60) return `${minutes}m${String(Math.floor((ms % 60000) / 1000)).padStart(2, '0')}s`;
  return `${Math.floor(minutes / 60)}h${String(minutes % 60).padStart(2, '0')}m`;
}

/**
 * Rates per queue between two samples, in messages per second: `in` from the messages added
 * since the previous sample, `out` from what left the backlog (`added - Δbacklog`).
 * @param {{ queues: { name: string, backlog: number }[] } | undefined} previous
 * @param {{ queues: { name: string, added?: number | null, backlog: number }[] }} current
 * @param {number} seconds between the samples
 * @returns {Map<string, { added: number, removed: number, inPerSec: number, outPerSec: number }>}
 */
function ratesBetween(previous, current, seconds) {
  const rates = new Map();
  if (previous === undefined || !(seconds > 0)) return rates;
  const before = new Map(previous.queues.map((q) => [q.name, q.backlog]));
  for (const q of current.queues) {
    if (q.added === null || q.added === undefined) continue;
    const removed = Math.max(0, (before.get(q.name) ?? 0) + q.added - q.backlog);
    rates.set(q.name, { added: q.added, removed, inPerSec: q.added / seconds, outPerSec: removed / seconds });
  }
  return rates;
}

/**
 * A sample as the JSON the CLI prints (one document; one per line with --watch, where each
 * queue also carries what was added and removed since the previous sample and the rates,
 * null on the first sample).
 * @param {{ queues: object[] }} sample
 * @param {Map<string, { added: number, removed: number, inPerSec: number, outPerSec: number }>} [rates]
 */
function statsDocument(sample, rates) {
  const flow = (name) => {
    const r = rates.get(name);
    return {
      added: r?.added ?? null,
      removed: r?.removed ?? null,
      inPerSec: r?.inPerSec ?? null,
      outPerSec: r?.outPerSec ?? null,
    };
  };
  return {
    at: new Date().toISOString(),
    queues: sample.queues.map((q) => ({
      name: q.name,
      ready: q.ready,
      delayed: q.delayed,
      inFlight: q.inFlight,
      oldestReadyAgeMs: q.oldestReadyAgeMs ?? null,
      ...(rates === undefined ? {} : flow(q.name)),
    })),
  };
}

/**
 * A sample as a text table; with `rates`, two more columns.
 * @param {{ queues: object[] }} sample
 * @param {Map<string, { inPerSec: number, outPerSec: number }>} [rates]
 * @returns {string}
 */
function formatStats(sample, rates) {
  const header = ['queue', 'ready', 'delayed', 'in flight', 'oldest ready'];
  if (rates !== undefined) header.push('in/s', 'out/s');
  const rate = (value) => (value === undefined ? '-' : value.toFixed(1));
  const rows = sample.queues.map((q) => {
    const row = [q.name, String(q.ready), String(q.delayed), String(q.inFlight), formatAge(q.oldestReadyAgeMs)];
    if (rates !== undefined) row.push(rate(rates.get(q.name)?.inPerSec), rate(rates.get(q.name)?.outPerSec));
    return row;
  });
  if (rows.length === 0) return '(no messages)\n';
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (cells) => cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join('  ');
  return `${[line(header), ...rows.map(line)].join('\n')}\n`;
}

module.exports = { formatChecks, formatStats, formatAge, ratesBetween, statsDocument, messageOf };
