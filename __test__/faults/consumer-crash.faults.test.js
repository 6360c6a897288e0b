'use strict';

// Fault scenario: kill -9 of a consumer process that holds a message in flight and
// the rest of its claim prefetched, in both ack modes, with a 2 s lease (redeliverTimeoutSeconds
// 2 on SQL, claimIdleMs 2000 on Redis). A surviving consumer in this process drains everything
// else first and is idle when the kill comes, so only the lease (not a send, not a poll of new
// work) can bring the dead consumer's rows back to it.
//
// Expected: every confirmed message is delivered (acked by the dead consumer before it died, or
// delivered to the survivor); the rows the dead consumer held come back within the lease + 5 s
// of the kill (an idle wait capped at getNotifyTimeoutMs, 60 s, fails this); nothing is left in
// storage at the end.

const path = require('node:path');
const fs = require('node:fs');
const { startServer } = require('./support/servers');
const { startHoldingChild, closeScenario, endScenario } = require('./support/child-consumer');
const { uniqueQueue } = require('./support/engines');
const { violations, summary, sleep } = require('./support/account');
const { sqlite } = require('../../bench/engines');

const temporarySqliteDsn = (prefix) => sqlite.temporaryDsn(prefix);

const LEASE_MS = 2000;
const COME_BACK_BOUND_MS = LEASE_MS + 5000;
const MESSAGES = 60;
const ACK_FIRST = 3;

/** A private SQLite file (no server), with the interface of support/servers.js. */
function sqliteServer() {
  const dsn = temporarySqliteDsn('nmn-fault-sqlite');
  return { engine: 'sqlite', dsn, stop: async () => fs.rmSync(path.dirname(dsn.slice('sqlite://'.length)), { recursive: true, force: true }) };
}

describe.each(['postgres', 'mariadb', 'sqlite', 'redis'])('%s: kill -9 of a consumer process', (engine) => {
  let server;
  const scenario = {};

  beforeAll(async () => {
    server = engine === 'sqlite' ? sqliteServer() : await startServer(engine);
  }, 120_000);

  afterEach(() => endScenario(scenario), 20_000);

  afterAll(async () => {
    await server?.stop();
  }, 60_000);

  it.each(['write-behind', 'commit'])(
    `ackMode %s: every confirmed message is delivered, the dead consumer's rows come back within the lease + 5 s`,
    async (ackMode) => {
      const queue = uniqueQueue(engine, 'crash');
      const base = { dsn: server.dsn, queue, ackMode, leaseMs: LEASE_MS, connectTimeoutMs: 2000 };
      const holding = await startHoldingChild(scenario, engine, base, { messages: MESSAGES, ackFirst: ACK_FIRST, childName: 'doomed' });
      const { run, state } = scenario;

      // The survivor takes everything else, then idles.
      run.startConsumers();
      await run.waitQuiet(800, 15_000);
      const confirmed = run.sends.filter((s) => s.outcome === 'confirmed').map((s) => s.key);
      const doneBeforeKill = new Set(run.deliveries.map((d) => d.key));
      const held = confirmed.filter((key) => !doneBeforeKill.has(key));

      const killAt = Date.now();
      state.child.kill('SIGKILL');
      await state.exited;

      // Wait for the held rows (bounded: a little past the bound, to report how late they were).
      const deadline = killAt + COME_BACK_BOUND_MS + 5000;
      const backAt = () => {
        const first = new Map();
        for (const d of run.deliveries) if (d.consumer !== 'child' && !first.has(d.key)) first.set(d.key, d.at);
        return first;
      };
      while (Date.now() < deadline && held.some((key) => !backAt().has(key))) await sleep(50);
      const back = backAt();
      const lateness = held.map((key) => (back.has(key) ? back.get(key) - killAt : undefined));
      const notBack = held.filter((key) => !back.has(key));
      const slowest = Math.max(0, ...lateness.filter((ms) => ms !== undefined));

      await run.waitDelivered(1000);
      await run.stopConsumers({ boundMs: 5000 });
      const { account, left } = await closeScenario(scenario, engine, base);
      console.log(
        `${summary(`consumer-crash ${engine} ${ackMode}`, account)}\n` +
          `child acked ${state.acked.length}, held ${held.length} (in flight: ${holding.key}); ` +
          `back after the kill in ${notBack.length === 0 ? `${slowest} ms` : `— ${notBack.length} not back after ${deadline - killAt} ms`}; ` +
          `left in storage: ${left.length}`,
      );

      const broken = violations(account, { allowedRejections: [], stopBoundMs: 5000, closeBoundMs: 5000, getMustRideThrough: true });
      if (held.length < 2) {
        broken.push(`the dead consumer held ${held.length} message(s): the scenario needs one in flight and some prefetched`);
      }
      if (notBack.length > 0) {
        broken.push(
          `${notBack.length} of the ${held.length} messages the dead consumer held were not back ${deadline - killAt} ms after the kill (bound ${COME_BACK_BOUND_MS} ms)`,
        );
      } else if (slowest > COME_BACK_BOUND_MS) {
        broken.push(`the dead consumer's messages came back ${slowest} ms after the kill (bound ${COME_BACK_BOUND_MS} ms)`);
      }
      if (left.length > 0) broken.push(`${left.length} message(s) left in storage at the end: ${left.slice(0, 5).join(', ')}`);
      expect(broken).toEqual([]);
    },
    60_000,
  );
});
