'use strict';

// Redis as the shared suites see it: the registry's engine (bench/engines.js) plus the words,
// DSN forms and values its cases use.

const { redis: engine, requireServer } = require('../../../bench/engines');
const { dsnWith } = require('./dsn');

const redis = {
  ...engine,
  errorLabel: 'Redis',
  requireServer: () => requireServer(engine),
  dsnWith: (parts) => dsnWith(engine.dsn, parts),
};

module.exports = { redis };
