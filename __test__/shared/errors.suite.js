'use strict';

// A transport when things go wrong, written once and run by <engine>.errors.test.js on every
// engine it applies to: a server that is not there or never answers, wrong passwords and
// unknown databases (typed, fast errors that never carry the DSN password: message, stack,
// cause chain, String(), util.inspect, logs), a process that prints nothing of its own, and
// processes that exit by themselves after close(), also from a worker thread. The engine
// adapter (support/engines/) supplies its DSN forms, a throwaway server that checks passwords,
// its refusal messages and the facts a case depends on (server, kind).

const net = require('node:net');
const { TransportConnectionError, TransportError } = require('@schally/nestjs-messenger');
const { uniqueName } = require('../support/engines');
const { closedPort } = require('../support/ports');
const { runChild, killedBy, expectCleanExit } = require('../support/child');
const { sqlTable } = require('../support/sql-table');
const {
  TestMessage,
  serializer,
  envelopeOf,
  idOf,
  receiveOne,
  settleWithin,
  closeAll,
  failure,
  expectNoSecret,
} = require('../support/transport-helpers');

const SECRET = 'hunter2secret';

/** A round trip in a child process (the child's `report` prints its steps). */
const ROUND_TRIP = `
  async function roundTrip(report) {
    const t = new Transport(transportOptions());
    await t.send(new Envelope(new M('child')));
    for await (const envelope of t.get(new AbortController().signal)) {
      await t.ack(envelope);
      report('acked ' + envelope.message.id);
      break;
    }
    await t.close();
    report('closed');
  }
`;

/**
 * Child-script lines that return once its consumer has had time to go idle, for engines with
 * nothing to probe (an adapter with push wake-up brings its own, `childWaitUntilIdle`).
 */
const SETTLE_INTO_IDLE = `
  // The count has run once the table is set up; give the consumer time to go idle.
  await t.getMessageCount();
  await new Promise((resolve) => setTimeout(resolve, 300));
  console.log('idle');
`;

/**
 * Registers the shared error and process cases for one engine and returns what its entry file
 * needs for its engine-only cases.
 * @param {object} engine an engine adapter of support/engines
 */
