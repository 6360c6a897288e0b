'use strict';

const { JsonSerializer } = require('@schally/nestjs-messenger');
const { runTransportConformanceTests, ConformanceMessage } = require('@schally/nestjs-messenger/testing');
const { SqlTransport } = require('../..');
const { uniqueName, temporarySqliteDsn } = require('../support/servers');

const dsn = temporarySqliteDsn('conformance');

runTransportConformanceTests({
  name: 'SqlTransport (SQLite)',
  capabilities: { delayedDelivery: true, listable: true },
  async createTransport() {
    const transport = new SqlTransport({
      dsn,
      queueName: uniqueName('conformance'),
      name: 'conformance',
      serializer: new JsonSerializer([ConformanceMessage]),
    });
    return { transport, cleanup: () => transport.close() };
  },
});
