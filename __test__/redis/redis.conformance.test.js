'use strict';

const { JsonSerializer } = require('@schally/nestjs-messenger');
const { runTransportConformanceTests, ConformanceMessage } = require('@schally/nestjs-messenger/testing');
const { RedisStreamsTransport } = require('../..');
const { REDIS_DSN, requireServer } = require('../support/servers');
const { withRedis, uniqueStream } = require('../support/redis');

beforeAll(() => requireServer('redis', REDIS_DSN));

runTransportConformanceTests({
  name: 'RedisStreamsTransport (single node)',
  capabilities: { delayedDelivery: true, listable: true },
  async createTransport() {
    const stream = uniqueStream('conformance');
    const transport = new RedisStreamsTransport({
      dsn: REDIS_DSN,
      stream,
      name: 'conformance',
      serializer: new JsonSerializer([ConformanceMessage]),
    });
    return {
      transport,
      cleanup: async () => {
        await transport.close();
        await withRedis((redis) => redis.del(stream, `${stream}:delayed`));
      },
    };
  },
});
