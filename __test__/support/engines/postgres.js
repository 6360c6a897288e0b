'use strict';

// PostgreSQL as the shared suites see it: the registry's engine (bench/engines.js) plus raw
// row access in its own SQL (stored formats, the upstream schema, tied rows) and the words,
// DSN forms and option values its cases use.

const { postgres: engine, uniqueName } = require('../../../bench/engines');
const { startPasswordCluster } = require('../pg-cluster');
const { sleep, waitFor } = require('../transport-helpers');
const { dsnWith } = require('./dsn');
const { sqlServerAdapter } = require('./sql-server');

/** Test-side raw access on `dsn`: the registry's admin connection plus inspection in PostgreSQL's SQL. */
function testAdmin(dsn = engine.dsn) {
  const admin = engine.admin(dsn);
  const { query } = admin;
  return {
    ...admin,
    /** Moves the row's claim an hour back: to other consumers, its holder froze for an hour. */
    async lapseClaim(table, id) {
      await query(`UPDATE ${table} SET delivered_at = now() - interval '1 hour' WHERE id = $1::bigint`, [id]);
    },
    /**
     * A login role granted only the use of `table`, with no right to create in its schema:
     * the account an app gets beside a migration. `drop()` removes it.
     */
    async accountForTable(table) {
      const role = uniqueName('nmn_app');
      await query(`CREATE ROLE ${role} LOGIN`);
      await query(`GRANT SELECT, INSERT, UPDATE, DELETE ON ${table} TO ${role}`);
      const [{ allowed }] = await query(`SELECT has_schema_privilege($1, 'public', 'CREATE') AS allowed`, [role]);
      if (allowed) {
        throw new Error('This case needs a role without CREATE on schema public (PostgreSQL 15 and later, or REVOKE CREATE ON SCHEMA public FROM PUBLIC).');
      }
      return {
        dsn: dsnWith(dsn, { user: role }),
        async drop() {
          await query(`REVOKE ALL ON ${table} FROM ${role}`);
          await query(`DROP ROLE ${role}`);
        },
      };
    },
    /** What the server's other sessions are doing now (for a failure message that must explain a stall). */
    async activity() {
      return query(
        `SELECT pid, application_name, state, wait_event_type, wait_event, left(query, 120) AS query,
                round(extract(epoch FROM now() - query_start)::numeric, 3) AS running_s
         FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND state <> 'idle'`,
      );
    },
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

/**
 * Backends LISTENing on messenger_messages. Upstream's listener and ours send the same text
 * (`LISTEN messenger_messages`), so a consumer's is told as the one that appears after it starts.
 */
async function listenerPids() {
  const rows = await engine
    .admin()
    .query('SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query = $1', ['LISTEN messenger_messages']);
  return new Set(rows.map((row) => row.pid));
}

/** What a mixed fleet (upstream and native on one table) asks of PostgreSQL. */
const fleet = {
  label: '',
  queueWord: 'queue',
  upstreamOptions: {},
  /**
   * Starts a consumer (`start()`) of `kind` and resolves it once it is idle: its LISTEN
   * connection exists and it had time to run its empty claim and its "next due" peek.
   */
  async whenIdle(kind, start) {
    const before = await listenerPids();
    const consumer = start();
    await waitFor(
      async () => [...(await listenerPids())].some((pid) => !before.has(pid)),
      5000,
      `the ${kind} consumer's LISTEN connection`,
    );
    await sleep(300);
    return consumer;
  },
  /** available_at - created_at of each row of the queue, in ms. */
  async storedDelays(db, queueName) {
    const rows = await db.query(
      `SELECT id::text AS id, extract(epoch FROM (available_at - created_at)) * 1000 AS delay_ms
         FROM messenger_messages WHERE queue_name = $1 ORDER BY messenger_messages.id`,
      [queueName],
    );
    return rows.map((row) => ({ id: row.id, delayMs: Number(row.delay_ms) }));
  },
  rejectedDelayCases: [
    {
      title: 'a rejected delayed message keeps its delay on the copy, across implementations',
      sender: 'up',
      rejecter: 'ours',
      other: 'up',
    },
  ],
  ddlTitle: 'setup() by native creates exactly the table and index upstream setup() creates',
  /** Columns, indexes and constraints of `table`, its name replaced by <table>. */
  async tableShape(db, table) {
    const columns = await db.query(
      `SELECT column_name, ordinal_position, data_type, udt_name, character_maximum_length,
              numeric_precision, datetime_precision, is_nullable, column_default,
              is_identity, identity_generation, identity_start, identity_increment,
              identity_maximum, identity_minimum, identity_cycle, is_generated, collation_name
         FROM information_schema.columns
        WHERE table_schema = current_schema() AND table_name = $1
        ORDER BY ordinal_position`,
      [table],
    );
    const placeholder = (text) => (text === null ? null : text.split(table).join('<table>'));
    const indexes = (
      await db.query(
        `SELECT indexname, indexdef FROM pg_indexes
          WHERE schemaname = current_schema() AND tablename = $1 ORDER BY indexname`,
        [table],
      )
    ).map((row) => ({ indexname: placeholder(row.indexname), indexdef: placeholder(row.indexdef) }));
    const constraints = (
      await db.query(
        `SELECT conname, contype, pg_get_constraintdef(oid) AS definition
           FROM pg_constraint WHERE conrelid = $1::regclass ORDER BY conname`,
        [table],
      )
    ).map((row) => ({ ...row, conname: placeholder(row.conname) }));
    return { columns, indexes, constraints };
  },
  /** Asserts (jest) that a table shape is upstream's documented one. */
  expectDocumentedShape(shape) {
    expect(shape.columns.length).toBe(7);
    expect(
      shape.columns.map((c) => [
        c.column_name,
        c.data_type,
        c.character_maximum_length,
        c.datetime_precision === null ? null : Number(c.datetime_precision),
        c.is_nullable,
        c.column_default,
        c.is_identity,
        c.identity_generation,
      ]),
    ).toEqual([
      ['id', 'bigint', null, null, 'NO', null, 'YES', 'ALWAYS'],
      ['body', 'text', null, null, 'NO', null, 'NO', null],
      ['headers', 'text', null, null, 'NO', null, 'NO', null],
      ['queue_name', 'character varying', 190, null, 'NO', null, 'NO', null],
      ['created_at', 'timestamp with time zone', null, 3, 'NO', 'now()', 'NO', null],
      ['available_at', 'timestamp with time zone', null, 3, 'NO', null, 'NO', null],
      ['delivered_at', 'timestamp with time zone', null, 3, 'YES', null, 'NO', null],
    ]);
    expect(shape.indexes.map((i) => i.indexname)).toEqual(['<table>_claim_idx', '<table>_pkey']);
    expect(shape.indexes[0].indexdef).toMatch(
      /^CREATE INDEX <table>_claim_idx ON \S*<table> USING btree \(queue_name, available_at, delivered_at, id\)$/,
    );
    expect(shape.constraints).toEqual([{ conname: '<table>_pkey', contype: 'p', definition: 'PRIMARY KEY (id)' }]);
  },
  /** The rows with these ids: the stored columns, the body's bytes as upper-case hex, the delay in ms. */
  async storedRowsById(db, ids) {
    const rows = await db.query(
      `SELECT id::text AS id, queue_name, body, upper(encode(convert_to(body, 'UTF8'), 'hex')) AS body_hex, headers,
              delivered_at, extract(epoch FROM (available_at - created_at)) * 1000 AS delay_ms
         FROM messenger_messages WHERE id = ANY($1::bigint[])`,
      [ids],
    );
    return rows.map(({ body_hex: bodyHex, delay_ms: delayMs, ...row }) => ({ ...row, bodyHex, delayMs: Number(delayMs) }));
  },
};

const postgres = sqlServerAdapter(engine, {
  /** How the transport names the engine in its error messages. */
  errorLabel: 'PostgreSQL',
  /**
   * The database a test file runs on: the shared one, under the file's own application_name
   * when it names one, so that its transports share no pool or LISTEN connection with other
   * files' (all files run in one process; one left open by a failed test stays alive).
   */
  runDsn: (tag) => (tag ? dsnWith(engine.dsn, { params: { application_name: tag } }) : engine.dsn),
  /** The same database under another DSN string: a pool (and LISTEN connection) of its own. */
  otherDsn: (dsn) => dsnWith(dsn, { params: { application_name: 'nmn_other' } }),
  testAdmin,

  // The words and values the shared cases take from the engine.
  schemaQualifiedTable: 'public.messages',
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
  /** A DSN with a user and a password taken as written (percent-encoded or not). */
  rawPasswordDsn: (user, rawPassword, port) => `postgres://${user}:${rawPassword}@127.0.0.1:${port}/test`,
  malformedDsns: (secret) => [`postgres://postgres:${secret}@[bad/test`, `postgres://postgres:${secret}@host:99999999/test`],
  /** What the error says for a database that does not exist. */
  unknownDatabase: /does not exist/i,
  /** `error.cause` as pg shapes it: the SQLSTATE as `code`. */
  unknownDatabaseCause: { code: '3D000' },
  missingTableCause: { code: '42P01' },
  auth: {
    title: 'password authentication (throwaway SCRAM cluster)',
    failsWithinMs: 6000,
    refusal: /authentication/i,
    cause: { code: '28P01' },
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
  fleet,
  /** Case names this engine's file has always used where the others say it differently. */
  titles: {
    tableNameBounds: 'accepts the longest and the shortest valid table names',
    staleRedelivery: 'redelivers a message left in flight beyond redeliverTimeoutSeconds (same id, no RedeliveryStamp)',
  },
});

module.exports = { postgres };