function errorsSuite(engine) {
  const transports = [];
  const operations = engine.operations();
  /** The engine's DSN with SECRET as password, on a port where nothing listens (set in beforeAll). */
  let unreachableDsn;
  let unreachablePort;

  function track(t) {
    transports.push(t);
    return t;
  }

  /** A transport of the engine on `dsn`, with a target (queue or stream) of its own. */
  function make(dsn, options = {}) {
    return track(new engine.Transport({ dsn, ...engine.target(), ...options }));
  }

  afterEach(async () => {
    await closeAll(transports);
  });

  if (engine.server) {
    beforeAll(async () => {
      unreachablePort = await closedPort();
      unreachableDsn = engine.dsnWith({ password: SECRET, port: unreachablePort });
    });

    describe('unreachable server', () => {
      it.each(operations)(
        '%s fails fast with TransportConnectionError that never shows the password',
        async (_, operation) => {
          const t = make(unreachableDsn, { serializer: serializer() });
          const { error, elapsedMs } = await failure(() => operation(t));
          expect(error).toBeInstanceOf(TransportConnectionError);
          expect(elapsedMs).toBeLessThan(6000);
          expect(error.message).toMatch(new RegExp(`^${engine.errorLabel} transport failed during "\\w+": `));
          expect(error.code).toBe('E_CONNECTION');
          expect(error.cause?.code).toBe('ECONNREFUSED');
          expectNoSecret(error, SECRET);
          expect(await settleWithin(t.close(), 3000)).toEqual({ value: undefined });
        },
        10000,
      );

      it('a consumer that never reached the server ends get() with the error instead of retrying forever', async () => {
        const t = make(unreachableDsn, { serializer: serializer() });
        const controller = new AbortController();
        let consumerError;
        const done = (async () => {
          try {
            for await (const envelope of t.get(controller.signal)) await t.ack(envelope);
          } catch (error) {
            consumerError = error;
          }
        })();
        try {
          expect(await settleWithin(done, 6000)).toEqual({ value: undefined });
        } finally {
          controller.abort();
          await done;
        }
        expect(consumerError).toBeInstanceOf(TransportConnectionError);
        expectNoSecret(consumerError, SECRET);
      }, 10000);

      it('keeps a user name and a percent-encoded password out of the error', async () => {
        const raw = 'p%40ss%3Aw0rd%2Fx';
        const t = make(engine.rawPasswordDsn('someuser', raw, unreachablePort));
        const { error } = await failure(() => t.send(envelopeOf('x')));
        expect(error).toBeInstanceOf(TransportConnectionError);
        expectNoSecret(error, raw, 'p@ss:w0rd/x');
      });

      it('keeps failing typed on every later operation (no half-open state)', async () => {
        const t = make(unreachableDsn, { serializer: serializer() });
        for (let i = 0; i < 3; i += 1) {
          const { error } = await failure(() => t.send(envelopeOf(`x${i}`)));
          expect(error).toBeInstanceOf(TransportConnectionError);
          expectNoSecret(error, SECRET);
        }
      }, 20000);

      it('keeps the password of a malformed DSN out of the constructor error', () => {
        for (const dsn of engine.malformedDsns(SECRET)) {
          let error;
          try {
            new engine.Transport({ dsn, ...engine.target() });
          } catch (e) {
            error = e;
          }
          expect({ dsn, name: error?.name }).toEqual({ dsn, name: 'TransportConnectionError' });
          expect(error).toBeInstanceOf(TransportConnectionError);
          expect({ dsn, code: error.code, cause: error.cause }).toEqual({ dsn, code: 'E_CONNECTION', cause: undefined });
          expectNoSecret(error, SECRET);
        }
      });

      describe('a server that accepts connections but never answers', () => {
        let server;
        let port;
        const sockets = new Set();

        beforeAll(async () => {
          server = net.createServer((socket) => {
            sockets.add(socket);
            socket.on('error', () => {});
            socket.on('close', () => sockets.delete(socket));
          });
          await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
          port = server.address().port;
        });

        afterAll(async () => {
          for (const socket of sockets) socket.destroy();
          await new Promise((resolve) => server.close(resolve));
        });

        it('fails with TransportConnectionError after connectTimeoutMs', async () => {
          const t = make(engine.dsnWith({ password: SECRET, port }), { connectTimeoutMs: 300 });
          const { error, elapsedMs } = await failure(() => t.send(envelopeOf('x')));
          expect(error).toBeInstanceOf(TransportConnectionError);
          expect(elapsedMs).toBeGreaterThanOrEqual(250);
          expect(elapsedMs).toBeLessThan(3000);
          expect(error.code).toBe('E_CONNECTION');
          expect(error.cause?.code).toBe('ETIMEDOUT');
          expectNoSecret(error, SECRET);
          expect(await settleWithin(t.close(), 3000)).toEqual({ value: undefined });
        });

        it('fails within the default 5 s connect timeout, not after silent retries', async () => {
          const t = make(engine.dsnWith({ password: SECRET, port }));
          const [, operation] = operations.find(([name]) => name === engine.silentServerOperation);
          const { error, elapsedMs } = await failure(() => operation(t));
          expect(error).toBeInstanceOf(TransportConnectionError);
          expect(elapsedMs).toBeGreaterThanOrEqual(4000);
          expect(elapsedMs).toBeLessThan(7000);
          expectNoSecret(error, SECRET);
        }, 12000);
      });
    });

    describe(engine.auth.title, () => {
      const RIGHT = 'rightpass';
      const WRONG = 'wr0ngPassw0rd';
      /** A server (or user) that checks passwords: `{ dsn(password), rawDsn(raw), stop() }`. */
      let auth;

      beforeAll(async () => {
        await engine.requireServer();
        auth = await engine.auth.start(RIGHT);
      }, 60000);

      afterAll(async () => {
        await auth?.stop();
      });

      it.each(operations)(
        '%s with a wrong password fails fast with TransportConnectionError that never shows it',
        async (_, operation) => {
          const t = make(auth.dsn(WRONG), { serializer: serializer() });
          const { error, elapsedMs } = await failure(() => operation(t));
          expect(error).toBeInstanceOf(TransportConnectionError);
          expect(elapsedMs).toBeLessThan(engine.auth.failsWithinMs);
          expect(error.message).toMatch(new RegExp(`^${engine.errorLabel} transport failed during "\\w+": `));
          expect(error.message).toMatch(engine.auth.refusal);
          expect(error.code).toBe('E_CONNECTION');
          expect(error.cause).toMatchObject(engine.auth.cause);
          expectNoSecret(error, WRONG, RIGHT);
          expect(await settleWithin(t.close(), 3000)).toEqual({ value: undefined });
        },
        10000,
      );

      it('never shows a percent-encoded wrong password, raw or decoded', async () => {
        const raw = 'wr0ng%40Pass%3Aw0rd';
        const t = make(auth.rawDsn(raw));
        const { error } = await failure(() => t.send(envelopeOf('x')));
        expect(error).toBeInstanceOf(TransportConnectionError);
        expectNoSecret(error, raw, 'wr0ng@Pass:w0rd');
      });

      // Redis's own file has stronger versions of the next two (a fuller round trip; no output at all).
      if (engine.kind === 'sql') {
        it('works with the right password (send, receive, ack)', async () => {
          const table = uniqueName('nmn_pw');
          const dsn = auth.dsn(RIGHT);
          try {
            const t = make(dsn, { tableName: table, serializer: serializer() });
            const sent = await t.send(envelopeOf('authenticated', 'ok'));
            const received = await receiveOne(t);
            expect(idOf(received)).toBe(idOf(sent));
            expect(received.message).toEqual(new TestMessage('authenticated', 'ok'));
            await t.ack(received);
            expect(await t.getMessageCount()).toBe(0);
            await t.close();
          } finally {
            await engine.admin(dsn).dropTable(table, { ifExists: true });
          }
        });

        it('logs nothing containing the password in a process that fails to authenticate', () => {
          const result = runChild(
            `
            (async () => {
              const t = new Transport({ dsn: process.env.DSN, ...JSON.parse(process.env.TARGET) });
              try {
                await t.send(new Envelope(new M('x')));
                console.log('UNEXPECTED success');
              } catch (error) {
                console.log('name=' + error.name);
                console.log('message=' + error.message);
                console.error(error.stack);
                console.error(String(error));
                console.error(util.inspect(error, { depth: 10, showHidden: true }));
              }
              await t.close();
              console.log('closed');
            })();
          `,
            {
              timeout: 15000,
              env: {
                KIND: engine.kind,
                DSN: auth.dsn(WRONG),
                TARGET: JSON.stringify(engine.target('child')),
                RUST_LOG: 'trace',
                RUST_BACKTRACE: 'full',
              },
            },
          );
          const output = `${result.stdout}\n${result.stderr}`;
          expect(result.status).toBe(0);
          expect(result.stdout).toContain('name=TransportConnectionError');
          expect(result.stdout).toMatch(engine.auth.refusal);
          expect(result.stdout).toContain('closed');
          expect(output).not.toContain(WRONG);
        }, 20000);
      }
    });

    if (engine.unknownDatabase) {
      describe('unknown database', () => {
        beforeAll(async () => {
          await engine.requireServer();
        });

        it.each(operations)('%s fails with TransportConnectionError', async (_, operation) => {
          const t = make(engine.dsnWith({ database: uniqueName('nmn_nodb') }), { serializer: serializer() });
          const { error, elapsedMs } = await failure(() => operation(t));
          expect(error).toBeInstanceOf(TransportConnectionError);
          expect(error).toBeInstanceOf(TransportError);
          expect(elapsedMs).toBeLessThan(6000);
          expect(error.message).toMatch(new RegExp(`^${engine.errorLabel} transport failed during "\\w+": `));
          expect(error.message).toMatch(engine.unknownDatabase);
          expect(error.cause).toMatchObject(engine.unknownDatabaseCause);
          expect(await settleWithin(t.close(), 3000)).toEqual({ value: undefined });
        });
      });
    }

    describe('output of the process', () => {
      it('prints nothing on stdout or stderr while operations against an unreachable server fail', () => {
        const result = runChild(
          `
          const fs = require('node:fs');
          const report = [];
          (async () => {
            const t = new Transport(transportOptions());
            const ops = [
              ['send', () => t.send(new Envelope(new M('x')))],
              ['get', () => t.get(new AbortController().signal).next()],
              ['list', () => t.list().next()],
              ['count', () => t.getMessageCount()],
            ];
            for (const [name, op] of ops) {
              try {
                await op();
                console.log(name + ' UNEXPECTED success');
              } catch (error) {
                console.log(name + ' ' + error.name);
                report.push(String(error), error.stack, util.inspect(error, { depth: 10, showHidden: true }));
              }
            }
            await t.close();
            console.log('closed');
          })()
            .catch((error) => { report.push('FAILED ' + error.stack); process.exitCode = 2; })
            .finally(() => fs.writeSync(3, report.join('\\n')));
        `,
          {
            fd3: true,
            timeout: 15000,
            env: {
              KIND: engine.kind,
              DSN: unreachableDsn,
              TARGET: JSON.stringify(engine.target('child')),
              RUST_LOG: 'trace',
              RUST_BACKTRACE: 'full',
            },
          },
        );
        expect(killedBy(result)).toBeNull();
        expect(result.status).toBe(0);
        expect(result.stdout).toBe(
          'send TransportConnectionError\nget TransportConnectionError\nlist TransportConnectionError\ncount TransportConnectionError\nclosed\n',
        );
        expect(result.stderr).toBe('');
        expect(result.report).toContain('TransportConnectionError');
        expect(result.report).not.toContain(SECRET);
      }, 20000);
    });
  }

  settlesAroundClose(engine, make);
  if (engine.kind === 'sql') processExit(engine, () => unreachableDsn);

  return { make, track, SECRET, unreachable: () => ({ dsn: unreachableDsn, port: unreachablePort }) };
}

