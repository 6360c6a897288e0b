'use strict';

// SqlTransport on MySQL/MariaDB when the server is not there or refuses us: typed, fast errors
// that never carry the DSN password (message, stack, cause chain, String(), util.inspect,
// logs); and processes that exit by themselves after close(), also from a worker thread.

const net = require('node:net');
const path = require('node:path');
const crypto = require('node:crypto');
const { spawnSync } = require('node:child_process');
const { TransportConnectionError, TransportError } = require('@schally/nestjs-messenger');
const { SqlTransport } = require('../..');
const { MYSQL_DSN, requireServer, uniqueName } = require('../support/servers');
const { mysqlQuery } = require('../support/mysql');
const {
  TestMessage,
  serializer,
  envelopeOf,
  idOf,
  receiveOne,
  pollUntil,
  settleWithin,
  closeAll,
  errorTexts,
} = require('../support/transport-helpers');

const ROOT = path.resolve(__dirname, '..', '..');
const CORE = require.resolve('@schally/nestjs-messenger');
const SECRET = 'hunter2secret';
const UNREACHABLE_DSN = `mysql://root:${SECRET}@127.0.0.1:59998/test`;
const SERVER = new URL(MYSQL_DSN);
const HOST_PORT = `${SERVER.hostname}:${SERVER.port || 3306}`;
const DATABASE = SERVER.pathname.replace(/^\//, '') || 'test';
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

/** Runs `start()`, which must reject; resolves `{ error, elapsedMs }`. */
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
      expect(error.message).toMatch(/^MySQL transport failed during "\w+": /);
      expectNoSecret(error, SECRET);
      expect(await settleWithin(t.close(), 3000)).toEqual({ value: undefined });
    },
    10000,
  );

  it('fails the same way on a mariadb:// DSN', async () => {
    const t = track(new SqlTransport({ dsn: UNREACHABLE_DSN.replace(/^mysql:/, 'mariadb:'), queueName: 'q' }));
    const { error, elapsedMs } = await failure(() => t.send(envelopeOf('x')));
    expect(error).toBeInstanceOf(TransportConnectionError);
    expect(elapsedMs).toBeLessThan(6000);
    expectNoSecret(error, SECRET);
  }, 10000);

  it('keeps failing typed on every later operation (no half-open state)', async () => {
    const t = track(new SqlTransport({ dsn: UNREACHABLE_DSN, queueName: 'q', serializer: serializer() }));
    for (let i = 0; i < 3; i += 1) {
      const { error } = await failure(() => t.send(envelopeOf(`x${i}`)));
      expect(error).toBeInstanceOf(TransportConnectionError);
      expectNoSecret(error, SECRET);
    }
  }, 20000);

  it('keeps the password of a malformed DSN out of the constructor error', () => {
    for (const dsn of [`mysql://root:${SECRET}@[bad/test`, `mariadb://root:${SECRET}@host:99999999/test`]) {
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
      const t = track(new SqlTransport({ dsn: `mysql://root:${SECRET}@127.0.0.1:${port}/test`, connectTimeoutMs: 300 }));
      const { error, elapsedMs } = await failure(() => t.send(envelopeOf('x')));
      expect(error).toBeInstanceOf(TransportConnectionError);
      expect(elapsedMs).toBeGreaterThanOrEqual(250);
      expect(elapsedMs).toBeLessThan(3000);
      expectNoSecret(error, SECRET);
      expect(await settleWithin(t.close(), 3000)).toEqual({ value: undefined });
    });

    it('fails within the default 5 s connect timeout, not after silent retries', async () => {
      const t = track(new SqlTransport({ dsn: `mysql://root:${SECRET}@127.0.0.1:${port}/test` }));
      const { error, elapsedMs } = await failure(() => t.getMessageCount());
      expect(error).toBeInstanceOf(TransportConnectionError);
      expect(elapsedMs).toBeLessThan(7000);
      expectNoSecret(error, SECRET);
    }, 12000);
  });
});

