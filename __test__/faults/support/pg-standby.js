'use strict';

// A PostgreSQL primary with a real streaming standby, for the failover fault tests: two
// private clusters (servers.js's startPostgres: trust auth, `postgres` OS user, free loopback
// ports, fresh temporary directories, killed when the jest worker exits), the standby made by
// `pg_basebackup -R -X stream` of the primary and started in hot standby. The harness can
// demote the primary in place (read-only by default, still up, its connections kept) and
// promote the standby.

const path = require('node:path');
const { startPostgres, runAsAsync, requireBinary, sleep, PG_BIN } = require('./servers');

const STANDBY_NAME = 'nmn_standby';

/**
 * Polls `check` (resolving to a truthy value when done) every 100 ms for at most `timeoutMs`.
 * On timeout throws `what`, the last failure and `logs()`.
 */
async function waitFor(what, check, { timeoutMs = 30_000, logs = () => '' } = {}) {
  const deadline = Date.now() + timeoutMs;
  let last;
  for (;;) {
    try {
      const done = await check();
      if (done) return done;
      last = `not yet (${JSON.stringify(done)})`;
    } catch (error) {
      last = error.message;
    }
    if (Date.now() > deadline) {
      throw new Error(`${what}: not after ${timeoutMs} ms (last: ${last})\n${logs()}`);
    }
    await sleep(100);
  }
}

const tail = (text, chars = 4000) => (text.length > chars ? `…${text.slice(-chars)}` : text);

/**
 * Starts a primary, then a standby streaming from it, and waits until the primary's
 * pg_stat_replication shows the standby `streaming`.
 * Resolves to `{ primary, standby, promote, demotePrimary, stop }`: `primary` and `standby`
 * are startPostgres servers (`port`, `dsn`, `query`, `stop`, `crash`, `log`, …).
 * @param {{ timeoutMs?: number }} [options] `timeoutMs`: bound of each wait (streaming,
 *   demotion, promotion)
 */
async function startPrimaryWithStandby({ timeoutMs = 30_000 } = {}) {
  requireBinary(
    path.join(PG_BIN, 'pg_basebackup'),
    'Install the PostgreSQL 15 server (apt-get install postgresql-15) or set FAULTS_PG_BIN.',
  );
  const primary = await startPostgres({
    prefix: 'nmn-fault-pg-primary-',
    settings: { wal_level: 'replica', max_wal_senders: 5, hot_standby: 'on', wal_keep_size: '64MB' },
  });
  let standby;
  const logs = () =>
    `--- primary log (port ${primary.port}) ---\n${tail(primary.log)}\n` +
    `--- standby log (port ${standby?.port ?? '-'}) ---\n${tail(standby?.log ?? '')}`;
  try {
    standby = await startPostgres({
      prefix: 'nmn-fault-pg-standby-',
      // cluster_name is the walreceiver's application_name in the primary's pg_stat_replication
      settings: { hot_standby: 'on', cluster_name: STANDBY_NAME },
      initData: (data) =>
        runAsAsync(
          'postgres',
          path.join(PG_BIN, 'pg_basebackup'),
          ['-R', '-X', 'stream', '--no-sync', '-c', 'fast', '-D', data, '-h', '127.0.0.1', '-p', String(primary.port), '-U', 'postgres'],
          { timeout: timeoutMs },
        ),
    });
    await waitFor(
      `standby on port ${standby.port} streaming from the primary on port ${primary.port}`,
      async () => {
        const { rows } = await primary.query(
          'SELECT state FROM pg_stat_replication WHERE application_name = $1',
          [STANDBY_NAME],
        );
        return rows.some((row) => row.state === 'streaming');
      },
      { timeoutMs, logs },
    );
  } catch (error) {
    await standby?.stop();
    await primary.stop();
    throw error;
  }

  return {
    primary,
    standby,
    /**
     * Makes the primary read-only in place, up and with its connections open:
     * `ALTER SYSTEM SET default_transaction_read_only = on` and a reload. Resolves once a
     * new connection sees it; already-open sessions pick it up from their next statement on
     * (a transaction already begun keeps its read-write state until it ends).
     */
    async demotePrimary() {
      await primary.query('ALTER SYSTEM SET default_transaction_read_only = on');
      await primary.query('SELECT pg_reload_conf()');
      // The postmaster re-reads the configuration, then signals every backend: once a new
      // backend (forked from it) sees the new default, the others have been signalled.
      await waitFor(
        `primary on port ${primary.port} read-only after reload`,
        async () => (await primary.query('SHOW default_transaction_read_only')).rows[0].default_transaction_read_only === 'on',
        { timeoutMs, logs },
      );
    },
    /** `pg_ctl promote -w` of the standby; resolves once pg_is_in_recovery() is false there. */
    async promote() {
      await standby.pgCtl(['-w', '-t', String(Math.ceil(timeoutMs / 1000)), 'promote'], { timeout: timeoutMs + 5000 });
      await waitFor(
        `standby on port ${standby.port} out of recovery after promotion`,
        async () => (await standby.query('SELECT pg_is_in_recovery() AS r')).rows[0].r === false,
        { timeoutMs, logs },
      );
    },
    /** Stops both servers (immediate) and removes their directories. */
    async stop() {
      try {
        await standby.stop();
      } finally {
        await primary.stop();
      }
    },
  };
}

module.exports = { startPrimaryWithStandby };
