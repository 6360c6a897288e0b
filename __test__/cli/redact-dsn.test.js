'use strict';

// The DSN redaction the demo prints with: the same text the addon shows for the same DSN
// (its own messages echo DSNs redacted), and the demo's first line never carrying a password.

const path = require('node:path');
const { execFile } = require('node:child_process');
const { queueStats } = require('../../binding.js');
const { redactDsn } = require('../../lib/cli/redact-dsn');
const { envelopeOf } = require('../../lib/native/native-error');

jest.setTimeout(30000);

/**
 * The DSN as the addon's own message shows it: `Invalid … DSN: "<dsn>"` for one it cannot
 * parse, `connect to <dsn>: …` for one it could not reach (nothing listens on port 1).
 */
async function shownByAddon(dsn) {
  const options = /^rediss?:/.test(dsn) ? { dsn, stream: 's', connectTimeoutMs: 500 } : { dsn, table: 't', connectTimeoutMs: 500 };
  const error = await queueStats(options).then(
    () => {
      throw new Error(`${dsn} was reached`);
    },
    (e) => e,
  );
  // The binding's errors carry their text in an envelope (lib/native/native-error.js).
  const message = envelopeOf(error.message)?.message ?? error.message;
  const shown = /DSN: "(.*)"\.$/.exec(message) ?? /connect to (.*?): /.exec(message);
  if (shown === null) throw new Error(`no DSN in ${message}`);
  return shown[1];
}

const DSNS = [
  ['a password with a slash (the URL parser ends the authority there)', 'postgres://u:p/ss@127.0.0.1:1/db', 'p/ss'],
  ['a password with an @', 'mysql://app:p@ss@127.0.0.1:1/test', 'p@ss'],
  ['a password in the query', 'mysql://app@127.0.0.1:1/test?password=Query-pw', 'Query-pw'],
  ['both, with a percent-encoded password', 'mysql://app:pa%40ss@127.0.0.1:1/test?pass=Other-pw', 'pa%40ss'],
  ['a Redis password with no user', 'redis://:Redis-pw@127.0.0.1:1/0', 'Redis-pw'],
  ['a Redis path that is not a database number', 'redis://u:Red/is@127.0.0.1:1/x', 'Red/is'],
  ['a plain postgres password', 'postgres://postgres:Plain-pw@127.0.0.1:1/test', 'Plain-pw'],
];

describe('redactDsn', () => {
  test.each(DSNS)('%s: the addon shows it the same, without the password', async (_, dsn, password) => {
    const redacted = redactDsn(dsn);
    expect(redacted).not.toContain(password);
    expect(redacted).toContain('***');
    expect(redacted).toBe(await shownByAddon(dsn));
  });

  test('a DSN without a password is left as it is', () => {
    for (const dsn of ['postgres://postgres@127.0.0.1:5432/test', 'redis://127.0.0.1:6379', 'sqlite:///tmp/x.db']) {
      expect(redactDsn(dsn)).toBe(dsn);
    }
  });
});

describe('the demo', () => {
  const demo = path.join(__dirname, '..', '..', 'demo', 'index.js');
  const runDemo = (dsn) =>
    new Promise((resolve) => {
      execFile(process.execPath, [demo, '--dsn', dsn, '--messages', '1'], { timeout: 20000, encoding: 'utf8' }, (error, stdout, stderr) =>
        resolve({ code: error?.code ?? 0, stdout, stderr }),
      );
    });

  test.each([
    ['a slash in the password', 'postgres://u:p/ss@127.0.0.1:1/db', 'p/ss'],
    ['a password in the query', 'mysql://app@127.0.0.1:1/test?password=Query-pw', 'Query-pw'],
  ])('prints the DSN it runs on redacted, with %s', async (_, dsn, password) => {
    const run = await runDemo(dsn);
    expect(run.stdout).toContain(`Demo on ${redactDsn(dsn)}:`);
    expect(`${run.stdout}${run.stderr}`).not.toContain(password);
    // Nothing listens on port 1 (or the DSN is refused): the demo fails after its first line.
    expect(run.code).toBe(1);
  });
});
