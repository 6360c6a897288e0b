'use strict';

// Fault scenario: every connection of the code under test is killed by the server
// under load — PostgreSQL pg_terminate_backend of every other backend (the LISTEN connection
// included), MariaDB KILL of every other connection, Redis CLIENT KILL TYPE normal — four times,
// 250 ms apart under load (each after the first hits what reconnected meanwhile), then once more
// while every consumer idles.
//
// Expected: as for a restart (nothing lost, sends resolve or reject with
// TransportConnectionError within connectTimeoutMs + margin, get() neither throws nor ends,
// delivery resumes within a few seconds), and on PostgreSQL push wake-ups are back: with the
// poll period set to 2 s, an idle consumer yields a message sent from another pool (so only
// NOTIFY through the consumers' LISTEN connection can wake them) within 500 ms, after the kill
// as before it. The send-to-yield latency is measured on every engine and printed.

const { TransportConnectionError } = require('@schally/nestjs-messenger');
const { privateServer } = require('./support/servers');
const { makeTransport, uniqueQueue, residue } = require('./support/engines');
const { LoadRun, violations, summary, sleep } = require('./support/account');

const CONNECT_TIMEOUT_MS = 2000;
const OP_BOUND_MS = CONNECT_TIMEOUT_MS + 5000;
const RECOVER_WITHIN_MS = 5000;
/** PostgreSQL consumers poll this rarely, so a yield faster than PUSH_BOUND_MS is a push. */
const PG_POLL_MS = 2000;
const PUSH_BOUND_MS = 500;
/** Kills under load, 250 ms apart (each after the first hits what reconnected meanwhile). */
const KILLS = 4;

/** A DSN of the same server that the code under test gives a pool (and a LISTEN) of its own. */
function otherPoolDsn(engine, dsn) {
  return engine === 'postgres' ? `${dsn}?application_name=faults_probe` : dsn;
}

async function probes(run, producer, count) {
  const results = [];
  for (let i = 0; i < count; i += 1) {
    results.push(await run.probe(producer, 5000));
    await sleep(200);
  }
  return results;
}

const show = (results) => results.map((r) => r.yieldMs ?? `not yielded (send ${r.outcome})`).join(', ');

describe.each(['postgres', 'mariadb', 'redis'])('%s: every backend killed under load', (engine) => {
  let run;
  // Once the server is stopped, a run a failed test left open is closed.
  const serverOf = privateServer(engine, { afterStop: () => run?.close({ boundMs: 3000 }) });

  it('nothing lost, sends bounded, get() rides through, delivery and push wake-ups resume', async () => {
    const server = serverOf();
    const queue = uniqueQueue(engine, 'kill');
    const make = (dsn = server.dsn) =>
      makeTransport(engine, {
        dsn,
        queue,
        connectTimeoutMs: CONNECT_TIMEOUT_MS,
        ...(engine === 'postgres' && { pollIntervalMs: PG_POLL_MS }),
      });
    const producers = [make(), make()];
    const consumers = [make(), make()];
    await producers[0].setup();
    run = new LoadRun({ producers, consumers, sendIntervalMs: 20, opBoundMs: OP_BOUND_MS + 3000 });
    const prober = run.addProducer(make(otherPoolDsn(engine, server.dsn)), 'probe');

    run.startConsumers();
    await sleep(700);
    const before = await probes(run, prober, 3);

    run.startProducers();
    await sleep(1500);
    run.faultStarted();
    const kills = [];
    for (let i = 0; i < KILLS; i += 1) {
      if (i > 0) await sleep(250);
      kills.push(await server.killBackends());
    }
    run.faultEnded();

    await sleep(3000);
    await run.stopProducers();
    await run.waitDelivered(10_000);
    await run.waitQuiet(1500);
    const after = await probes(run, prober, 5);
    // Once more with every consumer idle (blocked on LISTEN / a blocking read).
    const idleKill = await server.killBackends();
    await sleep(1000);
    const afterIdle = await probes(run, prober, 3);

    await run.stopConsumers({ boundMs: 5000 });
    await run.close({ boundMs: 5000 });
    const account = run.account();
    run = undefined;
    const left = await residue(engine, { dsn: server.dsn, queue, connectTimeoutMs: CONNECT_TIMEOUT_MS });
    console.log(
      `${summary(`backend-kill ${engine}`, account)}, left in storage ${left.length}\n` +
        `killed ${kills.map((k) => `${k.killed}${k.listeners ? ` (${k.listeners} LISTEN)` : ''}`).join(', ')}; ` +
        `send-to-yield ms before the kill: ${show(before)}; after: ${show(after)}; ` +
        `after a kill of ${idleKill.killed} while idle: ${show(afterIdle)}`,
    );

    expect(kills[0].killed).toBeGreaterThanOrEqual(2);
    expect(account.confirmed).toBeGreaterThan(50);
    const broken = violations(account, {
      sendBoundMs: OP_BOUND_MS,
      allowedRejections: [TransportConnectionError.name],
      ackBoundMs: OP_BOUND_MS,
      getMustRideThrough: true,
      recoverWithinMs: RECOVER_WITHIN_MS,
      stopBoundMs: 5000,
      closeBoundMs: 5000,
    });
    if (engine === 'postgres') {
      const slow = (results) => results.filter((r) => r.yieldMs === undefined || r.yieldMs > PUSH_BOUND_MS);
      if (slow(before).length > 0) {
        broken.push(`before the kill, send-to-yield exceeded ${PUSH_BOUND_MS} ms (${show(before)}): the measure is void`);
      }
      if (slow(after).length > 0) {
        broken.push(`after the kill, send-to-yield exceeded ${PUSH_BOUND_MS} ms (${show(after)}): push wake-ups did not come back`);
      }
      if (slow(afterIdle).length > 0) {
        broken.push(`after a kill while idle, send-to-yield exceeded ${PUSH_BOUND_MS} ms (${show(afterIdle)}): push wake-ups did not come back`);
      }
    }
    expect(broken).toEqual([]);
  }, 90_000);
});
