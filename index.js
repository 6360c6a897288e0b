'use strict';

/**
 * nestjs-messenger-native: drop-in native transports for @schally/nestjs-messenger.
 * @module nestjs-messenger-native
 */

const { SqlTransport } = require('./lib/transports/sql-transport');
const { RedisStreamsTransport } = require('./lib/transports/redis-streams-transport');
const { dialectFromDsn, assertValidRedisDsn } = require('./lib/options/dsn-schemes');
const { TransportHealthIndicator } = require('./lib/telemetry/transport-health-indicator');

module.exports = { SqlTransport, RedisStreamsTransport, TransportHealthIndicator, dialectFromDsn, assertValidRedisDsn };
