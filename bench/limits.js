'use strict';

// The engine limits the benchmark sets the native figures against, measured in the same run:
// each engine driven straight (pgbench, or one driver connection) with the native transport's
// own consume statements, and Redis's raw XADD capacity.

const { execFileSync } = require('node:child_process');
const { ENGINES } = require('./engines');
const { freshName } = require('./transports');
const { postgresOwnStatementsLimit } = require('./limit-postgres');
const { mysqlOwnStatementsLimit } = require('./limit-mysql');
const { redisOwnCommandsLimit } = require('./limit-redis');

/** Per engine: what its limit runs (for the report) and the measurement. */
const OWN_STATEMENTS = {
  postgres: { label: 'pgbench, claim stamping delivered_at + fenced batched DELETE', measure: postgresOwnStatementsLimit },
  mysql: { label: 'mysql2, BEGIN; SELECT … FOR UPDATE SKIP LOCKED; UPDATE delivered_at + COMMIT in one round trip; batched DELETE', measure: mysqlOwnStatementsLimit },
  redis: { label: 'ioredis, promote script + XREADGROUP + settle script (XACK + XDEL)', measure: redisOwnCommandsLimit },
};

/**
 * The engine's capacity for the native transport's own consume statements: one client,
 * claims of `batch` and the batched delete of each, draining `depth` prefilled messages.
 * Resolves `{ engine, depth, rows, seconds, rowsPerSecond }`.
 * @param {'postgres' | 'mysql' | 'redis'} engine
 * @param {number} depth
 * @param {number} [batch]
 */
function ownStatementsLimit(engine, depth, batch = 100) {
  return OWN_STATEMENTS[engine].measure(depth, batch);
}

/** Redis's own capacity for pipelined XADD (redis-benchmark, 16 commands per round trip). */
function redisXaddLimit() {
  const url = new URL(ENGINES.redis.dsn);
  const key = `bench:{${freshName('limit')}}`;
  const output = execFileSync(
    'redis-benchmark',
    ['-h', url.hostname, '-p', url.port || '6379', '-n', '100000', '-P', '16', '-q', 'XADD', key, '*', 'body', 'x'.repeat(140), 'headers', 'y'.repeat(80)],
    { encoding: 'utf8' },
  );
  execFileSync('redis-cli', ['-h', url.hostname, '-p', url.port || '6379', 'DEL', key]);
  return Number(/([\d.]+) requests per second/.exec(output)?.[1]);
}

module.exports = {
  OWN_STATEMENTS,
  ownStatementsLimit,
  postgresOwnStatementsLimit,
  mysqlOwnStatementsLimit,
  redisOwnCommandsLimit,
  redisXaddLimit,
};
