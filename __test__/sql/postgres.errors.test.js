'use strict';

// SqlTransport on PostgreSQL when the server is not there or refuses us: typed, fast errors
// that never carry the DSN password (message, stack, cause chain, logs); and processes that
// exit by themselves after close(), also from a worker thread.

const net = require('node:net');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { TransportConnectionError } = require('@schally/nestjs-messenger');
const { SqlTransport } = require('../..');
const { POSTGRES_DSN, requireServer, uniqueName } = require('../support/servers');
const { pgQuery } = require('../support/pg');
const { startPasswordCluster } = require('../support/pg-cluster');
const {
  TestMessage,
  serializer,
  envelopeOf,
  idOf,
  receiveOne,
  settleWithin,
  closeAll,
  errorTexts,
} = require('../support/transport-helpers');

const ROOT = path.resolve(__dirname, '..', '..');
const CORE = require.resolve('@schally/nestjs-messenger');
const SECRET = 'hunter2secret';
const UNREACHABLE_DSN = `postgres://postgres:${SECRET}@127.0.0.1:59999/test`;
const transports = [];

function track(t) {
  transports.push(t);
  return t;
}

/** Asserts that no text a logger could print for `error` contains any of `secrets`. */
function expectNoSecret(error, ...secrets) {
  const texts = errorTexts(error);
  for (const secret of secrets) {
    for (const text of texts) expect(text).not.toContain(secret);
  }
}

/** Runs `promise`, which must reject; resolves `{ error, elapsedMs }`. */
async function failure(start) {
  const startedAt = Date.now();
  try {
    await start();
  } catch (error) {
    return { error, elapsedMs: Date.now() - startedAt };
  }
  throw new Error('expected the operation to fail');
}

const OPERATIONS = [
  ['send', (t) => t.send(envelopeOf('x'))],
  ['setup', (t) => t.setup()],
  ['get', (t) => t.get(new AbortController().signal).next()],
  ['list', (t) => t.list().next()],
  ['find', (t) => t.find('1')],
  ['getMessageCount', (t) => t.getMessageCount()],
];

afterEach(async () => {
  await closeAll(transports);
});

describe('unreachable server', () => {
  it.each(OPERATIONS)(
    '%s fails fast with TransportConnectionError that never shows the password',
    async (_, operation) => {
      const t = track(new SqlTransport({ dsn: UNREACHABLE_DSN, queueName: uniqueName('q'), serializer: serializer() }));
      const { error, elapsedMs } = await failure(() => operation(t));
      expect(error).toBeInstanceOf(TransportConnectionError);
      expect(elapsedMs).toBeLessThan(6000);
      expect(error.message).toMatch(/^PostgreSQL transport failed during "\w+": /);
      expectNoSecret(error, SECRET);
      expect(await settleWithin(t.close(), 3000)).toEqual({ value: undefined });
    },
    10000,
  );

  it('keeps a password given as a query parameter out of the error too', async () => {
    const t = track(
      new SqlTransport({ dsn: `postgres://postgres@127.0.0.1:59999/test?password=${SECRET}`, queueName: 'q' }),
    );
    const { error } = await failure(() => t.send(envelopeOf('x')));
    expect(error).toBeInstanceOf(TransportConnectionError);
    expectNoSecret(error, SECRET);
  });

  it('keeps the password of a malformed DSN out of the constructor error', () => {
    for (const dsn of [`postgres://postgres:${SECRET}@[bad/test`, `postgres://postgres:${SECRET}@host:99999999/test`]) {
      let error;
      try {
        new SqlTransport({ dsn });
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(TransportConnectionError);
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
      const t = track(
        new SqlTransport({ dsn: `postgres://postgres:${SECRET}@127.0.0.1:${port}/test`, connectTimeoutMs: 300 }),
      );
      const { error, elapsedMs } = await failure(() => t.send(envelopeOf('x')));
      expect(error).toBeInstanceOf(TransportConnectionError);
      expect(elapsedMs).toBeGreaterThanOrEqual(250);
      expect(elapsedMs).toBeLessThan(3000);
      expectNoSecret(error, SECRET);
      expect(await settleWithin(t.close(), 3000)).toEqual({ value: undefined });
    });

    it('fails within the default 5 s connect timeout, not after silent retries', async () => {
      const t = track(new SqlTransport({ dsn: `postgres://postgres:${SECRET}@127.0.0.1:${port}/test` }));
      const { error, elapsedMs } = await failure(() => t.getMessageCount());
      expect(error).toBeInstanceOf(TransportConnectionError);
      expect(elapsedMs).toBeLessThan(7000);
      expectNoSecret(error, SECRET);
    }, 12000);
  });
});