describe('password authentication', () => {
  const RIGHT = 'rightpass';
  const WRONG = 'wr0ngPassw0rd';
  // Unique per run, so parallel files and earlier runs cannot interfere.
  const USER = `nmn_pw_${crypto.randomBytes(4).toString('hex')}`;
  const HOSTS = ['%', 'localhost', '127.0.0.1'];
  const dsn = (password, database = DATABASE) =>
    `mysql://${USER}:${encodeURIComponent(password)}@${HOST_PORT}/${database}`;

  beforeAll(async () => {
    await requireServer('mysql', MYSQL_DSN);
    for (const host of HOSTS) {
      await mysqlQuery(`DROP USER IF EXISTS '${USER}'@'${host}'`);
      await mysqlQuery(`CREATE USER '${USER}'@'${host}' IDENTIFIED BY '${RIGHT}'`);
      await mysqlQuery(`GRANT ALL ON \`${DATABASE}\`.* TO '${USER}'@'${host}'`);
    }
  });

  afterAll(async () => {
    for (const host of HOSTS) await mysqlQuery(`DROP USER IF EXISTS '${USER}'@'${host}'`);
  });

  it.each(OPERATIONS)(
    '%s with a wrong password fails fast with TransportConnectionError that never shows it',
    async (_, operation) => {
      const t = track(new SqlTransport({ dsn: dsn(WRONG), queueName: uniqueName('q'), serializer: serializer() }));
      const { error, elapsedMs } = await failure(() => operation(t));
      expect(error).toBeInstanceOf(TransportConnectionError);
      expect(elapsedMs).toBeLessThan(6000);
      expect(error.message).toMatch(/^MySQL transport failed during "\w+": /);
      expect(error.message).toMatch(/access denied/i);
      expectNoSecret(error, WRONG);
      expect(await settleWithin(t.close(), 3000)).toEqual({ value: undefined });
    },
    10000,
  );

  it('never shows a percent-encoded wrong password, raw or decoded', async () => {
    const raw = 'wr0ng%40Pass%3Aw0rd';
    const t = track(new SqlTransport({ dsn: `mysql://${USER}:${raw}@${HOST_PORT}/${DATABASE}`, queueName: 'q' }));
    const { error } = await failure(() => t.send(envelopeOf('x')));
    expect(error).toBeInstanceOf(TransportConnectionError);
    expectNoSecret(error, raw, 'wr0ng@Pass:w0rd');
  });

  it('works with the right password (send, receive, ack)', async () => {
    const table = uniqueName('nmn_mpw');
    try {
      const t = track(
        new SqlTransport({ dsn: dsn(RIGHT), tableName: table, queueName: uniqueName('q'), serializer: serializer() }),
      );
      const sent = await t.send(envelopeOf('authenticated', 'ok'));
      const received = await receiveOne(t);
      expect(idOf(received)).toBe(idOf(sent));
      expect(received.message).toEqual(new TestMessage('authenticated', 'ok'));
      await t.ack(received);
      expect(await t.getMessageCount()).toBe(0);
      await t.close();
    } finally {
      await mysqlQuery(`DROP TABLE IF EXISTS ${table}`);
    }
  });

  it('fails with TransportConnectionError for a database the user may not use', async () => {
    const t = track(new SqlTransport({ dsn: dsn(RIGHT, 'mysql'), queueName: 'q', serializer: serializer() }));
    const { error, elapsedMs } = await failure(() => t.send(envelopeOf('x')));
    expect(error).toBeInstanceOf(TransportConnectionError);
    expect(elapsedMs).toBeLessThan(6000);
    expect(error.message).toMatch(/access denied/i);
    expectNoSecret(error, RIGHT);
  });

  it.each([1, 2, 3])('closing all %i transports of a DSN gives back every server connection', async (n) => {
    const connections = async () => {
      const [row] = await mysqlQuery('SELECT COUNT(*) AS n FROM information_schema.processlist WHERE USER = ?', [USER]);
      return Number(row.n);
    };
    // Connections of an earlier case are gone first (or that case failed already).
    await pollUntil(async () => (await connections()) === 0, { timeoutMs: 3000 });
    const table = uniqueName('nmn_mrel');
    try {
      const group = Array.from({ length: n }, () =>
        track(new SqlTransport({ dsn: dsn(RIGHT), tableName: table, queueName: 'q', serializer: serializer() })),
      );
      await Promise.all(group.flatMap((t, i) => [t.send(envelopeOf(`r-${i}`)), t.getMessageCount()]));
      expect(await connections()).toBeGreaterThan(0);
      for (const t of group) await t.close();
      await pollUntil(async () => (await connections()) === 0, { timeoutMs: 3000 });
      expect([n, await connections()]).toEqual([n, 0]);
    } finally {
      await mysqlQuery(`DROP TABLE IF EXISTS ${table}`);
    }
  }, 15000);

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
          console.error(String(error));
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
      env: { ...process.env, DSN: dsn(WRONG), RUST_LOG: 'trace', RUST_BACKTRACE: 'full' },
    });
    const output = `${result.stdout}\n${result.stderr}`;
    expect(result.status).toBe(0);
    expect(result.stdout).toContain('name=TransportConnectionError');
    expect(result.stdout).toMatch(/access denied/i);
    expect(result.stdout).toContain('closed');
    expect(output).not.toContain(WRONG);
  }, 20000);
});

