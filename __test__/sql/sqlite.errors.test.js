'use strict';

// SqlTransport on SQLite when its file cannot be used, and processes that exit by themselves
// after close(): the shared process cases (shared/errors.suite.js; an embedded engine has no
// server to be unreachable or to refuse a password), plus SQLite's own: paths that cannot be a
// database, a file that is not one, and DSN forms refused at construction.

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { TransportConnectionError } = require('@schally/nestjs-messenger');
const { SqlTransport } = require('../..');
const { sqlite } = require('../support/engines');
const { transportOperations, settleWithin, throwsSync, failure, closeAll } = require('../support/transport-helpers');
const { errorsSuite } = require('../shared/errors.suite');
const { outcomesSuite } = require('../shared/outcomes.suite');

errorsSuite(sqlite);
outcomesSuite(sqlite);

/** A file of this test file's own, below which nothing can be created. */
const DSN = sqlite.runDsn('nmn-serr');
const directories = [path.dirname(DSN.slice('sqlite://'.length))];
const transports = [];

function transport(options) {
  const t = new SqlTransport({ ...sqlite.target(), ...options });
  transports.push(t);
  return t;
}

function temporaryDirectory(prefix) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `${prefix}-`));
  directories.push(dir);
  return dir;
}

beforeAll(async () => {
  // The file exists (a regular file, for the "below a regular file" paths).
  const t = new SqlTransport({ dsn: DSN });
  await t.setup();
  await t.close();
});

afterEach(async () => {
  await closeAll(transports);
});

afterAll(() => {
  for (const dir of directories) fs.rmSync(dir, { recursive: true, force: true });
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
