'use strict';

// SqlTransport on SQLite (the embedded default) beyond the conformance suite: the shared
// SqlTransport cases (shared/sql-transport.suite.js) on a file of its own, plus what only an
// embedded file engine has: construction that creates no file, WAL mode, DSN forms (relative,
// absolute, :memory:), a busy file locked by another process, file descriptors released by
// close(), and path errors. Raw rows are written and inspected with the sqlite3 CLI; the tests
// that need it fail with an install hint when it is absent. Multi-process consumers are in
// sqlite.processes.test.js; process exit after close() in sqlite.errors.test.js.

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { TransportConnectionError, TransportError, TransportNotFoundError } = require('@schally/nestjs-messenger');
const { SqlTransport } = require('../..');
const { sqlite, uniqueName } = require('../support/engines');
const {
  TestMessage,
  envelopeOf,
  transportOperations,
  idOf,
  receiveUpTo,
  receiveOne,
  pollUntil,
  settleWithin,
  throwsSync,
  failure,
  collect,
} = require('../support/transport-helpers');
const { sqlTransportSuite } = require('../shared/sql-transport.suite');

const ROOT = path.resolve(__dirname, '..', '..');
const CORE = require.resolve('@schally/nestjs-messenger');

const { DSN, TABLE, transport, lastQueue } = sqlTransportSuite(sqlite);

const directories = [];

function temporaryDirectory(prefix) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `${prefix}-`));
  directories.push(dir);
  return dir;
}

afterAll(() => {
  for (const dir of directories) fs.rmSync(dir, { recursive: true, force: true });
});

describe('construction and options', () => {
  it('opens nothing in the constructor (the file is not created by construction and close)', async () => {
    const dir = temporaryDirectory('nmn-lazy');
    const file = path.join(dir, 'never.db');
    const t = new SqlTransport({ dsn: `sqlite://${file}` });
    expect(await settleWithin(t.close(), 3000)).toEqual({ value: undefined });
    expect(fs.existsSync(file)).toBe(false);
    const unopenable = new SqlTransport({ dsn: 'sqlite:///proc/nope/x.db' });
    expect(await settleWithin(unopenable.close(), 3000)).toEqual({ value: undefined });
  });

  it('creates its file and table on first use (autoSetup defaults to true), in WAL mode', async () => {
    const dir = temporaryDirectory('nmn-auto');
    const file = path.join(dir, 'auto.db');
    const table = uniqueName('nmn_sauto');
    const t = transport({ dsn: `sqlite://${file}`, tableName: table });
    expect(fs.existsSync(file)).toBe(false);
    await t.send(envelopeOf('auto-1'));
    expect(fs.existsSync(file)).toBe(true);
    expect(await sqlite.admin(file).tableExists(table)).toBe(true);
    expect(await sqlite.admin(file).query('PRAGMA journal_mode;')).toEqual([{ journal_mode: 'wal' }]);
    const received = await receiveOne(t);
    await t.ack(received);
  });
});

