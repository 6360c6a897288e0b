'use strict';

const { redis } = require('../support/engines');
const { conformanceSuite } = require('../shared/conformance.suite');

conformanceSuite(redis, { name: 'RedisStreamsTransport (single node)' });
