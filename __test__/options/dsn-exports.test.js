'use strict';

// The DSN helpers upstream's packages export (`dialectFromDsn` and `assertValidRedisDsn`) are
// exported here too, and answer every input as upstream's own functions do: the same result,
// or an error of the same class with the same message. Two differences: `sqlite:`, a scheme
// only this package's SqlTransport serves, and the DSN a message echoes, whose password is
// replaced by `***` (upstream echoes it whole).

const { TransportConnectionError } = require('@schally/nestjs-messenger');
const upstreamSql = require('@schally/nestjs-messenger-transport-sql');
const upstreamRedis = require('@schally/nestjs-messenger-transport-redis');
const ours = require('../..');

/** What calling `fn(input)` gives: its result, or the thrown error's class and message. */
function outcome(fn, input) {
  try {
    return { returned: fn(input) };
  } catch (error) {
    return { threw: error.constructor, message: error.message };
  }
}

const SQL_DSNS = [
  'postgres://user:secret@db.example:5432/app',
  'postgresql://localhost/test?sslmode=disable',
  'postgres:relative',
  'POSTGRES://UPPER/case',
  'mysql://root@127.0.0.1:3306/test',
  'mariadb://root@127.0.0.1/test',
  'mysql+ssl://host/db',
  'redis://localhost:6379',
  'http://example.com',
  'postgres//missing-colon',
  '',
  ' postgres://trimmed ',
  'not a url',
  '://nothing',
];
const REDIS_DSNS = [
  'redis://localhost:6379',
  'rediss://user:secret@cache.example:6380/2',
  'REDIS://UPPER',
  'redis:',
  'redis+sentinel://host',
  'postgres://localhost/test',
  'sqlite://queue.db',
  '',
  'not a url',
  'localhost:6379',
];
/** Refused DSNs that carry a password, and the password as written in them. */
const REFUSED_SQL_DSNS_WITH_PASSWORDS = [
  ['not a URL (its port)', 'postgres://app:Hunter2-pw@db.example:99999/app', 'Hunter2-pw'],
  ['not a URL, percent-encoded', 'mysql://app:p%40ss-Word@db.example:port/app', 'p%40ss-Word'],
  ['another scheme', 'http://app:Hunter2-pw@example.com/app', 'Hunter2-pw'],
  ['another scheme, the password in the query', 'http://example.com/app?password=Query-pw', 'Query-pw'],
];
const REFUSED_REDIS_DSNS_WITH_PASSWORDS = [
  ['not a URL (its port)', 'rediss://app:Hunter2-pw@cache.example:99999/0', 'Hunter2-pw'],
  ['another scheme', 'postgres://:Hunter2-pw@cache.example/0', 'Hunter2-pw'],
];

/**
 * Checks that `fn` refuses `dsn` with upstream's class and message, the password in it
 * replaced by `***`, and nowhere in the message, raw or percent-decoded.
 */
function expectRefusedWithoutPassword(fn, upstreamFn, dsn, password) {
  const ourOutcome = outcome(fn, dsn);
  const theirs = outcome(upstreamFn, dsn);
  expect(ourOutcome.threw).toBe(TransportConnectionError);
  expect(theirs.threw).toBe(TransportConnectionError);
  expect(theirs.message).toContain(password);
  expect(ourOutcome.message).not.toContain(password);
  expect(ourOutcome.message).not.toContain(decodeURIComponent(password));
  expect(ourOutcome.message).toBe(theirs.message.replace(password, '***'));
}

const ODD_INPUTS = [undefined, null, 42, {}, { toString: () => 'postgres://from-an-object/db' }];

describe('dialectFromDsn', () => {
  test('is exported with upstream’s name', () => {
    expect(typeof ours.dialectFromDsn).toBe('function');
    expect(typeof upstreamSql.dialectFromDsn).toBe('function');
  });

  test.each([...SQL_DSNS, ...ODD_INPUTS].map((input) => [String(input), input]))(
    '%s: the same result, or the same error, as upstream’s',
    (_, input) => {
      expect(outcome(ours.dialectFromDsn, input)).toEqual(outcome(upstreamSql.dialectFromDsn, input));
    },
  );

  test('a bad DSN is a TransportConnectionError, as upstream’s', () => {
    expect(() => ours.dialectFromDsn('not a url')).toThrow(TransportConnectionError);
    expect(() => ours.dialectFromDsn('http://example.com')).toThrow(TransportConnectionError);
  });

  test.each(REFUSED_SQL_DSNS_WITH_PASSWORDS)(
    'a refused DSN, %s: upstream’s error, without the password',
    (_, dsn, password) => {
      expectRefusedWithoutPassword(ours.dialectFromDsn, upstreamSql.dialectFromDsn, dsn, password);
    },
  );

  test('sqlite: DSNs, which only this package serves, are sqlite (upstream refuses them)', () => {
    for (const dsn of ['sqlite://relative/path.db', 'sqlite:relative.db', 'sqlite:///absolute/path.db', 'sqlite://:memory:']) {
      expect(ours.dialectFromDsn(dsn)).toBe('sqlite');
      expect(outcome(upstreamSql.dialectFromDsn, dsn).threw).toBe(TransportConnectionError);
    }
  });
});

describe('assertValidRedisDsn', () => {
  test('is exported with upstream’s name', () => {
    expect(typeof ours.assertValidRedisDsn).toBe('function');
  });

  test.each([...REDIS_DSNS, ...ODD_INPUTS].map((input) => [String(input), input]))(
    '%s: the same result, or the same error, as upstream’s',
    (_, input) => {
      expect(outcome(ours.assertValidRedisDsn, input)).toEqual(outcome(upstreamRedis.assertValidRedisDsn, input));
    },
  );

  test.each(REFUSED_REDIS_DSNS_WITH_PASSWORDS)(
    'a refused DSN, %s: upstream’s error, without the password',
    (_, dsn, password) => {
      expectRefusedWithoutPassword(ours.assertValidRedisDsn, upstreamRedis.assertValidRedisDsn, dsn, password);
    },
  );

  test('returns nothing for a good DSN and throws a TransportConnectionError for a bad one', () => {
    expect(ours.assertValidRedisDsn('rediss://cache.example:6380')).toBeUndefined();
    expect(() => ours.assertValidRedisDsn('postgres://localhost/test')).toThrow(TransportConnectionError);
  });
});
