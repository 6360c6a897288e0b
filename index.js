'use strict';

/**
 * nestjs-messenger-native: drop-in native transports for @schally/nestjs-messenger.
 * @module nestjs-messenger-native
 */

const { SqlTransport } = require('./lib/sql-transport');
const { RedisStreamsTransport } = require('./lib/redis-streams-transport');
const { dialectFromDsn, assertValidRedisDsn } = require('./lib/dsn-schemes');
const { TransportHealthIndicator } = require('./lib/transport-health-indicator');

module.exports = { SqlTransport, RedisStreamsTransport, TransportHealthIndicator, dialectFromDsn, assertValidRedisDsn };
