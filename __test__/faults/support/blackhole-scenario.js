'use strict';

// The blackhole scenario's body (see blackhole.faults.test.js), run in a child process of the
// test so that the process can be watched exiting by itself afterwards: the child builds a
// proxy in front of the private server the test started, runs the load, silences the network,
// and reports the account and the broken rules over IPC, then lets its event loop end.
//
// Forked with an IPC channel and FAULT_ENGINE, FAULT_DSN (the private server's DSN) and
// FAULT_PORT (its port). Sends { type: 'result', lines, broken } or { type: 'error', message }.

const { TransportConnectionError } = require('@schally/nestjs-messenger');
const { startProxy, viaProxy } = require('./proxy');
const { makeTransport, uniqueQueue } = require('./engines');
const { LoadRun, violations, summary, sleep, settleWithin } = require('./account');

const CONNECT_TIMEOUT_MS = 1000;
/**
 * The lease (redeliverTimeoutSeconds, claimIdleMs). A claim or a release the silence cut off
 * after the server ran it leaves its rows claimed by nobody; they come back at their lease (the
 * documented rule; the shared SQL schema records no claimer): a lease shorter than the silence
 * lets the account see them come back instead of counting them lost for an hour.
 */
const LEASE_MS = 12_000;
// The documented bound of every SQL operation: connectTimeoutMs + 10 s (docs/reliability.md),
// plus half a second for timers and the event loop of a busy 2-core machine.
const BOUND_MS = CONNECT_TIMEOUT_MS + 10_000 + 500;
// The silence outlasts the bound, so the bound is what ends every wait.
const BLACKHOLE_MS = BOUND_MS + 4000;
/** When, into the silence, one get() is aborted and one transport closed. */
const VICTIMS_AT_MS = 1000;
const RECOVER_WITHIN_MS = 10_000;

