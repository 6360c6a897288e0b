'use strict';

// Fault scenario: the server restarts under load — PostgreSQL `pg_ctl stop -m fast`
// then start, MariaDB orderly shutdown then start, Redis kill -9 then start with its
// fsync-always AOF — each down for DOWN_MS, on a private server of the suite's own.
//
// Expected (DESIGN.md, "Faults"): nothing confirmed is lost (the leases are left at their
// defaults, so a row or entry left hidden behind a lost claim reply shows up as lost); every send
// made during the outage resolves, or rejects with TransportConnectionError within
// connectTimeoutMs (+ margin); the consumers' get() neither throws nor ends; a message sent after
// the server is back is delivered within a few seconds.

const { TransportConnectionError } = require('@schally/nestjs-messenger');
const { privateServer } = require('./support/servers');
const { makeTransport, uniqueQueue, residue } = require('./support/engines');
const { LoadRun, violations, summary, sleep } = require('./support/account');

const CONNECT_TIMEOUT_MS = 2000;
const DOWN_MS = 2000;
/** connectTimeoutMs plus a margin: the longest any send or ack may take. */
const OP_BOUND_MS = CONNECT_TIMEOUT_MS + 5000;
/** "Delivers again within a few seconds of the server's return." */
const RECOVER_WITHIN_MS = 5000;

describe.each(['postgres', 'mariadb', 'redis'])('%s: server restart under load', (engine) => {
  let run;
  // Stopping the server ends whatever the code under test still waits on; then a run a failed
  // test left open is closed.
  const serverOf = privateServer(engine, { afterStop: () => run?.close({ boundMs: 3000 }) });

  it.each(['write-behind', 'commit'])(
    'ackMode %s: nothing lost, sends bounded, get() rides through, delivery resumes',
    async (ackMode) => {
      const server = serverOf();
      const queue = uniqueQueue(engine, 'restart');
      const make = () =>
        makeTransport(engine, { dsn: server.dsn, queue, ackMode, connectTimeoutMs: CONNECT_TIMEOUT_MS });
      const producers = [make(), make()];
      const consumers = [make(), make()];
      await producers[0].setup();
      run = new LoadRun({ producers, consumers, sendIntervalMs: 20, opBoundMs: OP_BOUND_MS + 3000 });
      run.startConsumers();
      run.startProducers();
      await sleep(1500);

      run.faultStarted();
      await server.restart({ downMs: DOWN_MS });
      run.faultEnded();

      await sleep(4000);
      await run.stopProducers();
      await run.waitDelivered(10_000);
      await run.stopConsumers({ boundMs: 5000 });
      await run.close({ boundMs: 5000 });
      const account = run.account();
      run = undefined;
      // stats(): the consumers rode the restart out and had their server back (a reconnect
      // each time), and kept the error they met, with no password in it.
      const seen = consumers.map((c) => c.stats());
      const left = await residue(engine, { dsn: server.dsn, queue, connectTimeoutMs: CONNECT_TIMEOUT_MS });
      // Informational: a row left here was delivered but its ack never written (it comes back
      // after the lease, an hour by default).
      console.log(
        `${summary(`restart ${engine} ${ackMode}`, account)}, left in storage ${left.length}; ` +
          `consumers' stats: reconnects ${seen.map((s) => s.reconnects).join('/')}, last error: ${seen.map((s) => s.lastError).join(' | ')}`,
      );
      // A consumer whose get() rode a failure out counts a reconnect and keeps the error. One
      // can also meet no failure at all: a claim that starts while the server is down waits
      // for a connection (up to the connect bound) and gets one once the server is back, and
      // in commit mode a consumer can spend the outage in a failing ack, claiming again after.
      for (const s of seen) {
        if (s.reconnects > 0) expect(typeof s.lastError).toBe('string');
      }
      const claimFailed = seen.some((s) => typeof s.lastError === 'string' && !/during "ack"/.test(s.lastError));
      if (claimFailed) {
        expect(seen.reduce((sum, s) => sum + s.reconnects, 0)).toBeGreaterThanOrEqual(1);
      }
      // The restart was met (by a send or a consumer): this run tested something.
      const errorsSeen = seen.filter((s) => typeof s.lastError === 'string').length;
      expect(account.rejected + errorsSeen).toBeGreaterThan(0);

      expect(account.confirmed).toBeGreaterThan(50);
      expect(
        violations(account, {
          sendBoundMs: OP_BOUND_MS,
          allowedRejections: [TransportConnectionError.name],
          ackBoundMs: OP_BOUND_MS,
          allowedAckFailures: ackMode === 'commit' ? [TransportConnectionError.name] : [],
          getMustRideThrough: true,
          recoverWithinMs: RECOVER_WITHIN_MS,
          stopBoundMs: 5000,
          closeBoundMs: 5000,
        }),
      ).toEqual([]);
    },
    90_000,
  );
});
