'use strict';

// Fault scenario: bad input, property-based. fast-check generates the inputs a
// confused or hostile caller can hand the transports, and each property runs against the real
// servers (the shared PostgreSQL, MariaDB and Redis; SQLite on a temporary file):
//
//   1. DSNs: reserved characters, spaces and unicode in passwords (raw or percent-encoded),
//      IPv6 hosts, odd ports, unknown schemes, empty parts. Constructing, then a first
//      operation, succeeds or fails with one of the core's typed errors, quickly, and no error
//      carries the password anywhere (message, stack, cause chain).
//   2. Identifiers (table, queue, stream, group, consumer, delayed-set names) at and past their
//      limits, with injection attempts: refused at construction with InvalidArgumentError, or
//      accepted and working under exactly that name; a refused name writes nothing.
//   3. Every numeric option at its extremes: InvalidArgumentError at construction, or a working
//      transport; never a panic.
//   4. Payloads around each engine's limits (MariaDB max_allowed_packet, NUL for PostgreSQL,
//      lone surrogates everywhere, a few MB for Redis and SQLite): a send stores exactly one row
//      that round-trips exactly, or rejects with a typed error and stores nothing.
//
// Each property first runs the named edge cases (as fast-check `examples`, so none is left
// to chance), then random ones. fast-check draws a new seed each run and prints it with the
// shrunk counterexample when a property fails; FC_SEED=<seed> (and FC_PATH=<path> from that
// report) replays it, FC_NUM_RUNS=<n> searches deeper. The run counts are small so that the
// whole file stays well under a minute; they buy breadth (each run a different mix), not depth.

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const util = require('node:util');
const crypto = require('node:crypto');
const fc = require('fast-check');
const {
  Envelope,
  InvalidArgumentError,
  TransportConnectionError,
  TransportError,
  TransportMessageIdStamp,
} = require('@schally/nestjs-messenger');
const { SqlTransport, RedisStreamsTransport } = require('../..');
const engines = require('../support/engines');
const { requireServer, uniqueName } = require('../../bench/engines');
const { closedPort } = require('../support/ports');

/** Runs per property and engine. */
const RUNS = { dsn: 40, names: 25, loneNames: 6, options: 30, payloads: 10, lonePayloads: 6, packet: 4 };
/** The connect timeout the DSN properties give every transport: nothing may wait long. */
const DSN_CONNECT_TIMEOUT_MS = 500;
/** docs/reliability.md: a SQL operation gives up after connectTimeoutMs + 10 s; a second more for the event loop. */
const DSN_OP_BOUND_MS = DSN_CONNECT_TIMEOUT_MS + 11_000;
/** An operation on a reachable server with a working configuration. */
const OP_BOUND_MS = 15_000;
/** How long a sent message may take to come back out of get(). */
const RECEIVE_BOUND_MS = 5_000;
const CLOSE_BOUND_MS = 10_000;

/**
 * fast-check's parameters: its own random seed unless FC_SEED/FC_PATH replay a failure;
 * FC_NUM_RUNS=<n> runs every property n times instead (a deeper search, minutes long).
 * `examples` are values of the property's one arbitrary.
 */
function fcParams(numRuns, examples = []) {
  return {
    numRuns: process.env.FC_NUM_RUNS !== undefined ? Number(process.env.FC_NUM_RUNS) : numRuns,
    // Run first, every time: the named edge cases, so that none is left to chance.
    examples: examples.map((example) => [example]),
    ...(process.env.FC_SEED !== undefined && { seed: Number(process.env.FC_SEED) }),
    ...(process.env.FC_PATH !== undefined && { path: process.env.FC_PATH }),
  };
}

// ---------------------------------------------------------------------------
// Checks shared by the properties
// ---------------------------------------------------------------------------

/** The core's typed errors (TransportConnectionError and TransportNotFoundError are TransportErrors). */
const TYPED = [InvalidArgumentError, TransportError];

/** Fails the property (fast-check then shrinks and reports) with `why` unless `condition` holds. */
function check(condition, why) {
  if (!condition) throw new Error(why);
}

/** A short, printable account of a thrown value. */
function describeError(error) {
  return error instanceof Error ? `${error.constructor.name}: ${error.message}` : `non-Error ${util.inspect(error)}`;
}

/** A value for a failure message, on one line: JSON for strings (so lone surrogates and control characters show), shortened. */
function show(value) {
  const text = typeof value === 'string' ? JSON.stringify(value) : util.inspect(value, { breakLength: Infinity });
  return text.length > 200 ? `${text.slice(0, 200)}… (${text.length} characters)` : text;
}

/**
 * Every text an error carries, deeply: message, name and stack of it and of each `cause`, every
 * own property (enumerable or not) of every object reachable from it, and util.inspect's view.
 * A password must appear in none of it.
 */
function everyText(error) {
  const parts = [];
  const seen = new Set();
  const walk = (value, depth) => {
    if (value === null || value === undefined || depth > 16) return;
    if (typeof value === 'string') {
      parts.push(value);
      return;
    }
    if (typeof value !== 'object' && typeof value !== 'function') {
      parts.push(String(value));
      return;
    }
    if (seen.has(value)) return;
    seen.add(value);
    if (value instanceof Error) parts.push(String(value.name), String(value.message), String(value.stack));
    for (const key of Reflect.ownKeys(value)) {
      const descriptor = Object.getOwnPropertyDescriptor(value, key);
      if (descriptor !== undefined && 'value' in descriptor) walk(descriptor.value, depth + 1);
    }
  };
  walk(error, 0);
  parts.push(util.inspect(error, { depth: Infinity, showHidden: true }));
  return parts.join('\n');
}

/**
 * What a Rust panic looks like once it reaches JavaScript: caught at the napi boundary it says
 * "panicked"; a panic on one of sqlx's SQLite worker threads kills the worker, and every later
 * call on that connection says it "crashed".
 */
const PANIC = /panicked|crashed background worker/i;

/**
 * Checks that `error` is an instance of one of `classes` (the core's typed errors by default)
 * and not a Rust panic.
 */
function checkTyped(error, what, classes = TYPED) {
  check(
    error instanceof Error && classes.some((ErrorClass) => error instanceof ErrorClass),
    `${what} threw ${describeError(error)}; expected ${classes.map((c) => c.name).join(' or ')}`,
  );
  check(!PANIC.test(everyText(error)), `${what} surfaced a Rust panic: ${describeError(error)}`);
}

/**
 * Resolves how `run` (sync or async) ended: `{ value }`, `{ error }`, or `{ hung: true }` when
 * it had not settled after `boundMs`.
 */
async function settle(run, boundMs) {
  let timer;
  const bound = new Promise((resolve) => {
    timer = setTimeout(() => resolve({ hung: true }), boundMs);
  });
  try {
    const ran = Promise.resolve()
      .then(run)
      .then(
        (value) => ({ value }),
        (error) => ({ error }),
      );
    return await Promise.race([ran, bound]);
  } finally {
    clearTimeout(timer);
  }
}

// Transports opened by a property; whatever a failing run left open is closed after the test.
const openTransports = new Set();

/** Registers a transport for the after-test sweep. */
function track(transport) {
  openTransports.add(transport);
  return transport;
}

/** Closes `transport`: it must settle within CLOSE_BOUND_MS, and a failure must be typed. */
async function closeChecked(transport, what) {
  openTransports.delete(transport);
  const closed = await settle(() => transport.close(), CLOSE_BOUND_MS);
  check(!closed.hung, `${what}: close() did not settle within ${CLOSE_BOUND_MS} ms`);
  if (closed.error !== undefined) checkTyped(closed.error, `${what}: close()`);
  return closed;
}