describe('unknown database', () => {
  beforeAll(async () => {
    await requireServer('mysql', MYSQL_DSN);
  });

  it.each(OPERATIONS)('%s fails with TransportConnectionError', async (_, operation) => {
    const missing = uniqueName('nmn_nodb');
    const url = new URL(MYSQL_DSN);
    url.pathname = `/${missing}`;
    const t = track(new SqlTransport({ dsn: url.toString(), queueName: 'q', serializer: serializer() }));
    const { error, elapsedMs } = await failure(() => operation(t));
    expect(error).toBeInstanceOf(TransportConnectionError);
    expect(error).toBeInstanceOf(TransportError);
    expect(elapsedMs).toBeLessThan(6000);
    expect(error.message).toMatch(/^MySQL transport failed during "\w+": /);
    expect(error.message).toMatch(/unknown database/i);
    expect(await settleWithin(t.close(), 3000)).toEqual({ value: undefined });
  });
});

describe('process exit after close()', () => {
  const TABLE = uniqueName('nmn_mexit');

  beforeAll(async () => {
    await requireServer('mysql', MYSQL_DSN);
    const t = new SqlTransport({ dsn: MYSQL_DSN, tableName: TABLE });
    await t.setup();
    await t.close();
  });

  afterAll(async () => {
    await mysqlQuery(`DROP TABLE IF EXISTS ${TABLE}`);
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
    const startedAt = Date.now();
    const result = spawnSync(process.execPath, ['-e', `${PRELUDE}\n${script}`], {
      cwd: ROOT,
      encoding: 'utf8',
      timeout: 10000,
      killSignal: 'SIGKILL',
      env: { ...process.env, DSN: MYSQL_DSN, TABLE, QUEUE: queueName, ...extraEnv },
    });
    return { ...result, elapsedMs: Date.now() - startedAt, queueName };
  }

  async function rowsLeft(queueName) {
    const [row] = await mysqlQuery(`SELECT COUNT(*) AS n FROM ${TABLE} WHERE queue_name = ?`, [queueName]);
    return Number(row.n);
  }

  it.each([
    ['mysql://', MYSQL_DSN],
    ['mariadb://', MYSQL_DSN.replace(/^mysql:/, 'mariadb:')],
  ])('exits by itself after send, consume, ack and close (%s)', async (_, dsn) => {
    const result = runChild(
      `
      ${ROUND_TRIP}
      roundTrip(console.log).catch((error) => { console.error('FAILED', error); process.exitCode = 2; });
    `,
      { DSN: dsn },
    );
    expect(result.signal).toBeNull();
    expect(result.stderr).toBe('');
    expect(result.status).toBe(0);
    expect(result.stdout.split('\n')).toEqual(['acked child', 'closed', '']);
    expect(result.elapsedMs).toBeLessThan(5000);
    expect(await rowsLeft(result.queueName)).toBe(0);
  }, 15000);

  it('exits by itself after close() released a consumer blocked on an idle wait', async () => {
    const result = runChild(`
      (async () => {
        const t = new SqlTransport(transportOptions({ pollIntervalMs: 60000 }));
        const consumer = (async () => {
          for await (const envelope of t.get(new AbortController().signal)) console.log('UNEXPECTED ' + envelope);
          console.log('consumer ended');
        })();
        // The count has run once the table is set up; give the consumer time to go idle.
        await t.getMessageCount();
        await new Promise((resolve) => setTimeout(resolve, 300));
        console.log('idle');
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

  it('exits by itself after a failed connection and close()', async () => {
    const result = runChild(
      `
      (async () => {
        const t = new SqlTransport(transportOptions());
        try { await t.send(new Envelope(new M('x'))); } catch (error) { console.log(error.name); }
        await t.close();
        console.log('closed');
      })().catch((error) => { console.error('FAILED', error); process.exitCode = 2; });
    `,
      { DSN: UNREACHABLE_DSN },
    );
    expect(result.signal).toBeNull();
    expect(result.stderr).toBe('');
    expect(result.status).toBe(0);
    expect(result.stdout.split('\n')).toEqual(['TransportConnectionError', 'closed', '']);
    expect(result.elapsedMs).toBeLessThan(8000);
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
