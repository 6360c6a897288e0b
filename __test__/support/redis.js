'use strict';

const { Redis } = require('ioredis');
const { REDIS_DSN } = require('./servers');

/**
 * A short-lived ioredis client for test set-up and inspection (never for the code under test).
 * @param {(redis: import('ioredis').Redis) => Promise<T>} use
 * @template T
 */
async function withRedis(use, dsn = REDIS_DSN) {
  const redis = new Redis(dsn, { lazyConnect: true, maxRetriesPerRequest: 1 });
  await redis.connect();
  try {
    return await use(redis);
  } finally {
    redis.disconnect();
  }
}

/** A stream key no other test uses (with a hash tag, so it also works on a cluster). */
function uniqueStream(prefix = 'test') {
  return `messenger:{${prefix}-${require('node:crypto').randomBytes(5).toString('hex')}}`;
}

module.exports = { withRedis, uniqueStream };