/**
 * Acks around close(): those recorded before it are written by it; one after it is refused
 * (it would be recorded and never written); and a count or a list waits for the acks recorded
 * before it, not for a queue that a busy consumer never lets empty.
 */
function settlesAroundClose(engine, make) {
  describe('acks around close() and a busy consumer', () => {
    const dsn = engine.runDsn('nmn-settles');

    beforeAll(async () => {
      await engine.requireServer?.();
    });

    it('refuses an ack after close() with TransportError, in both ack modes', async () => {
      for (const ackMode of ['write-behind', 'commit']) {
        const t = make(dsn, { serializer: serializer(), ackMode });
        await t.send(envelopeOf('late-ack'));
        const received = await receiveOne(t);
        await t.ack(received);
        await t.close();
        const { error } = await failure(() => t.ack(received));
        expect(error).toBeInstanceOf(TransportError);
        expect(error.message).toMatch(/closed/);
      }
    });

    it('answers getMessageCount() while a consumer keeps acking', async () => {
      const target = engine.target('busy');
      const t = make(dsn, { serializer: serializer(), ...target });
      const consumer = make(dsn, { serializer: serializer(), ...target });
      const sends = [];
      for (let i = 0; i < 3000; i += 1) sends.push(t.send(envelopeOf(`busy-${i}`)));
      await Promise.all(sends);
      const controller = new AbortController();
      let acked = 0;
      const loop = (async () => {
        for await (const envelope of consumer.get(controller.signal)) {
          await consumer.ack(envelope);
          acked += 1;
        }
      })();
      while (acked < 100) await new Promise((resolve) => setTimeout(resolve, 5));
      const counted = await settleWithin(consumer.getMessageCount(), 4000);
      // The count waited only for the acks recorded before it (it is answered, whether before
      // the consumer's next ack or after its last), and the consumer goes on to the end.
      const deadline = Date.now() + 10_000;
      while (acked < 3000 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 5));
      const ackedInAll = acked;
      controller.abort();
      await loop;
      expect(counted.value).toEqual(expect.any(Number));
      expect(ackedInAll).toBe(3000);
    }, 20000);
  });
}