describe('DSN forms', () => {
  /** Runs a script in a fresh node process with the given working directory. */
  function runIn(cwd, script) {
    const startedAt = Date.now();
    const result = spawnSync(
      process.execPath,
      [
        '-e',
        `
        const { SqlTransport } = require(${JSON.stringify(ROOT)});
        const { Envelope, JsonSerializer, TransportMessageIdStamp } = require(${JSON.stringify(CORE)});
        class M { constructor(id) { this.id = id; } }
        const options = (dsn) => ({ dsn, queueName: 'forms', serializer: new JsonSerializer([M]) });
        async function roundTrip(t, id) {
          const sent = await t.send(new Envelope(new M(id)));
          for await (const envelope of t.get(new AbortController().signal)) {
            await t.ack(envelope);
            if (envelope.message.id !== id) throw new Error('got ' + envelope.message.id);
            break;
          }
          return String(sent.last(TransportMessageIdStamp).id);
        }
        ${script}
      `,
      ],
      { cwd, encoding: 'utf8', timeout: 15000, killSignal: 'SIGKILL' },
    );
    return { ...result, elapsedMs: Date.now() - startedAt };
  }

  it('resolves relative paths (sqlite://rel.db, sqlite:rel.db, sqlite://sub/dir.db) against the working directory when built', async () => {
    const cwd = temporaryDirectory('nmn-rel');
    fs.mkdirSync(path.join(cwd, 'sub'));
    fs.mkdirSync(path.join(cwd, 'elsewhere'));
    const result = runIn(
      cwd,
      `
      (async () => {
        const built = [
          new SqlTransport(options('sqlite://rel.db')),
          new SqlTransport(options('sqlite:colon.db')),
          new SqlTransport(options('sqlite://sub/nested.db')),
        ];
        // Resolution happened at construction: a later chdir does not move these files.
        process.chdir('elsewhere');
        const late = new SqlTransport(options('sqlite://late.db'));
        for (const [i, t] of [...built, late].entries()) {
          console.log(await roundTrip(t, 'm' + i));
          await t.close();
        }
        console.log('done');
      })().catch((error) => { console.error('FAILED', error); process.exitCode = 2; });
    `,
    );
    expect(result.stderr).toBe('');
    expect(result.status).toBe(0);
    expect(result.stdout.split('\n')).toEqual(['1', '1', '1', '1', 'done', '']);
    for (const file of ['rel.db', 'colon.db', 'sub/nested.db', 'elsewhere/late.db']) {
      expect(fs.existsSync(path.join(cwd, file))).toBe(true);
      expect(await sqlite.admin(path.join(cwd, file)).tableExists('messenger_messages')).toBe(true);
    }
    for (const file of ['elsewhere/rel.db', 'elsewhere/colon.db', 'late.db']) {
      expect(fs.existsSync(path.join(cwd, file))).toBe(false);
    }
  }, 20000);

  it('opens an absolute path given as sqlite:///abs/path.db', async () => {
    const dir = temporaryDirectory('nmn-abs');
    const file = path.join(dir, 'abs.db');
    const t = transport({ dsn: `sqlite://${file}` });
    expect(`sqlite://${file}`).toMatch(/^sqlite:\/\/\//);
    const sent = await t.send(envelopeOf('abs'));
    expect(fs.existsSync(file)).toBe(true);
    const [row] = await sqlite.admin(file).query(`SELECT CAST(id AS TEXT) AS id, body FROM ${TABLE};`);
    expect(row).toEqual({ id: idOf(sent), body: '{"id":"abs","payload":""}' });
    const received = await receiveOne(t);
    await t.ack(received);
  });

  it('shares sqlite://:memory: between the transports of one process', async () => {
    const queueName = uniqueName('q');
    const a = transport({ dsn: 'sqlite://:memory:', queueName });
    const b = transport({ dsn: 'sqlite://:memory:', queueName });
    await a.setup();
    const sent = await a.send(envelopeOf('mem-1'));
    expect(await b.getMessageCount()).toBe(1);
    const received = await receiveOne(b);
    expect(idOf(received)).toBe(idOf(sent));
    expect(received.message).toEqual(new TestMessage('mem-1'));
    await b.ack(received);
    expect(await a.getMessageCount()).toBe(0);
  });

  it('keeps sqlite://:memory: consistent under concurrent use (every pooled connection sees one database)', async () => {
    const queueName = uniqueName('q');
    const a = transport({ dsn: 'sqlite://:memory:', queueName });
    const b = transport({ dsn: 'sqlite://:memory:', queueName });
    const settled = await Promise.allSettled([
      a.setup(),
      ...Array.from({ length: 20 }, (_, i) => a.send(envelopeOf(`mem-${i}`))),
      ...Array.from({ length: 4 }, () => b.getMessageCount()),
    ]);
    const failures = settled.filter((s) => s.status === 'rejected').map((s) => s.reason.message);
    expect(failures).toEqual([]);
    const received = await receiveUpTo(b, 20, 3000);
    expect(received.map((e) => e.message.id).sort()).toEqual(Array.from({ length: 20 }, (_, i) => `mem-${i}`).sort());
    await Promise.all(received.map((e) => b.ack(e)));
    expect(await a.getMessageCount()).toBe(0);
  });
});

describe('busy database (another process holds the write lock)', () => {
  // Each test has a file of its own: the busy timeout (connectTimeoutMs) belongs to the pool,
  // which is shared by every transport of the process on the same DSN.
  function busyFile() {
    return path.join(temporaryDirectory('nmn-busy'), 'busy.db');
  }

  it('a send waits for the lock and succeeds once the other transaction commits', async () => {
    const file = busyFile();
    const t = transport({ dsn: `sqlite://${file}` });
    expect(await t.getMessageCount()).toBe(0);
    const lock = await sqlite.admin(file).holdWriteLock();
    let sending;
    try {
      sending = t.send(envelopeOf('patient'));
      expect(await settleWithin(sending, 300)).toBe('timeout');
    } finally {
      await lock.release();
    }
    const { value: sent } = await settleWithin(sending, 3000);
    expect(sent).toBeDefined();
    const received = await receiveOne(t);
    expect(idOf(received)).toBe(idOf(sent));
    await t.ack(received);
  });

  it('a send fails with TransportError after connectTimeoutMs (the busy timeout), writing nothing', async () => {
    const file = busyFile();
    const t = transport({ dsn: `sqlite://${file}`, connectTimeoutMs: 300 });
    const queueName = lastQueue();
    expect(await t.getMessageCount()).toBe(0);
    const lock = await sqlite.admin(file).holdWriteLock();
    let outcome;
    const startedAt = Date.now();
    try {
      outcome = await settleWithin(t.send(envelopeOf('impatient')), 3000);
    } finally {
      await lock.release();
    }
    const elapsed = Date.now() - startedAt;
    expect(outcome.error).toBeInstanceOf(TransportError);
    expect(outcome.error).not.toBeInstanceOf(TransportNotFoundError);
    expect(outcome.error.message).toMatch(/^SQLite transport failed during "send": .*locked/);
    expect(elapsed).toBeGreaterThanOrEqual(250);
    expect(elapsed).toBeLessThan(3000);
    expect(await sqlite.admin(file).count(TABLE, queueName)).toBe(0);

    // Usable again once the lock is gone.
    const sent = await t.send(envelopeOf('after-lock'));
    const received = await receiveOne(t);
    expect(idOf(received)).toBe(idOf(sent));
    await t.ack(received);
  });
});

describe('connections after close()', () => {
  /** How many of this process's file descriptors point at `file` (or its -wal/-shm). */
  function openDescriptors(file) {
    let count = 0;
    for (const fd of fs.readdirSync('/proc/self/fd')) {
      try {
        if (fs.readlinkSync(`/proc/self/fd/${fd}`).startsWith(file)) count += 1;
      } catch {
        // Gone meanwhile (readdir's own descriptor).
      }
    }
    return count;
  }

  it.each([1, 2, 3])('closing all %i transports of a DSN releases the file (no descriptor left open)', async (n) => {
    const file = path.join(temporaryDirectory('nmn-release'), 'release.db');
    const queueName = uniqueName('q');
    const group = Array.from({ length: n }, () => transport({ dsn: `sqlite://${file}`, queueName }));
    await Promise.all(group.flatMap((t, i) => [t.send(envelopeOf(`r-${i}`)), t.getMessageCount()]));
    expect(openDescriptors(file)).toBeGreaterThan(0);
    for (const t of group) await t.close();
    const released = await pollUntil(() => openDescriptors(file) === 0, { timeoutMs: 3000 });
    expect([n, openDescriptors(file)]).toEqual([n, 0]);
    expect(released).toBe(true);
  });
});

describe('errors', () => {
  const OPERATIONS = transportOperations();

  describe.each([
    ['in a directory that does not exist', () => 'sqlite:///proc/nope/x.db'],
    ['where nothing may be created', () => 'sqlite:///proc/x.db'],
    ['below a regular file', () => `${DSN}/x.db`],
    ['that is a directory', () => `sqlite://${path.dirname(DSN.slice('sqlite://'.length))}`],
  ])('a path %s', (_, dsn) => {
    it.each(OPERATIONS)('%s fails fast with TransportConnectionError', async (op, operation) => {
      const t = transport({ dsn: dsn() });
      const { error, elapsedMs } = await failure(() => operation(t));
      expect(error).toBeInstanceOf(TransportConnectionError);
      expect(error.message).toMatch(/^SQLite transport failed during "\w+": /);
      expect(elapsedMs).toBeLessThan(3000);
      expect(await settleWithin(t.close(), 3000)).toEqual({ value: undefined });
    });
  });

  it('fails with TransportConnectionError for a file that is not a database', async () => {
    const dir = temporaryDirectory('nmn-notdb');
    const file = path.join(dir, 'garbage.db');
    fs.writeFileSync(file, 'this is not an SQLite database, just text. '.repeat(200));
    for (const [, operation] of OPERATIONS) {
      const t = transport({ dsn: `sqlite://${file}` });
      const { error } = await failure(() => operation(t));
      expect(error).toBeInstanceOf(TransportConnectionError);
      expect(error.message).toMatch(/not a database/);
    }
    expect(fs.readFileSync(file, 'utf8').startsWith('this is not an SQLite database')).toBe(true);
  });

  it.each([
    ['no path (sqlite://)', 'sqlite://'],
    ['no path (sqlite:)', 'sqlite:'],
    ['a query string', 'sqlite://x.db?mode=ro'],
    ['a query string on an absolute path', 'sqlite:///tmp/x.db?cache=shared'],
    ['a fragment', 'sqlite:x.db#frag'],
  ])('rejects a DSN with %s as TransportConnectionError at construction', (_, dsn) => {
    const error = throwsSync(() => new SqlTransport({ dsn }));
    expect(error).toBeInstanceOf(TransportConnectionError);
    expect(error.message).toMatch(/SQLite DSN/);
  });
});

describe('process exit after close()', () => {
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
      env: { ...process.env, DSN, TABLE, QUEUE: queueName, ...extraEnv },
    });
    return { ...result, elapsedMs: Date.now() - startedAt, queueName };
  }

  async function rowsLeft(queueName) {
    const t = transport({ queueName });
    return (await collect(t.list())).length;
  }

  it.each([
    ['a file', () => DSN],
    ['sqlite://:memory:', () => 'sqlite://:memory:'],
  ])('exits by itself after send, consume, ack and close (%s)', async (_, dsn) => {
    const result = runChild(
      `
      ${ROUND_TRIP}
      roundTrip(console.log).catch((error) => { console.error('FAILED', error); process.exitCode = 2; });
    `,
      { DSN: dsn() },
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
