'use strict';

/**
 * nestjs-messenger-native: drop-in native transports for @schally/nestjs-messenger.
 * @module nestjs-messenger-native
 */

const { SqlTransport } = require('./lib/sql-transport');

module.exports = { SqlTransport };
