'use strict';

// What the CLI tests share: the CLI run as a child process (`node bin/…`), exactly as a user
// runs it, and per SQL engine the DSN, raw statements for drifting a table, and clean-up.

const { execFile } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { postgres, mysql, sqlite, uniqueName } = require('../../bench/engines');
const { DSN_VARIABLES } = require('../../lib/cli/args');

const BIN = path.join(__dirname, '..', '..', 'bin', 'nestjs-messenger-native.js');

/**
 * Runs the CLI with `args`; resolves its exit code, output and wall time (never rejects for a
 * non-zero exit). The environment is this process's without a DSN variable (so a DSN set
 * where the tests run cannot stand in for a missing `--dsn`), plus `env`.
 * @param {string[]} args
 * @param {{ timeoutMs?: number, env?: Record<string, string> }} [options]
 * @returns {Promise<{ code: number, stdout: string, stderr: string, ms: number }>}
 */
function runCli(args, { timeoutMs = 30000, env = {} } = {}) {
  const started = Date.now();
  const inherited = Object.fromEntries(Object.entries(process.env).filter(([name]) => !DSN_VARIABLES.includes(name)));
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [BIN, ...args],
      { timeout: timeoutMs, encoding: 'utf8', env: { ...inherited, ...env } },
      (error, stdout, stderr) => {
        const code = error ? (typeof error.code === 'number' ? error.code : -1) : 0;
        resolve({ code, stdout, stderr, ms: Date.now() - started });
      },
    );
  });
}

/** The `--json` document of a run (asserting there is exactly one). */
function jsonOf(run) {
  const lines = run.stdout.trim().split('\n');
  expect(lines).toHaveLength(1);
  return JSON.parse(lines[0]);
}

/** `{ name: status }` of a doctor report. */
function verdicts(report) {
  return Object.fromEntries(report.checks.map((c) => [c.name, c.status]));
}

/** The detail of check `name`. */
function detailOf(report, name) {
  return report.checks.find((c) => c.name === name)?.detail;
}

/** The file's temporary directory for SQLite files, made on first use. */
let tempDir;
/** A SQLite file path of its own in a temporary directory (removed by `removeTemp`). */
function sqliteDsn(prefix = 'cli') {
  tempDir ??= fs.mkdtempSync(path.join(os.tmpdir(), 'nmn-cli-'));
  return `sqlite://${path.join(tempDir, `${uniqueName(prefix)}.db`)}`;
}
function removeTemp() {
  if (tempDir !== undefined) fs.rmSync(tempDir, { recursive: true, force: true });
  tempDir = undefined;
}

/**
 * The SQL engines as these tests drive them: the DSN (a file per call for SQLite), the check
 * names doctor prints in order, and raw statements in each dialect.
 */
const SQL_ENGINES = [
  {
    name: 'postgres',
    dsn: () => postgres.dsn,
    checks: ['connect', 'server version', 'clock', 'table', 'columns', 'claim index', 'skip locked', 'listen/notify'],
    exec: (dsn, sql) => postgres.admin(dsn).query(sql),
    dropColumnAndRetype: (t) => `ALTER TABLE ${t} DROP COLUMN headers; ALTER TABLE ${t} ALTER COLUMN available_at TYPE text`,
    wrongType: 'column available_at has type text, expected timestamp(3) with time zone',
    dropIndex: (t) => `DROP INDEX ${t}_claim_idx`,
    dropTable: (dsn, t) => postgres.admin(dsn).query(`DROP TABLE IF EXISTS ${t}`),
    tableExists: async (dsn, t) => (await postgres.admin(dsn).query('SELECT to_regclass($1) AS r', [t]))[0].r !== null,
  },
  {
    name: 'mysql',
    dsn: () => mysql.dsn,
    checks: ['connect', 'server version', 'clock', 'table', 'columns', 'claim index', 'skip locked', 'isolation'],
    exec: async (dsn, sql) => {
      for (const statement of sql.split('; ')) await mysql.admin(dsn).query(statement);
    },
    dropColumnAndRetype: (t) => `ALTER TABLE ${t} DROP COLUMN headers; ALTER TABLE ${t} MODIFY available_at VARCHAR(40) NOT NULL`,
    wrongType: 'column available_at has type varchar(40), expected datetime(3)',
    dropIndex: (t) => `DROP INDEX ${t}_claim_idx ON ${t}`,
    dropTable: (dsn, t) => mysql.admin(dsn).query(`DROP TABLE IF EXISTS ${t}`),
    tableExists: async (dsn, t) =>
      (await mysql.admin(dsn).query('SELECT COUNT(*) AS n FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?', [t]))[0].n > 0,
  },
  {
    name: 'sqlite',
    dsn: () => sqliteDsn(),
    checks: ['file', 'sqlite version', 'journal mode', 'table', 'columns', 'claim index'],
    exec: (dsn, sql) => sqlite.admin(dsn).query(`${sql};`),
    // SQLite cannot change a column's type: the drifted table is made again by hand.
    dropColumnAndRetype: (t) =>
      `DROP TABLE ${t}; CREATE TABLE ${t} (id INTEGER PRIMARY KEY AUTOINCREMENT, body TEXT NOT NULL, queue_name VARCHAR(190) NOT NULL, ` +
      `created_at TEXT NOT NULL, available_at INTEGER NOT NULL, delivered_at TEXT NULL); ` +
      `CREATE INDEX ${t}_claim_idx ON ${t} (queue_name, available_at, delivered_at, id)`,
    wrongType: 'column available_at has type integer, expected text',
    dropIndex: (t) => `DROP INDEX ${t}_claim_idx`,
    dropTable: async () => {},
    tableExists: async (dsn, t) =>
      fs.existsSync(dsn.slice('sqlite://'.length)) &&
      (await sqlite.admin(dsn).query(`SELECT name FROM sqlite_master WHERE type = 'table' AND name = '${t}';`)).length > 0,
  },
];

/**
 * For a describe on one of SQL_ENGINES: the list its tests add the tables they make to
 * (`{ dsn, table }`), each dropped once the describe's tests are done.
 */
function tablesDroppedAfterAll(engine) {
  const tables = [];
  afterAll(async () => {
    for (const { dsn, table } of tables) await engine.dropTable(dsn, table);
  });
  return tables;
}

module.exports = { runCli, jsonOf, verdicts, detailOf, sqliteDsn, removeTemp, SQL_ENGINES, uniqueName, tablesDroppedAfterAll };
