'use strict';

// PostgreSQL as the shared suites see it: the registry's engine (bench/engines.js) plus raw
// row access in its own SQL (stored formats, the upstream schema, tied rows) and the words,
// DSN forms and option values its cases use.

const { postgres: engine, requireServer, uniqueName } = require('../../../bench/engines');
const { startPasswordCluster } = require('../pg-cluster');
const { transportOperations } = require('../transport-helpers');
const { dsnWith } = require('./dsn');

/** Test-side raw access on `dsn`: the registry's admin connection plus inspection in PostgreSQL's SQL. */
function testAdmin(dsn = engine.dsn) {
  const admin = engine.admin(dsn);
  const { query } = admin;
  return {
    ...admin,
    /** Whether the row's delivered_at lies behind the database clock (a stale claim). */
    async isStale(table, id) {
      const [row] = await query(`SELECT delivered_at < now() AS stale FROM ${table} WHERE id = $1::bigint`, [id]);
      return row?.stale === true;
    },
    /** The stored body's exact bytes and the type it is stored as. */
    async storedBody(table, id) {
      const [row] = await query(
        `SELECT encode(convert_to(body, 'UTF8'), 'hex') AS hex, pg_typeof(body)::text AS type FROM ${table} WHERE id = $1::bigint`,
        [id],
      );
      return { bytes: Buffer.from(row.hex, 'hex'), storageClass: row.type };
    },
    /** The queue's rows with available_at - created_at and now - created_at in ms (database clock). */
    async storedRows(table, queueName) {
      const rows = await query(
        `SELECT id::text AS id, queue_name, body, headers, delivered_at,
                (extract(epoch FROM available_at - created_at) * 1000)::float8 AS delay_ms,
                (extract(epoch FROM now() - created_at) * 1000)::float8 AS age_ms
           FROM ${table} WHERE queue_name = $1 ORDER BY ${table}.id`,
        [queueName],
      );
      return rows.map(({ delay_ms: delayMs, age_ms: ageMs, ...row }) => ({ ...row, delayMs, ageMs }));
    },
    /** Per row of the queue in id order: its id, the body's "id" and the body's size in bytes. */
    storedBodies(table, queueName) {
      return query(
        `SELECT id::text AS id, body::json->>'id' AS mid, octet_length(body) AS bytes
           FROM ${table} WHERE queue_name = $1 ORDER BY ${table}.id`,
        [queueName],
      );
    },
    /** `count` rows f-1 … f-<count> written by one statement (they share available_at). */
    async insertTied(table, queueName, count, headers) {
      await query(
        `INSERT INTO ${table} (queue_name, body, headers, available_at)
         SELECT $1, format('{"id":"f-%s","payload":""}', g), $2, now() FROM generate_series(1, $3::int) AS g`,
        [queueName, headers, count],
      );
    },
    /** `count` rows bulk-1 … bulk-<count>, each due 1 ms after the one before. */
    async insertSpread(table, queueName, count, headers) {
      await query(
        `INSERT INTO ${table} (queue_name, body, headers, available_at)
         SELECT $1, format('{"id":"bulk-%s","payload":""}', g), $2, now() + g * interval '1 millisecond'
           FROM generate_series(1, $3::int) AS g`,
        [queueName, headers, count],
      );
    },
    /** Asserts (jest) that `table` has exactly upstream's columns and claim index. */
    async expectUpstreamSchema(table) {
      const columns = await query(
        `SELECT column_name, data_type, is_nullable FROM information_schema.columns
          WHERE table_name = $1 ORDER BY ordinal_position`,
        [table],
      );
      expect(columns.map((c) => [c.column_name, c.data_type, c.is_nullable])).toEqual([
        ['id', 'bigint', 'NO'],
        ['body', 'text', 'NO'],
        ['headers', 'text', 'NO'],
        ['queue_name', 'character varying', 'NO'],
        ['created_at', 'timestamp with time zone', 'NO'],
        ['available_at', 'timestamp with time zone', 'NO'],
        ['delivered_at', 'timestamp with time zone', 'YES'],
      ]);
      const indexes = await query('SELECT indexdef FROM pg_indexes WHERE indexname = $1', [`${table}_claim_idx`]);
      expect(indexes).toHaveLength(1);
      expect(indexes[0].indexdef).toContain('(queue_name, available_at, delivered_at, id)');
    },
  };
}

