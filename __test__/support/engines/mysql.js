'use strict';

// MySQL/MariaDB as the shared suites see it: the registry's engine (bench/engines.js) plus raw
// row access in its own SQL (stored formats, the upstream schema, tied rows, a DELETE held
// behind a table lock) and the words, DSN forms and option values its cases use.

const crypto = require('node:crypto');
const { mysql: engine, uniqueName } = require('../../../bench/engines');
const { pollUntil, sleep } = require('../transport-helpers');
const { dsnWith } = require('./dsn');
const { sqlServerAdapter } = require('./sql-server');

/** The same server under the other scheme: the transport maps it onto the same driver URL. */
const mariadb = (dsn) => dsn.replace(/^mysql:/, 'mariadb:');

/** Test-side raw access on `dsn`: the registry's admin connection plus inspection in MySQL's SQL. */
function testAdmin(dsn = engine.dsn) {
  const admin = engine.admin(dsn);
  const { query } = admin;

  /** Whether a statement starting with `prefix` is running (waiting) on the server. */
  async function running(prefix) {
    const [row] = await query('SELECT COUNT(*) AS n FROM information_schema.processlist WHERE INFO LIKE ?', [
      `${prefix}%`,
    ]);
    return Number(row.n) > 0;
  }

  /** Rows bulk-/f-<g> for g = 1 … count, one multi-row INSERT; `times(g)` gives created_at, available_at. */
  async function insertMany(table, queueName, count, headers, prefix, times) {
    const values = [];
    const params = [];
    for (let g = 1; g <= count; g += 1) {
      const [created, available] = times(g);
      values.push(`(?, ?, ?, ${created}, ${available})`);
      params.push(queueName, `{"id":"${prefix}-${g}","payload":""}`, headers);
    }
    await query(
      `INSERT INTO ${table} (queue_name, body, headers, created_at, available_at) VALUES ${values.join(', ')}`,
      params,
    );
  }

  return {
    ...admin,
    running,
    async lapseClaim(table, id) {
      await query(`UPDATE ${table} SET delivered_at = NOW(3) - INTERVAL 1 HOUR WHERE id = ?`, [id]);
    },
    /**
     * An account granted only the use of `table`, with no CREATE privilege: the account an app
     * gets beside a migration. `drop()` removes it.
     */
    async accountForTable(table) {
      const user = uniqueName('nmn_app');
      await query(`CREATE USER '${user}'@'%'`);
      await query(`GRANT SELECT, INSERT, UPDATE, DELETE ON ${table} TO '${user}'@'%'`);
      return {
        dsn: dsnWith(dsn, { user }),
        drop: () => query(`DROP USER '${user}'@'%'`),
      };
    },
    /** What the server's other sessions are doing now (for a failure message that must explain a stall). */
    async activity() {
      return query(
        "SELECT ID AS id, STATE AS state, TIME AS running_s, LEFT(INFO, 120) AS query FROM information_schema.PROCESSLIST WHERE COMMAND <> 'Sleep' AND ID <> CONNECTION_ID()",
      );
    },
    async isStale(table, id) {
      const [row] = await query(`SELECT delivered_at < NOW(3) AS stale FROM ${table} WHERE id = ?`, [id]);
      return row !== undefined && Number(row.stale) === 1;
    },
    async storedBody(table, id) {
      const [row] = await query(`SELECT HEX(body) AS hex, CHARSET(body) AS charset FROM ${table} WHERE id = ?`, [id]);
      return { bytes: Buffer.from(row.hex, 'hex'), storageClass: row.charset === 'binary' ? 'binary' : 'text' };
    },
    async storedRows(table, queueName) {
      const rows = await query(
        `SELECT CAST(id AS CHAR) AS id, queue_name, body, headers, delivered_at,
                TIMESTAMPDIFF(MICROSECOND, created_at, available_at) / 1000 AS delay_ms,
                TIMESTAMPDIFF(MICROSECOND, created_at, NOW(3)) / 1000 AS age_ms
           FROM ${table} WHERE queue_name = ? ORDER BY ${table}.id`,
        [queueName],
      );
      return rows.map(({ delay_ms: delayMs, age_ms: ageMs, ...row }) => ({
        ...row,
        delayMs: Number(delayMs),
        ageMs: Number(ageMs),
      }));
    },
    async storedBodies(table, queueName) {
      const rows = await query(
        `SELECT CAST(id AS CHAR) AS id, JSON_UNQUOTE(JSON_EXTRACT(body, '$.id')) AS mid, LENGTH(body) AS bytes
           FROM ${table} WHERE queue_name = ? ORDER BY ${table}.id`,
        [queueName],
      );
      return rows.map((row) => ({ ...row, bytes: Number(row.bytes) }));
    },
    insertTied: (table, queueName, count, headers) =>
      insertMany(table, queueName, count, headers, 'f', () => ["'2000-01-01 00:00:00.000'", "'2000-01-01 00:00:00.000'"]),
    insertSpread: (table, queueName, count, headers) =>
      insertMany(table, queueName, count, headers, 'bulk', (g) => ['NOW(3)', `NOW(3) + INTERVAL ${g * 1000} MICROSECOND`]),
    async expectUpstreamSchema(table) {
      const columns = await query(
        `SELECT COLUMN_NAME AS name, COLUMN_TYPE AS type, IS_NULLABLE AS nullable FROM information_schema.columns
          WHERE table_schema = DATABASE() AND table_name = ? ORDER BY ORDINAL_POSITION`,
        [table],
      );
      expect(columns.map((c) => [c.name, c.type.replace(/\(20\)/, ''), c.nullable])).toEqual([
        ['id', 'bigint unsigned', 'NO'],
        ['body', 'longtext', 'NO'],
        ['headers', 'longtext', 'NO'],
        ['queue_name', 'varchar(190)', 'NO'],
        ['created_at', 'datetime(3)', 'NO'],
        ['available_at', 'datetime(3)', 'NO'],
        ['delivered_at', 'datetime(3)', 'YES'],
      ]);
      const [info] = await query(
        `SELECT ENGINE AS engine, TABLE_COLLATION AS collation FROM information_schema.tables
          WHERE table_schema = DATABASE() AND table_name = ?`,
        [table],
      );
      expect(info).toEqual({ engine: 'InnoDB', collation: 'utf8mb4_unicode_ci' });
      const indexColumns = await query(
        `SELECT COLUMN_NAME AS name FROM information_schema.statistics
          WHERE table_schema = DATABASE() AND table_name = ? AND index_name = ? ORDER BY SEQ_IN_INDEX`,
        [table, `${table}_claim_idx`],
      );
      expect(indexColumns.map((c) => c.name)).toEqual(['queue_name', 'available_at', 'delivered_at', 'id']);
    },
    /**
     * Makes the DELETE of the ack that `startAck()` starts wait behind a table lock, drops the
     * table under it, then lets it go; resolves what the ack settled to.
     */
    async dropTableUnderBlockedDelete(table, startAck) {
      return admin.withClient(async (locker) => {
        await locker.query(`LOCK TABLES ${table} WRITE`);
        const acked = startAck();
        const blocked = await pollUntil(() => running(`DELETE FROM ${table} `), { timeoutMs: 3000 });
        expect(blocked).toBe(true);
        await locker.query(`DROP TABLE ${table}`);
        await locker.query('UNLOCK TABLES');
        return acked;
      });
    },
  };
}

