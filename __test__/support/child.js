'use strict';

// A script in a fresh node process, for what only a process of its own shows: that it exits by
// itself after close() (also from a worker thread), and what it prints or logs.

const path = require('node:path');
const { spawnSync } = require('node:child_process');

const ROOT = path.resolve(__dirname, '..', '..');
const CORE = require.resolve('@schally/nestjs-messenger');

/**
 * Lines a child script starts with: both transport classes (`Transport` is the one of
 * `process.env.KIND`), the core's Envelope and JsonSerializer, a message class M, and
 * `transportOptions(extra)`: DSN from `process.env.DSN`, the target (queue and table, or stream)
 * from `process.env.TARGET` (JSON) and a serializer for M.
 */
const PRELUDE = `
  const util = require('node:util');
  const { SqlTransport, RedisStreamsTransport } = require(${JSON.stringify(ROOT)});
  const { Envelope, JsonSerializer } = require(${JSON.stringify(CORE)});
  const Transport = process.env.KIND === 'redis' ? RedisStreamsTransport : SqlTransport;
  class M { constructor(id) { this.id = id; } }
  const transportOptions = (extra = {}) => ({
    dsn: process.env.DSN,
    ...JSON.parse(process.env.TARGET ?? '{}'),
    serializer: new JsonSerializer([M]),
    ...extra,
  });
`;

/**
 * Runs `script` (after PRELUDE) in a fresh node process that must exit by itself (it is
 * killed after `timeout` ms). `stdio[3]` is a pipe when `fd3` is set; its text is `report`.
 */
function runChild(script, { env = {}, timeout = 10000, fd3 = false } = {}) {
  const startedAt = Date.now();
  const result = spawnSync(process.execPath, ['-e', `${PRELUDE}\n${script}`], {
    cwd: ROOT,
    encoding: 'utf8',
    timeout,
    killSignal: 'SIGKILL',
    stdio: fd3 ? ['ignore', 'pipe', 'pipe', 'pipe'] : ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, ...env },
  });
  return { ...result, elapsedMs: Date.now() - startedAt, report: fd3 ? (result.output[3] ?? '') : '' };
}

/**
 * The signal a child was ended by, with what it printed on stderr (an abort says why only
 * there), or null when it exited by itself.
 * @param {{ signal: string | null, stderr: string }} result what `runChild` returned
 */
function killedBy(result) {
  return result.signal === null ? null : `${result.signal}; stderr: ${result.stderr}`;
}

/**
 * Asserts (jest) that a child exited by itself, with status 0 and nothing on stderr.
 * @param {{ signal: string | null, stderr: string, status: number | null }} result what `runChild` returned
 */
function expectCleanExit(result) {
  expect(killedBy(result)).toBeNull();
  expect(result.stderr).toBe('');
  expect(result.status).toBe(0);
}

module.exports = { ROOT, CORE, PRELUDE, runChild, killedBy, expectCleanExit };
