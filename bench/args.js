'use strict';

// The benchmark's command line, parsed with node:util parseArgs like the CLI's (strict: an
// unknown option, a missing value or an unknown engine is an error before any run starts).

const { parseArgs: parseNodeArgs } = require('node:util');
const { ENGINES } = require('./engines');

const USAGE = `Usage: node bench/index.js [--rounds <n>] [--engines <a,b>] [--deep <n>] [--soak <n>] [--no-limits]
       [--processes <a,b>] [--scale-messages <n>] [--queues <a,b>] [--idle-ms <n>] [--no-scale]

  --rounds          rounds of every workload (default 3)
  --engines         comma-separated, of ${Object.keys(ENGINES).join(', ')} (default all)
  --deep            messages of the B1-at-depth run, 0 for none (default 100000)
  --soak            messages of the soak run, 0 for none (default 0; 1000000 is the usual soak)
  --no-limits       leave out the engine-limits section
  --processes       B6: consumer process counts on one queue, comma-separated (default 1,2,4,8);
                    the largest also runs with a queue per process
  --scale-messages  B6: messages each of its runs drains (default 20000)
  --queues          B7: queue counts of the many-queues runs, comma-separated (default 50,200)
  --idle-ms         B7: how long the queues idle while CPU is measured (default 10000)
  --no-scale        leave out B6 and B7
`;

const OPTIONS = {
  rounds: { type: 'string', default: '3' },
  engines: { type: 'string' },
  deep: { type: 'string', default: '100000' },
  soak: { type: 'string', default: '0' },
  'no-limits': { type: 'boolean' },
  processes: { type: 'string', default: '1,2,4,8' },
  'scale-messages': { type: 'string', default: '20000' },
  queues: { type: 'string', default: '50,200' },
  'idle-ms': { type: 'string', default: '10000' },
  'no-scale': { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
};

function count(name, text, min) {
  const n = Number(text);
  if (text.trim() === '' || !Number.isInteger(n) || n < min) {
    throw new Error(`--${name} must be an integer ≥ ${min}, not ${JSON.stringify(text)}\n${USAGE}`);
  }
  return n;
}

/** A comma-separated list of integers ≥ `min`, each once, in the order given. */
function counts(name, text, min) {
  const parts = text.split(',').map((part) => part.trim());
  if (parts.some((part) => part === '')) {
    throw new Error(`--${name} takes integers ≥ ${min} separated by commas, not ${JSON.stringify(text)}\n${USAGE}`);
  }
  return [...new Set(parts.map((part) => count(name, part, min)))];
}

/**
 * Parses the benchmark's command line.
 * @param {string[]} argv without node and the script
 * @returns {{ help: true } | { help: false, rounds: number, engines: string[], deep: number, soak: number, limits: boolean, processes: number[], scaleMessages: number, queues: number[], idleMs: number, scale: boolean }}
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
    processes: counts('processes', values.processes, 1),
    scaleMessages: count('scale-messages', values['scale-messages'], 1),
    queues: counts('queues', values.queues, 1),
    idleMs: count('idle-ms', values['idle-ms'], 0),
    scale: values['no-scale'] !== true,
  };
}

module.exports = { parseArgs, USAGE };
