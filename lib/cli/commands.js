'use strict';

// lib/cli/: the `nestjs-messenger-native` command line (bin/) over the addon's diagnostics:
// the command line's syntax (args.js), the two commands (this file), what they print
// (format.js) and the addon's own DSN redaction (redact-dsn.js, which the demo uses too). It
// reaches the addon only through native/ and never loads the core, so it runs without an app.

// The CLI's two commands over the native diagnostics (src/diagnostics/): each returns the
// process exit code and writes only through the `out`/`err` streams it is given.

const { doctor, queueStats } = require('../native/addon');
const { formatChecks, formatStats, messageOf, ratesBetween, statsDocument } = require('./format');

/** Exit codes: all checks passed / a check failed or the command could not run / bad usage. */
const EXIT = Object.freeze({ OK: 0, FAILED: 1, USAGE: 2 });

/**
 * @typedef {object} CliOptions
 * @property {string} dsn
 * @property {string} [table]
 * @property {string} [queue]
 * @property {string} [stream]
 * @property {string} [group]
 * @property {string} [delayKey]
 * @property {boolean} cluster
 * @property {boolean} [autoSetup] doctor: the transports create a missing table (default true)
 * @property {number} [connectTimeoutMs]
 * @property {boolean} json
 * @property {number} [watchMs]
 * @property {number} [count]
 */

/** The native options of `options` (undefined keys left out). */
function nativeOptions(options, keys) {
  const picked = {};
  for (const key of keys) if (options[key] !== undefined) picked[key] = options[key];
  return picked;
}

/**
 * `doctor`: every check of the DSN's engine, as lines or one JSON document.
 * @param {CliOptions} options
 * @param {{ out: NodeJS.WritableStream, err: NodeJS.WritableStream }} io
 * @returns {Promise<number>} the exit code
 */
async function runDoctor(options, io) {
  let report;
  try {
    report = await doctor(
      nativeOptions(options, ['dsn', 'table', 'queue', 'stream', 'group', 'delayKey', 'cluster', 'connectTimeoutMs', 'autoSetup']),
    );
  } catch (error) {
    io.err.write(`doctor: ${messageOf(error)}\n`);
    return EXIT.USAGE;
  }
  io.out.write(options.json ? `${JSON.stringify({ ok: report.ok, checks: report.checks })}\n` : formatChecks(report));
  return report.ok ? EXIT.OK : EXIT.FAILED;
}

const sleep = (ms, signal) =>
  new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => {
      clearTimeout(timer);
      resolve();
    }, { once: true });
  });

/**
 * `stats`: one sample, or with `watchMs` one every interval (until `count` samples are printed
 * or `signal` aborts) with the rates between successive samples. A failed sample while
 * watching is reported on `err` and sampling goes on (a restarting server comes back); only
 * the first sample's failure ends the command, since that is a wrong DSN or target rather
 * than a server going away.
 * @param {CliOptions} options
 * @param {{ out: NodeJS.WritableStream, err: NodeJS.WritableStream, signal?: AbortSignal }} io
 * @returns {Promise<number>} the exit code
 */
async function runStats(options, io) {
  const signal = io.signal ?? new AbortController().signal;
  const base = nativeOptions(options, ['dsn', 'table', 'queue', 'stream', 'group', 'delayKey', 'cluster', 'connectTimeoutMs']);
  const watching = options.watchMs !== undefined;
  let previous;
  let previousAt = 0;
  let printed = 0;
  for (;;) {
    let sample;
    const at = Date.now();
    try {
      sample = await queueStats({ ...base, ...(previous?.cursor ? { cursor: previous.cursor } : {}) });
    } catch (error) {
      if (!watching || previous === undefined) {
        io.err.write(`stats: ${messageOf(error)}\n`);
        return EXIT.FAILED;
      }
      io.err.write(`${new Date(at).toISOString()} stats: ${messageOf(error)} (sampling goes on)\n`);
    }
    if (sample !== undefined) {
      const rates = watching ? ratesBetween(previous, sample, (at - previousAt) / 1000) : undefined;
      if (options.json) {
        io.out.write(`${JSON.stringify(statsDocument(sample, rates))}\n`);
      } else {
        if (watching) io.out.write(`${new Date(at).toISOString()}\n`);
        io.out.write(formatStats(sample, rates));
      }
      previous = sample;
      previousAt = at;
      printed += 1;
    }
    if (!watching || signal.aborted || (options.count !== undefined && printed >= options.count)) return EXIT.OK;
    await sleep(options.watchMs, signal);
    if (signal.aborted) return EXIT.OK;
  }
}

module.exports = { runDoctor, runStats, EXIT };