describe('password authentication (throwaway SCRAM cluster)', () => {
  const RIGHT = 'rightpass';
  const WRONG = 'wr0ngPassw0rd';
  let cluster;

  beforeAll(async () => {
    cluster = await startPasswordCluster({ password: RIGHT });
  }, 60000);

  afterAll(() => {
    cluster?.stop();
  });

  it.each(OPERATIONS)(
    '%s with a wrong password fails fast with TransportConnectionError that never shows it',
    async (_, operation) => {
      const t = track(new SqlTransport({ dsn: cluster.dsn(WRONG), queueName: uniqueName('q'), serializer: serializer() }));
      const { error, elapsedMs } = await failure(() => operation(t));
      expect(error).toBeInstanceOf(TransportConnectionError);
      expect(elapsedMs).toBeLessThan(6000);
      expect(error.message).toMatch(/authentication/i);
      expectNoSecret(error, WRONG);
      expect(await settleWithin(t.close(), 3000)).toEqual({ value: undefined });
    },
    10000,
  );

  it('never shows a percent-encoded wrong password, raw or decoded', async () => {
    const raw = 'wr0ng%40Pass%3Aw0rd';
    const t = track(
      new SqlTransport({ dsn: `postgres://postgres:${raw}@127.0.0.1:${cluster.port}/postgres`, queueName: 'q' }),
    );
    const { error } = await failure(() => t.send(envelopeOf('x')));
    expect(error).toBeInstanceOf(TransportConnectionError);
    expectNoSecret(error, raw, 'wr0ng@Pass:w0rd');
  });

  it('works with the right password (send, receive, ack)', async () => {
    const t = track(new SqlTransport({ dsn: cluster.dsn(RIGHT), queueName: uniqueName('q'), serializer: serializer() }));
    const sent = await t.send(envelopeOf('authenticated', 'ok'));
    const received = await receiveOne(t);
    expect(idOf(received)).toBe(idOf(sent));
    expect(received.message).toEqual(new TestMessage('authenticated', 'ok'));
    await t.ack(received);
    expect(await t.getMessageCount()).toBe(0);
  });

  it('logs nothing containing the password in a process that fails to authenticate', () => {
    const script = `
      const util = require('node:util');
      const { SqlTransport } = require(${JSON.stringify(ROOT)});
      const { Envelope } = require(${JSON.stringify(CORE)});
      class M { constructor(id) { this.id = id; } }
      (async () => {
        const t = new SqlTransport({ dsn: process.env.DSN, queueName: 'child' });
        try {
          await t.send(new Envelope(new M('x')));
          console.log('UNEXPECTED success');
        } catch (error) {
          console.log('name=' + error.name);
          console.log('message=' + error.message);
          console.error(error.stack);
          console.error(util.inspect(error, { depth: 10, showHidden: true }));
        }
        await t.close();
        console.log('closed');
      })();
    `;
    const result = spawnSync(process.execPath, ['-e', script], {
      cwd: ROOT,
      encoding: 'utf8',
      timeout: 15000,
      env: { ...process.env, DSN: cluster.dsn(WRONG), RUST_LOG: 'trace', RUST_BACKTRACE: 'full' },
    });
    const output = `${result.stdout}\n${result.stderr}`;
    expect(result.status).toBe(0);
    expect(result.stdout).toContain('name=TransportConnectionError');
    expect(result.stdout).toContain('closed');
    expect(output).not.toContain(WRONG);
  }, 20000);
});

