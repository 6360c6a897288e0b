'use strict';

const { mysql } = require('../support/engines');
const { conformanceSuite } = require('../shared/conformance.suite');

conformanceSuite(mysql, { name: 'SqlTransport (MariaDB)' });