afterEach(async () => {
  await Promise.all([...openTransports].map((t) => settle(() => t.close(), CLOSE_BOUND_MS)));
  openTransports.clear();
});

// A rejection nobody awaited (a native promise dropped on the floor) is a crash in waiting.
const strayRejections = [];
const onStrayRejection = (reason) => strayRejections.push(reason);
beforeAll(() => process.on('unhandledRejection', onStrayRejection));
afterAll(() => process.off('unhandledRejection', onStrayRejection));
afterEach(() => {
  expect(strayRejections.splice(0).map(describeError)).toEqual([]);
});

/**
 * The message class of every property that looks at payloads: its serializer stores `text`
 * verbatim as the body (the JSON serializer would escape NUL and lone surrogates, hiding them
 * from the engine).
 */
class RawMessage {
  constructor(text) {
    this.text = text;
  }
}

const rawSerializer = {
  encode: (envelope) => ({ body: envelope.message.text, headers: { 'X-Message-Type': 'RawMessage' } }),
  decode: (encoded) => new Envelope(Object.assign(Object.create(RawMessage.prototype), { text: encoded.body })),
};

const idOf = (envelope) => String(envelope.last(TransportMessageIdStamp).id);

/**
 * Takes up to `count` messages from `transport.get()` within `boundMs`, acking each; resolves
 * the envelopes (fewer when the bound ran out first).
 */
async function receive(transport, count, boundMs = RECEIVE_BOUND_MS) {
  const received = [];
  if (count === 0) return received;
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), boundMs);
  try {
    for await (const envelope of transport.get(controller.signal)) {
      received.push(envelope);
      await transport.ack(envelope);
      if (received.length >= count) break;
    }
  } finally {
    clearTimeout(timer);
    controller.abort();
  }
  return received;
}

/** How a settled operation ended, for a failure message. */
function outcomeText(outcome) {
  if (outcome.hung) return 'no answer';
  return outcome.error !== undefined ? describeError(outcome.error) : show(outcome.value);
}

/** Where two long strings first differ, for a failure message that does not print megabytes. */
function firstDifference(a, b) {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i += 1;
  const around = (text) => show(text.slice(i, i + 8));
  return `length ${a.length} vs ${b.length}, first difference at ${i}: ${around(a)} vs ${around(b)}`;
}

// ---------------------------------------------------------------------------
// The engines and their raw inspection (admin connections only, never the code under test)
// ---------------------------------------------------------------------------

const { lit } = engines.sqlite;

/**
 * Per SQL engine: table listing, creation and removal by name, and per-row digests of a queue's
 * bodies (byte length and a hash computed by the server, so megabytes need not travel back).
 */
const SQL_INSPECTION = {
  postgres: {
    hash: 'sha256',
    tables: async (admin, prefix) =>
      (
        await admin.query('SELECT tablename AS name FROM pg_tables WHERE schemaname = current_schema() AND tablename LIKE $1', [
          `${prefix}%`,
        ])
      ).map((row) => row.name),
    create: (admin, table) => admin.query(`CREATE TABLE "${table}" (id int)`),
    drop: (admin, table) => admin.query(`DROP TABLE IF EXISTS "${table}"`),
    digests: (admin, table, queue) =>
      admin.query(
        `SELECT id::text AS id, octet_length(body) AS bytes, encode(sha256(convert_to(body, 'UTF8')), 'hex') AS digest
           FROM ${table} WHERE queue_name = $1 ORDER BY id`,
        [queue],
      ),
  },
  mysql: {
    hash: 'sha256',
    tables: async (admin, prefix) =>
      (
        await admin.query(
          'SELECT table_name AS name FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name LIKE ?',
          [`${prefix}%`],
        )
      ).map((row) => row.name),
    create: (admin, table) => admin.query(`CREATE TABLE \`${table}\` (id int)`),
    drop: (admin, table) => admin.query(`DROP TABLE IF EXISTS \`${table}\``),
    digests: (admin, table, queue) =>
      admin.query(
        `SELECT CAST(id AS CHAR) AS id, LENGTH(body) AS bytes, SHA2(body, 256) AS digest
           FROM ${table} WHERE queue_name = ? ORDER BY id`,
        [queue],
      ),
  },
  sqlite: {
    // The sqlite3 CLI has sha3() built in, not sha256().
    hash: 'sha3-256',
    tables: async (admin, prefix) =>
      (await admin.query(`SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE ${lit(`${prefix}%`)};`)).map(
        (row) => row.name,
      ),
    create: (admin, table) => admin.query(`CREATE TABLE "${table}" (id int);`),
    drop: (admin, table) => admin.query(`DROP TABLE IF EXISTS "${table}";`),
    digests: (admin, table, queue) =>
      admin.query(
        `SELECT CAST(id AS TEXT) AS id, length(CAST(body AS BLOB)) AS bytes, lower(hex(sha3(CAST(body AS BLOB), 256))) AS digest
           FROM ${table} WHERE queue_name = ${lit(queue)} ORDER BY id;`,
      ),
  },
};

/**
 * A SQL engine as the properties use it: its DSN (a fresh file for SQLite), admin connection,
 * inspection, and transports of the code under test on it.
 */
function sqlContext(engine) {
  const ctx = {
    engine,
    dsn: undefined,
    admin: undefined,
    inspect: SQL_INSPECTION[engine.name],
    async start() {
      await requireServer(engine.name);
      if (engine.name === 'sqlite') engine.requireCli();
      ctx.dsn = engine.name === 'sqlite' ? engine.temporaryDsn('bad-input') : engine.dsn;
      ctx.admin = engine.admin(ctx.dsn);
    },
    stop() {
      if (engine.name === 'sqlite' && ctx.dsn !== undefined) {
        fs.rmSync(path.dirname(ctx.dsn.slice('sqlite://'.length)), { recursive: true, force: true });
      }
    },
    /** Table names starting with `prefix`, as the server lists them (filtered: LIKE's `_` is a wildcard). */
    tables: async (prefix) => (await ctx.inspect.tables(ctx.admin, prefix)).filter((name) => name.startsWith(prefix)),
    /** Drops every table whose name starts with `prefix` (this test's, all allowlisted names). */
    async dropTables(prefix) {
      // Nothing to do when start() failed: the server is down, and its hint is the failure.
      if (ctx.admin === undefined) return;
      for (const table of await ctx.tables(prefix)) await ctx.inspect.drop(ctx.admin, table);
    },
    open: (options) => track(new SqlTransport({ dsn: ctx.dsn, serializer: rawSerializer, ...options })),
  };
  return ctx;
}

/**
 * sqlContext for a describe: started before its tests and stopped after them, with the tables
 * under a tag of its own (named after `prefix`) dropped after each test. Returns both.
 */
function taggedSqlContext(engine, prefix) {
  const ctx = sqlContext(engine);
  const tag = uniqueName(prefix);
  beforeAll(() => ctx.start());
  afterAll(() => ctx.stop());
  afterEach(() => ctx.dropTables(tag));
  return { ctx, tag };
}

const redisEngine = engines.redis;

/** Runs `use(client)` on a short-lived admin client of the shared Redis. */
const withRedis = (use) => redisEngine.admin().withClient(use);

