'use strict';

const { InvalidArgumentError, JsonSerializer } = require('@schally/nestjs-messenger');
const { ackModeOf, nonNegativeNumber } = require('./option-checks');
const { sqlEngineOf } = require('./native');
const { nativeSync } = require('./errors');

const TABLE_NAME_PATTERN = /^[a-z_][a-z0-9_]{0,47}$/;
const QUEUE_NAME_MAX_LENGTH = 190;

/** Defaults, identical to `@schally/nestjs-messenger-transport-sql`'s. */
const DEFAULTS = Object.freeze({
  queueName: 'default',
  tableName: 'messenger_messages',
  redeliverTimeoutSeconds: 3600,
  autoSetup: true,
  pollIntervalMs: 100,
  useNotify: true,
  getNotifyTimeoutMs: 60000,
  connectTimeoutMs: 5000,
});

/**
 * Validates `SqlTransport` options and fills in defaults. Throws `InvalidArgumentError` for
 * a bad option and `TransportConnectionError` for a bad DSN, as upstream does.
 * @param {import('../index').SqlTransportOptions} options
 */
function resolveSqlOptions(options) {
  if (options === null || typeof options !== 'object') {
    throw new InvalidArgumentError('SqlTransport options must be an object with at least a dsn.');
  }
  const dsn = typeof options.dsn === 'string' ? options.dsn : '';
  const engine = nativeSync(() => sqlEngineOf(dsn));
  const queueName = options.queueName ?? DEFAULTS.queueName;
  if (typeof queueName !== 'string' || queueName.length < 1 || queueName.length > QUEUE_NAME_MAX_LENGTH) {
    throw new InvalidArgumentError(
      `Invalid queue name "${String(queueName)}": expected 1 to ${QUEUE_NAME_MAX_LENGTH} characters.`,
    );
  }
  const tableName = options.tableName ?? DEFAULTS.tableName;
  if (typeof tableName !== 'string' || !TABLE_NAME_PATTERN.test(tableName)) {
    throw new InvalidArgumentError(
      `Invalid table name "${String(tableName)}": expected a lowercase SQL identifier matching ${String(TABLE_NAME_PATTERN)}.`,
    );
  }
  const pushCapable = engine === 'postgres';
  if (!pushCapable && (options.useNotify !== undefined || options.getNotifyTimeoutMs !== undefined)) {
    throw new InvalidArgumentError(
      `useNotify and getNotifyTimeoutMs are PostgreSQL-only options; remove them for a ${engine} DSN.`,
    );
  }
  return {
    engine,
    dsn,
    queueName,
    tableName,
    name: options.name ?? queueName,
    serializer: options.serializer ?? new JsonSerializer(),
    autoSetup: options.autoSetup ?? DEFAULTS.autoSetup,
    useNotify: pushCapable ? (options.useNotify ?? DEFAULTS.useNotify) : false,
    redeliverTimeoutSeconds: nonNegativeNumber(options, DEFAULTS, 'redeliverTimeoutSeconds'),
    pollIntervalMs: nonNegativeNumber(options, DEFAULTS, 'pollIntervalMs'),
    getNotifyTimeoutMs: nonNegativeNumber(options, DEFAULTS, 'getNotifyTimeoutMs'),
    connectTimeoutMs: nonNegativeNumber(options, DEFAULTS, 'connectTimeoutMs'),
    ackMode: ackModeOf(options),
  };
}

module.exports = { resolveSqlOptions, DEFAULTS };
