'use strict';

// SqlTransport on SQLite (the embedded default) beyond the conformance suite: options, DSN
// forms (relative, absolute, :memory:), typed errors, schema life cycle (autoSetup, dropped
// tables), poison rows, storage format, batched and concurrent sends, queue isolation, FIFO,
// crash recovery, prefetch release, delayed redelivery, list/find/count, idle waits, busy
// locks held by another process, get()/close(), and process exit. The PostgreSQL file of the
// same name is the model. Raw rows are written and inspected with the sqlite3 CLI; the tests
// that need it fail with an install hint when it is absent. Multi-process consumers are in
// sqlite.processes.test.js.

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawn, spawnSync } = require('node:child_process');
const {
  BusNameStamp,
  DelayStamp,
  InvalidArgumentError,
  MessengerError,
  ReceivedStamp,
  RedeliveryStamp,
  TransportConnectionError,
  TransportError,
  TransportMessageIdStamp,
  TransportNotFoundError,
} = require('@schally/nestjs-messenger');
const { SqlTransport } = require('../..');
const { uniqueName, temporarySqliteDsn } = require('../support/servers');
const {
  TestMessage,
  serializer,
  envelopeOf,
  idOf,
  receiveUpTo,
  receiveWithin,
  receiveOne,
  pollUntil,
  settleWithin,
  closeAll,
} = require('../support/transport-helpers');

const ROOT = path.resolve(__dirname, '..', '..');
const CORE = require.resolve('@schally/nestjs-messenger');
const SQLITE3 = 'sqlite3';
const HAVE_CLI = spawnSync(SQLITE3, ['-version'], { encoding: 'utf8' }).status === 0;
/**
 * Tests that write or inspect rows behind the transport's back need the sqlite3 CLI; without
 * it they fail (never skip) and say how to get it (.ci/run installs it).
 */
const itCli = (title, fn, timeout) =>
  it(
    title,
    async () => {
      if (!HAVE_CLI) throw new Error('This test needs the sqlite3 CLI: apt-get install -y sqlite3');
      return fn();
    },
    timeout,
  );

const DSN = temporarySqliteDsn('nmn-str');
const DB_PATH = DSN.slice('sqlite://'.length);
const DB_DIR = path.dirname(DB_PATH);
/** The same file under another DSN string: a pool of its own, whose sends wake nobody here. */
const OTHER_DSN = `sqlite://${DB_DIR}/./${path.basename(DB_PATH)}`;
const directories = [DB_DIR];

/** The table most tests share (each on its own queue); DDL tests use their own tables. */
const TABLE = uniqueName('nmn_str');
const transports = [];
const queues = [];
const consumers = [];
const NOW_SQL = "strftime('%Y-%m-%d %H:%M:%f', 'now')";

/** A transport on DSN and TABLE (unless overridden), closed after the test. */
function transport(options = {}) {
  const queueName = options.queueName ?? uniqueName('q');
  queues.push(queueName);
  const t = new SqlTransport({
    dsn: DSN,
    tableName: TABLE,
    serializer: serializer(),
    ...options,
    queueName,
  });
  transports.push(t);
  return t;
}

function lastQueue() {
  return queues[queues.length - 1];
}

function freshTable(prefix) {
  return uniqueName(prefix);
}

function temporaryDirectory(prefix) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `${prefix}-`));
  directories.push(dir);
  return dir;
}

/** An SQL literal (the CLI takes no bound parameters). */
function lit(value) {
  if (value === null) return 'NULL';
  if (typeof value === 'number') return String(value);
  return `'${String(value).replace(/'/g, "''")}'`;
}

/**
 * Runs SQL with the sqlite3 CLI on `db` (a separate connection, as another process would
 * have). With `json`, returns the rows of the (single) SELECT.
 */
