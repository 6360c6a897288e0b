'use strict';

const { JsonSerializer } = require('@schally/nestjs-messenger');
const { runTransportConformanceTests, ConformanceMessage } = require('@schally/nestjs-messenger/testing');
const { SqlTransport } = require('../..');
const { POSTGRES_DSN, requireServer, uniqueName } = require('../support/servers');
const { pgQuery } = require('../support/pg');

beforeAll(async () => {
  await requireServer('postgres', POSTGRES_DSN);
  // Create the shared table once so each scenario's setup stays well inside 5 s.
  await new SqlTransport({ dsn: POSTGRES_DSN }).setup();
});

runTransportConformanceTests({
  name: 'SqlTransport (PostgreSQL)',
  capabilities: { delayedDelivery: true, listable: true },
  async createTransport() {
    const queueName = uniqueName('conformance');
    const transport = new SqlTransport({
      dsn: POSTGRES_DSN,
      queueName,
      name: 'conformance',
      serializer: new JsonSerializer([ConformanceMessage]),
    });
    return {
      transport,
      cleanup: async () => {
        await transport.close();
        await pgQuery('DELETE FROM messenger_messages WHERE queue_name = $1', [queueName]);
      },
    };
  },
});