/** Every key (as a Buffer) starting with `prefix` (which has no glob characters). */
async function redisKeys(prefix) {
  return withRedis(async (client) => {
    const keys = [];
    let cursor = '0';
    do {
      const [next, batch] = await client.scanBuffer(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
      cursor = String(next);
      keys.push(...batch);
    } while (cursor !== '0');
    return keys;
  });
}

/** Deletes every key starting with `prefix`. */
async function deleteRedisKeys(prefix) {
  const keys = await redisKeys(prefix);
  if (keys.length > 0) await withRedis((client) => client.del(...keys));
}

/**
 * For a describe on the shared Redis: fails its tests with the start hint when the server is
 * down (beforeAll), and deletes every key under a tag of its own (named after `prefix`) after
 * each test. Returns the tag, and fresh stream names under it.
 */
function taggedRedisKeys(prefix) {
  const tag = redisEngine.uniqueStream(prefix);
  let up = false;
  beforeAll(async () => {
    await requireServer(redisEngine.name);
    up = true;
  });
  afterEach(async () => {
    if (up) await deleteRedisKeys(tag);
  });
  return { tag, freshStream: () => `${tag}:${crypto.randomBytes(4).toString('hex')}` };
}

/** A Redis Streams transport of the code under test on the shared server. */
const openRedis = (options) =>
  track(new RedisStreamsTransport({ dsn: redisEngine.dsn, serializer: rawSerializer, ...options }));

const SQL_ENGINES = [engines.postgres, engines.mysql, engines.sqlite];

// ---------------------------------------------------------------------------
// 1. DSNs
// ---------------------------------------------------------------------------

/** Every character RFC 3986 reserves, and the space. */
const RESERVED = [...'/?#@:%[]!$&\'()*+,;= '];
const PLAIN = [...'aZ09-._~'];
const UNICODE = ['é', 'ß', '中', '✓', '😀', '\u00a0', 'Ω'];

/** Passwords of 0 to 14 characters drawn mostly from the reserved ones. */
const passwordArb = fc
  .array(
    fc.oneof(
      { weight: 3, arbitrary: fc.constantFrom(...RESERVED) },
      { weight: 2, arbitrary: fc.constantFrom(...PLAIN) },
      { weight: 1, arbitrary: fc.constantFrom(...UNICODE) },
    ),
    { maxLength: 14 },
  )
  .map((chars) => chars.join(''));

/** The characters a careful user percent-encodes in a userinfo (the generic delimiters, %, space). */
const GEN_DELIMS = /[/?#@:%[\] ]/g;

/** The password as written into the DSN: verbatim, fully percent-encoded, or only its delimiters. */
function writtenPassword(password, encoding) {
  if (encoding === 'raw') return password;
  if (encoding === 'encoded') return encodeURIComponent(password);
  return password.replace(GEN_DELIMS, (c) => encodeURIComponent(c));
}

/**
 * A password form is only looked for in an error when finding it there can only mean a leak:
 * four characters or more, not a part of what the DSN says besides the password (the redacted
 * DSN is echoed in messages), and holding a character that no fixed text of the transports'
 * messages, stacks and driver errors has (so "fail" or "ion " cannot match "failed" or
 * "Connection").
 */
const MARKER = /[#?!$&=%+]|[^\x00-\x7f]/u;

/** A password form, and each of its 6-character windows: a leak of part of a password is a leak too. */
function fragments(form) {
  if (form.length <= 6) return [form];
  return [form, ...Array.from({ length: form.length - 5 }, (_, i) => form.slice(i, i + 6))];
}

/**
 * Checks that no form of the password (as generated, as written into the DSN), nor a part of
 * one, appears in any text `error` carries.
 */
function checkNoPassword(error, what, dsn, password, written) {
  if (written === '') return;
  const restRemoved = dsn.split(written).join('');
  const restRedacted = dsn.split(written).join('***');
  const text = everyText(error);
  for (const form of new Set([password, written])) {
    if (form.length < 4) continue;
    for (const part of fragments(form)) {
      if (!MARKER.test(part) || restRemoved.includes(part) || restRedacted.includes(part)) continue;
      const shown = part === form ? `the password ${show(form)}` : `${show(part)} of the password ${show(form)}`;
      check(!text.includes(part), `${what}: ${shown} appears in the error: ${describeError(error)}`);
    }
  }
}

/** Schemes that name no engine of the transport under test, or nothing at all. */
const ALIEN_SCHEMES = ['http', 'foo', '', 'postgres+tls', 'mysqlx', 'sqlite3', '1abc'];

/**
 * The server DSN targets: the engine's schemes (the first three its own, then other engines'),
 * users the server knows or not, databases that exist or not, driver parameters. A SQL DSN never
 * has an empty path: on a reachable server it would name another database, where a created table
 * would escape the clean-up (Redis's empty path is database 0).
 */
const DSN_TARGETS = [
  {
    engine: engines.postgres,
    schemes: ['postgres', 'postgresql', 'POSTGRES', 'mysql', 'redis'],
    users: ['postgres', 'nobody_bi'],
    databases: ['/test', '/nosuchdb_bi'],
    params: ['sslmode=require', 'application_name=bad%20input', 'sslmode=bogus'],
  },
  {
    engine: engines.mysql,
    schemes: ['mysql', 'mariadb', 'MySQL', 'postgres', 'rediss'],
    users: ['root', 'nobody_bi'],
    databases: ['/test', '/nosuchdb_bi'],
    params: ['ssl-mode=REQUIRED', 'charset=utf8mb4', 'ssl-mode=bogus'],
  },
  {
    engine: engines.redis,
    schemes: ['redis', 'rediss', 'REDIS', 'postgres'],
    users: ['default', 'nobody_bi'],
    databases: ['/0', '', '/99999', '/abc', '/0/x'],
    params: ['protocol=resp3', 'protocol=bogus'],
  },
];

/** The generated parts of a server DSN. */
function serverDsnArb(target) {
  return fc.record({
    scheme: fc.oneof(
      { weight: 6, arbitrary: fc.constantFrom(...target.schemes.slice(0, 3)) },
      { weight: 1, arbitrary: fc.constantFrom(...target.schemes.slice(3), ...ALIEN_SCHEMES) },
    ),
    user: fc.constantFrom(...target.users, '', 'u%20ser'),
    password: passwordArb,
    encoding: fc.constantFrom('raw', 'encoded', 'delims'),
    passwordIn: fc.constantFrom('userinfo', 'userinfo', 'userinfo', 'query'),
    host: fc.constantFrom('127.0.0.1', '[::1]', 'localhost', ''),
    port: fc.constantFrom('closed', 'server', 'none', '', 0, 65535, 65536, -1, 'abc', 99999999),
    database: fc.constantFrom(...target.databases),
    params: fc.constantFrom('', '', ...target.params),
  });
}

/**
 * One DSN per reserved character, written raw into the userinfo: the cases most likely to
 * confuse a parser. Then an `@` followed later by a `/` (the `/` ends the authority early, so
 * the password's own `@` looks like the end of the userinfo), alone and with a space that makes
 * the URL unparseable.
 */
function reservedExamples(target) {
  return [...RESERVED.map((c) => `pa${c}ss${c}word`), 'p@ss/wörd', 'p@s s/wörd'].map((password) => ({
    scheme: target.schemes[0],
    user: target.users[0],
    password,
    encoding: 'raw',
    passwordIn: 'userinfo',
    host: '127.0.0.1',
    port: 'closed',
    database: target.databases[0],
    params: '',
  }));
}

/** The DSN of `parts`; `ports` are this test's closed port and the server's. Also returns the written password. */
function serverDsn(parts, ports) {
  const inQuery = parts.passwordIn === 'query';
  const written = writtenPassword(parts.password, inQuery ? 'encoded' : parts.encoding);
  const userinfo = inQuery ? (parts.user === '' ? '' : `${parts.user}@`) : `${parts.user}:${written}@`;
  const port = { closed: `:${ports.closed}`, server: `:${ports.server}`, none: '' }[parts.port] ?? `:${parts.port}`;
  const query = [parts.params, inQuery ? `password=${written}` : ''].filter((p) => p !== '').join('&');
  const dsn = `${parts.scheme}://${userinfo}${parts.host}${port}${parts.database}${query === '' ? '' : `?${query}`}`;
  return { dsn, written };
}

/** The generated parts of a SQLite DSN: a relative file behind a userinfo, or a file with a query. */
const sqliteDsnArb = fc.record({
  scheme: fc.oneof({ weight: 6, arbitrary: fc.constant('sqlite') }, { weight: 1, arbitrary: fc.constantFrom('SQLite', ...ALIEN_SCHEMES) }),
  form: fc.constantFrom('userinfo', 'userinfo', 'query', 'memory'),
  user: fc.constantFrom('u', '', 'u%20ser'),
  password: passwordArb,
  encoding: fc.constantFrom('raw', 'encoded', 'delims'),
  host: fc.constantFrom('h', '127.0.0.1', '[::1]', ''),
  port: fc.constantFrom('', ':0', ':65535', ':65536', ':abc'),
  file: fc.constantFrom('/q.db', '', '/d/q.db'),
});

/**
 * The DSN of SQLite `parts`. Relative paths land in `cwd` (the test's own temporary working
 * directory); the others name a file in `dir`.
 */
function sqliteDsn(parts, dir) {
  const written = writtenPassword(parts.password, parts.form === 'query' ? 'encoded' : parts.encoding);
  const userinfo = `${parts.user}:${written}@`;
  const dsn = {
    userinfo: `${parts.scheme}://${userinfo}${parts.host}${parts.port}${parts.file}`,
    query: `${parts.scheme}://${dir}/q.db?password=${written}`,
    memory: `${parts.scheme}://${userinfo}:memory:`,
  }[parts.form];
  return { dsn, written };
}

/**
 * One DSN: constructing must return or throw a typed error, and a first operation
 * (getMessageCount) must resolve or reject with one, within the bound; no error may carry the
 * password; close() must settle.
 */
async function dsnCase(open, dsn, password, written) {
  const what = `DSN ${show(dsn)}`;
  const made = await settle(() => open(dsn), 2000);
  check(!made.hung, `${what}: the constructor did not return`);
  if (made.error !== undefined) {
    checkTyped(made.error, `${what}: the constructor`);
    checkNoPassword(made.error, `${what}: the constructor`, dsn, password, written);
    return;
  }
  const transport = track(made.value);
  try {
    const counted = await settle(() => transport.getMessageCount(), DSN_OP_BOUND_MS);
    check(!counted.hung, `${what}: getMessageCount() did not settle within ${DSN_OP_BOUND_MS} ms`);
    if (counted.error !== undefined) {
      checkTyped(counted.error, `${what}: getMessageCount()`);
      checkNoPassword(counted.error, `${what}: getMessageCount()`, dsn, password, written);
    } else {
      check(counted.value === 0, `${what}: getMessageCount() resolved ${show(counted.value)} on a new queue`);
    }
  } finally {
    const closed = await closeChecked(transport, what);
    if (closed.error !== undefined) checkNoPassword(closed.error, `${what}: close()`, dsn, password, written);
  }
}

describe('bad input, property-based: DSNs', () => {
  describe.each(DSN_TARGETS)('$engine.label', (target) => {
    const { engine } = target;
    const tag = uniqueName('bid');
    const ports = {};
    let up = false;

    beforeAll(async () => {
      await requireServer(engine.name);
      up = true;
      ports.server = Number(new URL(engine.dsn).port || engine.defaultPort);
      ports.closed = await closedPort();
    });

    afterEach(async () => {
      // A DSN that reached the server made this test's table or stream: remove it.
      if (!up) return;
      if (engine.kind === 'redis') await deleteRedisKeys(tag);
      else await SQL_INSPECTION[engine.name].drop(engine.admin(), tag);
    });

    const common = { connectTimeoutMs: DSN_CONNECT_TIMEOUT_MS, serializer: rawSerializer };
    const open = (dsn) =>
      engine.kind === 'redis'
        ? new RedisStreamsTransport({ dsn, stream: tag, ...common })
        : new SqlTransport({ dsn, tableName: tag, queueName: tag, ...common });

    it('construction and a first operation succeed or fail with a typed error that carries no password', async () => {
      await fc.assert(
        fc.asyncProperty(serverDsnArb(target), async (parts) => {
          const { dsn, written } = serverDsn(parts, ports);
          await dsnCase(open, dsn, parts.password, written);
        }),
        fcParams(RUNS.dsn, reservedExamples(target)),
      );
    }, 120_000);
  });

  describe('SQLite', () => {
    let dir;
    let previousCwd;

    beforeAll(() => {
      engines.sqlite.requireCli();
      // Relative SQLite DSNs resolve against the working directory: make it a private one, so
      // a DSN that names a file creates it there and not in the repository.
      dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bad-input-dsn-'));
      previousCwd = process.cwd();
      process.chdir(dir);
    });

    afterAll(() => {
      if (previousCwd !== undefined) process.chdir(previousCwd);
      if (dir !== undefined) fs.rmSync(dir, { recursive: true, force: true });
    });

    const open = (dsn) =>
      new SqlTransport({ dsn, queueName: 'bad-input', connectTimeoutMs: DSN_CONNECT_TIMEOUT_MS, serializer: rawSerializer });

    it('construction and a first operation succeed or fail with a typed error that carries no password', async () => {
      expect(fs.realpathSync(process.cwd())).toBe(fs.realpathSync(dir));
      await fc.assert(
        fc.asyncProperty(sqliteDsnArb, async (parts) => {
          const { dsn, written } = sqliteDsn(parts, dir);
          await dsnCase(open, dsn, parts.password, written);
        }),
        fcParams(
          RUNS.dsn,
          RESERVED.map((c) => ({
            scheme: 'sqlite',
            form: 'userinfo',
            user: 'u',
            password: `pa${c}ss${c}word`,
            encoding: 'raw',
            host: 'h',
            port: '',
            file: '/q.db',
          })),
        ),
      );
    }, 60_000);
  });
});

// ---------------------------------------------------------------------------
// 2. Identifiers
// ---------------------------------------------------------------------------

/** Characters for names: allowed ones, case, quotes, separators, control characters, unicode. */
const NAME_UNIT = fc.constantFrom(
  ...'az09_A-. ;"\'`\\%$()*/',
  '\n',
  '\t',
  '\r',
  '\u0000',
  'é',
  '中',
  '😀',
  '\u2028',
);

/** Strings that would run a statement of their own if a name reached the SQL text unescaped. */
function sqlInjections(canary) {
  return [
    `; DROP TABLE ${canary}; --`,
    `"; DROP TABLE ${canary}; --`,
    `\`; DROP TABLE \`${canary}\`; --`,
    `'; DROP TABLE ${canary}; --`,
    ` (id int); DROP TABLE ${canary}`,
    `\u0000; DROP TABLE ${canary}`,
    `\nDROP TABLE ${canary}`,
  ];
}

/** `prefix` filled with `unit` (then 'a') to exactly `length` UTF-16 code units. */
function fillTo(prefix, unit, length) {
  const count = Math.max(0, Math.floor((length - prefix.length) / unit.length));
  const filled = prefix + unit.repeat(count);
  return filled + 'a'.repeat(Math.max(0, length - filled.length));
}

/** README: tableName must match this; queueName has 1 to 190 characters (UTF-16 code units). */
const TABLE_NAME = /^[a-z_][a-z0-9_]{0,47}$/;
const MAX_QUEUE_NAME = 190;

/** Table and queue names for one SQL test: `tag`-prefixed (so every table made can be found), plus a few bare invalid ones. */
function sqlNamesArb(tag, canary) {
  const tablePrefix = `${tag}_t`;
  const room = 48 - tablePrefix.length;
  const queuePrefix = `${tag}-q-`;
  const injections = sqlInjections(canary);
  const table = fc.oneof(
    { weight: 3, arbitrary: fc.stringMatching(/^[a-z0-9_]{0,10}$/).map((s) => tablePrefix + s) },
    { weight: 2, arbitrary: fc.integer({ min: room - 1, max: room + 2 }).map((n) => tablePrefix + 'x'.repeat(n)) },
    { weight: 2, arbitrary: fc.constantFrom(...injections).map((s) => tablePrefix + s) },
    { weight: 2, arbitrary: fc.string({ unit: NAME_UNIT, minLength: 1, maxLength: 6 }).map((s) => tablePrefix + s) },
    { weight: 1, arbitrary: fc.constantFrom('', '1abc', 'Messages', 'public.messages', '_'.repeat(49), canary.toUpperCase()) },
  );
  const queue = fc.oneof(
    { weight: 3, arbitrary: fc.string({ unit: NAME_UNIT, maxLength: 10 }).map((s) => queuePrefix + s) },
    {
      weight: 2,
      arbitrary: fc
        .record({ length: fc.integer({ min: MAX_QUEUE_NAME - 2, max: MAX_QUEUE_NAME + 2 }), unit: fc.constantFrom('a', 'é', '中', '😀') })
        .map(({ length, unit }) => fillTo(queuePrefix, unit, length)),
    },
    { weight: 2, arbitrary: fc.constantFrom(...injections).map((s) => queuePrefix + s) },
    { weight: 1, arbitrary: fc.constantFrom('', '\u0000', `${queuePrefix}\u0000`) },
  );
  return fc.record({ table, queue, roundTrip: fc.nat(2).map((n) => n === 0) });
}

/** Both sides of each limit, and each injection in each name. */
function sqlNameExamples(tag, canary) {
  const tablePrefix = `${tag}_t`;
  const queue = `${tag}-q-ok`;
  const table = `${tablePrefix}ok`;
  return [
    { table: fillTo(tablePrefix, 'x', 48), queue, roundTrip: true },
    { table: fillTo(tablePrefix, 'x', 49), queue, roundTrip: true },
    ...['a', '😀'].flatMap((unit) =>
      [MAX_QUEUE_NAME, MAX_QUEUE_NAME + 1].map((length) => ({ table, queue: fillTo(`${tag}-q-`, unit, length), roundTrip: true })),
    ),
    ...sqlInjections(canary).flatMap((injection) => [
      { table: tablePrefix + injection, queue, roundTrip: false },
      { table, queue: `${tag}-q-${injection}`, roundTrip: true },
    ]),
  ];
}

describe('bad input, property-based: identifiers', () => {
  describe.each(SQL_ENGINES)('SqlTransport on $label', (engine) => {
    const { ctx, tag } = taggedSqlContext(engine, 'bin');
    const canary = `${tag}_canary`;

    it('refuses a table or queue name at construction with InvalidArgumentError, or works under exactly that name', async () => {
      await ctx.inspect.create(ctx.admin, canary);
      await fc.assert(
        fc.asyncProperty(sqlNamesArb(tag, canary), async ({ table, queue, roundTrip }) => {
          const what = `tableName ${show(table)}, queueName ${show(queue)}`;
          const before = await ctx.tables(tag);
          const withinLimits = TABLE_NAME.test(table) && queue.length >= 1 && queue.length <= MAX_QUEUE_NAME;
          const made = await settle(() => ctx.open({ tableName: table, queueName: queue, connectTimeoutMs: 2000 }), 2000);
          check(!made.hung, `${what}: the constructor did not return`);
          if (made.error !== undefined) {
            checkTyped(made.error, `${what}: the constructor`, [InvalidArgumentError]);
          } else {
            const transport = made.value;
            try {
              check(withinLimits, `${what}: accepted, though the README's limits refuse it`);
              const counted = await settle(() => transport.getMessageCount(), OP_BOUND_MS);
              check(counted.value === 0, `${what}: getMessageCount() gave ${outcomeText(counted)}`);
              if (roundTrip) {
                const text = `sent to ${queue}`;
                const sent = await settle(() => transport.send(new Envelope(new RawMessage(text))), OP_BOUND_MS);
                check(sent.value !== undefined, `${what}: send() gave ${outcomeText(sent)}`);
                const id = idOf(sent.value);
                const rows = await ctx.admin.rowsById(table, id);
                check(
                  rows.length === 1 && rows[0].queue_name === queue,
                  `${what}: the sent row is stored as ${show(rows.map((r) => r.queue_name))}, not under the queue name given`,
                );
                const [received] = await receive(transport, 1);
                check(received?.message.text === text && idOf(received) === id, `${what}: get() did not yield the message sent`);
              }
            } finally {
              await closeChecked(transport, what);
            }
          }
          // Nothing but the accepted table appeared, and no injection reached the canary.
          const after = await ctx.tables(tag);
          const appeared = after.filter((name) => !before.includes(name) && !(made.error === undefined && name === table));
          check(appeared.length === 0, `${what}: tables appeared that no accepted name explains: ${show(appeared)}`);
          check(after.includes(canary), `${what}: the canary table ${canary} is gone`);
        }),
        fcParams(RUNS.names, sqlNameExamples(tag, canary)),
      );
    }, 120_000);
  });

  describe('RedisStreamsTransport', () => {
    const { tag } = taggedRedisKeys('bin');
    const canary = `${tag}:canary`;

    /** Strings that would run a command of their own if a name reached the protocol or a script unescaped. */
    const injections = [
      `\r\nDEL ${canary}\r\n`,
      `*2\r\n$3\r\nDEL\r\n$${Buffer.byteLength(canary)}\r\n${canary}\r\n`,
      `') redis.call('DEL', '${canary}') --`,
      `"]]) redis.call("DEL", "${canary}") --`,
      ` ; DEL ${canary}`,
    ];
    /** A name: empty, short and odd, an injection, or long (Redis sets no limit below 512 MB). */
    const name = (prefix) =>
      fc.oneof(
        { weight: 1, arbitrary: fc.constant('') },
        { weight: 3, arbitrary: fc.string({ unit: NAME_UNIT, minLength: 1, maxLength: 10 }).map((s) => prefix + s) },
        { weight: 2, arbitrary: fc.constantFrom(...injections).map((s) => prefix + s) },
        { weight: 1, arbitrary: fc.integer({ min: 1000, max: 70_000 }).map((n) => prefix + 'x'.repeat(n)) },
      );
    const optional = (arb) => fc.oneof({ weight: 1, arbitrary: fc.constant(undefined) }, { weight: 3, arbitrary: arb });
    const namesArb = fc.record({
      stream: name(`${tag}:s`),
      group: optional(name('')),
      consumer: optional(name('')),
      delayKey: optional(name(`${tag}:d`)),
      roundTrip: fc.nat(2).map((n) => n === 0),
    });

    /** The fields of an XINFO reply row ([k, v, k, v, …]) as an object. */
    const fieldsOf = (row) => Object.fromEntries(Array.from({ length: row.length / 2 }, (_, i) => [row[2 * i], row[2 * i + 1]]));

    it('refuses an empty name at construction with InvalidArgumentError, or works under exactly the names given', async () => {
      await withRedis((client) => client.set(canary, '1'));
      await fc.assert(
        fc.asyncProperty(namesArb, async ({ stream, group, consumer, delayKey, roundTrip }) => {
          const names = { stream, group, consumer, delayKey };
          const what = `names ${show(names)}`;
          const before = (await redisKeys(tag)).map(String);
          const made = await settle(() => openRedis({ ...names, connectTimeoutMs: 2000 }), 2000);
          check(!made.hung, `${what}: the constructor did not return`);
          const empty = Object.values(names).some((value) => value === '');
          if (made.error !== undefined) {
            checkTyped(made.error, `${what}: the constructor`, [InvalidArgumentError]);
          } else {
            const transport = made.value;
            try {
              check(!empty, `${what}: accepted an empty name`);
              const counted = await settle(() => transport.getMessageCount(), OP_BOUND_MS);
              check(counted.value === 0, `${what}: getMessageCount() gave ${outcomeText(counted)}`);
              const groups = await withRedis((client) => client.xinfo('GROUPS', stream));
              check(
                groups.map((row) => fieldsOf(row).name).includes(group ?? 'messenger'),
                `${what}: the stream has no group named exactly as given`,
              );
              if (roundTrip) {
                const text = `sent to ${stream}`;
                const sent = await settle(() => transport.send(new Envelope(new RawMessage(text))), OP_BOUND_MS);
                check(sent.value !== undefined, `${what}: send() gave ${outcomeText(sent)}`);
                const [received] = await receive(transport, 1);
                check(
                  received?.message.text === text && idOf(received) === idOf(sent.value),
                  `${what}: get() did not yield the message sent`,
                );
                if (consumer !== undefined) {
                  const consumers = await withRedis((client) => client.xinfo('CONSUMERS', stream, group ?? 'messenger'));
                  check(
                    consumers.map((row) => fieldsOf(row).name).includes(consumer),
                    `${what}: the group has no consumer named exactly as given`,
                  );
                }
              }
            } finally {
              await closeChecked(transport, what);
            }
          }
          // Only the accepted stream, its delayed set and its sends' markers appeared (a send
          // marks its batch stored in `<stream>:sent:<uuid>` for a minute, so that a retry after
          // a lost reply stores nothing twice); the canary is still there.
          const explained = (key) =>
            made.error === undefined && (key === stream || key === (delayKey ?? `${stream}:delayed`) || key.startsWith(`${stream}:sent:`));
          const appeared = (await redisKeys(tag)).map(String).filter((key) => !before.includes(key) && !explained(key));
          check(appeared.length === 0, `${what}: keys appeared that no accepted name explains: ${show(appeared)}`);
          check((await withRedis((client) => client.exists(canary))) === 1, `${what}: the canary key is gone`);
        }),
        fcParams(RUNS.names, [
          ...['stream', 'group', 'consumer', 'delayKey'].map((key) => ({ stream: `${tag}:s`, [key]: '', roundTrip: true })),
          ...injections.map((injection) => ({
            stream: `${tag}:s${injection}`,
            group: injection,
            consumer: injection,
            delayKey: `${tag}:d${injection}`,
            roundTrip: true,
          })),
        ]),
      );
    }, 120_000);
  });

  // Names that differ only in a lone surrogate (half of a UTF-16 pair, which UTF-8 cannot
  // encode) are different names to JavaScript: they must be refused, or name different queues.
  // A separate property, so that this one defect cannot hide others above.
  const loneSurrogate = fc.integer({ min: 0xd800, max: 0xdfff }).map((code) => String.fromCharCode(code));
  const lonePairArb = fc
    .tuple(loneSurrogate, loneSurrogate)
    .filter(([a, b]) => a !== b)
    .map(([a, b]) => ({ a, b }));

  /**
   * `A` and `B` are transports on names that differ only in a lone surrogate; both accepted,
   * a message sent on A must not be counted on B.
   */
  async function checkDistinct(what, makeA, makeB) {
    const a = await settle(makeA, 2000);
    const b = await settle(makeB, 2000);
    try {
      for (const made of [a, b]) {
        check(!made.hung, `${what}: the constructor did not return`);
        if (made.error !== undefined) checkTyped(made.error, `${what}: the constructor`, [InvalidArgumentError]);
      }
      if (a.error !== undefined || b.error !== undefined) return;
      const sent = await settle(() => a.value.send(new Envelope(new RawMessage('for A only'))), OP_BOUND_MS);
      check(sent.value !== undefined, `${what}: send() gave ${outcomeText(sent)}`);
      const onB = await settle(() => b.value.getMessageCount(), OP_BOUND_MS);
      check(
        onB.value === 0,
        `${what}: a message sent under one name is counted under the other (${outcomeText(onB)}): both names reach one queue`,
      );
    } finally {
      for (const made of [a, b]) if (made.value !== undefined) await closeChecked(made.value, what);
    }
  }

  describe.each(SQL_ENGINES)('SqlTransport on $label: lone surrogates', (engine) => {
    const { ctx, tag } = taggedSqlContext(engine, 'bil');

    it('refuses queue names that differ only in a lone surrogate, or keeps them apart', async () => {
      await fc.assert(
        fc.asyncProperty(lonePairArb, async ({ a, b }) => {
          const queue = uniqueName('q');
          const what = `queueNames ${show(queue + a)} and ${show(queue + b)}`;
          await checkDistinct(
            what,
            () => ctx.open({ tableName: tag, queueName: queue + a }),
            () => ctx.open({ tableName: tag, queueName: queue + b }),
          );
        }),
        fcParams(RUNS.loneNames),
      );
    }, 60_000);
  });

  describe('RedisStreamsTransport: lone surrogates', () => {
    const { freshStream } = taggedRedisKeys('bil');

    it('refuses stream names that differ only in a lone surrogate, or keeps them apart', async () => {
      await fc.assert(
        fc.asyncProperty(lonePairArb, async ({ a, b }) => {
          const stream = freshStream();
          const what = `streams ${show(stream + a)} and ${show(stream + b)}`;
          await checkDistinct(
            what,
            () => openRedis({ stream: stream + a }),
            () => openRedis({ stream: stream + b }),
          );
        }),
        fcParams(RUNS.loneNames),
      );
    }, 60_000);
  });
});

// ---------------------------------------------------------------------------
// 3. Option values at their extremes
// ---------------------------------------------------------------------------

/** Numbers at and past every edge: zero of both signs, tiny, huge, 2^n boundaries, non-finite. */
const EXTREME_NUMBERS = [
  0,
  -0,
  -1,
  -Number.MIN_VALUE,
  Number.MIN_VALUE,
  1e-7,
  0.5,
  1,
  2 ** 31,
  2 ** 32,
  2 ** 53,
  Number.MAX_SAFE_INTEGER + 2,
  1e15,
  1e300,
  Number.MAX_VALUE,
  -1e300,
  Infinity,
  -Infinity,
  NaN,
];
/** Values that are not numbers, some of which coerce to one. */
const NOT_NUMBERS = [
  '100',
  '',
  'NaN',
  true,
  false,
  {},
  [],
  [5],
  10n,
  new Number(5),
  { valueOf: () => 5 },
  () => 5,
  Symbol('five'),
  new Date(0),
  null,
  undefined,
];
const optionValueArb = fc.oneof(
  { weight: 3, arbitrary: fc.constantFrom(...EXTREME_NUMBERS) },
  { weight: 2, arbitrary: fc.double() },
  { weight: 1, arbitrary: fc.integer() },
  { weight: 2, arbitrary: fc.constantFrom(...NOT_NUMBERS) },
);

/**
 * The documented domain of an option (README, index.d.ts): unset (undefined or null: the
 * default), a finite number >= 0, or for readBatchSize a positive integer.
 */
function withinDomain(option, value) {
  if (value === undefined || value === null) return true;
  if (option === 'readBatchSize') return Number.isInteger(value) && value >= 1;
  return typeof value === 'number' && Number.isFinite(value) && value >= 0;
}

/**
 * A value no implementation may refuse: unset, or 1 to 2^31 - 1 (ms, seconds, entries). Refusing
 * an extreme one (0, a denormal, a century) is one of the two outcomes the property allows.
 */
function ordinary(option, value) {
  if (value === undefined || value === null) return true;
  return typeof value === 'number' && value >= 1 && value <= 2 ** 31 - 1 && (option !== 'readBatchSize' || Number.isInteger(value));
}

/**
 * One option value: refused with InvalidArgumentError (always when it is outside its documented
 * domain, or for getNotifyTimeoutMs off PostgreSQL set at all; never when it is ordinary), or
 * accepted and the transport works: a first count resolves and, for a sample, a message goes
 * round. The one documented failure of an accepted value is connectTimeoutMs doing its job: a
 * positive timeout shorter than a connection or command takes ends in TransportConnectionError.
 * Zero is not such a timeout: no machine meets it, so accepting it accepts a transport that can
 * never work.
 */
async function optionCase({ option, value, roundTrip }, { open, mustRefuse, mustAccept }) {
  const what = `${option}: ${show(value)}`;
  const made = await settle(() => open({ [option]: value }), 2000);
  check(!made.hung, `${what}: the constructor did not return`);
  if (made.error !== undefined) {
    checkTyped(made.error, `${what}: the constructor`, [InvalidArgumentError]);
    check(!mustAccept, `${what}: refused an ordinary value (${describeError(made.error)})`);
    return;
  }
  const transport = made.value;
  const tooShortToConnect = option === 'connectTimeoutMs' && typeof value === 'number' && value > 0 && value < 1000;
  /** A step of an accepted configuration failed: only a too-short connectTimeoutMs explains that. */
  const checkFailure = (step, error) => {
    checkTyped(error, `${what}: ${step}`);
    check(
      tooShortToConnect && error instanceof TransportConnectionError,
      `${what}: accepted, but the transport does not work: ${step} threw ${describeError(error)}`,
    );
  };
  try {
    check(!mustRefuse, `${what}: accepted, though it is outside the option's documented domain`);
    const counted = await settle(() => transport.getMessageCount(), OP_BOUND_MS);
    check(!counted.hung, `${what}: getMessageCount() did not settle within ${OP_BOUND_MS} ms`);
    if (counted.error !== undefined) return checkFailure('getMessageCount()', counted.error);
    check(counted.value === 0, `${what}: getMessageCount() resolved ${show(counted.value)} on a new queue`);
    if (!roundTrip) return undefined;
    const sent = await settle(() => transport.send(new Envelope(new RawMessage(what))), OP_BOUND_MS);
    check(!sent.hung, `${what}: send() did not settle within ${OP_BOUND_MS} ms`);
    if (sent.error !== undefined) return checkFailure('send()', sent.error);
    const received = await settle(() => receive(transport, 1), RECEIVE_BOUND_MS + OP_BOUND_MS);
    check(!received.hung, `${what}: get() did not end after its abort`);
    if (received.error !== undefined) return checkFailure('get()', received.error);
    check(
      received.value[0]?.message.text === what,
      `${what}: accepted, but get() did not yield the message within ${RECEIVE_BOUND_MS} ms`,
    );
    return undefined;
  } finally {
    await closeChecked(transport, what);
  }
}

const SQL_NUMERIC_OPTIONS = ['connectTimeoutMs', 'pollIntervalMs', 'redeliverTimeoutSeconds', 'getNotifyTimeoutMs'];
const REDIS_NUMERIC_OPTIONS = ['connectTimeoutMs', 'pollIntervalMs', 'claimIdleMs', 'readBatchSize'];

/** One option's values; a sample of the accepted ones also sends and receives a message. */
const optionArb = (option) => fc.record({ option: fc.constant(option), value: optionValueArb, roundTrip: fc.nat(3).map((n) => n === 0) });

/** The option with every value named above, each with a round trip when accepted. */
const optionExamples = (option) => [...EXTREME_NUMBERS, ...NOT_NUMBERS].map((value) => ({ option, value, roundTrip: true }));

// One test per option, so that a defect of one option cannot hide another's.
describe('bad input, property-based: option values at their extremes', () => {
  describe.each(SQL_ENGINES)('SqlTransport on $label', (engine) => {
    const { ctx, tag: table } = taggedSqlContext(engine, 'bio');

    it.each(SQL_NUMERIC_OPTIONS)('%s: InvalidArgumentError at construction, or a working transport', async (option) => {
      // README: useNotify and getNotifyTimeoutMs, set at all, are refused off PostgreSQL.
      const notifyOffPostgres = option === 'getNotifyTimeoutMs' && !engine.pushWakeup;
      await fc.assert(
        fc.asyncProperty(optionArb(option), async (c) => {
          await optionCase(c, {
            open: (o) => ctx.open({ tableName: table, queueName: uniqueName('q'), ...o }),
            mustRefuse: notifyOffPostgres ? c.value !== undefined : !withinDomain(option, c.value),
            mustAccept: !notifyOffPostgres && ordinary(option, c.value),
          });
        }),
        fcParams(RUNS.options, optionExamples(option)),
      );
    }, 60_000);
  });

  describe('RedisStreamsTransport', () => {
    const { freshStream } = taggedRedisKeys('bio');

    it.each(REDIS_NUMERIC_OPTIONS)('%s: InvalidArgumentError at construction, or a working transport', async (option) => {
      await fc.assert(
        fc.asyncProperty(optionArb(option), async (c) => {
          const stream = freshStream();
          await optionCase(c, {
            open: (o) => openRedis({ stream, ...o }),
            mustRefuse: !withinDomain(option, c.value),
            mustAccept: ordinary(option, c.value),
          });
        }),
        fcParams(RUNS.options, optionExamples(option)),
      );
    }, 60_000);
  });
});

// ---------------------------------------------------------------------------
// 4. Payloads around each engine's limits
// ---------------------------------------------------------------------------

/** Characters engines treat specially: NUL and other controls, quotes, noncharacters, astral. */
const BODY_UNIT = fc.constantFrom('\u0000', '\u0001', '\n', '"', '\\', "'", '%', 'é', '中', '😀', '\uffff', '\ufffe', '\u2028', '\u{10ffff}');
/** Short well-formed bodies: any code points, or the special ones densely. */
const smallBodyArb = fc.oneof(
  { weight: 2, arbitrary: fc.string({ unit: 'binary', maxLength: 30 }) },
  { weight: 2, arbitrary: fc.string({ unit: BODY_UNIT, maxLength: 20 }) },
);

/** A body of about `bytes` UTF-8 bytes of `unit`, ending in `tail` (so the end is checked too). */
function bodyOfBytes(bytes, unit, tail = '') {
  return unit.repeat(Math.max(0, Math.floor((bytes - Buffer.byteLength(tail)) / Buffer.byteLength(unit)))) + tail;
}

/** Bodies of `minBytes` to `maxBytes`, each of one repeated unit (1 to 4 UTF-8 bytes each). */
const sizedBodyArb = (minBytes, maxBytes) =>
  fc
    .record({
      bytes: fc.integer({ min: minBytes, max: maxBytes }),
      unit: fc.constantFrom('a', 'é', '中', '😀', '\u0000'),
      tail: fc.string({ unit: BODY_UNIT, maxLength: 4 }),
    })
    .map(({ bytes, unit, tail }) => bodyOfBytes(bytes, unit, tail));

/** A short body with at least one lone surrogate in it. */
const loneBodyArb = fc
  .tuple(fc.string({ unit: 'binary', maxLength: 6 }), fc.integer({ min: 0xd800, max: 0xdfff }), fc.string({ unit: 'binary', maxLength: 6 }))
  .map(([head, code, tail]) => head + String.fromCharCode(code) + tail);

/** NUL alone, and NUL between two good bodies sent at once (a bad body must fail alone). */
const PAYLOAD_EXAMPLES = [['\u0000'], ['first', 'a\u0000b', 'third']];

/** One to three bodies, sent concurrently (so they share a batch, and one bad body must fail alone). */
const bodiesArb = (bodyArb) => fc.array(bodyArb, { minLength: 1, maxLength: 3 });

/** A body for a failure message: its size and its ends. */
function describeBody(body) {
  if (body.length <= 40) return show(body);
  return `${body.length} UTF-16 units (${Buffer.byteLength(body)} bytes) ${show(body.slice(0, 12))}…${show(body.slice(-12))}`;
}

/**
 * Sends `bodies` concurrently on a fresh queue. Each send resolves with an id or rejects with a
 * typed error; storage then holds exactly one row per resolved send, byte for byte that body
 * (its length and hash, computed by the server), and nothing for a rejected one; get() yields
 * each stored body exactly as sent.
 */
async function payloadCase(bodies, { open, stored, hash, sendBoundMs = OP_BOUND_MS }) {
  const what = `bodies [${bodies.map(describeBody).join(', ')}]`;
  const transport = open();
  try {
    const results = await Promise.all(
      bodies.map((body) => settle(() => transport.send(new Envelope(new RawMessage(body))), sendBoundMs)),
    );
    const confirmed = new Map();
    results.forEach((result, i) => {
      check(!result.hung, `${what}: send() of ${describeBody(bodies[i])} did not settle within ${sendBoundMs} ms`);
      if (result.error !== undefined) checkTyped(result.error, `${what}: send() of ${describeBody(bodies[i])}`);
      else confirmed.set(idOf(result.value), bodies[i]);
    });

    const rows = await stored();
    check(
      rows.length === confirmed.size,
      `${what}: ${rows.length} rows stored for ${confirmed.size} resolved sends (${results.map((r) => (r.value === undefined ? outcomeText(r) : 'stored')).join('; ')})`,
    );
    for (const row of rows) {
      const body = confirmed.get(String(row.id));
      check(body !== undefined, `${what}: stored row ${row.id} belongs to no resolved send`);
      const bytes = Buffer.from(body, 'utf8');
      check(
        Number(row.bytes) === bytes.length && String(row.digest).toLowerCase() === crypto.createHash(hash).update(bytes).digest('hex'),
        `${what}: row ${row.id} holds ${row.bytes} bytes that are not the body's ${bytes.length}`,
      );
    }

    const received = await receive(transport, confirmed.size, Math.max(RECEIVE_BOUND_MS, sendBoundMs));
    check(received.length === confirmed.size, `${what}: get() yielded ${received.length} of ${confirmed.size} stored messages`);
    for (const envelope of received) {
      const sent = confirmed.get(idOf(envelope));
      const got = envelope.message.text;
      check(got === sent, `${what}: message ${idOf(envelope)} came back changed: ${firstDifference(sent ?? '', got ?? '')}`);
    }
  } finally {
    await closeChecked(transport, what);
  }
}

/**
 * The payload properties every transport must hold, on `target()` (a fresh queue or stream per
 * case): any mix of small awkward bodies and large ones (`largest`: the size range in bytes,
 * `upTo` its upper end in words), and bodies with lone surrogates. `unit` names what one send
 * stores (row, entry).
 */
function payloadProperties(target, { largest, upTo, unit }) {
  const title = `NUL, control, astral and noncharacter bodies, and bodies up to ${upTo}: one exact ${unit} per resolved send, none per typed rejection`;
  it(title, async () => {
    await fc.assert(
      fc.asyncProperty(
        bodiesArb(fc.oneof({ weight: 3, arbitrary: smallBodyArb }, { weight: 1, arbitrary: sizedBodyArb(...largest) })),
        (bodies) => payloadCase(bodies, target()),
      ),
      fcParams(RUNS.payloads, PAYLOAD_EXAMPLES),
    );
  }, 120_000);

  it('bodies with lone surrogates: stored exactly, or refused with a typed error and nothing stored', async () => {
    await fc.assert(
      fc.asyncProperty(bodiesArb(loneBodyArb), (bodies) => payloadCase(bodies, target())),
      fcParams(RUNS.lonePayloads, [['\ud800'], ['ok', 'a\udfffb']]),
    );
  }, 60_000);
}

describe('bad input, property-based: payloads', () => {
  describe.each(SQL_ENGINES)('SqlTransport on $label', (engine) => {
    const { ctx, tag: table } = taggedSqlContext(engine, 'bip');
    let queue;

    /** The transport and the storage inspection of one case, on a queue of its own. */
    const target = () => {
      queue = uniqueName('q');
      return {
        open: () => ctx.open({ tableName: table, queueName: queue }),
        // No table yet when every send so far was refused before anything was written.
        stored: async () => ((await ctx.tables(table)).includes(table) ? ctx.inspect.digests(ctx.admin, table, queue) : []),
        hash: ctx.inspect.hash,
      };
    };

    payloadProperties(target, { largest: [64 * 1024, 2 * 1024 * 1024], upTo: '2 MB', unit: 'row' });

    if (engine.name === 'mysql') {
      const packetTitle =
        "bodies around the server's max_allowed_packet, up to three at once: one exact row per resolved send, none per typed rejection";
      it(packetTitle, async () => {
        const [{ n }] = await ctx.admin.query('SELECT CAST(@@max_allowed_packet AS UNSIGNED) AS n');
        const maxPacket = Number(n);
        // Either side of the limit: a body that fits with room to spare, one that fits only
        // without the statement around it, one just over. Multi-byte units put the byte count
        // (what the packet measures) far from the character count.
        const bigBodyArb = fc
          .record({
            bytes: fc.integer({ min: maxPacket - 128 * 1024, max: maxPacket + 16 * 1024 }),
            unit: fc.constantFrom('a', 'é', '😀'),
          })
          .map(({ bytes, unit }) => bodyOfBytes(bytes, unit, 'end'));
        await fc.assert(
          fc.asyncProperty(bodiesArb(bigBodyArb), (bodies) => payloadCase(bodies, { ...target(), sendBoundMs: 30_000 })),
          fcParams(RUNS.packet),
        );
      }, 180_000);
    }
  });

  describe('RedisStreamsTransport', () => {
    const { freshStream } = taggedRedisKeys('bip');
    /**
     * Each entry's id, body length in bytes and SHA-1, computed by Redis: megabytes of bodies
     * read back by the admin client would keep its parser's buffers (and the process) alive.
     */
    const STREAM_DIGESTS = `
      local out = {}
      for _, entry in ipairs(redis.call('XRANGE', KEYS[1], '-', '+')) do
        local body = ''
        for i = 1, #entry[2], 2 do
          if entry[2][i] == 'body' then body = entry[2][i + 1] end
        end
        out[#out + 1] = { entry[1], #body, redis.sha1hex(body) }
      end
      return out`;

    /** The transport and the stream inspection of one case, on a stream of its own. */
    const target = () => {
      const stream = freshStream();
      return {
        open: () => openRedis({ stream }),
        hash: 'sha1',
        stored: async () =>
          (await withRedis((client) => client.eval(STREAM_DIGESTS, 1, stream))).map(([id, bytes, digest]) => ({ id, bytes, digest })),
      };
    };

    payloadProperties(target, { largest: [1024 * 1024, 4 * 1024 * 1024], upTo: '4 MB', unit: 'entry' });
  });
});