/** Processes that exit by themselves after close(): a round trip, an idle consumer, a worker thread. */
function processExit(engine, unreachableDsn) {
  describe('process exit after close()', () => {
    const DSN = engine.runDsn('nmn-exit');
    const { TABLE, db, queue } = sqlTable(engine, { dsn: DSN, prefix: 'nmn_exit' });

    /** Runs a script in a fresh node process on a queue of its own; it must exit by itself. */
    function runOnQueue(script, env = {}) {
      const queueName = queue();
      const app = uniqueName('nmn_child');
      const result = runChild(script, {
        env: {
          KIND: 'sql',
          // A DSN the child can be told apart by (PostgreSQL: its application_name).
          DSN: engine.tagDsn(DSN, app),
          APP: app,
          TARGET: JSON.stringify({ tableName: TABLE, queueName }),
          ...env,
        },
      });
      return { ...result, queueName };
    }

    it.each(engine.childDsns(DSN))('exits by itself after send, consume, ack and close%s', async (_, dsn) => {
      const result = runOnQueue(
        `
        ${ROUND_TRIP}
        roundTrip(console.log).catch((error) => { console.error('FAILED', error); process.exitCode = 2; });
      `,
        dsn === undefined ? {} : { DSN: dsn },
      );
      expectCleanExit(result);
      expect(result.stdout).toContain('acked child');
      expect(result.stdout).toContain('closed');
      expect(result.stdout.split('\n')).toEqual(['acked child', 'closed', '']);
      expect(result.elapsedMs).toBeLessThan(5000);
      expect(await db.count(TABLE, result.queueName)).toBe(0);
    }, 15000);

    it('exits by itself after close() released a consumer blocked on an idle wait', async () => {
      const longIdle = { pollIntervalMs: 60000, ...(engine.pushWakeup ? { getNotifyTimeoutMs: 60000 } : {}) };
      const result = runOnQueue(`
        (async () => {
          const t = new Transport(transportOptions(${JSON.stringify(longIdle)}));
          const consumer = (async () => {
            for await (const envelope of t.get(new AbortController().signal)) console.log('UNEXPECTED ' + envelope);
            console.log('consumer ended');
          })();
          ${engine.childWaitUntilIdle ?? SETTLE_INTO_IDLE}
          await t.close();
          await consumer;
          console.log('closed');
        })().catch((error) => { console.error('FAILED', error); process.exitCode = 2; });
      `);
      expectCleanExit(result);
      expect(result.stdout.split('\n')).toEqual(['idle', 'consumer ended', 'closed', '']);
      expect(result.elapsedMs).toBeLessThan(5000);
    }, 15000);

    if (engine.server) {
      it('exits by itself after a failed connection and close()', async () => {
        const result = runOnQueue(
          `
          (async () => {
            const t = new Transport(transportOptions());
            try { await t.send(new Envelope(new M('x'))); } catch (error) { console.log(error.name); }
            await t.close();
            console.log('closed');
          })().catch((error) => { console.error('FAILED', error); process.exitCode = 2; });
        `,
          { DSN: unreachableDsn() },
        );
        expectCleanExit(result);
        expect(result.stdout.split('\n')).toEqual(['TransportConnectionError', 'closed', '']);
        expect(result.elapsedMs).toBeLessThan(8000);
      }, 15000);
    }

    it('exits by itself when the transport runs in a worker thread', async () => {
      const { PRELUDE } = require('../support/child');
      const workerScript = `
        ${PRELUDE}
        ${ROUND_TRIP}
        const { parentPort } = require('node:worker_threads');
        roundTrip((line) => parentPort.postMessage(line)).catch((error) => {
          parentPort.postMessage('FAILED ' + error.stack);
          process.exitCode = 2;
        });
      `;
      const result = runOnQueue(`
        const { Worker } = require('node:worker_threads');
        const worker = new Worker(${JSON.stringify(workerScript)}, { eval: true });
        worker.on('message', (line) => console.log('worker: ' + line));
        worker.on('error', (error) => { console.error('worker error', error); process.exitCode = 3; });
        worker.on('exit', (code) => {
          console.log('worker exit ' + code);
          if (code !== 0) process.exitCode = 4;
        });
      `);
      expectCleanExit(result);
      expect(result.stdout.split('\n')).toEqual(['worker: acked child', 'worker: closed', 'worker exit 0', '']);
      expect(result.elapsedMs).toBeLessThan(5000);
      expect(await db.count(TABLE, result.queueName)).toBe(0);
    }, 15000);
  });
}

module.exports = { errorsSuite };
