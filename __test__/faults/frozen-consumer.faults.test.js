'use strict';

// Fault scenario: fenced settles. A consumer process holds a message in its handler
// (and more prefetched) with a 1 s lease, and is frozen (SIGSTOP: a stop-the-world pause, a
// suspended VM) for longer than the lease, so it cannot renew its claim. A consumer in this
// process takes its messages over and handles them. Then the frozen one resumes and settles its
// old delivery: an ack or a reject that must neither delete the newer delivery nor make a copy
// of it, and that it counts in stats().staleSettles.
//
// Expected: nothing lost, nothing left in storage, the held message handled by the survivor
// exactly once after the takeover (a stale reject's copy would deliver it a third time), and
// the stale settles counted. Runs on the shared servers: it stops only its own child process.

const fs = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { uniqueQueue } = require('./support/engines');
const { within, startHoldingChild, closeScenario, endScenario } = require('./support/child-consumer');
const { violations, summary, sleep } = require('./support/account');
const { requireServer, sqlite } = require('../../bench/engines');

/**
 * Whether an InnoDB transaction is open on the MariaDB server: the frozen child stopped inside
 * its claim (between `SELECT … FOR UPDATE SKIP LOCKED` and `UPDATE` + `COMMIT`), whose row locks
 * every other consumer skips until it resumes. Asked after the statements in flight at the freeze
 * have had time to end (the server finishes those by itself).
 */
async function claimOpen() {
  await sleep(50);
  const [{ open }] = await require('../../bench/engines').mysql.admin().query('SELECT COUNT(*) AS open FROM information_schema.innodb_trx');
  return Number(open) > 0;
}

/** Whether another process holds the SQLite file's write lock (a write cannot begin within 200 ms). */
function writeLocked(dsn) {
  const file = dsn.slice('sqlite://'.length);
  const result = spawnSync('sqlite3', ['-bail', '-cmd', '.timeout 200', file, 'BEGIN IMMEDIATE; ROLLBACK;'], { encoding: 'utf8' });
  return result.status !== 0 && /locked|busy/i.test(result.stderr);
}

const LEASE_MS = 1000;
const FROZEN_MS = 3 * LEASE_MS;
const MESSAGES = 30;
const ACK_FIRST = 3;

const SERVERS = {
  postgres: () => require('../../bench/engines').postgres.dsn,
  mariadb: () => require('../../bench/engines').mysql.dsn,
  redis: () => require('../../bench/engines').redis.dsn,
  sqlite: () => sqlite.temporaryDsn('nmn-fault-frozen'),
};
const REGISTRY_NAME = { postgres: 'postgres', mariadb: 'mysql', redis: 'redis' };

describe.each(Object.keys(SERVERS))('%s: a consumer frozen past its lease settles late', (engine) => {
  let dsn;
  const scenario = {};

  beforeAll(async () => {
    if (REGISTRY_NAME[engine]) await requireServer(REGISTRY_NAME[engine]);
    dsn = SERVERS[engine]();
  });

  afterEach(() => endScenario(scenario), 20_000);

  afterAll(() => {
    if (engine === 'sqlite') fs.rmSync(path.dirname(dsn.slice('sqlite://'.length)), { recursive: true, force: true });
  });

  it.each(['ack', 'reject'])(
    'a stale %s leaves the newer delivery alone and is counted; nothing is lost or copied',
    async (how) => {
      const queue = uniqueQueue(engine, 'frozen');
      const base = { dsn, queue, leaseMs: LEASE_MS, connectTimeoutMs: 2000 };
      const holding = await startHoldingChild(scenario, engine, base, { messages: MESSAGES, ackFirst: ACK_FIRST, childName: 'frozen' });
      const { run, state } = scenario;

      // Frozen: its claims lapse; the survivor takes over what it held and handles everything.
      state.child.kill('SIGSTOP');
      // SQLite: a process frozen inside a write (a renewal, a claim) holds the file's write lock,
      // and nobody can write until it thaws: that is SQLite, not this scenario. Freeze again,
      // after a moment's thaw, until the freeze lands outside a write.
      // MariaDB likewise: a process frozen inside its claim's transaction keeps the rows that
      // claim locked (see docs/reliability.md), the held message among them when InnoDB
      // locked it as it scanned; this scenario is about settles, so freeze outside a claim.
      const stoppedInside = async () => (engine === 'sqlite' ? writeLocked(dsn) : engine === 'mariadb' && (await claimOpen()));
      for (let attempt = 0; attempt < 10 && (await stoppedInside()); attempt += 1) {
        state.child.kill('SIGCONT');
        // Long enough for a claim's last round trip (its COMMIT) after a thaw.
        await sleep(engine === 'mariadb' ? 200 : 20);
        state.child.kill('SIGSTOP');
      }
      const frozenAt = Date.now();
      run.startConsumers();
      while (Date.now() - frozenAt < FROZEN_MS || !run.deliveries.some((d) => d.key === holding.key)) {
        if (Date.now() - frozenAt > FROZEN_MS + 10_000) break;
        await sleep(50);
      }
      await run.waitQuiet(500, 10_000);
      const takenOver = run.deliveries.filter((d) => d.key === holding.key && d.consumer !== 'child');

      state.child.kill('SIGCONT');
      state.child.send({ type: 'settle', how });
      const settled = await within(state.settled, 15_000, `${how} its stale delivery`, state);
      await sleep(LEASE_MS * 2);

      await run.stopConsumers({ boundMs: 5000 });
      const afterFreeze = run.deliveries.filter((d) => d.consumer !== 'child');
      const afterStale = afterFreeze.filter((d) => d.key === holding.key);
      const { account, left } = await closeScenario(scenario, engine, base);
      console.log(
        `${summary(`frozen-consumer ${engine} ${how}`, account)}\n` +
          `held ${holding.key}: taken over ${takenOver.length}×, delivered to the survivor ${afterStale.length}× in all; ` +
          `stale settles counted by the frozen consumer: ${settled.staleSettles}; left in storage: ${left.length}`,
      );

      // The held message is delivered twice (frozen consumer, survivor): at-least-once, allowed.
      const broken = violations(account, { allowedRejections: [], stopBoundMs: 5000, closeBoundMs: 5000 });
      if (takenOver.length !== 1) broken.push(`the survivor took the held message over ${takenOver.length}× while the consumer was frozen (expected once)`);
      if (afterStale.length !== 1) {
        broken.push(`after the stale ${how}, the held message reached the survivor ${afterStale.length}× (a copy or an undeleted row)`);
      }
      // Its write-behind acks of the messages before may not have been written when it froze:
      // those that came back to the survivor too are stale as well. And one written as it froze
      // may have been applied without its reply being read in time: its repeat finds the entry
      // settled and counts as stale too (the count can be over, never under).
      const ackedTwice = state.acked.filter((a) => afterFreeze.some((d) => d.key === a.key)).length;
      const [least, most] = [1 + ackedTwice, 1 + state.acked.length];
      if (settled.staleSettles < least || settled.staleSettles > most) {
        broken.push(
          `the frozen consumer counted ${settled.staleSettles} stale settles (expected ${least} to ${most}: the held message, ` +
            `${ackedTwice} acked before the freeze and taken over, at most ${state.acked.length - ackedTwice} repeated)`,
        );
      }
      if (left.length > 0) broken.push(`${left.length} message(s) left in storage at the end: ${left.slice(0, 5).join(', ')}`);
      expect(broken).toEqual([]);
    },
    60_000,
  );
});
