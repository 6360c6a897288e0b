'use strict';

// SqlTransport on SQLite (the embedded default) beyond the conformance suite: the shared
// SqlTransport cases (shared/sql-transport.suite.js) on a file of its own, plus what only an
// embedded file engine has: construction that creates no file, WAL mode, DSN forms (relative,
// absolute, :memory:), a busy file locked by another process, file descriptors released by
// close(). Raw rows are written and inspected with the sqlite3 CLI; the tests
// that need it fail with an install hint when it is absent. Multi-process consumers are in
// sqlite.processes.test.js; path errors and process exit after close() in sqlite.errors.test.js.

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { TransportError, TransportNotFoundError } = require('@schally/nestjs-messenger');
const { SqlTransport } = require('../..');
const { sqlite, uniqueName } = require('../support/engines');
const {
  TestMessage,
  envelopeOf,
  idOf,
  receiveUpTo,
  receiveOne,
  pollUntil,
  settleWithin,
} = require('../support/transport-helpers');
const { ROOT, CORE } = require('../support/child');
const { sqlTransportSuite } = require('../shared/sql-transport.suite');

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
