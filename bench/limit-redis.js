'use strict';

// Redis's limit for the native transport's own consume commands, in its order
// (src/engines/redis/reads.rs `claim_from_server`, src/engines/redis/engine.rs `delete`): the promote script
// on the delayed set, XREADGROUP … COUNT n STREAMS s >, then the ack of the claimed entries.
// Claimed entries carry a token, so the native ack is the settle script (XPENDING of the id
// range for this consumer, XACK, XDEL), not the plain MULTI XACK + XDEL that `ack_and_delete`
// sends for entries held without one. The scripts are the transport's own files, sent with
// EVALSHA as redis-rs's `Script` sends them. One connection, one command at a time.

const fs = require('node:fs');
const path = require('node:path');
const { randomUUID } = require('node:crypto');
const { ENGINES } = require('./engines');
const { drainPrefilled } = require('./limit-queue');

const SCRIPTS = path.join(__dirname, '..', 'src', 'engines', 'redis', 'scripts');
/** The transport's default group (lib/options/redis-options.js). */
const GROUP = 'messenger';
/** PROMOTE_LIMIT of src/engines/redis/reads.rs. */
const PROMOTE_LIMIT = 100;

/** An ioredis client with the transport's promote and settle scripts as commands. */
async function connect() {
  const { Redis } = require('ioredis');
  const redis = new Redis(ENGINES.redis.dsn, { lazyConnect: true, maxRetriesPerRequest: 1 });
  await redis.connect();
  redis.defineCommand('promote', { numberOfKeys: 2, lua: fs.readFileSync(path.join(SCRIPTS, 'promote.lua'), 'utf8') });
  redis.defineCommand('settle', { numberOfKeys: 1, lua: fs.readFileSync(path.join(SCRIPTS, 'settle.lua'), 'utf8') });
  return redis;
}

/** The lowest and highest stream ids of `ids`, compared as numbers (writes.rs `id_range`). */
function idRange(ids) {
  const key = (id) => id.split('-').map(BigInt);
  const before = (a, b) => {
    const [x, y] = [key(a), key(b)];
    return x[0] < y[0] || (x[0] === y[0] && x[1] < y[1]);
  };
  return ids.reduce(([low, high], id) => [before(id, low) ? id : low, before(high, id) ? id : high], [ids[0], ids[0]]);
}

/** One claim and the ack of its entries; resolves how many it took (0: drained). */
async function claimAndAck(redis, stream, consumer, batch) {
  await redis.promote(`${stream}:delayed`, stream, PROMOTE_LIMIT);
  const reply = await redis.xreadgroup('GROUP', GROUP, consumer, 'COUNT', batch, 'STREAMS', stream, '>');
  const ids = (reply?.[0]?.[1] ?? []).map(([id]) => id);
  if (ids.length === 0) return 0;
  const [first, last] = idRange(ids);
  await redis.settle(stream, GROUP, consumer, first, last, ...ids);
  return ids.length;
}

/**
 * Entries/s Redis sustains for the native transport's claim (promote script, XREADGROUP of
 * `batch`) and ack (settle script: XACK + XDEL of this consumer's entries), one ioredis
 * connection draining a stream of `depth` prefilled entries. The group is made as the
 * transport's setup makes it; connecting is not timed.
 * @param {number} depth
 * @param {number} [batch]
 */
function redisOwnCommandsLimit(depth, batch = 100) {
  return drainPrefilled('redis', depth, async (stream) => {
    const redis = await connect();
    try {
      await redis.xgroup('CREATE', stream, GROUP, '0', 'MKSTREAM');
      const consumer = `${process.pid}-${randomUUID()}`;
      const started = process.hrtime.bigint();
      while ((await claimAndAck(redis, stream, consumer, batch)) > 0);
      return { seconds: Number(process.hrtime.bigint() - started) / 1e9 };
    } finally {
      redis.disconnect();
    }
  });
}

module.exports = { redisOwnCommandsLimit };
