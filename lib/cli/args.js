'use strict';

// The CLI's command line: `<command> [--dsn …] [options]`, parsed with node:util parseArgs
// (strict: an unknown option is a usage error), plus the `--watch` interval's syntax. The DSN
// may come from the environment instead, so that a password stays out of `ps` and the shell's
// history.

const { parseArgs } = require('node:util');

/** A command line the CLI cannot run: exit code 2 with the message and the usage. */
class UsageError extends Error {}

const COMMON = {
  dsn: { type: 'string' },
  table: { type: 'string' },
  queue: { type: 'string' },
  stream: { type: 'string' },
  group: { type: 'string' },
  'delayed-key': { type: 'string' },
  cluster: { type: 'boolean' },
  'connect-timeout': { type: 'string' },
  json: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
  version: { type: 'boolean', short: 'v' },
};

const OPTIONS = {
  doctor: { ...COMMON, 'no-auto-setup': { type: 'boolean' } },
  stats: { ...COMMON, watch: { type: 'string' }, count: { type: 'string' } },
};

/** Where the DSN is looked for when `--dsn` is not given, first found wins. */
const DSN_VARIABLES = ['MESSENGER_DSN', 'DATABASE_URL'];

const USAGE = `Usage:
  nestjs-messenger-native doctor [--dsn <dsn>] [--table <name>] [--queue <name>] [--no-auto-setup]
                                 [--stream <key> [--group <name>] [--delayed-key <key>]] [--cluster]
                                 [--connect-timeout <duration>] [--json]
  nestjs-messenger-native stats  [--dsn <dsn>] [--table <name>] [--queue <name>]
                                 [--stream <key> [--group <name>] [--delayed-key <key>]] [--cluster]
                                 [--watch <interval> [--count <n>]] [--json]
  nestjs-messenger-native --version

doctor: one line per check (ok / warn / FAIL); exit 0 when none fails, 1 when one does.
        A table not created yet is a warning (the transports create it on first use), a
        failure with --no-auto-setup (the transports run with autoSetup: false).
stats:  ready, delayed, in flight and oldest ready age per queue (SQL) or stream group (Redis);
        --watch 1s repeats and adds rates, and keeps sampling through a failed sample (a
        restart): the failure goes to stderr. --count counts the samples printed. Read-only.
Without --dsn, the DSN is read from MESSENGER_DSN, else DATABASE_URL: a password given there
stays out of \`ps\` and the shell's history.
Defaults are the transports': table messenger_messages, group messenger, delayed key <stream>:delayed.
Exit code 2: bad usage.`;

const UNITS = { ms: 1, s: 1000, m: 60000 };

/**
 * Milliseconds of a duration written `500ms`, `1s`, `1.5s`, `2m` or a bare number of ms.
 * @param {string} text
 * @param {string} option for the message
 * @returns {number}
 */
function parseDuration(text, option) {
  const match = /^(\d+(?:\.\d+)?)(ms|s|m)?$/.exec(text.trim());
  const ms = match === null ? NaN : Number(match[1]) * UNITS[match[2] ?? 'ms'];
  if (!Number.isFinite(ms) || ms <= 0) {
    throw new UsageError(`Invalid --${option} ${JSON.stringify(text)}: expected a duration such as 500ms, 1s or 2m.`);
  }
  return ms;
}

/**
 * The DSN of `--dsn`, else of the first non-empty variable of DSN_VARIABLES in `env`.
 * @param {string | undefined} flag
 * @param {Record<string, string | undefined>} env
 * @returns {string | undefined}
 */
function dsnFrom(flag, env) {
  if (flag !== undefined) return flag;
  for (const name of DSN_VARIABLES) {
    if (typeof env[name] === 'string' && env[name] !== '') return env[name];
  }
  return undefined;
}

/**
 * Parses `argv` (without node and the script).
 * @param {string[]} argv
 * @param {Record<string, string | undefined>} [env] where a DSN not given as `--dsn` is read
 * @returns {{ command: 'doctor' | 'stats' | 'help' | 'version', options: Record<string, unknown> }}
 * @throws {UsageError}
 */
function parseCommandLine(argv, env = process.env) {
  const [command, ...rest] = argv;
  if (command === undefined || command === '--help' || command === '-h' || command === 'help') {
    return { command: 'help', options: {} };
  }
  if (command === '--version' || command === '-v' || command === 'version') return { command: 'version', options: {} };
  const spec = OPTIONS[command];
  if (spec === undefined) throw new UsageError(`Unknown command ${JSON.stringify(command)}: use doctor or stats.`);
  let values;
  try {
    ({ values } = parseArgs({ args: rest, options: spec, strict: true, allowPositionals: false }));
  } catch (error) {
    throw new UsageError(error.message);
  }
  if (values.help) return { command: 'help', options: {} };
  if (values.version) return { command: 'version', options: {} };
  const dsn = dsnFrom(values.dsn, env);
  if (dsn === undefined || dsn === '') {
    throw new UsageError(`${command} needs --dsn <dsn>, or the DSN in ${DSN_VARIABLES.join(' or ')}.`);
  }
  const redis = /^rediss?:/i.test(dsn);
  const sqlOnly = ['table', 'queue'].filter((key) => values[key] !== undefined);
  const redisOnly = ['stream', 'group', 'delayed-key', 'cluster'].filter((key) => values[key] !== undefined);
  if (values['no-auto-setup'] !== undefined) sqlOnly.push('no-auto-setup');
  if (redis && sqlOnly.length > 0) throw new UsageError(`--${sqlOnly[0]} applies to SQL DSNs, not to Redis.`);
  if (!redis && redisOnly.length > 0) throw new UsageError(`--${redisOnly[0]} applies to Redis DSNs only.`);
  if (redis && command === 'stats' && values.stream === undefined) throw new UsageError('stats on Redis needs --stream <key>.');
  if (values.count !== undefined && values.watch === undefined) throw new UsageError('--count applies to --watch.');
  const count = values.count === undefined ? undefined : Number(values.count);
  if (count !== undefined && !(Number.isInteger(count) && count > 0)) {
    throw new UsageError(`Invalid --count ${JSON.stringify(values.count)}: expected a positive integer.`);
  }
  return {
    command,
    options: {
      dsn,
      table: values.table,
      queue: values.queue,
      stream: values.stream,
      group: values.group,
      delayKey: values['delayed-key'],
      cluster: values.cluster === true,
      autoSetup: values['no-auto-setup'] !== true,
      connectTimeoutMs:
        values['connect-timeout'] === undefined ? undefined : parseDuration(values['connect-timeout'], 'connect-timeout'),
      json: values.json === true,
      watchMs: values.watch === undefined ? undefined : parseDuration(values.watch, 'watch'),
      count,
    },
  };
}

module.exports = { parseCommandLine, parseDuration, UsageError, USAGE, DSN_VARIABLES };
