'use strict';

const { postgres } = require('../support/engines');
const { conformanceSuite } = require('../shared/conformance.suite');

conformanceSuite(postgres, { name: 'SqlTransport (PostgreSQL)' });
