'use strict';

const { TransportConnectionError } = require('@schally/nestjs-messenger');
const { redactDsn } = require('../native/addon');
const { withCode } = require('../native/errors');

/**
 * The DSN checks the upstream packages export (`dialectFromDsn` from the SQL transport,
 * `assertValidRedisDsn` from the Redis one), with their results, error class and messages:
 * a DSN is parsed as a WHATWG URL and judged by its scheme alone; the rest is the driver's.
 * Two differences: `sqlite:` DSNs, which only this package's SqlTransport serves, are
 * 'sqlite'; and a refused DSN is echoed with its password replaced by `***` (the addon's own
 * redaction), where upstream echoes it whole.
 */

const SQL_DIALECT_OF_SCHEME = new Map([
  ['postgres:', 'postgres'],
  ['postgresql:', 'postgres'],
  ['mysql:', 'mysql'],
  ['mariadb:', 'mysql'],
]);

/** SQLite DSNs are told by their prefix: `sqlite://:memory:` is not a WHATWG URL. */
const SQLITE_PREFIX = 'sqlite:';

const REDIS_SCHEMES = new Set(['redis:', 'rediss:']);

/**
 * The DSN as an error shows it: as upstream interpolates it (so an odd input reads, or throws,
 * as there), with any password replaced by `***`.
 */
function shown(dsn) {
  return redactDsn(`${dsn}`);
}

/** The URL's scheme (with its colon), or throws upstream's "Invalid … DSN" error. */
function schemeOf(dsn, what) {
  try {
    return new URL(dsn).protocol;
  } catch {
    throw withCode(new TransportConnectionError(`Invalid ${what} DSN: "${shown(dsn)}".`), 'E_CONNECTION');
  }
}

/**
 * Which SQL dialect a DSN targets: 'postgres' (`postgres://`, `postgresql://`), 'mysql'
 * (`mysql://`, `mariadb://`) or 'sqlite' (`sqlite:`). Throws `TransportConnectionError` for
 * a DSN that is not a URL or has another scheme, worded as upstream does (the password
 * redacted).
 * @param {string} dsn
 * @returns {import('../../index').SqlDialect}
 */
function dialectFromDsn(dsn) {
  if (typeof dsn === 'string' && dsn.startsWith(SQLITE_PREFIX)) return 'sqlite';
  const scheme = schemeOf(dsn, 'SQL');
  const dialect = SQL_DIALECT_OF_SCHEME.get(scheme);
  if (dialect === undefined) {
    throw withCode(
      new TransportConnectionError(
        `Unsupported SQL DSN scheme "${scheme}" in "${shown(dsn)}". Use postgres://, postgresql://, mysql:// or mariadb://.`,
      ),
      'E_CONNECTION',
    );
  }
  return dialect;
}

/**
 * Returns nothing for a `redis://` or `rediss://` DSN; throws `TransportConnectionError` for
 * one that is not a URL or has another scheme, worded as upstream does (the password redacted).
 * @param {string} dsn
 * @returns {void}
 */
function assertValidRedisDsn(dsn) {
  const scheme = schemeOf(dsn, 'Redis');
  if (!REDIS_SCHEMES.has(scheme)) {
    throw withCode(
      new TransportConnectionError(`Unsupported Redis DSN scheme "${scheme}" in "${shown(dsn)}". Use redis:// or rediss://.`),
      'E_CONNECTION',
    );
  }
}

module.exports = { dialectFromDsn, assertValidRedisDsn };
