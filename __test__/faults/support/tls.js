'use strict';

// The SQL engines of the TLS scenario behind one vocabulary: how each starts a private server
// that serves TLS with a given certificate (or none), how its DSN asks for a verified or merely
// required TLS connection (query parameters as sqlx parses them: PostgreSQL `sslmode` and
// `sslrootcert`, MySQL `ssl-mode` and `ssl-ca`), how many rows a queue holds, and whether the
// transport's sessions reached the server encrypted (asked of the server, not the client).

const crypto = require('node:crypto');
const mysql = require('mysql2/promise');
const { startPostgres, startMariadb } = require('./servers');

/** The password in every DSN of the scenario: it must never appear in an error. */
const SECRET = 'tls-Secret?9';

/** The default table of SqlTransport (the scenario leaves tableName alone). */
const TABLE = 'messenger_messages';

/** A tag no other test uses, for a queue name or an application name. */
function uniqueTag(prefix) {
  return `${prefix}_${crypto.randomBytes(5).toString('hex')}`;
}

const postgres = {
  label: 'PostgreSQL',
  /** @param {{ cert: string, key: string } | undefined} ssl */
  start: (ssl) => startPostgres({ ssl }),
  /**
   * The superuser with a password in the DSN (trust authentication ignores it, so the only
   * thing that can refuse the connection is TLS) and an application name to find the
   * transport's sessions by.
   */
  dsn: (server, { host = '127.0.0.1', params, tag = 'nmn_tls' }) =>
    `postgres://postgres:${encodeURIComponent(SECRET)}@${host}:${server.port}/postgres?${params}&application_name=${tag}`,
  verified: (ca) => `sslmode=verify-full&sslrootcert=${ca}`,
  required: () => 'sslmode=require',
  /** Rows of `queue` in the default table (0 when the table was never created). */
  async storedRows(server, queue) {
    const { rows } = await server.query('SELECT to_regclass($1) IS NOT NULL AS present', [TABLE]);
    if (!rows[0].present) return 0;
    const counted = await server.query(`SELECT count(*)::int AS n FROM ${TABLE} WHERE queue_name = $1`, [queue]);
    return counted.rows[0].n;
  },
  /** `ssl` of every open session of the transport, by application name (pg_stat_ssl). */
  async sessionsEncrypted(server, tag) {
    const { rows } = await server.query(
      `SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid)
        WHERE a.application_name = $1 AND a.backend_type = 'client backend'`,
      [tag],
    );
    return rows.map((r) => r.ssl);
  },
};

const mariadb = {
  label: 'MySQL',
  /**
   * A private MariaDB and a user for the transport, with a password. On a server that serves
   * TLS the user must log in over TLS (REQUIRE SSL), so the server itself checks that every
   * session of the transport is encrypted; on a server without TLS it may log in over
   * plaintext, so only the client's ssl-mode stands between a DSN that asks for TLS and a
   * silent plaintext fallback.
   * @param {{ cert: string, key: string } | undefined} ssl
   */
  async start(ssl) {
    const server = await startMariadb({ ssl });
    try {
      const requirement = ssl === undefined ? '' : ' REQUIRE SSL';
      await server.query(`CREATE USER 'tls_app'@'%' IDENTIFIED BY '${SECRET.replace(/'/g, "''")}'${requirement}`);
      await server.query("GRANT ALL ON test.* TO 'tls_app'@'%'");
      if (ssl !== undefined) await expectPlaintextLoginRefused(server);
    } catch (error) {
      await server.stop();
      throw error;
    }
    return server;
  },
  dsn: (server, { host = '127.0.0.1', params }) =>
    `mysql://tls_app:${encodeURIComponent(SECRET)}@${host}:${server.port}/test?${params}`,
  verified: (ca) => `ssl-mode=VERIFY_IDENTITY&ssl-ca=${ca}`,
  required: () => 'ssl-mode=REQUIRED',
  async storedRows(server, queue) {
    const [{ present }] = await server.query(
      'SELECT COUNT(*) AS present FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?',
      [TABLE],
    );
    if (Number(present) === 0) return 0;
    const [{ n }] = await server.query(`SELECT COUNT(*) AS n FROM ${TABLE} WHERE queue_name = ?`, [queue]);
    return Number(n);
  },
  /** The server refuses the transport's user without TLS (see start()): every session is. */
  async sessionsEncrypted(server) {
    const rows = await server.query("SELECT ID FROM information_schema.PROCESSLIST WHERE USER = 'tls_app'");
    return rows.map(() => true);
  },
};

/**
 * The harness's own check that REQUIRE SSL is in force: the transport's user cannot log in
 * over plaintext (mysql2 without `ssl`). Without it, a round trip would not show TLS was used.
 */
async function expectPlaintextLoginRefused(server) {
  let connection;
  try {
    connection = await mysql.createConnection({ host: '127.0.0.1', port: server.port, user: 'tls_app', password: SECRET, database: 'test' });
  } catch (error) {
    if (/denied/i.test(error.message)) return;
    throw error;
  }
  await connection.end();
  throw new Error('harness: tls_app logged in over plaintext although it was created REQUIRE SSL');
}

module.exports = { SECRET, uniqueTag, tlsEngines: { postgres, mariadb } };
