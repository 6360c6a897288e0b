'use strict';

const { JsonSerializer } = require('@schally/nestjs-messenger');
const { runTransportConformanceTests, ConformanceMessage } = require('@schally/nestjs-messenger/testing');
const { SqlTransport } = require('../..');
const { MYSQL_DSN, requireServer, uniqueName } = require('../support/servers');
const { mysqlQuery } = require('../support/mysql');

beforeAll(async () => {
  await requireServer('mysql', MYSQL_DSN);
  await new SqlTransport({ dsn: MYSQL_DSN }).setup();
});

runTransportConformanceTests({
  name: 'SqlTransport (MariaDB)',
  capabilities: { delayedDelivery: true, listable: true },
  async createTransport() {
    const queueName = uniqueName('conformance');
    const transport = new SqlTransport({
      dsn: MYSQL_DSN,
      queueName,
      name: 'conformance',
      serializer: new JsonSerializer([ConformanceMessage]),
    });
    return {
      transport,
      cleanup: async () => {
        await transport.close();
        await mysqlQuery('DELETE FROM messenger_messages WHERE queue_name = ?', [queueName]);
      },
    };
  },
});