/** What a mixed fleet (upstream and native on one table) asks of MariaDB. */
const fleet = {
  label: ' (MariaDB)',
  queueWord: 'MariaDB queue',
  /** Upstream's MySQL dialect polls; 20 ms keeps its idle latency small. */
  upstreamOptions: { pollIntervalMs: 20 },
  /** Starts a consumer (`start()`) and resolves it once it has had time to poll and go idle. */
  async whenIdle(kind, start) {
    const consumer = start();
    await sleep(150);
    return consumer;
  },
  /** available_at - created_at of each row of the queue, in ms (both set from one NOW(3)). */
  async storedDelays(db, queueName) {
    const rows = await db.query(
      `SELECT CAST(id AS CHAR) AS id, TIMESTAMPDIFF(MICROSECOND, created_at, available_at) AS delay_us
         FROM messenger_messages WHERE queue_name = ? ORDER BY messenger_messages.id`,
      [queueName],
    );
    return rows.map((row) => ({ id: row.id, delayMs: Number(row.delay_us) / 1000 }));
  },
  rejectedDelayCases: [
    { title: 'upstream sends, native rejects, upstream gets the copy', sender: 'up', rejecter: 'ours', other: 'up' },
    { title: 'native sends, upstream rejects, native gets the copy', sender: 'ours', rejecter: 'up', other: 'ours' },
  ].map((d) => ({ ...d, title: `a rejected delayed message re-applies its delay on the copy: ${d.title}` })),
  ddlTitle: 'setup() by native creates exactly the table upstream setup() creates (SHOW CREATE TABLE)',
  /** SHOW CREATE TABLE of `table`, its name replaced by <table>. */
  async tableShape(db, table) {
    const [row] = await db.query(`SHOW CREATE TABLE ${table}`);
    return row['Create Table'].split(table).join('<table>');
  },
  /** Asserts (jest) that a table's DDL is upstream's documented one. */
  expectDocumentedShape(ddl) {
    expect(ddl).toContain('`id` bigint(20) unsigned NOT NULL AUTO_INCREMENT');
    expect(ddl).toContain('`created_at` datetime(3) NOT NULL,');
    expect(ddl).toContain('`delivered_at` datetime(3) DEFAULT NULL');
    expect(ddl).toContain('KEY `<table>_claim_idx` (`queue_name`,`available_at`,`delivered_at`,`id`)');
    expect(ddl).toMatch(/ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci$/);
  },
  async storedRowsById(db, ids) {
    const rows = await db.query(
      `SELECT CAST(id AS CHAR) AS id, queue_name, body, HEX(body) AS body_hex, headers, delivered_at,
              TIMESTAMPDIFF(MICROSECOND, created_at, available_at) AS delay_us
         FROM messenger_messages WHERE id IN (?)`,
      [ids],
    );
    return rows.map(({ body_hex: bodyHex, delay_us: delayUs, ...row }) => ({ ...row, bodyHex, delayMs: Number(delayUs) / 1000 }));
  },
};

