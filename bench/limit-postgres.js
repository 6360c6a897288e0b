'use strict';

// PostgreSQL's limit for the native transport's own consume statements, driven by pgbench
// with one client: the claim of src/engines/sql/postgres/statements.rs (the shared schema's predicate
// and order, FOR UPDATE SKIP LOCKED, the `delivered_at` stamp, the token) and the fenced
// batched delete of src/engines/sql/table_queue.rs, each in its own autocommit transaction as the
// transport runs them.

const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { ENGINES } = require('./engines');
const { drainPrefilled } = require('./limit-queue');

/** The default redelivery timeout (lib/options/sql-options.js), bound as the claim's lease. */
const LEASE_SECONDS = 3600;
/** `stamp_span_ms` (src/engines/sql/claim_doubt.rs) for that lease: a tenth, at most 100 ms. */
const SPAN_MS = 100;
/** `TOKEN_OF` of statements.rs: a claim's token, `delivered_at` in microseconds. */
const TOKEN_OF = '(extract(epoch FROM delivered_at) * 1000000)::bigint';

function pgbenchPath() {
  const root = '/usr/lib/postgresql';
  for (const version of fs.existsSync(root) ? fs.readdirSync(root).sort().reverse() : []) {
    const candidate = path.join(root, version, 'bin', 'pgbench');
    if (fs.existsSync(candidate)) return candidate;
  }
  return 'pgbench';
}

/**
 * The transport's claim, prepared once per connection as sqlx prepares it (same parameters:
 * queue, lease, limit, nonce, span). Only the final SELECT differs: pgbench's \gset takes one
 * row, so the claimed ids are aggregated in claim order and the bodies only measured, not
 * shipped (which makes the limit, if anything, higher than the real statement's).
 */
function claimStatement(table) {
  const claimable =
    'queue_name = $1 AND available_at <= now() ' +
    'AND (delivered_at IS NULL OR delivered_at < now() - make_interval(secs => $2::float8))';
  const stamp =
    'to_timestamp(((ceil((floor(extract(epoch FROM now()) * 1000) - $4::bigint) / $5::bigint) * $5::bigint + $4::bigint) / 1000.0)::float8)';
  return (
    `PREPARE claim(text, float8, int8, int8, int8) AS ` +
    `WITH relaxed AS (SELECT set_config('synchronous_commit', 'off', true) AS setting), due AS ( ` +
    `SELECT id FROM ${table} WHERE ${claimable} ` +
    `ORDER BY available_at, delivered_at, id LIMIT $3 FOR UPDATE SKIP LOCKED ` +
    `), claimed AS ( ` +
    `UPDATE ${table} AS m SET delivered_at = ${stamp} FROM due WHERE m.id = due.id ` +
    `RETURNING m.id, m.body, m.headers, m.available_at, ${TOKEN_OF} AS token ` +
    `) SELECT string_agg(claimed.id::text, ',' ORDER BY claimed.available_at, claimed.id) AS ids, ` +
    `max(token) AS token, sum(octet_length(body) + octet_length(headers)) AS bytes FROM claimed, relaxed;`
  );
}

/**
 * One pgbench transaction: a claim (a fresh nonce per attempt, as ClaimAttempt::new draws)
 * and the delete of what it claimed, `delete_head` + `held_condition` for one claim's rows,
 * sent as plain SQL as `execute_counted` does. The PREPARE runs in a client's first
 * transaction only (pgbench variables live as long as the client).
 */
function script(queue, batch) {
  const table = 'messenger_messages';
  return [
    '\\if :prepared = 0',
    claimStatement(table),
    '\\set prepared 1',
    '\\endif',
    `\\set nonce random(0, ${SPAN_MS - 1})`,
    `EXECUTE claim('${queue}', ${LEASE_SECONDS}, ${batch}, :nonce, ${SPAN_MS}) \\gset`,
    `DELETE FROM ${table} WHERE (${TOKEN_OF} = :token AND id IN (:ids));`,
    '',
  ].join('\n');
}

/**
 * Rows/s PostgreSQL sustains for the native transport's claim (stamping `delivered_at`) and
 * batched delete of `batch` rows, one pgbench client draining a queue of `depth` prefilled
 * rows. The time is pgbench's (without connecting).
 * @param {number} depth
 * @param {number} [batch]
 */
function postgresOwnStatementsLimit(depth, batch = 100) {
  return drainPrefilled('postgres', depth, async (queue) => {
    const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'nmn-pgbench-')), 'claim.sql');
    fs.writeFileSync(file, script(queue, batch));
    const url = new URL(ENGINES.postgres.dsn);
    const transactions = Math.ceil(depth / batch);
    try {
      const output = execFileSync(
        pgbenchPath(),
        ['-n', '-D', 'prepared=0', '-f', file, '-t', String(transactions), '-c', '1', '-h', url.hostname, '-p', url.port || '5432', '-U', decodeURIComponent(url.username || 'postgres'), url.pathname.slice(1)],
        { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] },
      );
      const tps = Number(/tps = ([\d.]+)/.exec(output)?.[1]);
      return { seconds: transactions / tps };
    } finally {
      fs.rmSync(path.dirname(file), { recursive: true, force: true });
    }
  });
}

module.exports = { postgresOwnStatementsLimit, pgbenchPath };
