'use strict';

// SqlTransport on PostgreSQL when the server is not there or refuses us, and processes that
// exit by themselves after close(): the shared cases (shared/errors.suite.js) on a throwaway
// SCRAM cluster, plus a password given as a DSN query parameter.

const { TransportConnectionError } = require('@schally/nestjs-messenger');
const { postgres } = require('../support/engines');
const { envelopeOf, failure, expectNoSecret } = require('../support/transport-helpers');
const { errorsSuite } = require('../shared/errors.suite');
const { outcomesSuite } = require('../shared/outcomes.suite');

const { make, SECRET, unreachable } = errorsSuite(postgres);
outcomesSuite(postgres);

describe('unreachable server', () => {
  it('keeps a password given as a query parameter out of the error too', async () => {
    const t = make(postgres.dsnWith({ port: unreachable().port, params: { password: SECRET } }));
    const { error } = await failure(() => t.send(envelopeOf('x')));
    expect(error).toBeInstanceOf(TransportConnectionError);
    expectNoSecret(error, SECRET);
  });
});
