'use strict';

// `doctor` on PostgreSQL, MariaDB and SQLite, run as a child process: all checks pass on a
// table the transport set up; a table or file not created yet warns (autoSetup creates it) and
// fails with --no-auto-setup; a drifted table, a missing index, an unreachable server and a
// wrong password each give their FAIL and exit 1, and no password is ever printed.

const fs = require('node:fs');
const { SqlTransport } = require('../..');
const { closedPort } = require('../support/ports');
const { mysql } = require('../../bench/engines');
const {
  runCli,
  jsonOf,
  verdicts,
  detailOf,
  sqliteDsn,
  removeTemp,
  SQL_ENGINES,
  uniqueName,
  tablesDroppedAfterAll,
} = require('./cli-support');

jest.setTimeout(30000);

afterAll(() => removeTemp());

/** A table of its own made by the transport's setup(); dropped after the file. */
async function transportTable(engine, dsn, tables) {
  const table = uniqueName('nmn_dr');
  tables.push({ dsn, table });
  const t = new SqlTransport({ dsn, tableName: table });
  await t.setup();
  await t.close();
  return table;
}

describe.each(SQL_ENGINES)('doctor on $name', (engine) => {
  const tables = tablesDroppedAfterAll(engine);

  /** doctor --json on a table of its own the transport set up, after `change(table)` (SQL) if given. */
  async function doctorJson(change) {
    const dsn = engine.dsn();
    const table = await transportTable(engine, dsn, tables);
    if (change) await engine.exec(dsn, change(table));
    const run = await runCli(['doctor', '--dsn', dsn, '--table', table, '--json']);
    return { table, run };
  }

  test('every check passes on a table the transport set up (exit 0, JSON shape)', async () => {
    const { table, run } = await doctorJson();
    expect(run.stderr).toBe('');
    const report = jsonOf(run);
    expect(Object.keys(report).sort()).toEqual(['checks', 'ok']);
    expect(report.checks.map((c) => c.name)).toEqual(engine.checks);
    for (const check of report.checks) {
      expect(Object.keys(check).sort()).toEqual(['detail', 'name', 'status']);
      expect(typeof check.detail).toBe('string');
    }
    expect(report.checks.filter((c) => c.status !== 'ok')).toEqual([]);
    expect(report.ok).toBe(true);
    expect(run.code).toBe(0);
    expect(detailOf(report, 'claim index')).toBe(`${table}_claim_idx (queue_name, available_at, delivered_at, id)`);
  });

  test('the text output has one line per check and a summary', async () => {
    const dsn = engine.dsn();
    const table = await transportTable(engine, dsn, tables);
    const run = await runCli(['doctor', '--dsn', dsn, '--table', table, '--queue', 'jobs']);
    const lines = run.stdout.trim().split('\n');
    expect(lines).toHaveLength(engine.checks.length + 2); // + the queue line + the summary
    expect(lines[lines.length - 2]).toMatch(/^ok +queue +jobs: no messages$/);
    expect(lines[lines.length - 1]).toBe(`all ${engine.checks.length + 1} checks passed`);
    expect(run.code).toBe(0);
  });

  test('a drifted table (a column missing, one of another type) fails naming both (exit 1)', async () => {
    const { run } = await doctorJson(engine.dropColumnAndRetype);
    const report = jsonOf(run);
    expect(verdicts(report)).toMatchObject({ table: 'ok', columns: 'FAIL', 'claim index': 'ok' });
    expect(detailOf(report, 'columns')).toBe(`missing column headers; ${engine.wrongType}`);
    expect(report.ok).toBe(false);
    expect(run.code).toBe(1);
  });

  test('a missing claim index fails naming it (exit 1)', async () => {
    const { table, run } = await doctorJson(engine.dropIndex);
    const report = jsonOf(run);
    expect(verdicts(report)).toMatchObject({ columns: 'ok', 'claim index': 'FAIL' });
    expect(detailOf(report, 'claim index')).toMatch(
      new RegExp(`^missing index ${table}_claim_idx \\(queue_name, available_at, delivered_at, id\\)`),
    );
    expect(run.code).toBe(1);
  });

  test('a table not created yet is a warning (autoSetup creates it), and is not created (exit 0)', async () => {
    const dsn = engine.dsn();
    if (engine.name === 'sqlite') await transportTable(engine, dsn, tables); // the file exists
    const table = uniqueName('nmn_none');
    const run = await runCli(['doctor', '--dsn', dsn, '--table', table, '--json']);
    const report = jsonOf(run);
    expect(verdicts(report).table).toBe('warn');
    expect(detailOf(report, 'table')).toBe(`table ${table} does not exist yet: a transport creates it on first use (autoSetup)`);
    expect(report.checks.map((c) => c.name)).not.toContain('columns');
    expect(run.code).toBe(0);
    expect(await engine.tableExists(dsn, table)).toBe(false);
  });

  test('with --no-auto-setup a missing table fails (exit 1)', async () => {
    const dsn = engine.dsn();
    if (engine.name === 'sqlite') await transportTable(engine, dsn, tables);
    const table = uniqueName('nmn_none');
    const run = await runCli(['doctor', '--dsn', dsn, '--table', table, '--no-auto-setup', '--json']);
    const report = jsonOf(run);
    expect(verdicts(report).table).toBe('FAIL');
    expect(detailOf(report, 'table')).toMatch(new RegExp(`^table ${table} does not exist, and autoSetup is off`));
    expect(run.code).toBe(1);
    expect(await engine.tableExists(dsn, table)).toBe(false);
  });
});

