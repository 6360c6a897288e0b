'use strict';

const { NativeQueue } = require('../native/addon');
const { nativeSync } = require('../native/errors');
const { resolveSqlOptions } = require('../options/sql-options');
const { NativeTransport } = require('./native-transport');
const { Outbox } = require('./outbox');
const { sqlSystem } = require('../telemetry/telemetry');

/**
 * Drop-in for `@schally/nestjs-messenger-transport-sql`'s `SqlTransport` (PostgreSQL,
 * MySQL/MariaDB, SQLite), with the claim, batch, wait and write paths in Rust. Same options,
 * table and semantics.
 */
class SqlTransport extends NativeTransport {
  #options;
  #outbox;

  /** @param {import('../index').SqlTransportOptions} options */
  constructor(options) {
    const o = resolveSqlOptions(options);
    const queue = nativeSync(() =>
      NativeQueue.sql({
        dsn: o.dsn,
        tableName: o.tableName,
        queueName: o.queueName,
        redeliverTimeoutSeconds: o.redeliverTimeoutSeconds,
        pollIntervalMs: o.pollIntervalMs,
        useNotify: o.useNotify,
        getNotifyTimeoutMs: o.getNotifyTimeoutMs,
        autoSetup: o.autoSetup,
        connectTimeoutMs: o.connectTimeoutMs,
        maxQueuedSends: o.maxQueuedSends,
        maxQueuedSendBytes: o.maxQueuedSendBytes,
        listenDsn: o.listenDsn,
        maxConnections: o.maxConnections,
      }),
    );
    const messaging = { system: sqlSystem(o.dialect), destination: o.queueName };
    super(queue, { serializer: o.serializer, name: o.name, label: 'SQL', ackMode: o.ackMode, messaging, logger: o.logger });
    this.#options = o;
  }

  /**
   * The transactional outbox: the INSERT that stores `envelope` exactly as `send()` would (body
   * and headers through this transport's serializer, the delay on the database clock, on
   * PostgreSQL the NOTIFY that wakes idle consumers, which the server delivers at commit), for
   * the app to run with its own client inside its own transaction: the message is stored if
   * and only if the transaction commits. `text` uses the dialect's placeholders (`$1` on
   * PostgreSQL, `?` on MySQL and SQLite); `values` go with them in order. The new id: the
   * `id` column of the one row the PostgreSQL statement returns, `insertId` (mysql2) or
   * `LAST_INSERT_ID()` on MySQL, `lastInsertRowid` (better-sqlite3) or `last_insert_rowid()`
   * on SQLite. With `{ placeholders: '?' }` PostgreSQL's text uses `?` too, one value per
   * occurrence, for clients that number placeholders themselves (Knex, MikroORM). Builds a
   * statement only; never touches the database.
   * @param {import('@schally/nestjs-messenger').Envelope} envelope
   * @param {import('../index').OutboxStatementOptions} [options]
   * @returns {import('../index').OutboxStatement}
   */
  outboxStatement(envelope, options) {
    this.#outbox ??= new Outbox(this.#options);
    return this.#outbox.statement(envelope, options);
  }
}

module.exports = { SqlTransport };
