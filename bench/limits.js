'use strict';

const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { prefill } = require('./prefill');
const { ENGINES } = require('./engines');
const { freshName, transportFactory } = require('./transports');

function pgbenchPath() {
  const root = '/usr/lib/postgresql';
  for (const version of fs.existsSync(root) ? fs.readdirSync(root).sort().reverse() : []) {
    const candidate = path.join(root, version, 'bin', 'pgbench');
    if (fs.existsSync(candidate)) return candidate;
  }
  return 'pgbench';
}

/**
 * The engine's own capacity for the claim-and-delete work, driven straight at PostgreSQL by
 * pgbench: each transaction claims 100 due rows with upstream's predicate and order
 * (SKIP LOCKED) and deletes them. Rows/s at the given queue depth.
 */
async function postgresClaimDeleteLimit(depth) {
  const queue = freshName('limit');
  const factory = transportFactory('postgres', 'native', queue);
  const t = factory();
  await t.setup();
  await t.close();
  await prefill('postgres', queue, depth, factory);
  const script = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'nmn-pgbench-')), 'claim.sql');
  fs.writeFileSync(
    script,
    `WITH c AS (SELECT id FROM messenger_messages WHERE queue_name = '${queue}' AND available_at <= now() ` +
      `AND (delivered_at IS NULL OR delivered_at < now() - make_interval(secs => 3600)) ` +
      `ORDER BY available_at, id LIMIT 100 FOR UPDATE SKIP LOCKED) ` +
      `DELETE FROM messenger_messages m USING c WHERE m.id = c.id;\n`,
  );
  const url = new URL(ENGINES.postgres.dsn);
  const transactions = Math.floor(depth / 100);
  const output = execFileSync(
    pgbenchPath(),
    ['-n', '-f', script, '-t', String(transactions), '-c', '1', '-h', url.hostname, '-p', url.port || '5432', '-U', decodeURIComponent(url.username || 'postgres'), url.pathname.slice(1)],
    { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const tps = Number(/tps = ([\d.]+)/.exec(output)?.[1]);
  return tps * 100;
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

module.exports = { postgresClaimDeleteLimit, redisXaddLimit };