function sqlite(statements, { json = false, db = DB_PATH } = {}) {
  return new Promise((resolve, reject) => {
    const args = ['-bail', '-cmd', '.timeout 5000'];
    if (json) args.push('-json');
    args.push(db);
    const child = spawn(SQLITE3, args, { stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.setEncoding('utf8').on('data', (chunk) => (out += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk) => (err += chunk));
    child.on('error', reject);
    child.on('close', (code) => {
      if (code !== 0) {
        reject(new Error(`sqlite3 exited with ${code}: ${err}`));
      } else if (!json) {
        resolve(out);
      } else {
        resolve(out.trim() === '' ? [] : JSON.parse(out));
      }
    });
    child.stdin.end(statements);
  });
}

async function rows(table, queueName) {
  return sqlite(
    `SELECT CAST(id AS TEXT) AS id, queue_name, body, headers, delivered_at FROM ${table}
      WHERE queue_name = ${lit(queueName)} ORDER BY ${table}.id;`,
    { json: true },
  );
}

/**
 * The queue's rows once there are `count` of them, or as they are after 2 s: acks may be
 * written behind (recorded at once, deleted by the next flush), so a raw look at the table
 * right after an ack polls.
 */
async function settledRows(table, queueName, count) {
  let last;
  await pollUntil(
    async () => {
      last = await rows(table, queueName);
      return last.length === count;
    },
    { timeoutMs: 2000 },
  );
  return last;
}

async function tableExists(table, db = DB_PATH) {
  const [row] = await sqlite(`SELECT COUNT(*) AS n FROM sqlite_master WHERE type = 'table' AND name = ${lit(table)};`, {
    json: true,
    db,
  });
  return row.n > 0;
}

/** An upstream-form row written behind the transport's back (as another writer would). */
async function insertRaw(table, queueName, body, headers) {
  await sqlite(
    `INSERT INTO ${table} (queue_name, body, headers, created_at, available_at)
     VALUES (${lit(queueName)}, ${lit(body)}, ${lit(headers)}, ${NOW_SQL}, ${NOW_SQL});`,
  );
}

/** Milliseconds since the epoch of a stored `YYYY-MM-DD HH:MM:SS.SSS` UTC text. */
function utcMs(text) {
  return Date.parse(`${text.replace(' ', 'T')}Z`);
}

async function collect(iterable) {
  const items = [];
  for await (const item of iterable) items.push(item);
  return items;
}

async function rejectionOf(promise) {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error('expected the promise to reject');
}

function throwsSync(fn) {
  try {
    fn();
  } catch (error) {
    return error;
  }
  throw new Error('expected the call to throw');
}

/** A long-running get() loop that records each delivery and when it arrived. */
function startConsumer(t) {
  const controller = new AbortController();
  const arrivals = [];
  const done = (async () => {
    for await (const envelope of t.get(controller.signal)) {
      arrivals.push({ envelope, at: Date.now() });
    }
    return 'ended';
  })();
  const consumer = {
    arrivals,
    done,
    async waitFor(count, timeoutMs) {
      await pollUntil(() => arrivals.length >= count, { timeoutMs, intervalMs: 5 });
      return arrivals.slice();
    },
    async stop() {
      controller.abort();
      await settleWithin(done, 5000);
      for (const { envelope } of arrivals.splice(0)) await t.ack(envelope).catch(() => {});
    },
  };
  consumers.push(consumer);
  return consumer;
}

/**
 * Another process (the sqlite3 CLI) holding the database's write lock in an open
 * transaction until `release()`.
 */
async function holdWriteLock(db = DB_PATH) {
  const child = spawn(SQLITE3, [db], { stdio: ['pipe', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.setEncoding('utf8').on('data', (chunk) => (out += chunk));
  child.stderr.setEncoding('utf8').on('data', (chunk) => (out += chunk));
  const exited = new Promise((resolve) => child.once('close', resolve));
  child.stdin.write(".timeout 5000\nBEGIN IMMEDIATE;\nSELECT 'locked';\n");
  const locked = await pollUntil(() => out.includes('locked'), { timeoutMs: 5000, intervalMs: 5 });
  if (!locked) throw new Error(`sqlite3 did not take the lock: ${out}`);
  return {
    async release() {
      child.stdin.end('COMMIT;\n');
      await exited;
    },
  };
}

beforeAll(async () => {
  const t = new SqlTransport({ dsn: DSN, tableName: TABLE });
  await t.setup();
  await t.close();
});

afterEach(async () => {
  for (const consumer of consumers.splice(0)) await consumer.stop();
  await closeAll(transports);
  const names = queues.splice(0);
  if (HAVE_CLI && names.length > 0) {
    await sqlite(`DELETE FROM ${TABLE} WHERE queue_name IN (${names.map(lit).join(', ')});`);
  }
});

afterAll(() => {
  for (const dir of directories) fs.rmSync(dir, { recursive: true, force: true });
});

describe('construction and options', () => {
  it('constructs with every default and closes cleanly before any use', async () => {
    const t = new SqlTransport({ dsn: DSN });
    expect(await settleWithin(t.close(), 3000)).toEqual({ value: undefined });
  });

  it('opens nothing in the constructor (the file is not created by construction and close)', async () => {
    const dir = temporaryDirectory('nmn-lazy');
    const file = path.join(dir, 'never.db');
    const t = new SqlTransport({ dsn: `sqlite://${file}` });
    expect(await settleWithin(t.close(), 3000)).toEqual({ value: undefined });
    expect(fs.existsSync(file)).toBe(false);
    const unopenable = new SqlTransport({ dsn: 'sqlite:///proc/nope/x.db' });
    expect(await settleWithin(unopenable.close(), 3000)).toEqual({ value: undefined });
  });

  itCli('defaults to table messenger_messages, queue "default" and the JsonSerializer wire form', async () => {
    const t = new SqlTransport({ dsn: DSN, serializer: serializer() });
    transports.push(t);
    const sent = await t.send(envelopeOf('defaults-1', 'p'));
    const id = idOf(sent);
    try {
      const stored = await sqlite(
        `SELECT queue_name, body, headers, delivered_at FROM messenger_messages WHERE id = ${Number(id)};`,
        { json: true },
      );
      expect(stored).toHaveLength(1);
      expect(stored[0].queue_name).toBe('default');
      expect(stored[0].body).toBe('{"id":"defaults-1","payload":"p"}');
      expect(JSON.parse(stored[0].headers)).toEqual({ 'X-Message-Type': 'TestMessage', 'X-Message-Stamps': '[]' });
      expect(stored[0].delivered_at).toBeNull();
    } finally {
      await t.ack(sent);
    }
    const gone = await pollUntil(
      async () => (await sqlite(`SELECT 1 AS x FROM messenger_messages WHERE id = ${Number(id)};`, { json: true })).length === 0,
      { timeoutMs: 2000 },
    );
    expect(gone).toBe(true);
  });

  itCli('creates its file and table on first use (autoSetup defaults to true), in WAL mode', async () => {
    const dir = temporaryDirectory('nmn-auto');
    const file = path.join(dir, 'auto.db');
    const table = freshTable('nmn_sauto');
    const t = transport({ dsn: `sqlite://${file}`, tableName: table });
    expect(fs.existsSync(file)).toBe(false);
    await t.send(envelopeOf('auto-1'));
    expect(fs.existsSync(file)).toBe(true);
    expect(await tableExists(table, file)).toBe(true);
    expect(await sqlite('PRAGMA journal_mode;', { json: true, db: file })).toEqual([{ journal_mode: 'wal' }]);
    const received = await receiveOne(t);
    await t.ack(received);
  });

  it('writes the ReceivedStamp with the queue name unless a name is given', async () => {
    const plain = transport();
    await plain.send(envelopeOf('named-1'));
    const received = await receiveOne(plain);
    expect(received.last(ReceivedStamp)).toEqual(new ReceivedStamp(lastQueue()));
    await plain.ack(received);

    const named = transport({ name: 'async' });
    await named.send(envelopeOf('named-2'));
    const second = await receiveOne(named);
    expect(second.last(ReceivedStamp).transportName).toBe('async');
    await named.ack(second);
  });

  it('does not make a claimed, unsettled message claimable by others (redeliverTimeoutSeconds defaults to 3600)', async () => {
    const owner = transport();
    const other = transport({ queueName: lastQueue() });
    await owner.send(envelopeOf('held-1'));
    const held = await receiveOne(owner);
    expect(await receiveWithin(other, 300)).toBeUndefined();
    expect(await other.getMessageCount()).toBe(0);
    await owner.ack(held);
  });

  itCli('polls at 100 ms by default (a row inserted behind its back arrives)', async () => {
    const t = transport();
    const encoded = serializer().encode(envelopeOf('raw-1'));
    const consumer = receiveWithin(t, 1000);
    // A raw insert by another process does not wake this one: only polling finds it.
    await insertRaw(TABLE, lastQueue(), encoded.body, JSON.stringify(encoded.headers));
    const received = await consumer;
    expect(received?.message).toEqual(new TestMessage('raw-1'));
    await t.ack(received);
  });

  it.each([
    ['an injection attempt', 'x; DROP TABLE y'],
    ['a double quote', 'messages"'],
    ['a single quote', "messages'"],
    ['a square bracket', 'messages]'],
    ['uppercase', 'Messages'],
    ['a schema-qualified name', 'main.messages'],
    ['a leading digit', '1messages'],
    ['a dash', 'messenger-messages'],
    ['a non-ASCII letter', 'tablé'],
    ['49 characters', 'a'.repeat(49)],
    ['the empty string', ''],
  ])('rejects a tableName with %s as InvalidArgumentError', (_, tableName) => {
    const error = throwsSync(() => new SqlTransport({ dsn: DSN, tableName }));
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect(error).toBeInstanceOf(MessengerError);
    expect(error).not.toBeInstanceOf(TransportError);
    expect(error.message).toMatch(/table ?name/i);
  });

  it('creates and uses tables with the longest and the shortest valid names', async () => {
    for (const tableName of [`nmn_${uniqueName('l').replace('_', '')}`.padEnd(48, 'x'), '_']) {
      expect(tableName.length === 48 || tableName === '_').toBe(true);
      const t = transport({ tableName });
      const sent = await t.send(envelopeOf(`table-${tableName.length}`));
      const received = await receiveOne(t);
      expect(idOf(received)).toBe(idOf(sent));
      await t.ack(received);
    }
  });

  it.each([
    ['empty', ''],
    ['191 characters long', 'q'.repeat(191)],
    ['not a string', 7],
  ])('rejects a queueName that is %s as InvalidArgumentError', (_, queueName) => {
    const error = throwsSync(() => new SqlTransport({ dsn: DSN, queueName }));
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect(error.message).toMatch(/queue ?name/i);
  });

  it('accepts a 190-character queue name end to end', async () => {
    const queueName = `${uniqueName('q')}_`.padEnd(190, '中');
    expect(queueName).toHaveLength(190);
    const t = transport({ queueName });
    await t.send(envelopeOf('long-queue'));
    expect(await t.getMessageCount()).toBe(1);
    const received = await receiveOne(t);
    expect(received.message).toEqual(new TestMessage('long-queue'));
    await t.ack(received);
    expect(await t.getMessageCount()).toBe(0);
  });

  it.each([
    ['pollIntervalMs', -1],
    ['pollIntervalMs', Number.NaN],
    ['pollIntervalMs', Number.POSITIVE_INFINITY],
    ['pollIntervalMs', '100'],
    ['redeliverTimeoutSeconds', -1],
    ['redeliverTimeoutSeconds', Number.NaN],
    ['connectTimeoutMs', Number.NaN],
    ['connectTimeoutMs', -1],
  ])('rejects %s = %p as InvalidArgumentError', (option, value) => {
    const error = throwsSync(() => new SqlTransport({ dsn: DSN, [option]: value }));
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect(error.message).toContain(option);
  });

  it('rejects options that are not an object as InvalidArgumentError', () => {
    expect(throwsSync(() => new SqlTransport(null))).toBeInstanceOf(InvalidArgumentError);
    expect(throwsSync(() => new SqlTransport(undefined))).toBeInstanceOf(InvalidArgumentError);
  });

  it.each([
    ['a file DSN', () => DSN],
    ['sqlite://:memory:', () => 'sqlite://:memory:'],
  ])('rejects useNotify / getNotifyTimeoutMs set at all (even false) with %s as InvalidArgumentError', async (_, dsn) => {
    for (const extra of [
      { useNotify: false },
      { useNotify: true },
      { getNotifyTimeoutMs: 1000 },
      { getNotifyTimeoutMs: 60000 },
      { useNotify: false, getNotifyTimeoutMs: 0 },
    ]) {
      const error = throwsSync(() => new SqlTransport({ dsn: dsn(), ...extra }));
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect(error.message).toMatch(/PostgreSQL/);
    }
    // Explicitly undefined is "not set".
    const t = new SqlTransport({ dsn: dsn(), useNotify: undefined, getNotifyTimeoutMs: undefined });
    await t.close();
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

  itCli('resolves relative paths (sqlite://rel.db, sqlite:rel.db, sqlite://sub/dir.db) against the working directory when built', async () => {
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
      expect(await tableExists('messenger_messages', path.join(cwd, file))).toBe(true);
    }
    for (const file of ['elsewhere/rel.db', 'elsewhere/colon.db', 'late.db']) {
      expect(fs.existsSync(path.join(cwd, file))).toBe(false);
    }
  }, 20000);

  itCli('opens an absolute path given as sqlite:///abs/path.db', async () => {
    const dir = temporaryDirectory('nmn-abs');
    const file = path.join(dir, 'abs.db');
    const t = transport({ dsn: `sqlite://${file}` });
    expect(`sqlite://${file}`).toMatch(/^sqlite:\/\/\//);
    const sent = await t.send(envelopeOf('abs'));
    expect(fs.existsSync(file)).toBe(true);
    const [row] = await sqlite(`SELECT CAST(id AS TEXT) AS id, body FROM ${TABLE};`, { json: true, db: file });
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

describe('misuse and close()', () => {
  const MISSING_ID = 'Cannot ack or reject an envelope without a TransportMessageIdStamp.';

  it('throws TransportError when acking or rejecting an envelope without a TransportMessageIdStamp', async () => {
    const t = transport();
    const ackError = await rejectionOf(t.ack(envelopeOf('no-id')));
    expect(ackError).toBeInstanceOf(TransportError);
    expect(ackError.message).toBe(MISSING_ID);
    const rejectError = await rejectionOf(t.reject(envelopeOf('no-id')));
    expect(rejectError).toBeInstanceOf(TransportError);
    expect(rejectError.message).toBe(MISSING_ID);
  });

  it('refuses to send once closed', async () => {
    const t = transport();
    await t.close();
    const error = await rejectionOf(t.send(envelopeOf('late')));
    expect(error).toBeInstanceOf(TransportError);
    expect(error.message).toBe('Cannot send on a SQL transport that is closing or closed.');
    const reader = transport({ queueName: lastQueue() });
    expect(await collect(reader.list())).toEqual([]);
  });

  it('refuses to send while close() waits for an in-flight message', async () => {
    const t = transport();
    await t.send(envelopeOf('in-flight'));
    const received = await receiveOne(t);
    const closing = t.close();
    const error = await rejectionOf(t.send(envelopeOf('late')));
    expect(error).toBeInstanceOf(TransportError);
    expect(error.message).toBe('Cannot send on a SQL transport that is closing or closed.');
    expect(await settleWithin(closing, 200)).toBe('timeout');
    await t.ack(received);
    expect(await settleWithin(closing, 3000)).toEqual({ value: undefined });
  });

  itCli('close() is idempotent, and get() after close() ends at once without yielding', async () => {
    const t = transport();
    await t.send(envelopeOf('left-behind'));
    await Promise.all([t.close(), t.close()]);
    await t.close();
    const iterator = t.get(new AbortController().signal);
    expect(await iterator.next()).toEqual({ value: undefined, done: true });
    const [row] = await rows(TABLE, lastQueue());
    expect(row.delivered_at).toBeNull();
  });
});

describe('schema life cycle', () => {
  itCli('with autoSetup disabled fails typed (NotFound) until setup() creates the table', async () => {
    const table = freshTable('nmn_snosetup');
    const t = transport({ tableName: table, autoSetup: false });

    const sendError = await rejectionOf(t.send(envelopeOf('early')));
    expect(sendError).toBeInstanceOf(TransportNotFoundError);
    expect(sendError.message).toMatch(/^SQLite transport failed during "send": /);
    expect(sendError.message).toContain(table);

    const getError = await rejectionOf(t.get(new AbortController().signal).next());
    expect(getError).toBeInstanceOf(TransportNotFoundError);

    expect(await rejectionOf(collect(t.list()))).toBeInstanceOf(TransportNotFoundError);
    expect(await rejectionOf(t.find('1'))).toBeInstanceOf(TransportNotFoundError);
    expect(await rejectionOf(t.getMessageCount())).toBeInstanceOf(TransportNotFoundError);
    expect(await tableExists(table)).toBe(false);

    await t.setup();
    await t.setup();

    const columns = await sqlite(`PRAGMA table_info(${table});`, { json: true });
    expect(columns.map((c) => [c.name, c.type, c.notnull, c.pk])).toEqual([
      ['id', 'INTEGER', 0, 1],
      ['body', 'TEXT', 1, 0],
      ['headers', 'TEXT', 1, 0],
      ['queue_name', 'VARCHAR(190)', 1, 0],
      ['created_at', 'TEXT', 1, 0],
      ['available_at', 'TEXT', 1, 0],
      ['delivered_at', 'TEXT', 0, 0],
    ]);
    const [ddl] = await sqlite(`SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ${lit(table)};`, {
      json: true,
    });
    expect(ddl.sql).toMatch(/id INTEGER PRIMARY KEY AUTOINCREMENT/);
    const index = await sqlite(`PRAGMA index_info(${table}_claim_idx);`, { json: true });
    expect(index.map((c) => c.name)).toEqual(['queue_name', 'available_at', 'delivered_at', 'id']);

    const sent = await t.send(envelopeOf('after-setup'));
    const received = await receiveOne(t);
    expect(idOf(received)).toBe(idOf(sent));
    await t.ack(received);
    expect(await t.getMessageCount()).toBe(0);
  });

  itCli('setup() re-creates a table dropped under a live instance, which then acks the reused id 1 (ADR-007 regression)', async () => {
    // AUTOINCREMENT never reuses an id while the table exists, but DROP TABLE also removes
    // its sqlite_sequence entry: the re-created table starts at 1 again.
    const table = freshTable('nmn_sadr7');
    const t = transport({ tableName: table });
    const queueName = lastQueue();

    expect(idOf(await t.send(envelopeOf('before-drop')))).toBe('1');
    const first = await receiveOne(t);
    expect(idOf(first)).toBe('1');
    await t.ack(first);

    await sqlite(`DROP TABLE ${table};`);
    await t.setup();

    expect(idOf(await t.send(envelopeOf('after-drop')))).toBe('1');
    const again = await receiveOne(t);
    expect(idOf(again)).toBe('1');
    expect(again.message).toEqual(new TestMessage('after-drop'));
    await t.ack(again);
    expect(await settledRows(table, queueName, 0)).toHaveLength(0);

    expect(await settleWithin(t.close(), 3000)).toEqual({ value: undefined });
  });

  itCli("an ack whose delete meets the dropped table never deletes the re-created table's message with the reused id (ADR-007)", async () => {
    const table = freshTable('nmn_sadr7b');
    const t = transport({ tableName: table });
    const queueName = lastQueue();
    expect(idOf(await t.send(envelopeOf('before-drop')))).toBe('1');
    const first = await receiveOne(t);

    // Another process holds the write lock, so the ack's DELETE waits (busy timeout); it
    // drops the table in that transaction and commits: the DELETE then finds no table.
    const holder = spawn(SQLITE3, [DB_PATH], { stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    holder.stdout.setEncoding('utf8').on('data', (chunk) => (out += chunk));
    holder.stderr.setEncoding('utf8').on('data', (chunk) => (out += chunk));
    const holderExited = new Promise((resolve) => holder.once('close', resolve));
    holder.stdin.write(".timeout 5000\nBEGIN IMMEDIATE;\nSELECT 'locked';\n");
    expect(await pollUntil(() => out.includes('locked'), { timeoutMs: 5000, intervalMs: 5 })).toBe(true);
    const acked = settleWithin(t.ack(first), 10000);
    // No way to see the DELETE waiting from outside: give it time to start and block.
    await settleWithin(acked, 300);
    holder.stdin.end(`DROP TABLE ${table};\nCOMMIT;\n`);
    await holderExited;
    const ackOutcome = await acked;
    // The ack may report the vanished table (TransportNotFoundError) or nothing.
    if (ackOutcome.error !== undefined) expect(ackOutcome.error).toBeInstanceOf(TransportNotFoundError);
    expect(await tableExists(table)).toBe(false);

    await t.setup();
    expect(idOf(await t.send(envelopeOf('after-drop')))).toBe('1');

    // Whatever the old ack left behind must not touch the new message 1, nor fail unrelated calls.
    const observed = {
      firstCount: await settleWithin(t.getMessageCount(), 3000),
      secondCount: await settleWithin(t.getMessageCount(), 3000),
      stored: (await rows(table, queueName)).map((r) => [r.id, JSON.parse(r.body).id]),
    };
    expect(observed).toEqual({
      firstCount: { value: 1 },
      secondCount: { value: 1 },
      stored: [['1', 'after-drop']],
    });
    const again = await receiveOne(t);
    expect(idOf(again)).toBe('1');
    expect(again.message).toEqual(new TestMessage('after-drop'));
    await t.ack(again);
    expect(await settleWithin(t.close(), 3000)).toEqual({ value: undefined });
    expect(await rows(table, queueName)).toEqual([]);
  }, 20000);

  itCli('with autoSetup, a send after the table vanished fails once with TransportNotFoundError, then heals by itself', async () => {
    const table = freshTable('nmn_sheal');
    const t = transport({ tableName: table });
    const queueName = lastQueue();
    const first = await t.send(envelopeOf('before-drop'));
    const received = await receiveOne(t);
    expect(idOf(received)).toBe(idOf(first));
    await t.ack(received);

    await sqlite(`DROP TABLE ${table};`);

    const error = await rejectionOf(t.send(envelopeOf('lost')));
    expect(error).toBeInstanceOf(TransportNotFoundError);

    const healed = await t.send(envelopeOf('healed'));
    expect(idOf(healed)).toBe('1');
    const again = await receiveOne(t);
    expect(idOf(again)).toBe('1');
    expect(again.message).toEqual(new TestMessage('healed'));
    await t.ack(again);
    expect(await settledRows(table, queueName, 0)).toHaveLength(0);
    expect(await settleWithin(t.close(), 3000)).toEqual({ value: undefined });
  });

  itCli('with autoSetup, a consumer whose table vanished gets TransportNotFoundError once; the next get() heals', async () => {
    const table = freshTable('nmn_shealget');
    const t = transport({ tableName: table });
    await t.send(envelopeOf('before-drop'));
    await t.ack(await receiveOne(t));

    await sqlite(`DROP TABLE ${table};`);

    const error = await rejectionOf(receiveWithin(t, 2000));
    expect(error).toBeInstanceOf(TransportNotFoundError);

    expect(await receiveWithin(t, 100)).toBeUndefined();
    expect(await tableExists(table)).toBe(true);
    await t.send(envelopeOf('healed'));
    const again = await receiveOne(t);
    expect(idOf(again)).toBe('1');
    await t.ack(again);
  });

  itCli('with autoSetup, list/find/count after the table vanished fail once with TransportNotFoundError, then heal', async () => {
    const table = freshTable('nmn_shealread');
    const t = transport({ tableName: table });
    await t.setup();
    await sqlite(`DROP TABLE ${table};`);
    expect(await rejectionOf(t.getMessageCount())).toBeInstanceOf(TransportNotFoundError);
    expect(await t.getMessageCount()).toBe(0);
    await sqlite(`DROP TABLE ${table};`);
    expect(await rejectionOf(collect(t.list()))).toBeInstanceOf(TransportNotFoundError);
    expect(await collect(t.list())).toEqual([]);
    await sqlite(`DROP TABLE ${table};`);
    expect(await rejectionOf(t.find('1'))).toBeInstanceOf(TransportNotFoundError);
    expect(await t.find('1')).toBeUndefined();
  });

  itCli('maps a reject once the table vanished to TransportNotFoundError without hanging close()', async () => {
    const table = freshTable('nmn_srejgone');
    const t = transport({ tableName: table });
    await t.send(envelopeOf('doomed'));
    const received = await receiveOne(t);

    await sqlite(`DROP TABLE ${table};`);

    const error = await rejectionOf(t.reject(received));
    expect(error).toBeInstanceOf(TransportNotFoundError);
    expect(await settleWithin(t.close(), 3000)).toEqual({ value: undefined });
  });

  it('never reuses an id while the table exists (AUTOINCREMENT)', async () => {
    const table = freshTable('nmn_snoreuse');
    const t = transport({ tableName: table });
    const first = await t.send(envelopeOf('one'));
    await t.ack(first);
    // The table is empty now; a plain rowid table would hand out 1 again.
    const second = await t.send(envelopeOf('two'));
    expect(idOf(first)).toBe('1');
    expect(idOf(second)).toBe('2');
    await t.ack(second);
  });
});

describe('poison rows', () => {
  const typed = (type, stamps = '[]') => JSON.stringify({ 'X-Message-Type': type, 'X-Message-Stamps': stamps });

  async function insertPoison(queueName) {
    const poison = [
      ['{"id":"p1"}', 'not-json'],
      ['{"id":"ghost"}', typed('GhostMessage')],
      ['[1,2,3]', typed('TestMessage')],
      ['{"id":"p4"}', '"just a string"'],
      ['{"id":"p5"}', 'null'],
      ['{"id":"p6"}', '[]'],
      ['{"id":"p7"}', typed('TestMessage', '[{"type":"GhostStamp","data":{}}]')],
      ['{"id":"p8"}', typed('TestMessage', '{}')],
      ['{"id":"p9"}', JSON.stringify({ 'X-Message-Stamps': '[]' })],
      ['not json at all', typed('TestMessage')],
      ['', ''],
    ];
    for (const [body, headers] of poison) await insertRaw(TABLE, queueName, body, headers);
    return poison.length;
  }

  itCli('discards undecodable and foreign rows instead of looping, and delivers the good one', async () => {
    const t = transport();
    const queueName = lastQueue();
    const poisonCount = await insertPoison(queueName);
    const good = await t.send(envelopeOf('good'));
    expect(await rows(TABLE, queueName)).toHaveLength(poisonCount + 1);

    const received = await receiveUpTo(t, 2, 700);
    expect(received).toHaveLength(1);
    expect(received[0].message).toEqual(new TestMessage('good'));
    expect(idOf(received[0])).toBe(idOf(good));

    const remaining = await pollUntil(
      async () => {
        const left = await rows(TABLE, queueName);
        return left.length === 1 ? left : undefined;
      },
      { timeoutMs: 1000 },
    );
    expect(remaining?.map((r) => r.id)).toEqual([idOf(good)]);

    await t.ack(received[0]);
    expect(await settledRows(TABLE, queueName, 0)).toHaveLength(0);
  });

  itCli('list() and find() skip undecodable rows without deleting them', async () => {
    const t = transport();
    const queueName = lastQueue();
    const poisonCount = await insertPoison(queueName);
    const good = await t.send(envelopeOf('good'));

    const listed = await collect(t.list());
    expect(listed.map(idOf)).toEqual([idOf(good)]);
    expect(listed[0].message).toEqual(new TestMessage('good'));

    const stored = await rows(TABLE, queueName);
    expect(stored).toHaveLength(poisonCount + 1);
    for (const row of stored.filter((r) => r.id !== idOf(good))) {
      expect(await t.find(row.id)).toBeUndefined();
    }
    expect(await rows(TABLE, queueName)).toHaveLength(poisonCount + 1);
    expect(stored.every((r) => r.delivered_at === null)).toBe(true);
    // getMessageCount counts rows, decodable or not (upstream's COUNT(*)).
    expect(await t.getMessageCount()).toBe(poisonCount + 1);
  });
});

describe('payloads and storage format', () => {
  itCli('round-trips a 1 MB body intact, stored byte for byte', async () => {
    const t = transport();
    const unit = 'abcdefghij\u00e9\u4e2d\ud83c\udf89"\\\n';
    const payload = unit.repeat(Math.ceil((1024 * 1024) / unit.length)).slice(0, 1024 * 1024);
    const envelope = envelopeOf('big', payload);
    const sent = await t.send(envelope);

    const expectedBody = serializer().encode(envelope).body;
    const [stored] = await sqlite(
      `SELECT hex(body) AS hex, typeof(body) AS type FROM ${TABLE} WHERE id = ${Number(idOf(sent))};`,
      { json: true },
    );
    expect(stored.type).toBe('text');
    expect(stored.hex === Buffer.from(expectedBody, 'utf8').toString('hex').toUpperCase()).toBe(true);

    const received = await receiveOne(t);
    expect(received.message.payload.length).toBe(payload.length);
    expect(received.message.payload === payload).toBe(true);
    const found = await t.find(idOf(sent));
    expect(found.message.payload === payload).toBe(true);
    await t.ack(received);
  });

  itCli('round-trips special characters in bodies, stamps and queue names', async () => {
    const nasty = [
      'emoji 🎉👍🏽',
      'quotes " \' `',
      'escapes \n \t \r \\ \\n',
      'NUL \u0000 and lone surrogate \ud800',
      'CJK 中文 日本語 한국어, RTL עברית العربية',
      'line separators \u2028 \u2029',
      "SQL '; DROP TABLE messenger_messages; -- ?1 ? :x @y $z %s",
    ].join(' | ');
    const queueName = `${uniqueName('q')} '"; DROP TABLE x; -- 🎉 中文 ?1`;
    const t = transport({ queueName });
    const sent = await t.send(envelopeOf(nasty, nasty, [new BusNameStamp(nasty)]));

    expect((await collect(t.list())).map(idOf)).toEqual([idOf(sent)]);
    expect(await t.getMessageCount()).toBe(1);
    const received = await receiveOne(t);
    expect(received.message).toEqual(new TestMessage(nasty, nasty));
    expect(received.last(BusNameStamp)).toEqual(new BusNameStamp(nasty));
    const [stored] = await sqlite(`SELECT queue_name, body FROM ${TABLE} WHERE id = ${Number(idOf(sent))};`, {
      json: true,
    });
    expect(stored.queue_name).toBe(queueName);
    expect(stored.body).toBe(serializer().encode(envelopeOf(nasty, nasty)).body);
    await t.ack(received);
    expect(await t.getMessageCount()).toBe(0);
  });

  itCli('stores exactly the upstream row format (body, double-encoded headers, UTC text times, DB-clock delay)', async () => {
    const t = transport();
    const queueName = lastQueue();
    const redeliveredAt = new Date('2026-01-02T03:04:05.678Z');
    const envelope = envelopeOf('fmt-1', 'payload', [
      new BusNameStamp('command.bus'),
      new RedeliveryStamp(2, redeliveredAt),
      new DelayStamp(60000),
      // Non-sendable: never stored.
      new ReceivedStamp('elsewhere'),
      new TransportMessageIdStamp('999'),
    ]);
    const before = Date.now();
    const sent = await t.send(envelope);
    const after = Date.now();

    expect(idOf(sent)).toMatch(/^[1-9]\d*$/);
    expect(typeof sent.last(TransportMessageIdStamp).id).toBe('string');
    expect(sent.message).toBe(envelope.message);
    expect(sent.last(DelayStamp)).toEqual(new DelayStamp(60000));

    const stored = await sqlite(
      `SELECT CAST(id AS TEXT) AS id, queue_name, body, headers, created_at, available_at, delivered_at
         FROM ${TABLE} WHERE queue_name = ${lit(queueName)};`,
      { json: true },
    );
    expect(stored).toHaveLength(1);
    const [row] = stored;
    expect(row.id).toBe(idOf(sent));
    expect(row.queue_name).toBe(queueName);
    expect(row.delivered_at).toBeNull();
    expect(row.body).toBe('{"id":"fmt-1","payload":"payload"}');
    expect(row.headers).toBe(
      '{"X-Message-Type":"TestMessage","X-Message-Stamps":"[' +
        '{\\"type\\":\\"BusNameStamp\\",\\"data\\":{\\"busName\\":\\"command.bus\\"}},' +
        '{\\"type\\":\\"RedeliveryStamp\\",\\"data\\":{\\"retryCount\\":2,\\"redeliveredAt\\":\\"2026-01-02T03:04:05.678Z\\"}},' +
        '{\\"type\\":\\"DelayStamp\\",\\"data\\":{\\"delayMs\\":60000}}]"}',
    );
    const encoded = serializer().encode(envelope);
    expect(row.body).toBe(encoded.body);
    expect(row.headers).toBe(JSON.stringify(encoded.headers));
    // UTC text, millisecond precision, from SQLite's clock (which is this machine's).
    const TIME = /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}$/;
    expect(row.created_at).toMatch(TIME);
    expect(row.available_at).toMatch(TIME);
    expect(utcMs(row.created_at)).toBeGreaterThanOrEqual(before - 1000);
    expect(utcMs(row.created_at)).toBeLessThanOrEqual(after + 1000);
    const delayMs = utcMs(row.available_at) - utcMs(row.created_at);
    expect(delayMs).toBeGreaterThanOrEqual(59999);
    expect(delayMs).toBeLessThanOrEqual(60001);

    // Not due: counted out, listed in, and deleted by an ack of the send result.
    expect(await t.getMessageCount()).toBe(0);
    expect((await collect(t.list())).map(idOf)).toEqual([idOf(sent)]);
    await t.ack(sent);
    expect(await settledRows(TABLE, queueName, 0)).toHaveLength(0);
  });

  itCli('decodes rows written in the upstream form by another writer', async () => {
    const t = transport();
    const encoded = serializer().encode(envelopeOf('foreign-1', 'x', [new RedeliveryStamp(3, new Date(0))]));
    await insertRaw(TABLE, lastQueue(), encoded.body, JSON.stringify(encoded.headers));
    const received = await receiveOne(t);
    expect(received.message).toEqual(new TestMessage('foreign-1', 'x'));
    expect(received.last(RedeliveryStamp).retryCount).toBe(3);
    expect(received.last(RedeliveryStamp).redeliveredAt).toBe('1970-01-01T00:00:00.000Z');
    await t.ack(received);
  });
});

describe('batched and concurrent sends', () => {
  itCli('maps each concurrently sent message (batched INSERTs) to its own id, and delivers them in id order', async () => {
    const table = freshTable('nmn_sfifo');
    const t = transport({ tableName: table });
    await t.setup();
    const sent = await Promise.all(Array.from({ length: 15 }, (_, i) => t.send(envelopeOf(`c-${i}`))));
    const idByMessage = new Map(sent.map((e) => [e.message.id, idOf(e)]));
    expect(new Set(idByMessage.values()).size).toBe(15);

    const stored = await sqlite(`SELECT CAST(id AS TEXT) AS id, body FROM ${table};`, { json: true });
    expect(stored).toHaveLength(15);
    for (const row of stored) {
      expect(idByMessage.get(JSON.parse(row.body).id)).toBe(row.id);
    }

    const received = await receiveUpTo(t, 15, 2000);
    for (const e of received) await t.ack(e);
    const receivedIds = received.map(idOf);
    expect(receivedIds).toEqual([...idByMessage.values()].sort((a, b) => Number(a) - Number(b)));
    for (const e of received) expect(idOf(e)).toBe(idByMessage.get(e.message.id));
  });

  itCli('stores 200 concurrent ~20 KB sends with ids in call order, and delivers each once', async () => {
    const t = transport();
    const queueName = lastQueue();
    const count = 200;
    const filler = 'z'.repeat(20 * 1024);
    const sent = await Promise.all(
      Array.from({ length: count }, (_, i) => t.send(envelopeOf(`big-${i}`, `${i}:${filler}`))),
    );
    const ids = sent.map(idOf);
    for (let i = 1; i < count; i += 1) expect(Number(ids[i])).toBeGreaterThan(Number(ids[i - 1]));

    const stored = await sqlite(
      `SELECT CAST(id AS TEXT) AS id, json_extract(body, '$.id') AS mid, length(CAST(body AS BLOB)) AS bytes
         FROM ${TABLE} WHERE queue_name = ${lit(queueName)} ORDER BY ${TABLE}.id;`,
      { json: true },
    );
    expect(stored).toHaveLength(count);
    expect(stored.map((r) => [r.id, r.mid])).toEqual(ids.map((id, i) => [id, `big-${i}`]));
    const expectedBytes = (i) => Buffer.byteLength(serializer().encode(envelopeOf(`big-${i}`, `${i}:${filler}`)).body);
    expect(stored.every((r, i) => r.bytes === expectedBytes(i))).toBe(true);

    const received = await receiveUpTo(t, count, 10000);
    expect(received.map(idOf)).toEqual(ids);
    expect(received.every((e, i) => e.message.id === `big-${i}` && e.message.payload === `${i}:${filler}`)).toBe(
      true,
    );
    await Promise.all(received.map((e) => t.ack(e)));
    expect(await settledRows(TABLE, queueName, 0)).toHaveLength(0);
  }, 30000);

  itCli('maps ids correctly when two pools send batches into one file at the same time', async () => {
    const queueName = uniqueName('q');
    const a = transport({ queueName });
    const b = transport({ queueName, dsn: OTHER_DSN });
    await Promise.all([a.getMessageCount(), b.getMessageCount()]);
    const sends = [];
    for (let i = 0; i < 150; i += 1) {
      sends.push(a.send(envelopeOf(`a-${i}`)));
      sends.push(b.send(envelopeOf(`b-${i}`)));
    }
    const sent = await Promise.all(sends);
    const idByMessage = new Map(sent.map((e) => [e.message.id, idOf(e)]));
    expect(new Set(idByMessage.values()).size).toBe(300);
    const stored = await sqlite(
      `SELECT CAST(id AS TEXT) AS id, json_extract(body, '$.id') AS mid FROM ${TABLE} WHERE queue_name = ${lit(queueName)};`,
      { json: true },
    );
    expect(stored).toHaveLength(300);
    for (const row of stored) expect(idByMessage.get(row.mid)).toBe(row.id);
  }, 20000);

  it('lets two consumers on two pools share one queue, each message delivered exactly once', async () => {
    const queueName = uniqueName('q');
    const producer = transport({ queueName });
    const c1 = transport({ queueName });
    const c2 = transport({ queueName, dsn: OTHER_DSN });
    const ids = (await Promise.all(Array.from({ length: 100 }, (_, i) => producer.send(envelopeOf(`s-${i}`))))).map(
      idOf,
    );
    const first = startConsumer(c1);
    const second = startConsumer(c2);
    await pollUntil(() => first.arrivals.length + second.arrivals.length >= 100, { timeoutMs: 8000, intervalMs: 10 });
    const all = [...first.arrivals, ...second.arrivals].map((a) => idOf(a.envelope));
    expect(all.sort((x, y) => Number(x) - Number(y))).toEqual(ids);
    expect(await settleWithin(first.done, 200)).toBe('timeout');
  }, 20000);
});

describe('busy database (another process holds the write lock)', () => {
  // Each test has a file of its own: the busy timeout (connectTimeoutMs) belongs to the pool,
  // which is shared by every transport of the process on the same DSN.
  function busyFile() {
    return path.join(temporaryDirectory('nmn-busy'), 'busy.db');
  }

  itCli('a send waits for the lock and succeeds once the other transaction commits', async () => {
    const file = busyFile();
    const t = transport({ dsn: `sqlite://${file}` });
    expect(await t.getMessageCount()).toBe(0);
    const lock = await holdWriteLock(file);
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

  itCli('a send fails with TransportError after connectTimeoutMs (the busy timeout), writing nothing', async () => {
    const file = busyFile();
    const t = transport({ dsn: `sqlite://${file}`, connectTimeoutMs: 300 });
    const queueName = lastQueue();
    expect(await t.getMessageCount()).toBe(0);
    const lock = await holdWriteLock(file);
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
    const [count] = await sqlite(`SELECT COUNT(*) AS n FROM ${TABLE} WHERE queue_name = ${lit(queueName)};`, {
      json: true,
      db: file,
    });
    expect(count.n).toBe(0);

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

describe('queues of one table', () => {
  it('keeps two queues of one table apart (get, list, count)', async () => {
    const a = transport();
    const b = transport();
    const sentA = [];
    const sentB = [];
    for (let i = 0; i < 3; i += 1) sentA.push(idOf(await a.send(envelopeOf(`a-${i}`))));
    for (let i = 0; i < 2; i += 1) sentB.push(idOf(await b.send(envelopeOf(`b-${i}`))));

    expect(await a.getMessageCount()).toBe(3);
    expect(await b.getMessageCount()).toBe(2);
    expect((await collect(a.list())).map(idOf)).toEqual(sentA);
    expect((await collect(b.list())).map(idOf)).toEqual(sentB);

    const gotA = await receiveUpTo(a, 3, 2000);
    expect(gotA.map(idOf)).toEqual(sentA);
    expect(gotA.map((e) => e.message.id)).toEqual(['a-0', 'a-1', 'a-2']);
    for (const e of gotA) await a.ack(e);
    expect(await receiveWithin(a, 300)).toBeUndefined();
    expect(await b.getMessageCount()).toBe(2);

    const gotB = await receiveUpTo(b, 2, 2000);
    expect(gotB.map(idOf)).toEqual(sentB);
    for (const e of gotB) await b.ack(e);

    expect(await a.getMessageCount()).toBe(0);
    expect(await b.getMessageCount()).toBe(0);
  });
});

describe('FIFO order', () => {
  // Rows with equal available_at must be taken in numeric id order (not the text order of
  // their CAST: "10" < "2"), as upstream's claim does.
  async function insertTied(table, queueName, count) {
    const encoded = serializer().encode(envelopeOf('template'));
    const values = [];
    for (let i = 1; i <= count; i += 1) {
      values.push(
        `(${lit(queueName)}, ${lit(`{"id":"f-${i}","payload":""}`)}, ${lit(JSON.stringify(encoded.headers))}, '2000-01-01 00:00:00.000', '2000-01-01 00:00:00.000')`,
      );
    }
    await sqlite(
      `INSERT INTO ${table} (queue_name, body, headers, created_at, available_at) VALUES ${values.join(', ')};`,
    );
    return Array.from({ length: count }, (_, i) => String(i + 1));
  }

  itCli('claims rows with equal available_at in numeric id order across a digit boundary', async () => {
    const table = freshTable('nmn_sfifo');
    const t = transport({ tableName: table });
    await t.setup();
    const expected = await insertTied(table, lastQueue(), 12);

    const received = await receiveUpTo(t, 12, 2000);
    for (const e of received) await t.ack(e);
    expect(received.map(idOf)).toEqual(expected);
    expect(received.map((e) => e.message.id)).toEqual(expected.map((id) => `f-${id}`));
  });

  itCli('lists rows with equal available_at in numeric id order across a digit boundary', async () => {
    const table = freshTable('nmn_sfifo');
    const t = transport({ tableName: table });
    await t.setup();
    const expected = await insertTied(table, lastQueue(), 12);

    expect((await collect(t.list())).map(idOf)).toEqual(expected);
    expect((await collect(t.list(3))).map(idOf)).toEqual(['1', '2', '3']);
  });

  it('delivers in available_at order first: an earlier-due later id goes before a later-due earlier id', async () => {
    const t = transport();
    const late = await t.send(envelopeOf('late', '', [new DelayStamp(300)]));
    const early = await t.send(envelopeOf('early'));
    const received = await receiveUpTo(t, 2, 3000);
    expect(received.map(idOf)).toEqual([idOf(early), idOf(late)]);
    for (const e of received) await t.ack(e);
  });
});

describe('crash recovery and prefetch', () => {
  async function staleInDb(id) {
    const [row] = await sqlite(`SELECT delivered_at < ${NOW_SQL} AS stale FROM ${TABLE} WHERE id = ${Number(id)};`, {
      json: true,
    });
    return row !== undefined && row.stale === 1;
  }

  itCli('redelivers a message left in flight beyond redeliverTimeoutSeconds 0 (same id, no RedeliveryStamp)', async () => {
    const crashed = transport();
    const queueName = lastQueue();
    const reaper = transport({ queueName, redeliverTimeoutSeconds: 0 });
    const sent = await crashed.send(envelopeOf('orphan', 'data'));
    const first = await receiveOne(crashed);
    expect(idOf(first)).toBe(idOf(sent));

    // delivered_at has millisecond precision: let the DB clock move past it.
    expect(await pollUntil(() => staleInDb(idOf(first)), { timeoutMs: 1000 })).toBe(true);

    const second = await receiveOne(reaper);
    expect(idOf(second)).toBe(idOf(first));
    expect(second.message).toEqual(new TestMessage('orphan', 'data'));
    expect(second.last(RedeliveryStamp)).toBeUndefined();
    await reaper.ack(second);
    expect(await settledRows(TABLE, queueName, 0)).toHaveLength(0);

    // The "crashed" instance's late ack is a harmless no-op, and lets it close.
    await crashed.ack(first);
  });

  it('redelivers after redeliverTimeoutSeconds 1, not before', async () => {
    const crashed = transport();
    const queueName = lastQueue();
    const reaper = transport({ queueName, redeliverTimeoutSeconds: 1 });
    await crashed.send(envelopeOf('orphan-1s'));
    const first = await receiveOne(crashed);
    const claimedAt = Date.now();

    expect(await receiveWithin(reaper, 500)).toBeUndefined();
    const second = await receiveOne(reaper, 4000);
    const elapsed = Date.now() - claimedAt;
    expect(elapsed).toBeGreaterThanOrEqual(900);
    expect(elapsed).toBeLessThan(3500);
    expect(idOf(second)).toBe(idOf(first));
    expect(second.last(RedeliveryStamp)).toBeUndefined();
    await reaper.ack(second);
    await crashed.ack(first);
  }, 10000);

  itCli('makes no copy when the crashed instance rejects a message the reaper already acked', async () => {
    const crashed = transport();
    const queueName = lastQueue();
    const reaper = transport({ queueName, redeliverTimeoutSeconds: 0 });
    await crashed.send(envelopeOf('taken-over'));
    const first = await receiveOne(crashed);
    expect(await pollUntil(() => staleInDb(idOf(first)), { timeoutMs: 1000 })).toBe(true);
    const second = await receiveOne(reaper);
    await reaper.ack(second);

    await crashed.reject(first);
    expect(await settledRows(TABLE, queueName, 0)).toHaveLength(0);
    expect(await settleWithin(crashed.close(), 3000)).toEqual({ value: undefined });
  });

  itCli('releases prefetched rows as soon as the get() loop is left', async () => {
    const t = transport();
    const queueName = lastQueue();
    const ids = [];
    for (let i = 0; i < 5; i += 1) ids.push(idOf(await t.send(envelopeOf(`pf-${i}`))));

    let first;
    for await (const envelope of t.get(new AbortController().signal)) {
      first = envelope;
      break;
    }
    expect(idOf(first)).toBe(ids[0]);

    // Released before get() finished: no waiting needed.
    const stored = await rows(TABLE, queueName);
    const others = stored.filter((r) => r.id !== ids[0]);
    expect(others.map((r) => r.id)).toEqual(ids.slice(1));
    expect(others.every((r) => r.delivered_at === null)).toBe(true);
    const [firstRow] = stored.filter((r) => r.id === ids[0]);
    expect(firstRow.delivered_at).not.toBeNull();

    const other = transport({ queueName });
    const rest = await receiveUpTo(other, 4, 2000);
    expect(rest.map(idOf)).toEqual(ids.slice(1));
    for (const e of rest) await other.ack(e);
    await t.ack(first);
    expect(await settledRows(TABLE, queueName, 0)).toHaveLength(0);
  });

  itCli('releases prefetched rows on close()', async () => {
    const t = transport();
    const queueName = lastQueue();
    const ids = [];
    for (let i = 0; i < 5; i += 1) ids.push(idOf(await t.send(envelopeOf(`pfc-${i}`))));

    const iterator = t.get(new AbortController().signal);
    const { value: first } = await iterator.next();
    expect(idOf(first)).toBe(ids[0]);
    await t.ack(first);
    await t.close();

    const stored = await rows(TABLE, queueName);
    expect(stored.map((r) => r.id)).toEqual(ids.slice(1));
    expect(stored.every((r) => r.delivered_at === null)).toBe(true);
    expect(await iterator.next()).toEqual({ value: undefined, done: true });

    const other = transport({ queueName });
    const rest = await receiveUpTo(other, 4, 2000);
    expect(rest.map(idOf)).toEqual(ids.slice(1));
    for (const e of rest) await other.ack(e);
  });
});

describe('reject and redelivery', () => {
  itCli('re-applies the DelayStamp of a rejected message to its copy (new id, RedeliveryStamp 1)', async () => {
    const t = transport();
    const queueName = lastQueue();
    const sent = await t.send(envelopeOf('delayed', 'd', [new DelayStamp(300)]));
    const first = await receiveOne(t, 3000);
    expect(idOf(first)).toBe(idOf(sent));

    const rejectedAt = Date.now();
    await t.reject(first);
    const copy = await receiveOne(t, 3000);
    const elapsed = Date.now() - rejectedAt;

    expect(elapsed).toBeGreaterThanOrEqual(250);
    expect(idOf(copy)).not.toBe(idOf(first));
    expect(Number(idOf(copy))).toBeGreaterThan(Number(idOf(first)));
    expect(copy.message).toEqual(new TestMessage('delayed', 'd'));
    expect(copy.last(RedeliveryStamp).retryCount).toBe(1);
    expect(copy.last(DelayStamp)).toEqual(new DelayStamp(300));
    expect((await rows(TABLE, queueName)).map((r) => r.id)).toEqual([idOf(copy)]);
    await t.ack(copy);
  });

  it('round-trips through two redeliveries', async () => {
    const t = transport();
    const sent = await t.send(envelopeOf('again'));
    const first = await receiveOne(t);
    expect(idOf(first)).toBe(idOf(sent));
    await t.reject(first);
    const second = await receiveOne(t);
    expect(idOf(second)).not.toBe(idOf(first));
    expect(second.last(RedeliveryStamp).retryCount).toBe(1);
    await t.reject(second);
    const third = await receiveOne(t);
    expect(third.last(RedeliveryStamp).retryCount).toBe(2);
    await t.ack(third);
    expect(await collect(t.list())).toEqual([]);
  });

  it('does nothing when rejecting an envelope this instance did not deliver', async () => {
    const t = transport();
    const other = transport({ queueName: lastQueue() });
    const sent = await t.send(envelopeOf('not-mine'));
    await other.reject(sent);
    await other.reject(await other.find(idOf(sent)));
    const received = await receiveOne(t);
    await other.reject(received);
    expect((await collect(t.list())).map(idOf)).toEqual([idOf(sent)]);
    await t.ack(received);
  });
});

describe('list, find and getMessageCount', () => {
  it('lists, finds and counts without consuming; an ack of a found message deletes it', async () => {
    const a = transport();
    const b = transport();
    const m1 = idOf(await a.send(envelopeOf('m1')));
    const inFlight = await receiveOne(a);
    expect(idOf(inFlight)).toBe(m1);
    const m2 = idOf(await a.send(envelopeOf('m2', '', [new DelayStamp(60000)])));
    const m3 = idOf(await a.send(envelopeOf('m3')));
    const m4 = idOf(await b.send(envelopeOf('m4')));

    const listed = await collect(a.list());
    expect(listed.map(idOf)).toEqual([m1, m3, m2]);
    expect(listed.map((e) => e.message.id)).toEqual(['m1', 'm3', 'm2']);
    expect(listed.every((e) => e.last(ReceivedStamp) === undefined)).toBe(true);
    expect((await collect(a.list(2))).map(idOf)).toEqual([m1, m3]);
    expect((await collect(b.list())).map(idOf)).toEqual([m4]);

    // Due and not in flight: m3 only (m1 is in flight, m2 is delayed).
    expect(await a.getMessageCount()).toBe(1);
    expect(await b.getMessageCount()).toBe(1);

    // find() sees every queue of the table.
    const foreign = await a.find(m4);
    expect(foreign.message).toEqual(new TestMessage('m4'));
    expect(idOf(foreign)).toBe(m4);
    const delayed = await a.find(m2);
    expect(delayed.last(DelayStamp)).toEqual(new DelayStamp(60000));
    for (const id of ['abc', '99999999999999999999', '0', '-1', '', '1.5', ' 1', '1e3']) {
      expect(await a.find(id)).toBeUndefined();
    }

    await a.ack(delayed);
    expect(await a.find(m2)).toBeUndefined();
    expect((await collect(a.list())).map(idOf)).toEqual([m1, m3]);

    // Nothing above consumed anything.
    const next = await receiveOne(a);
    expect(idOf(next)).toBe(m3);
    await a.ack(next);
    await a.ack(inFlight);
    const other = await receiveOne(b);
    expect(idOf(other)).toBe(m4);
    await b.ack(other);
    expect(await a.getMessageCount()).toBe(0);
    expect(await collect(a.list())).toEqual([]);
  });

  it('find() accepts only plain decimal ids, as upstream (/^\\d+$/): "+<id>" finds nothing', async () => {
    const t = transport();
    const id = idOf(await t.send(envelopeOf('plus')));
    expect(idOf(await t.find(id))).toBe(id);
    expect(await t.find(`+${id}`)).toBeUndefined();
  });

  itCli('lists 100 messages by default and honours an explicit limit', async () => {
    const t = transport();
    const queueName = lastQueue();
    const encoded = serializer().encode(envelopeOf('template'));
    const values = [];
    for (let g = 1; g <= 105; g += 1) {
      values.push(
        `(${lit(queueName)}, ${lit(`{"id":"bulk-${g}","payload":""}`)}, ${lit(JSON.stringify(encoded.headers))}, ${NOW_SQL}, strftime('%Y-%m-%d %H:%M:%f', 'now', '+${(g / 1000).toFixed(3)} seconds'))`,
      );
    }
    await sqlite(
      `INSERT INTO ${TABLE} (queue_name, body, headers, created_at, available_at) VALUES ${values.join(', ')};`,
    );
    const all = await collect(t.list());
    expect(all).toHaveLength(100);
    expect(all.map((e) => e.message.id)).toEqual(Array.from({ length: 100 }, (_, i) => `bulk-${i + 1}`));
    expect((await collect(t.list(3))).map((e) => e.message.id)).toEqual(['bulk-1', 'bulk-2', 'bulk-3']);
    expect(await collect(t.list(500))).toHaveLength(105);
  });
});

describe('idle waits', () => {
  it.each([
    ['the consuming transport itself', false],
    ['another transport on the same DSN', true],
  ])('an in-process send from %s wakes an idle consumer at once (pollIntervalMs 60000)', async (_, separate) => {
    const queueName = uniqueName('q');
    const consuming = transport({ queueName, pollIntervalMs: 60000 });
    const sender = separate ? transport({ queueName }) : consuming;
    const consumer = startConsumer(consuming);
    expect(await consuming.getMessageCount()).toBe(0);
    // Let the consumer reach its idle wait (its empty claim is done by now).
    expect(await settleWithin(consumer.done, 300)).toBe('timeout');

    const sentAt = Date.now();
    const sent = await sender.send(envelopeOf('wake'));
    const [arrival] = await consumer.waitFor(1, 2000);
    expect(arrival).toBeDefined();
    expect(idOf(arrival.envelope)).toBe(idOf(sent));
    expect(arrival.at - sentAt).toBeLessThan(300);
  });

  it('delivers an in-process delayed send on time to an idle consumer although pollIntervalMs is 60 s', async () => {
    const t = transport({ pollIntervalMs: 60000 });
    const consumer = startConsumer(t);
    expect(await t.getMessageCount()).toBe(0);
    expect(await settleWithin(consumer.done, 300)).toBe('timeout');

    const sentAt = Date.now();
    const sent = await t.send(envelopeOf('delayed', '', [new DelayStamp(400)]));
    const [arrival] = await consumer.waitFor(1, 3000);
    expect(arrival).toBeDefined();
    expect(idOf(arrival.envelope)).toBe(idOf(sent));
    const elapsed = arrival.at - sentAt;
    expect(elapsed).toBeGreaterThanOrEqual(350);
    expect(elapsed).toBeLessThanOrEqual(1500);
  }, 10000);

  it('bounds the idle wait by the next available_at for a delayed message sent on another DSN string (another pool)', async () => {
    // Nothing wakes the consumer here: the sender is another pool, and SQLite has no push.
    // The consumer's idle wait after its empty claim is bounded by the row's available_at.
    const queueName = uniqueName('q');
    const sender = transport({ queueName, dsn: OTHER_DSN });
    await sender.getMessageCount();
    const sentAt = Date.now();
    const sent = await sender.send(envelopeOf('delayed-other', '', [new DelayStamp(400)]));
    const consumer = startConsumer(transport({ queueName, pollIntervalMs: 60000 }));
    const [arrival] = await consumer.waitFor(1, 3000);
    expect(arrival).toBeDefined();
    expect(idOf(arrival.envelope)).toBe(idOf(sent));
    const elapsed = arrival.at - sentAt;
    expect(elapsed).toBeGreaterThanOrEqual(350);
    expect(elapsed).toBeLessThanOrEqual(1500);
  }, 10000);

  it('finds a message sent on another DSN string by polling at pollIntervalMs', async () => {
    const queueName = uniqueName('q');
    const sender = transport({ queueName, dsn: OTHER_DSN });
    const consuming = transport({ queueName, pollIntervalMs: 300 });
    await sender.getMessageCount();
    const consumer = startConsumer(consuming);
    expect(await consuming.getMessageCount()).toBe(0);
    expect(await settleWithin(consumer.done, 100)).toBe('timeout');
    const sentAt = Date.now();
    const sent = await sender.send(envelopeOf('polled'));
    const [arrival] = await consumer.waitFor(1, 3000);
    expect(arrival).toBeDefined();
    expect(idOf(arrival.envelope)).toBe(idOf(sent));
    expect(arrival.at - sentAt).toBeLessThan(1200);
  });
});

describe('get() and close()', () => {
  itCli('get() with an already-aborted signal returns at once and claims nothing', async () => {
    const t = transport();
    const queueName = lastQueue();
    await t.send(envelopeOf('untouched'));
    const iterator = t.get(AbortSignal.abort());
    expect(await settleWithin(iterator.next(), 500)).toEqual({ value: { value: undefined, done: true } });
    const [row] = await rows(TABLE, queueName);
    expect(row.delivered_at).toBeNull();
    expect(await t.getMessageCount()).toBe(1);
  });

  it('close() ends a consumer blocked on an idle wait promptly, without throwing', async () => {
    const t = transport({ pollIntervalMs: 60000 });
    const yielded = [];
    const consumer = (async () => {
      for await (const envelope of t.get(new AbortController().signal)) yielded.push(envelope);
      return 'ended';
    })();
    expect(await t.getMessageCount()).toBe(0);
    expect(await settleWithin(consumer, 200)).toBe('timeout');

    const started = Date.now();
    const closed = t.close();
    expect(await settleWithin(consumer, 1000)).toEqual({ value: 'ended' });
    expect(Date.now() - started).toBeLessThan(1000);
    expect(await settleWithin(closed, 2000)).toEqual({ value: undefined });
    expect(yielded).toEqual([]);
  });

  it('aborting the signal ends a consumer blocked on an idle wait promptly', async () => {
    const t = transport({ pollIntervalMs: 60000 });
    const controller = new AbortController();
    const consumer = (async () => {
      for await (const envelope of t.get(controller.signal)) void envelope;
      return 'ended';
    })();
    expect(await t.getMessageCount()).toBe(0);
    expect(await settleWithin(consumer, 200)).toBe('timeout');
    const started = Date.now();
    controller.abort();
    expect(await settleWithin(consumer, 1000)).toEqual({ value: 'ended' });
    expect(Date.now() - started).toBeLessThan(1000);
  });

  itCli('accepts ack and reject after the get() iterator was disposed', async () => {
    const t = transport();
    const queueName = lastQueue();
    await t.send(envelopeOf('late-settle'));
    let first;
    for await (const envelope of t.get(new AbortController().signal)) {
      first = envelope;
      break;
    }
    await t.reject(first);
    // A second reject of the same delivery stays a no-op after disposal too.
    await t.reject(first);
    const stored = await rows(TABLE, queueName);
    expect(stored).toHaveLength(1);
    expect(stored[0].id).not.toBe(idOf(first));

    let copy;
    for await (const envelope of t.get(new AbortController().signal)) {
      copy = envelope;
      break;
    }
    expect(copy.last(RedeliveryStamp).retryCount).toBe(1);
    await t.ack(copy);
    expect(await settledRows(TABLE, queueName, 0)).toHaveLength(0);
    expect(await settleWithin(t.close(), 3000)).toEqual({ value: undefined });
  });
});

describe('errors', () => {
  const OPERATIONS = [
    ['send', (t) => t.send(envelopeOf('x'))],
    ['setup', (t) => t.setup()],
    ['get', (t) => t.get(new AbortController().signal).next()],
    ['list', (t) => t.list().next()],
    ['find', (t) => t.find('1')],
    ['getMessageCount', (t) => t.getMessageCount()],
  ];

  async function failure(start) {
    const startedAt = Date.now();
    try {
      await start();
    } catch (error) {
      return { error, elapsedMs: Date.now() - startedAt };
    }
    throw new Error('expected the operation to fail');
  }

  describe.each([
    ['in a directory that does not exist', () => 'sqlite:///proc/nope/x.db'],
    ['where nothing may be created', () => 'sqlite:///proc/x.db'],
    ['below a regular file', () => `sqlite://${DB_PATH}/x.db`],
    ['that is a directory', () => `sqlite://${DB_DIR}`],
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
    queues.push(queueName);
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
