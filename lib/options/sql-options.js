'use strict';

const { JsonSerializer } = require('@schally/nestjs-messenger');
const { ackModeOf, connectionBudgetOf, nonNegativeNumber, positiveNumber, sendBacklogOf, wellFormed } = require('./option-checks');
const { checkSqlNames, sqlDialectOf } = require('../native/addon');
const { invalidArgument, nativeSync } = require('../native/errors');
const { loggerOf } = require('../telemetry/event-log');

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
    throw invalidArgument('SqlTransport options must be an object with at least a dsn.');
  }
  const dsn = typeof options.dsn === 'string' ? options.dsn : '';
  const facts = nativeSync(() => sqlDialectOf(dsn));
  const queueName = options.queueName ?? DEFAULTS.queueName;
  if (typeof queueName !== 'string') {
    throw invalidArgument(`Invalid queueName ${String(queueName)}: expected a string.`);
  }
  const tableName = options.tableName ?? DEFAULTS.tableName;
  if (typeof tableName !== 'string') {
    throw invalidArgument(`Invalid tableName ${String(tableName)}: expected a string.`);
  }
  wellFormed(queueName, 'queueName');
  // The limits (identifier allowlist, VARCHAR(190)) are the native side's: one copy.
  nativeSync(() => checkSqlNames(tableName, queueName));
  if (!facts.pushWakeup && (options.useNotify !== undefined || options.getNotifyTimeoutMs !== undefined)) {
    throw invalidArgument(
      `useNotify and getNotifyTimeoutMs apply only where the database can wake consumers (PostgreSQL); remove them for a ${facts.label} DSN.`,
    );
  }
  const listenDsn = options.listenDsn;
  if (listenDsn !== undefined && (typeof listenDsn !== 'string' || listenDsn === '')) {
    throw invalidArgument('Invalid listenDsn: expected a PostgreSQL DSN (a non-empty string).');
  }
  if (listenDsn !== undefined && !facts.pushWakeup) {
    throw invalidArgument(`listenDsn applies only to PostgreSQL; remove it for a ${facts.label} DSN.`);
  }
  const maxConnections = connectionBudgetOf(options);
  return {
    dialect: facts.dialect,
    dsn,
    queueName,
    tableName,
    name: options.name ?? queueName,
    serializer: options.serializer ?? new JsonSerializer(),
    autoSetup: options.autoSetup ?? DEFAULTS.autoSetup,
    useNotify: facts.pushWakeup ? (options.useNotify ?? DEFAULTS.useNotify) : false,
    listenDsn,
    maxConnections,
    redeliverTimeoutSeconds: nonNegativeNumber(options, DEFAULTS, 'redeliverTimeoutSeconds'),
    pollIntervalMs: nonNegativeNumber(options, DEFAULTS, 'pollIntervalMs'),
    getNotifyTimeoutMs: nonNegativeNumber(options, DEFAULTS, 'getNotifyTimeoutMs'),
    connectTimeoutMs: positiveNumber(options, DEFAULTS, 'connectTimeoutMs'),
    ackMode: ackModeOf(options),
    ...sendBacklogOf(options),
    logger: loggerOf(options),
  };
}

module.exports = { resolveSqlOptions, DEFAULTS };
