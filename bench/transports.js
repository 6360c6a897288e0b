'use strict';

// Transports of one implementation ('native' or 'upstream') on one engine of the registry, as
// an app would build them (default options), for the workloads.

const { ENGINES, sqlite, uniqueName } = require('./engines');
const { serializer } = require('./message');

/** A table/queue/stream name of its own for one run. */
const freshName = uniqueName;

/** Names the SQLite file a child process (the cross-process wake-up's producer) shares. */
const SQLITE_FILE_VAR = 'NMN_BENCH_SQLITE_DSN';

let sqliteFile;
/** The one SQLite file of this benchmark process (its parent's, when it has one). */
function sqliteDsn() {
  sqliteFile ??= process.env[SQLITE_FILE_VAR] ?? sqlite.temporaryDsn('nmn-bench');
  return sqliteFile;
}

/**
 * Builds transports of one implementation on one engine, all on the same queue; on Redis,
 * with `cluster` (`{ dsn }` of a throwaway cluster), on that cluster.
 */
function transportFactory(engine, impl, queue, cluster) {
  const native = require('..');
  if (ENGINES[engine].kind === 'redis') {
    const RedisStreamsTransport =
      impl === 'native' ? native.RedisStreamsTransport : require('@schally/nestjs-messenger-transport-redis').RedisStreamsTransport;
    const where = cluster === undefined ? { dsn: ENGINES.redis.dsn } : { dsn: cluster.dsn, cluster: true };
    return () => new RedisStreamsTransport({ ...where, stream: queue, name: 'bench', serializer: serializer() });
  }
  const SqlTransport = impl === 'native' ? native.SqlTransport : require('@schally/nestjs-messenger-transport-sql').SqlTransport;
  const dsn = engine === 'sqlite' ? sqliteDsn() : ENGINES[engine].dsn;
  return () => new SqlTransport({ dsn, queueName: queue, name: 'bench', serializer: serializer() });
}

module.exports = { freshName, transportFactory, sqliteDsn, SQLITE_FILE_VAR };