describe('process exit after close()', () => {
  const TABLE = uniqueName('nmn_exit');
  const queues = [];

  beforeAll(async () => {
    await requireServer('postgres', POSTGRES_DSN);
    const t = new SqlTransport({ dsn: POSTGRES_DSN, tableName: TABLE });
    await t.setup();
    await t.close();
  });

  afterAll(async () => {
    await pgQuery(`DROP TABLE IF EXISTS ${TABLE}`);
  });

  const PRELUDE = `
    const { SqlTransport } = require(${JSON.stringify(ROOT)});
    const { Envelope, JsonSerializer } = require(${JSON.stringify(CORE)});
    class M { constructor(id) { this.id = id; } }
    const transportOptions = (extra = {}) => ({
      dsn: process.env.DSN,
      tableName: process.env.TABLE,
      queueName: process.env.QUEUE,
      serializer: new JsonSerializer([M]),
      ...extra,
    });
  `;

  const ROUND_TRIP = `
    async function roundTrip(report) {
      const t = new SqlTransport(transportOptions());
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

  /** Runs a script in a fresh node process; it must exit by itself (no process.exit). */
  function runChild(script, extraEnv = {}) {
    const queueName = uniqueName('q');
    queues.push(queueName);
    const app = uniqueName('nmn_child');
    const startedAt = Date.now();
    const result = spawnSync(process.execPath, ['-e', `${PRELUDE}\n${script}`], {
      cwd: ROOT,
      encoding: 'utf8',
      timeout: 10000,
      killSignal: 'SIGKILL',
      env: {
        ...process.env,
        DSN: `${POSTGRES_DSN}${POSTGRES_DSN.includes('?') ? '&' : '?'}application_name=${app}`,
        APP: app,
        TABLE,
        QUEUE: queueName,
        ...extraEnv,
      },
    });
    return { ...result, elapsedMs: Date.now() - startedAt, queueName };
  }

  async function rowsLeft(queueName) {
    const { rows } = await pgQuery(`SELECT count(*)::int AS n FROM ${TABLE} WHERE queue_name = $1`, [queueName]);
    return rows[0].n;
  }

  it('exits by itself after send, consume, ack and close', async () => {
    const result = runChild(`
      ${ROUND_TRIP}
      roundTrip(console.log).catch((error) => { console.error('FAILED', error); process.exitCode = 2; });
    `);
    expect(result.signal).toBeNull();
    expect(result.stderr).toBe('');
    expect(result.status).toBe(0);
    expect(result.stdout).toContain('acked child');
    expect(result.stdout).toContain('closed');
    expect(result.elapsedMs).toBeLessThan(5000);
    expect(await rowsLeft(result.queueName)).toBe(0);
  }, 15000);

  it('exits by itself after close() released a consumer blocked on an idle wait', async () => {
    const result = runChild(`
      const { Client } = require('pg');
      (async () => {
        const t = new SqlTransport(transportOptions({ pollIntervalMs: 60000, getNotifyTimeoutMs: 60000 }));
        const consumer = (async () => {
          for await (const envelope of t.get(new AbortController().signal)) console.log('UNEXPECTED ' + envelope);
          console.log('consumer ended');
        })();
        // Wait until the consumer's LISTEN is up, i.e. it is idle-blocked.
        const probe = new Client({ connectionString: ${JSON.stringify(POSTGRES_DSN)} });
        await probe.connect();
        for (let i = 0; i < 200; i += 1) {
          const { rows } = await probe.query(
            "SELECT 1 FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%'",
            [process.env.APP],
          );
          if (rows.length > 0) { console.log('idle'); break; }
          await new Promise((resolve) => setTimeout(resolve, 25));
        }
        await probe.end();
        await t.close();
        await consumer;
        console.log('closed');
      })().catch((error) => { console.error('FAILED', error); process.exitCode = 2; });
    `);
    expect(result.signal).toBeNull();
    expect(result.stderr).toBe('');
    expect(result.status).toBe(0);
    expect(result.stdout.split('\n')).toEqual(['idle', 'consumer ended', 'closed', '']);
    expect(result.elapsedMs).toBeLessThan(5000);
  }, 15000);

  it('exits by itself when the transport runs in a worker thread', async () => {
    const workerScript = `
      ${PRELUDE}
      ${ROUND_TRIP}
      const { parentPort } = require('node:worker_threads');
      roundTrip((line) => parentPort.postMessage(line)).catch((error) => {
        parentPort.postMessage('FAILED ' + error.stack);
        process.exitCode = 2;
      });
    `;
    const result = runChild(`
      const { Worker } = require('node:worker_threads');
      const worker = new Worker(${JSON.stringify(workerScript)}, { eval: true });
      worker.on('message', (line) => console.log('worker: ' + line));
      worker.on('error', (error) => { console.error('worker error', error); process.exitCode = 3; });
      worker.on('exit', (code) => {
        console.log('worker exit ' + code);
        if (code !== 0) process.exitCode = 4;
      });
    `);
    expect(result.signal).toBeNull();
    expect(result.stderr).toBe('');
    expect(result.status).toBe(0);
    expect(result.stdout.split('\n')).toEqual(['worker: acked child', 'worker: closed', 'worker exit 0', '']);
    expect(result.elapsedMs).toBeLessThan(5000);
    expect(await rowsLeft(result.queueName)).toBe(0);
  }, 15000);
});
