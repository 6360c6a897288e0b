'use strict';

const { Envelope } = require('@schally/nestjs-messenger');
const { ENGINES } = require('./engines');
const { BenchMessage, storedForm } = require('./message');

/**
 * Stores `count` due messages on `queue` as fast as the engine allows, bypassing both
 * transports (the same rows for native and upstream runs). Body ids are unique: `m-<n>`.
 */
async function prefill(engine, queue, count, makeTransport) {
  const { body, headers } = storedForm('__ID__');
  if (engine === 'postgres') {
    await ENGINES.postgres.admin().query(
      `INSERT INTO messenger_messages (queue_name, body, headers, available_at)
       SELECT $1, replace($2, '__ID__', 'm-' || g), $3, now() FROM generate_series(1, $4) AS g`,
      [queue, body, headers, count],
    );
    return;
  }
  if (engine === 'mysql') {
    await ENGINES.mysql.admin().withClient(async (connection) => {
      // Both spellings: MariaDB's limit and MySQL's.
      await connection.query('SET SESSION max_recursive_iterations = 10000000').catch(() => undefined);
      await connection.query('SET SESSION cte_max_recursion_depth = 10000000').catch(() => undefined);
      await connection.query(
        `INSERT INTO messenger_messages (queue_name, body, headers, created_at, available_at)
         WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < ?)
         SELECT ?, REPLACE(?, '__ID__', CONCAT('m-', n)), ?, NOW(3), NOW(3) FROM s`,
        [count, queue, body, headers],
      );
    });
    return;
  }
  if (engine === 'redis') {
    await ENGINES.redis.admin().withClient(async (redis) => {
      for (let start = 0; start < count; start += 1000) {
        const pipeline = redis.pipeline();
        for (let i = start; i < Math.min(count, start + 1000); i += 1) {
          pipeline.xadd(queue, '*', 'body', body.replace('__ID__', `m-${i + 1}`), 'headers', headers);
        }
        await pipeline.exec();
      }
    });
    return;
  }
  // SQLite has no server to talk to from here: store through the native transport, 256 at a time.
  const transport = makeTransport();
  try {
    for (let start = 0; start < count; start += 256) {
      const sends = [];
      for (let i = start; i < Math.min(count, start + 256); i += 1) {
        sends.push(transport.send(new Envelope(new BenchMessage(`m-${i + 1}`))));
      }
      await Promise.all(sends);
    }
  } finally {
    await transport.close();
  }
}

module.exports = { prefill };
