'use strict';

const { randomUUID } = require('node:crypto');
const { JsonSerializer } = require('@schally/nestjs-messenger');
const { invalidArgument } = require('../native/errors');
const { ackModeOf, connectionBudgetOf, nonNegativeNumber, positiveNumber, sendBacklogOf, wellFormed } = require('./option-checks');
const { loggerOf } = require('../telemetry/event-log');
const { redisConnectionOf } = require('./redis-connection-options');

/** Defaults, identical to `@schally/nestjs-messenger-transport-redis`'s. */
const DEFAULTS = Object.freeze({
  group: 'messenger',
  claimIdleMs: 30000,
  pollIntervalMs: 50,
  readBatchSize: 10,
  connectTimeoutMs: 5000,
});

function nonEmptyString(value, key) {
  if (typeof value !== 'string' || value.length === 0) {
    throw invalidArgument(`Invalid ${key} ${JSON.stringify(value)}: expected a non-empty string.`);
  }
  return wellFormed(value, key);
}

/**
 * Validates `RedisStreamsTransport` options and fills in defaults.
 * @param {import('../index').RedisStreamsTransportOptions} options
 */
function resolveRedisOptions(options) {
  if (options === null || typeof options !== 'object') {
    throw invalidArgument('RedisStreamsTransport options must be an object with a dsn and a stream.');
  }
  const maxConnections = connectionBudgetOf(options);
  if (maxConnections !== undefined && options.cluster === true) {
    throw invalidArgument(
      'maxConnections applies to a single Redis node: on a cluster a process holds two connections per node whatever the number of queues, one for commands and one for its idle consumers\' key tracking (docs/operations.md, "Connections").',
    );
  }
  const stream = nonEmptyString(options.stream, 'stream');
  const readBatchSize = options.readBatchSize ?? DEFAULTS.readBatchSize;
  if (!Number.isInteger(readBatchSize) || readBatchSize < 1) {
    throw invalidArgument(`Invalid readBatchSize ${String(readBatchSize)}: expected a positive integer.`);
  }
  const connection = redisConnectionOf(options);
  const waitForReplicas = options.waitForReplicas ?? 0;
  if (!Number.isInteger(waitForReplicas) || waitForReplicas < 0) {
    throw invalidArgument(`Invalid waitForReplicas ${String(waitForReplicas)}: expected a whole number of replicas (0: do not wait).`);
  }
  if (waitForReplicas > 0 && options.cluster === true) {
    throw invalidArgument(
      'waitForReplicas applies to a single Redis node (with Sentinel or a replica of its own): on a cluster a send\'s write and its WAIT could reach different connections.',
    );
  }
  return {
    dsn: typeof options.dsn === 'string' ? options.dsn : '',
    stream,
    name: options.name ?? stream,
    group: nonEmptyString(options.group ?? DEFAULTS.group, 'group'),
    consumer: nonEmptyString(options.consumer ?? `${process.pid}-${randomUUID()}`, 'consumer'),
    delayKey: nonEmptyString(options.delayKey ?? `${stream}:delayed`, 'delayKey'),
    serializer: options.serializer ?? new JsonSerializer(),
    claimIdleMs: nonNegativeNumber(options, DEFAULTS, 'claimIdleMs'),
    pollIntervalMs: nonNegativeNumber(options, DEFAULTS, 'pollIntervalMs'),
    readBatchSize,
    cluster: options.cluster === true,
    tlsCa: connection.tlsCa,
    connectTimeoutMs: positiveNumber({ connectTimeoutMs: connection.connectTimeoutMs }, DEFAULTS, 'connectTimeoutMs'),
    overrides: connection.overrides,
    maxConnections,
    waitForReplicas,
    ackMode: ackModeOf(options),
    ...sendBacklogOf(options),
    logger: loggerOf(options),
  };
}

module.exports = { resolveRedisOptions, DEFAULTS };
