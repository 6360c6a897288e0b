'use strict';

const { sqlite } = require('../bench/engines');

const USAGE = `Usage: npm run demo -- [--dsn <dsn>] [--messages <n>] [--delayed <fraction>] [--failing <fraction>]

  --dsn        any supported DSN (default: a new SQLite file in the temp directory)
  --messages   how many messages to send (default 3000)
  --delayed    fraction sent with a DelayStamp of 50-500 ms (default 0.1)
  --failing    fraction whose handler fails once and comes back through reject() (default 0.05)
`;

function fraction(name, value) {
  const n = Number(value);
  if (!Number.isFinite(n) || n < 0 || n > 1) throw new Error(`--${name} must be a number between 0 and 1`);
  return n;
}

/** Parses the demo's command line. */
function parseArgs(argv) {
  const options = { dsn: undefined, messages: 3000, delayed: 0.1, failing: 0.05 };
  for (let i = 0; i < argv.length; i += 1) {
    const arg = argv[i];
    const value = argv[i + 1];
    if (arg === '--help' || arg === '-h') {
      process.stdout.write(USAGE);
      process.exit(0);
    } else if (arg === '--dsn') {
      options.dsn = value;
      i += 1;
    } else if (arg === '--messages') {
      options.messages = Number.parseInt(value, 10);
      if (!(options.messages > 0)) throw new Error('--messages must be a positive integer');
      i += 1;
    } else if (arg === '--delayed') {
      options.delayed = fraction('delayed', value);
      i += 1;
    } else if (arg === '--failing') {
      options.failing = fraction('failing', value);
      i += 1;
    } else {
      throw new Error(`Unknown argument ${arg}\n${USAGE}`);
    }
  }
  // The embedded default: a new SQLite file (the engine registry's own temporary DSN).
  options.dsn ??= sqlite.temporaryDsn('messenger-demo');
  return options;
}

module.exports = { parseArgs };
