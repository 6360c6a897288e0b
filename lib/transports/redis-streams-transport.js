'use strict';

const { NativeQueue } = require('../native/addon');
const { nativeSync } = require('../native/errors');
const { resolveRedisOptions } = require('../options/redis-options');
const { NativeTransport } = require('./native-transport');

/**
 * Drop-in for `@schally/nestjs-messenger-transport-redis`'s `RedisStreamsTransport`: the same
 * stream, consumer group, entry fields and delayed zset, with blocking reads, batched acks
 * and atomic delayed promotion in Rust.
 */
class RedisStreamsTransport extends NativeTransport {
  /** @param {import('../index').RedisStreamsTransportOptions} options */
  constructor(options) {
    const o = resolveRedisOptions(options);
    const queue = nativeSync(() =>
      NativeQueue.redis({
        dsn: o.dsn,
        stream: o.stream,
        group: o.group,
        consumer: o.consumer,
        delayKey: o.delayKey,
        claimIdleMs: o.claimIdleMs,
        pollIntervalMs: o.pollIntervalMs,
        readBatchSize: o.readBatchSize,
        cluster: o.cluster,
        tlsCa: o.tlsCa,
        connectTimeoutMs: o.connectTimeoutMs,
        overrides: o.overrides,
        maxQueuedSends: o.maxQueuedSends,
        maxQueuedSendBytes: o.maxQueuedSendBytes,
        maxConnections: o.maxConnections,
        waitForReplicas: o.waitForReplicas,
      }),
    );
    const messaging = { system: 'redis', destination: o.stream };
    super(queue, { serializer: o.serializer, name: o.name, label: 'Redis', ackMode: o.ackMode, messaging, logger: o.logger });
  }
}

module.exports = { RedisStreamsTransport };
