'use strict';

// The benchmark's command line, parsed with node:util parseArgs like the CLI's (strict: an
// unknown option, a missing value or an unknown engine is an error before any run starts).

const { parseArgs: parseNodeArgs } = require('node:util');
const { ENGINES } = require('./engines');

const USAGE = `Usage: node bench/index.js [--rounds <n>] [--engines <a,b>] [--deep <n>] [--soak <n>] [--no-limits]

  --rounds     rounds of every workload (default 3)
  --engines    comma-separated, of ${Object.keys(ENGINES).join(', ')} (default all)
  --deep       messages of the B1-at-depth run, 0 for none (default 100000)
  --soak       messages of the soak run, 0 for none (default 0; 1000000 is the usual soak)
  --no-limits  leave out the engine-limits section
`;

const OPTIONS = {
  rounds: { type: 'string', default: '3' },
  engines: { type: 'string' },
  deep: { type: 'string', default: '100000' },
  soak: { type: 'string', default: '0' },
  'no-limits': { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
};

function count(name, text, min) {
  const n = Number(text);
  if (text.trim() === '' || !Number.isInteger(n) || n < min) {
    throw new Error(`--${name} must be an integer ≥ ${min}, not ${JSON.stringify(text)}\n${USAGE}`);
  }
  return n;
}

/**
 * Parses the benchmark's command line.
 * @param {string[]} argv without node and the script
 * @returns {{ help: true } | { help: false, rounds: number, engines: string[], deep: number, soak: number, limits: boolean }}
 * @throws {Error} with the usage in its message
 */
function parseArgs(argv) {
  let values;
  try {
    ({ values } = parseNodeArgs({ args: argv, options: OPTIONS, strict: true, allowPositionals: false }));
  } catch (error) {
    throw new Error(`${error.message}\n${USAGE}`, { cause: error });
  }
  if (values.help) return { help: true };
  const engines = values.engines === undefined ? Object.keys(ENGINES) : values.engines.split(',').filter(Boolean);
  const unknown = engines.find((engine) => ENGINES[engine] === undefined);
  if (unknown !== undefined || engines.length === 0) {
    throw new Error(`--engines takes ${Object.keys(ENGINES).join(', ')}, not ${JSON.stringify(values.engines)}\n${USAGE}`);
  }
  return {
    help: false,
    rounds: count('rounds', values.rounds, 1),
    engines,
    deep: count('deep', values.deep, 0),
    soak: count('soak', values.soak, 0),
    limits: values['no-limits'] !== true,
  };
}

module.exports = { parseArgs, USAGE };
