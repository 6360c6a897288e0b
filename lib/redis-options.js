'use strict';

const { randomUUID } = require('node:crypto');
const { JsonSerializer } = require('@schally/nestjs-messenger');
const { invalidArgument } = require('./errors');
const { ackModeOf, nonNegativeNumber, positiveNumber, sendBacklogOf, wellFormed } = require('./option-checks');
const { loggerOf } = require('./event-log');

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

/** PEM text of `redisOptions.tls.ca` (string, Buffer, or an array of them), if given. */
function caOf(redisOptions) {
  const ca = redisOptions?.tls?.ca;
  if (ca === undefined || ca === null) return undefined;
  const parts = Array.isArray(ca) ? ca : [ca];
  return parts.map((part) => (Buffer.isBuffer(part) ? part.toString('utf8') : String(part))).join('\n');
}

/**
 * Validates `RedisStreamsTransport` options and fills in defaults.
 * @param {import('../index').RedisStreamsTransportOptions} options
 */
function resolveRedisOptions(options) {
  if (options === null || typeof options !== 'object') {
    throw invalidArgument('RedisStreamsTransport options must be an object with a dsn and a stream.');
  }
  const stream = nonEmptyString(options.stream, 'stream');
  const readBatchSize = options.readBatchSize ?? DEFAULTS.readBatchSize;
  if (!Number.isInteger(readBatchSize) || readBatchSize < 1) {
    throw invalidArgument(`Invalid readBatchSize ${String(readBatchSize)}: expected a positive integer.`);
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
    tlsCa: caOf(options.redisOptions),
    connectTimeoutMs: positiveNumber(options, DEFAULTS, 'connectTimeoutMs'),
    ackMode: ackModeOf(options),
    ...sendBacklogOf(options),
    logger: loggerOf(options),
  };
}

module.exports = { resolveRedisOptions, DEFAULTS };
