'use strict';

// The demo's command line, parsed with node:util parseArgs like the CLI's (strict: an unknown
// option or a missing value is an error, never silently taken as the next option).

const { parseArgs: parseNodeArgs } = require('node:util');
const { sqlite } = require('../bench/engines');

const USAGE = `Usage: npm run demo -- [--dsn <dsn>] [--messages <n>] [--delayed <fraction>] [--failing <fraction>]

  --dsn        any supported DSN (default: MESSENGER_DSN, else a new SQLite file in the temp directory)
  --messages   how many messages to send (default 3000)
  --delayed    fraction sent with a DelayStamp of 50-500 ms (default 0.1)
  --failing    fraction whose handler fails once and comes back through reject() (default 0.05)
`;

const OPTIONS = {
  dsn: { type: 'string' },
  messages: { type: 'string', default: '3000' },
  delayed: { type: 'string', default: '0.1' },
  failing: { type: 'string', default: '0.05' },
  help: { type: 'boolean', short: 'h' },
};

function fraction(name, value) {
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n) || n < 0 || n > 1) {
    throw new Error(`--${name} must be a number between 0 and 1`);
  }
  return n;
}

/**
 * Parses the demo's command line.
 * @param {string[]} argv without node and the script
 * @param {Record<string, string | undefined>} [env] where MESSENGER_DSN is read
 * @returns {{ help: true } | { help: false, dsn: string, messages: number, delayed: number, failing: number }}
 * @throws {Error} with the usage in its message, for a command line the demo cannot run
 */
function parseArgs(argv, env = process.env) {
  let values;
  try {
    ({ values } = parseNodeArgs({ args: argv, options: OPTIONS, strict: true, allowPositionals: false }));
  } catch (error) {
    throw new Error(`${error.message}\n${USAGE}`, { cause: error });
  }
  if (values.help) return { help: true };
  const messages = Number(values.messages);
  if (!(Number.isInteger(messages) && messages > 0)) throw new Error('--messages must be a positive integer');
  return {
    help: false,
    // The embedded default: a new SQLite file (the engine registry's own temporary DSN).
    dsn: values.dsn ?? (env.MESSENGER_DSN || sqlite.temporaryDsn('messenger-demo')),
    messages,
    delayed: fraction('delayed', values.delayed),
    failing: fraction('failing', values.failing),
  };
}

module.exports = { parseArgs, USAGE };
