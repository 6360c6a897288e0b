#!/usr/bin/env node
'use strict';

// `npx nestjs-messenger-native doctor|stats [--dsn …]` (or the DSN in MESSENGER_DSN /
// DATABASE_URL): see `--help` and docs/operations.md. Exit codes: 0 ok, 1 a check failed (or stats could not
// sample), 2 bad usage.

const { parseCommandLine, UsageError, USAGE } = require('../lib/cli/args');

async function main(argv) {
  let parsed;
  try {
    parsed = parseCommandLine(argv);
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    process.stderr.write(`${error.message}\n\n${USAGE}\n`);
    return 2;
  }
  if (parsed.command === 'help') {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  if (parsed.command === 'version') {
    process.stdout.write(`${require('../package.json').version}\n`);
    return 0;
  }
  // Loaded after the arguments are checked: a usage error needs no native addon.
  const { runDoctor, runStats } = require('../lib/cli/commands');
  const io = { out: process.stdout, err: process.stderr };
  if (parsed.command === 'doctor') return runDoctor(parsed.options, io);
  const stop = new AbortController();
  process.once('SIGINT', () => stop.abort());
  return runStats(parsed.options, { ...io, signal: stop.signal });
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (error) => {
    process.stderr.write(`${error?.message ?? String(error)}\n`);
    process.exitCode = 1;
  },
);
