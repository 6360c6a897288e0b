'use strict';

const { NativeQueue } = require('./native');
const { nativeSync } = require('./errors');
const { resolveSqlOptions } = require('./sql-options');
const { NativeTransport } = require('./native-transport');

/**
 * Drop-in for `@schally/nestjs-messenger-transport-sql`'s `SqlTransport` (PostgreSQL,
 * MySQL/MariaDB, SQLite), with the claim, batch, wait and write paths in Rust. Same options,
 * table and semantics.
 */
class SqlTransport extends NativeTransport {
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
      }),
    );
    super(queue, { serializer: o.serializer, name: o.name, label: 'SQL', ackMode: o.ackMode });
  }
}

module.exports = { SqlTransport };