async function blackholeScenario({ engine, dsn: serverDsn, port }) {
  const proxy = await startProxy({ targetPort: port });
  const queue = uniqueQueue(engine, 'hole');
  const dsn = viaProxy(serverDsn, proxy);
  const make = (ackMode = 'write-behind') =>
    makeTransport(engine, { dsn, queue, ackMode, connectTimeoutMs: CONNECT_TIMEOUT_MS, leaseMs: LEASE_MS });
  const producers = [make(), make()];
  const consumers = [make('write-behind'), make('commit'), make(), make()];
  // Bursts of concurrent sends: a flush carries several callers' sends, so a caller that gives
  // up on one must not decide the others' answers.
  const run = new LoadRun({ producers, consumers, sendIntervalMs: 20, burst: 4, opBoundMs: BLACKHOLE_MS + 5000 });
  try {
    await producers[0].setup();
    const [, , abortVictim, closeVictim] = run.consumers;

    run.startConsumers();
    run.startProducers();
    await sleep(1500);

    run.faultStarted();
    proxy.blackhole();
    await sleep(VICTIMS_AT_MS);
    // While the peer stays silent: abort one get(), close one transport (its get() runs too).
    const aborted = run.stopConsumers({ boundMs: BLACKHOLE_MS, consumers: [abortVictim] });
    const closed = (async () => {
      closeVictim.stopping = true;
      const startedAt = Date.now();
      const close = await settleWithin(closeVictim.transport.close(), BLACKHOLE_MS);
      const closeMs = Date.now() - startedAt;
      const loop = await settleWithin(closeVictim.loop, Math.max(0, BLACKHOLE_MS - closeMs));
      return {
        closeMs,
        closeOutcome: close.timeout ? 'not done' : close.error ? `failed: ${close.error.message}` : 'closed',
        getEndedMs: loop.timeout ? undefined : Date.now() - startedAt,
      };
    })();
    // The reads an operator or a health check makes, during the silence: each settles (an
    // error is fine) within the bound.
    const reads = Promise.all(
      Object.entries({
        getMessageCount: () => producers[1].getMessageCount(),
        find: () => producers[1].find('1'),
        list: async () => {
          for await (const envelope of producers[1].list(5)) void envelope;
        },
        health: () => producers[1].health({ timeoutMs: 2000 }),
      }).map(async ([name, read]) => {
        const startedAt = Date.now();
        const outcome = await settleWithin(read(), BLACKHOLE_MS);
        return { name, ms: Date.now() - startedAt, outcome: outcome.timeout ? 'not settled' : outcome.error ? 'failed' : 'answered' };
      }),
    );
    await sleep(BLACKHOLE_MS - VICTIMS_AT_MS);
    proxy.restore();
    run.faultEnded();
    await aborted;
    const victim = await closed;
    const readOutcomes = await reads;

    await sleep(4000);
    await run.stopProducers();
    await run.waitDelivered(LEASE_MS + 10_000);
    await run.stopConsumers({ boundMs: BOUND_MS, consumers: run.consumers.slice(0, 2) });
    await run.close({ boundMs: BOUND_MS, transports: [...producers, ...consumers.slice(0, 3)] });
    const account = run.account();
    const abortStop = account.stops.find((s) => s.consumer === abortVictim.name);
    const lines = [
      summary(`blackhole ${engine}`, account),
      `abort during the silence: get() ${abortStop.ended ? `ended after ${abortStop.ms} ms` : `not ended after ${abortStop.ms} ms`}; ` +
        `close during the silence: ${victim.closeOutcome} after ${victim.closeMs} ms, ` +
        `its get() ${victim.getEndedMs === undefined ? 'did not end' : `ended after ${victim.getEndedMs} ms`}; ` +
        `close() after the restore: ${account.closes.map((c) => `${c.outcome} ${c.ms} ms`).join(', ')}`,
      `reads during the silence: ${readOutcomes.map((r) => `${r.name} ${r.outcome} after ${r.ms} ms`).join(', ')}`,
    ];

    const broken = violations(account, {
      sendBoundMs: BOUND_MS,
      allowedRejections: [TransportConnectionError.name],
      ackBoundMs: BOUND_MS,
      allowedAckFailures: [TransportConnectionError.name],
      getMustRideThrough: true,
      recoverWithinMs: RECOVER_WITHIN_MS,
      stopBoundMs: BOUND_MS,
      closeBoundMs: BOUND_MS,
    });
    // Completing may mean rejecting (say, acks that could not be written): only a close() that
    // is still pending, or took longer than the bound, breaks the rule.
    if (victim.closeOutcome === 'not done' || victim.closeMs > BOUND_MS) {
      broken.push(`close() during the silence: ${victim.closeOutcome} after ${victim.closeMs} ms (bound ${BOUND_MS} ms)`);
    }
    for (const read of readOutcomes) {
      if (read.outcome === 'not settled' || read.ms > BOUND_MS) broken.push(`${read.name}() during the silence: ${read.outcome} after ${read.ms} ms (bound ${BOUND_MS} ms)`);
    }
    if (victim.getEndedMs === undefined || victim.getEndedMs > BOUND_MS) {
      broken.push(
        `get() of the transport closed during the silence ${victim.getEndedMs === undefined ? 'did not end' : `ended after ${victim.getEndedMs} ms`} (bound ${BOUND_MS} ms)`,
      );
    }
    return { lines, broken };
  } finally {
    // Whatever still waits on the proxy ends with a reset.
    await run.close({ boundMs: 3000 });
    await proxy.close();
  }
}

module.exports = { blackholeScenario, BOUND_MS, BLACKHOLE_MS };

if (require.main === module) {
  const send = (message) =>
    new Promise((resolve) => {
      if (!process.connected) return resolve();
      process.send(message, () => resolve());
    });
  blackholeScenario({
    engine: process.env.FAULT_ENGINE,
    dsn: process.env.FAULT_DSN,
    port: Number(process.env.FAULT_PORT),
  })
    .then((result) => send({ type: 'result', ...result }))
    .catch((error) => send({ type: 'error', message: String(error?.stack ?? error) }))
    // No process.exit(): the process must end by itself once its work is done.
    .finally(() => process.connected && process.disconnect());
}
