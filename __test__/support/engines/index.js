'use strict';

// The engines as the tests see them: the registry's (bench/engines.js: DSN, start command,
// requireServer, admin connection, facts) with the raw inspection, words and values the
// shared suites (__test__/shared/) ask of an engine adapter. One file per engine; each owns
// its SQL.

const { uniqueName } = require('../../../bench/engines');
const { postgres } = require('./postgres');
const { mysql } = require('./mysql');
const { sqlite } = require('./sqlite');
const { redis } = require('./redis');

module.exports = { postgres, mysql, sqlite, redis, uniqueName };