const mysql = sqlServerAdapter(engine, {
  errorLabel: 'MySQL',
  runDsn: () => engine.dsn,
  /**
   * The same server and database under another DSN string (a harmless driver parameter): a
   * pool of its own in this process, so its sends do not wake consumers of the other.
   */
  otherDsn: (dsn) => `${dsn}${dsn.includes('?') ? '&' : '?'}statement-cache-capacity=77`,
  mariadb,
  testAdmin,

  schemaQualifiedTable: 'test.messages',
  concurrentSendSize: { kb: 120, why: ' (more than one max_allowed_packet together)' },
  longQueueNames: [
    [' (ASCII)', 'x'],
    [' (CJK (3 bytes each in utf8mb4))', '中'],
  ],
  invalidDsns: [
    ['a host that is not a URL', 'mysql://u:p@[bad/test'],
    ['a port out of range', 'mariadb://u@127.0.0.1:99999999/test'],
  ],
  dsnForms: (dsn) => [
    ['a mysql:// DSN', dsn],
    ['a mariadb:// DSN', mariadb(dsn)],
  ],
  titles: {
    tableNameBounds: 'creates and uses a table with the longest valid name (48 characters; its index name is 58)',
  },
  fleet,

  rawPasswordDsn: (user, rawPassword, port) => `mysql://${user}:${rawPassword}@127.0.0.1:${port}/test`,
  malformedDsns: (secret) => [`mysql://root:${secret}@[bad/test`, `mariadb://root:${secret}@host:99999999/test`],
  unknownDatabase: /unknown database/i,
  /** `error.cause` as mysql2 shapes it: the symbolic name as `code`, with `errno` and `sqlState`. */
  unknownDatabaseCause: { code: 'ER_BAD_DB_ERROR', errno: 1049, sqlState: '42000' },
  missingTableCause: { code: 'ER_NO_SUCH_TABLE', errno: 1146, sqlState: '42S02' },
  auth: {
    title: 'password authentication',
    failsWithinMs: 6000,
    refusal: /access denied/i,
    cause: { code: 'ER_ACCESS_DENIED_ERROR', errno: 1045, sqlState: '28000' },
    /**
     * A user of its own (unique per run, so parallel files and earlier runs cannot interfere)
     * whose password is `password`, allowed on the test database from every loopback host form.
     */
    async start(password) {
      const server = new URL(engine.dsn);
      const hostPort = `${server.hostname}:${server.port || engine.defaultPort}`;
      const database = server.pathname.replace(/^\//, '') || 'test';
      const user = `nmn_pw_${crypto.randomBytes(4).toString('hex')}`;
      const hosts = ['%', 'localhost', '127.0.0.1'];
      const admin = engine.admin();
      for (const host of hosts) {
        await admin.query(`DROP USER IF EXISTS '${user}'@'${host}'`);
        await admin.query(`CREATE USER '${user}'@'${host}' IDENTIFIED BY '${password}'`);
        await admin.query(`GRANT ALL ON \`${database}\`.* TO '${user}'@'${host}'`);
      }
      return {
        user,
        dsn: (pw, db = database) => `mysql://${user}:${encodeURIComponent(pw)}@${hostPort}/${db}`,
        rawDsn: (raw) => `mysql://${user}:${raw}@${hostPort}/${database}`,
        async stop() {
          for (const host of hosts) await admin.query(`DROP USER IF EXISTS '${user}'@'${host}'`);
        },
      };
    },
  },
  tagDsn: (dsn) => dsn,
  childDsns: (dsn) => [
    [' (mysql://)', dsn],
    [' (mariadb://)', mariadb(dsn)],
  ],
});

module.exports = { mysql };
