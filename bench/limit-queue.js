'use strict';

// The fixture of an engine-limit measurement: a fresh queue prefilled exactly as the native
// consumer's B1 run finds it (same rows, same table or stream), drained by the measurement,
// checked empty and removed.

const { ENGINES } = require('./engines');
const { prefill } = require('./prefill');
const { freshName, transportFactory } = require('./transports');

/** The rows (SQL) or entries (Redis) still on `queue`. */
async function left(engine, queue) {
  if (ENGINES[engine].kind === 'redis') return ENGINES.redis.admin().withClient((redis) => redis.xlen(queue));
  return ENGINES[engine].admin().count('messenger_messages', queue);
}

/**
 * Prefills a fresh queue with `depth` messages, lets `drain(queue)` empty it and say how long
 * that took (`{ seconds }`), and removes the queue whatever happened. A limit that left rows
 * behind did not do the transport's work, so it fails rather than report a rate.
 * @param {'postgres' | 'mysql' | 'redis'} engine
 * @param {number} depth
 * @param {(queue: string) => Promise<{ seconds: number }>} drain
 * @returns {Promise<{ engine: string, depth: number, rows: number, seconds: number, rowsPerSecond: number }>}
 */
async function drainPrefilled(engine, depth, drain) {
  return onFreshQueue(engine, 'limit', async (queue, factory) => {
    await prefill(engine, queue, depth, factory);
    const { seconds } = await drain(queue);
    const remaining = await left(engine, queue);
    if (remaining !== 0) throw new Error(`${engine} limit left ${remaining} of ${depth} messages on ${queue}`);
    return { engine, depth, rows: depth, seconds, rowsPerSecond: depth / seconds };
  });
}

/**
 * Runs `use(queue, factory)` on a fresh queue (SQL: in the table and claim index as the
 * transport makes them; `factory` builds native transports on it) and removes what is left on
 * it, whatever happened.
 * @template T
 * @param {'postgres' | 'mysql' | 'redis'} engine
 * @param {string} prefix
 * @param {(queue: string, factory: () => object) => Promise<T>} use
 * @returns {Promise<T>}
 */
async function onFreshQueue(engine, prefix, use) {
  const redis = ENGINES[engine].kind === 'redis';
  // Hash-tagged like run-one's streams, so the same name works on a cluster.
  const queue = redis ? `bench:{${freshName(prefix)}}` : freshName(prefix);
  const factory = transportFactory(engine, 'native', queue);
  try {
    if (!redis) {
      const transport = factory();
      await transport.setup();
      await transport.close();
    }
    return await use(queue, factory);
  } finally {
    if (redis) await ENGINES.redis.admin().del([queue, `${queue}:delayed`]);
    else await ENGINES[engine].admin().deleteQueues('messenger_messages', [queue]);
  }
}

module.exports = { drainPrefilled, onFreshQueue };
