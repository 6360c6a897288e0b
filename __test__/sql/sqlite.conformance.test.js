'use strict';

const { sqlite } = require('../support/engines');
const { conformanceSuite } = require('../shared/conformance.suite');

const dsn = sqlite.runDsn('conformance');

conformanceSuite(sqlite, { name: 'SqlTransport (SQLite)', dsn: () => dsn });

afterAll(() => sqlite.removeRunDsn(dsn));
