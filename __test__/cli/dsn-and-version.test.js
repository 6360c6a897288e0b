'use strict';

// Where the CLI takes its DSN from: `--dsn`, else MESSENGER_DSN, else DATABASE_URL (so a
// password can stay out of `ps` and the shell's history), and `--version`.

const fs = require('node:fs');
const path = require('node:path');
const { spawn } = require('node:child_process');
const { postgres, redis } = require('../../bench/engines');
const { runCli, jsonOf, detailOf, uniqueName } = require('./cli-support');

jest.setTimeout(30000);

const BIN = path.join(__dirname, '..', '..', 'bin', 'nestjs-messenger-native.js');
const { version } = require('../../package.json');
/** Nothing listens there: a DSN on it fails its connect check. */
const NOWHERE = 'redis://127.0.0.1:1';

describe('the DSN from the environment', () => {
  test('MESSENGER_DSN stands in for --dsn', async () => {
    const run = await runCli(['doctor', '--json'], { env: { MESSENGER_DSN: redis.dsn } });
    expect(run.code).toBe(0);
    expect(detailOf(jsonOf(run), 'connect')).toContain(redis.dsn);
  });

  test('DATABASE_URL is read when MESSENGER_DSN is not set', async () => {
    const run = await runCli(['doctor', '--json'], { env: { DATABASE_URL: redis.dsn } });
    expect(run.code).toBe(0);
    expect(detailOf(jsonOf(run), 'connect')).toContain(redis.dsn);
  });

  test('MESSENGER_DSN wins over DATABASE_URL, and --dsn over both', async () => {
    const fromVariable = await runCli(['doctor', '--json'], { env: { MESSENGER_DSN: redis.dsn, DATABASE_URL: NOWHERE } });
    expect(fromVariable.code).toBe(0);
    const fromFlag = await runCli(['doctor', '--dsn', redis.dsn, '--json'], { env: { MESSENGER_DSN: NOWHERE, DATABASE_URL: NOWHERE } });
    expect(fromFlag.code).toBe(0);
  });

  test('an empty variable counts as unset', async () => {
    const run = await runCli(['doctor', '--json'], { env: { MESSENGER_DSN: '', DATABASE_URL: redis.dsn } });
    expect(run.code).toBe(0);
  });

  test('with neither --dsn nor a variable, the usage error names both variables', async () => {
    const run = await runCli(['stats', '--table', 'x']);
    expect(run.code).toBe(2);
    expect(run.stderr).toContain('MESSENGER_DSN');
    expect(run.stderr).toContain('DATABASE_URL');
  });

  test('a password given in MESSENGER_DSN is in neither the command line nor the output', async () => {
    // PostgreSQL here trusts loopback connections: the password is carried, never checked.
    const dsn = postgres.dsn.replace('://postgres@', '://postgres:Env-Held-pw@');
    expect(dsn).toContain('Env-Held-pw');
    const table = uniqueName('nmn_envdsn');
    const child = spawn(process.execPath, [BIN, 'stats', '--table', table, '--watch', '100ms', '--count', '1', '--json'], {
      env: { ...process.env, MESSENGER_DSN: dsn, DATABASE_URL: '' },
    });
    const cmdline = fs.readFileSync(`/proc/${child.pid}/cmdline`, 'utf8');
    let output = '';
    child.stdout.on('data', (chunk) => (output += chunk));
    child.stderr.on('data', (chunk) => (output += chunk));
    const code = await new Promise((resolve) => child.on('close', resolve));
    expect(cmdline).toContain('stats');
    expect(cmdline).not.toContain('Env-Held-pw');
    // The table does not exist: the command fails, naming the target with the password redacted.
    expect(code).toBe(1);
    expect(output).toContain(table);
    expect(output).not.toContain('Env-Held-pw');
  });
});

describe('--version', () => {
  test.each([[['--version']], [['-v']], [['doctor', '--version']]])('%j prints the package version', async (args) => {
    const run = await runCli(args);
    expect(run.code).toBe(0);
    expect(run.stdout).toBe(`${version}\n`);
  });
});
