'use strict';

const crypto = require('node:crypto');
const path = require('node:path');
const os = require('node:os');
const fs = require('node:fs');
const native = require('..');
const { serializer } = require('./message');

const DSN = {
  postgres: process.env.POSTGRES_DSN ?? 'postgres://postgres@127.0.0.1:5432/test',
  mysql: process.env.MYSQL_DSN ?? 'mysql://root@127.0.0.1:3306/test',
  redis: process.env.REDIS_DSN ?? 'redis://127.0.0.1:6379',
};

/** A table/queue/stream name of its own for one run. */
function freshName(prefix) {
  return `${prefix}_${crypto.randomBytes(4).toString('hex')}`;
}

let sqliteFile;
function sqliteDsn() {
  sqliteFile ??= path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'nmn-bench-')), 'bench.db');
  return `sqlite://${sqliteFile}`;
}

/**
 * Builds transports of one implementation ('native' or 'upstream') on one engine, all on the
 * same queue, with default options (as an app would run them).
 */
function transportFactory(engine, impl, queue) {
  if (engine === 'redis') {
    const RedisStreamsTransport =
      impl === 'native' ? native.RedisStreamsTransport : require('@schally/nestjs-messenger-transport-redis').RedisStreamsTransport;
    return () => new RedisStreamsTransport({ dsn: DSN.redis, stream: queue, name: 'bench', serializer: serializer() });
  }
  const SqlTransport = impl === 'native' ? native.SqlTransport : require('@schally/nestjs-messenger-transport-sql').SqlTransport;
  const dsn = engine === 'sqlite' ? sqliteDsn() : DSN[engine];
  return () => new SqlTransport({ dsn, queueName: queue, name: 'bench', serializer: serializer() });
}

module.exports = { DSN, freshName, transportFactory, sqliteDsn };
