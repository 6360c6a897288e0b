'use strict';

// SQLite as the shared suites see it: the registry's engine (bench/engines.js) plus raw row
// access through the sqlite3 CLI (another process, as another writer would be; the cases that
// need it fail, never skip, with an install hint when it is missing) and the words, DSN forms
// and option values its cases use. Every test file runs on a file of its own.

const fs = require('node:fs');
const path = require('node:path');
const { sqlite: engine, uniqueName } = require('../../../bench/engines');
const { settleWithin, transportOperations } = require('../transport-helpers');

const { lit, NOW } = engine;

/** Milliseconds since the epoch of a stored `YYYY-MM-DD HH:MM:SS.SSS` UTC text. */
function utcMs(text) {
  return Date.parse(`${text.replace(' ', 'T')}Z`);
}

/** Test-side raw access on the file of `dsn`: the registry's CLI access plus inspection in SQLite's SQL. */
function testAdmin(dsn) {
  const admin = engine.admin(dsn);
  const { query } = admin;

  /** Rows <prefix>-<g> for g = 1 … count, one multi-row INSERT; `times(g)` gives created_at, available_at. */
  async function insertMany(table, queueName, count, headers, prefix, times) {
    const values = [];
    for (let g = 1; g <= count; g += 1) {
      const [created, available] = times(g);
      values.push(`(${lit(queueName)}, ${lit(`{"id":"${prefix}-${g}","payload":""}`)}, ${lit(headers)}, ${created}, ${available})`);
    }
    await query(`INSERT INTO ${table} (queue_name, body, headers, created_at, available_at) VALUES ${values.join(', ')};`);
  }

  return {
    ...admin,
    async lapseClaim(table, id) {
      await query(
        `UPDATE ${table} SET delivered_at = strftime('%Y-%m-%d %H:%M:%f', 'now', '-1 hours') WHERE id = ${Number(id)};`,
      );
    },
    async isStale(table, id) {
      const [row] = await query(`SELECT delivered_at < ${NOW} AS stale FROM ${table} WHERE id = ${Number(id)};`);
      return row !== undefined && row.stale === 1;
    },
    async storedBody(table, id) {
      const [row] = await query(`SELECT hex(body) AS hex, typeof(body) AS type FROM ${table} WHERE id = ${Number(id)};`);
      return { bytes: Buffer.from(row.hex, 'hex'), storageClass: row.type };
    },
    async storedRows(table, queueName) {
      const rows = await query(
        `SELECT CAST(id AS TEXT) AS id, queue_name, body, headers, created_at, available_at, delivered_at,
                ROUND((julianday('now') - julianday(created_at)) * 86400000) AS age_ms
           FROM ${table} WHERE queue_name = ${lit(queueName)} ORDER BY ${table}.id;`,
      );
      return rows.map(({ age_ms: ageMs, ...row }) => ({
        ...row,
        delayMs: utcMs(row.available_at) - utcMs(row.created_at),
        ageMs,
      }));
    },
    storedBodies(table, queueName) {
      return query(
        `SELECT CAST(id AS TEXT) AS id, json_extract(body, '$.id') AS mid, length(CAST(body AS BLOB)) AS bytes
           FROM ${table} WHERE queue_name = ${lit(queueName)} ORDER BY ${table}.id;`,
      );
    },
    insertTied: (table, queueName, count, headers) =>
      insertMany(table, queueName, count, headers, 'f', () => ["'2000-01-01 00:00:00.000'", "'2000-01-01 00:00:00.000'"]),
    insertSpread: (table, queueName, count, headers) =>
      insertMany(table, queueName, count, headers, 'bulk', (g) => [
        NOW,
        `strftime('%Y-%m-%d %H:%M:%f', 'now', '+${(g / 1000).toFixed(3)} seconds')`,
      ]),
    async expectUpstreamSchema(table) {
      const columns = await query(`PRAGMA table_info(${table});`);
      expect(columns.map((c) => [c.name, c.type, c.notnull, c.pk])).toEqual([
        ['id', 'INTEGER', 0, 1],
        ['body', 'TEXT', 1, 0],
        ['headers', 'TEXT', 1, 0],
        ['queue_name', 'VARCHAR(190)', 1, 0],
        ['created_at', 'TEXT', 1, 0],
        ['available_at', 'TEXT', 1, 0],
        ['delivered_at', 'TEXT', 0, 0],
      ]);
      const [ddl] = await query(`SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ${lit(table)};`);
      expect(ddl.sql).toMatch(/id INTEGER PRIMARY KEY AUTOINCREMENT/);
      const index = await query(`PRAGMA index_info(${table}_claim_idx);`);
      expect(index.map((c) => c.name)).toEqual(['queue_name', 'available_at', 'delivered_at', 'id']);
    },
    /**
     * Another process holds the write lock, so the DELETE of the ack that `startAck()` starts
     * waits (busy timeout); that process drops the table in its transaction and commits, and
     * the DELETE then finds no table. Resolves what the ack settled to.
     */
    async dropTableUnderBlockedDelete(table, startAck) {
      const lock = await admin.holdWriteLock();
      const acked = startAck();
      // No way to see the DELETE waiting from outside: give it time to start and block.
      await settleWithin(acked, 300);
      await lock.release(`DROP TABLE ${table};\n`);
      return acked;
    },
  };
}

const sqlite = {
  ...engine,
  get Transport() {
    return require('../../..').SqlTransport;
  },
  target: (prefix = 'q') => ({ queueName: uniqueName(prefix) }),
  /** Nothing to remove one by one: the file goes whole with its directory. */
  removeTarget: async () => {},
  operations: () => transportOperations(),
  errorLabel: 'SQLite',
  /** `error.cause` as better-sqlite3 shapes it: the result code's name as `code`. */
  missingTableCause: { code: 'SQLITE_ERROR' },
  requireServer: async () => {},
  rawAccess: () => engine.hasCli(),
  /** A private file for one test file. */
  runDsn: (prefix) => engine.temporaryDsn(prefix),
  removeRunDsn: (dsn) => fs.rmSync(path.dirname(dsn.slice('sqlite://'.length)), { recursive: true, force: true }),
  /** The same file under another DSN string: a pool of its own, whose sends wake nobody else. */
  otherDsn: (dsn) => {
    const file = dsn.slice('sqlite://'.length);
    return `sqlite://${path.dirname(file)}/./${path.basename(file)}`;
  },
  testAdmin,

  schemaQualifiedTable: 'main.messages',
  storageNoun: 'file',
  otherDsnNoun: 'another DSN string',
  storesTextTimes: true,
  concurrentSendSize: { kb: 20, why: '' },
  longQueueNames: [['', '中']],
  invalidDsns: [],
  dsnForms: (dsn) => [
    ['a file DSN', dsn],
    ['sqlite://:memory:', 'sqlite://:memory:'],
  ],
  titles: {
    idsNeverReused: 'never reuses an id while the table exists (AUTOINCREMENT)',
  },

  tagDsn: (dsn) => dsn,
  childDsns: (dsn) => [
    [' (a file)', dsn],
    [' (sqlite://:memory:)', 'sqlite://:memory:'],
  ],
};

module.exports = { sqlite };