const postgres = {
  ...engine,
  /** The transport class of the engine. */
  get Transport() {
    return require('../../..').SqlTransport;
  },
  /** Options naming a queue of its own. */
  target: () => ({ queueName: uniqueName('q') }),
  /** How the transport names the engine in its error messages. */
  errorLabel: 'PostgreSQL',
  requireServer: () => requireServer(engine),
  /** Whether raw access works here (it always does on a server). */
  rawAccess: () => true,
  /** The database a test file runs on (the shared one). */
  runDsn: () => engine.dsn,
  removeRunDsn: () => {},
  /** The same database under another DSN string: a pool (and LISTEN connection) of its own. */
  otherDsn: (dsn) => dsnWith(dsn, { params: { application_name: 'nmn_other' } }),
  /** The engine's DSN with some parts replaced (a closed port, a user, a password …). */
  dsnWith: (parts) => dsnWith(engine.dsn, parts),
  testAdmin,

  // The words and values the shared cases take from the engine.
  schemaQualifiedTable: 'public.messages',
  storageNoun: 'table',
  otherDsnNoun: 'another DSN',
  storesTextTimes: false,
  concurrentSendSize: { kb: 120, why: '' },
  longQueueNames: [['', 'x']],
  invalidDsns: [
    ['a malformed DSN', 'not a dsn'],
    ['an empty DSN', ''],
    ['a missing DSN', undefined],
    ['a host that is not a URL', 'postgres://u:p@[bad'],
  ],
  /** The DSN spellings of one database (only asked of engines without push wake-up). */
  dsnForms: () => [],
  /** Every operation that reaches the server, by name. */
  operations: () => transportOperations(),
  /** What a server that never answers is asked for the default connect timeout. */
  silentServerOperation: 'getMessageCount',
  /** A DSN with a user and a password taken as written (percent-encoded or not). */
  rawPasswordDsn: (user, rawPassword, port) => `postgres://${user}:${rawPassword}@127.0.0.1:${port}/test`,
  malformedDsns: (secret) => [`postgres://postgres:${secret}@[bad/test`, `postgres://postgres:${secret}@host:99999999/test`],
  /** What the error says for a database that does not exist. */
  unknownDatabase: /does not exist/i,
  auth: {
    title: 'password authentication (throwaway SCRAM cluster)',
    failsWithinMs: 6000,
    refusal: /authentication/i,
    /** A throwaway cluster whose superuser must authenticate with `password` (SCRAM). */
    async start(password) {
      const cluster = await startPasswordCluster({ password });
      return {
        dsn: cluster.dsn,
        rawDsn: (raw) => `postgres://postgres:${raw}@127.0.0.1:${cluster.port}/postgres`,
        stop: () => cluster.stop(),
      };
    },
  },
  /** `dsn` told apart in pg_stat_activity by its application_name. */
  tagDsn: (dsn, app) => dsnWith(dsn, { params: { application_name: app } }),
  /** The DSN spellings a child process round-trips on (title suffix, DSN; undefined: the file's). */
  childDsns: () => [['', undefined]],
  /** Child-script lines that return once its consumer is idle: its LISTEN is up (found by application_name). */
  childWaitUntilIdle: `
    const { Client } = require('pg');
    const probe = new Client({ connectionString: ${JSON.stringify(engine.dsn)} });
    await probe.connect();
    for (let i = 0; i < 200; i += 1) {
      const { rows } = await probe.query(
        "SELECT 1 FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%'",
        [process.env.APP],
      );
      if (rows.length > 0) { console.log('idle'); break; }
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
    await probe.end();
  `,
  /** Case names this engine's file has always used where the others say it differently. */
  titles: {
    tableNameBounds: 'accepts the longest and the shortest valid table names',
    staleRedelivery: 'redelivers a message left in flight beyond redeliverTimeoutSeconds (same id, no RedeliveryStamp)',
  },
};

module.exports = { postgres };
