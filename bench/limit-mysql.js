'use strict';

// MariaDB's limit for the native transport's own consume statements, sent in the order and
// the protocol the transport sends them (src/engines/sql/mysql/mod.rs `claim`, sqlx 0.8): BEGIN
// (text); the claim SELECT … FOR UPDATE SKIP LOCKED as a cached prepared statement; the
// UPDATE of `delivered_at` to the claim's token and the COMMIT as one text round trip (COMMIT
// alone when the claim found nothing); then the fenced batched DELETE as plain text
// (`execute_counted`). One connection, one round trip at a time.

const { ENGINES } = require('./engines');
const { drainPrefilled } = require('./limit-queue');

/** The default redelivery timeout (lib/options/sql-options.js), bound as the claim's lease. */
const LEASE_SECONDS = 3600;
const TABLE = 'messenger_messages';
/** `TOKEN_OF` of src/engines/sql/mysql/statements.rs. */
const TOKEN_OF = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01', delivered_at)";
const CLAIM_SELECT =
  `SELECT CAST(id AS CHAR) AS id, body, headers, TIMESTAMPDIFF(MICROSECOND, '1970-01-01', NOW(3)) AS token FROM ${TABLE} ` +
  'WHERE queue_name = ? AND available_at <= NOW(3) AND (delivered_at IS NULL OR delivered_at < NOW(3) - INTERVAL ? SECOND) ' +
  `ORDER BY ${TABLE}.available_at, ${TABLE}.delivered_at, ${TABLE}.id LIMIT ? FOR UPDATE SKIP LOCKED`;

/** One claim and the delete of its rows; resolves how many rows it took (0: drained). */
async function claimAndDelete(connection, queue, batch) {
  await connection.query('BEGIN');
  const [rows] = await connection.execute(CLAIM_SELECT, [queue, LEASE_SECONDS, batch]);
  if (rows.length === 0) {
    await connection.query('COMMIT');
    return 0;
  }
  // The token comes back as text (bigNumberStrings) and goes into SQL as the transport
  // inlines it: an integer, never a value from outside.
  const token = rows[0].token;
  const ids = `(${rows.map((row) => row.id).join(',')})`;
  await connection.query(`UPDATE ${TABLE} SET delivered_at = '1970-01-01' + INTERVAL ${token} MICROSECOND WHERE id IN ${ids}; COMMIT`);
  await connection.query(`DELETE FROM ${TABLE} WHERE (${TOKEN_OF} = ${token} AND id IN ${ids})`);
  return rows.length;
}

/**
 * Rows/s MariaDB sustains for the native transport's claim transaction (SELECT … FOR UPDATE
 * SKIP LOCKED, UPDATE of `delivered_at`, COMMIT) and batched delete of `batch` rows, one
 * mysql2 connection draining a queue of `depth` prefilled rows. Connecting is not timed.
 * @param {number} depth
 * @param {number} [batch]
 */
function mysqlOwnStatementsLimit(depth, batch = 100) {
  return drainPrefilled('mysql', depth, async (queue) => {
    const driver = require('mysql2/promise');
    const connection = await driver.createConnection({
      uri: ENGINES.mysql.dsn.replace(/^mariadb:/, 'mysql:'),
      supportBigNumbers: true,
      bigNumberStrings: true,
      multipleStatements: true,
    });
    try {
      const started = process.hrtime.bigint();
      while ((await claimAndDelete(connection, queue, batch)) > 0);
      return { seconds: Number(process.hrtime.bigint() - started) / 1e9 };
    } finally {
      await connection.end();
    }
  });
}

module.exports = { mysqlOwnStatementsLimit };