describe('doctor: failures before any table', () => {
  test.each([
    ['postgres', (port) => `postgres://postgres:Pg-S3cret-pw@127.0.0.1:${port}/test`],
    ['mysql', (port) => `mysql://root:My-S3cret-pw@127.0.0.1:${port}/test`],
    ['redis', (port) => `redis://default:Rd-S3cret-pw@127.0.0.1:${port}`],
  ])('%s: an unreachable host fails at once with exit 1 and no password shown', async (_name, dsnAt) => {
    const dsn = dsnAt(await closedPort());
    const password = /:([^:@]+)@/.exec(dsn)[1];
    const run = await runCli(['doctor', '--dsn', dsn, '--connect-timeout', '10s']);
    expect(run.code).toBe(1);
    expect(run.stdout).toMatch(/^FAIL +connect +connect to \w+:\/\/\w+:\*\*\*@127\.0\.0\.1:\d+/);
    expect(run.stdout.trim().split('\n')).toEqual([expect.stringMatching(/^FAIL/), '1 of 1 checks failed']);
    // Refused at once: nowhere near the 10 s connect timeout.
    expect(run.ms).toBeLessThan(5000);
    expect(`${run.stdout}${run.stderr}`).not.toContain(password);
  });

  test('sqlite: a file not made yet is a warning (exit 0), a failure with --no-auto-setup (exit 1), and is not created', async () => {
    const dsn = sqliteDsn('missing');
    const file = dsn.slice('sqlite://'.length);
    const fresh = await runCli(['doctor', '--dsn', dsn, '--json']);
    expect(jsonOf(fresh)).toEqual({
      ok: true,
      checks: [{ name: 'file', status: 'warn', detail: `${file} does not exist yet: a transport creates it on first use` }],
    });
    expect(fresh.code).toBe(0);
    const strict = await runCli(['doctor', '--dsn', dsn, '--no-auto-setup', '--json']);
    expect(jsonOf(strict)).toEqual({
      ok: false,
      checks: [{ name: 'file', status: 'FAIL', detail: `${file} does not exist (a transport creates it on first use)` }],
    });
    expect(strict.code).toBe(1);
    expect(fs.existsSync(file)).toBe(false);
  });

  test('a DSN of no supported scheme is one FAIL without its password (exit 1)', async () => {
    const run = await runCli(['doctor', '--dsn', 'ftp://u:Ftp-S3cret@h/x', '--json']);
    expect(jsonOf(run).checks).toEqual([expect.objectContaining({ name: 'dsn', status: 'FAIL' })]);
    expect(run.code).toBe(1);
    expect(`${run.stdout}${run.stderr}`).not.toContain('Ftp-S3cret');
  });

  describe('mysql: a wrong password', () => {
    const user = uniqueName('doctor_pw');
    const admin = mysql.admin();
    beforeAll(async () => {
      await admin.query(`CREATE USER '${user}'@'%' IDENTIFIED BY 'secret'`);
      await admin.query(`GRANT ALL ON test.* TO '${user}'@'%'`);
    });
    afterAll(async () => {
      await admin.query(`DROP USER IF EXISTS '${user}'@'%'`);
    });

    test('the right one connects', async () => {
      const run = await runCli(['doctor', '--dsn', `mysql://${user}:secret@127.0.0.1:3306/test`, '--json']);
      const report = jsonOf(run);
      expect(verdicts(report).connect).toBe('ok');
      expect(detailOf(report, 'connect')).toMatch(new RegExp(`^mysql://${user}:\\*\\*\\*@127\\.0\\.0\\.1:3306/test in \\d+ ms$`));
    });

    test('a wrong one fails the connect check (exit 1) and is printed nowhere', async () => {
      const wrong = 'Wr0ng-Pa55word';
      const dsn = `mysql://${user}:${wrong}@127.0.0.1:3306/test`;
      for (const args of [['doctor', '--dsn', dsn], ['doctor', '--dsn', dsn, '--json'], ['stats', '--dsn', dsn]]) {
        const run = await runCli(args);
        expect(run.code).toBe(1);
        const output = `${run.stdout}${run.stderr}`;
        expect(output).toMatch(/Access denied/);
        expect(output).not.toContain(wrong);
        expect(output).not.toContain('secret');
      }
    });
  });
});

describe('usage errors exit 2', () => {
  test.each([
    [['doctor']],
    [['doctor', '--dsn', 'postgres://postgres@127.0.0.1:5432/test', '--tabel', 'x']],
    [['doctor', '--dsn', 'postgres://postgres@127.0.0.1:5432/test', '--stream', 'x']],
    [['stats', '--dsn', 'redis://127.0.0.1:6379']],
    [['stats', '--dsn', 'sqlite://x.db', '--watch', 'soon']],
    [['frobnicate']],
  ])('%j', async (args) => {
    const run = await runCli(args);
    expect(run.code).toBe(2);
    expect(run.stdout).toBe('');
    expect(run.stderr).toContain('Usage:');
  });

  test('--help prints the usage and exits 0', async () => {
    const run = await runCli(['--help']);
    expect(run.code).toBe(0);
    expect(run.stdout).toContain('nestjs-messenger-native doctor [--dsn <dsn>]');
  });
});
