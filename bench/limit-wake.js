'use strict';

// The floor B4 (wake-up) is set against, measured in the same run: the message the native
// transport would send, stored by the engine's own Node client at B4's pace (one every 10 ms,
// so the server idles between them as it does under B4), and the time until a second
// connection of that client learns of it (PostgreSQL: its NOTIFY; Redis: a blocked
// XREADGROUP). A wake-up is that send and then a claim, so it cannot beat the send alone.

const { setTimeout: sleep } = require('node:timers/promises');
const { ENGINES } = require('./engines');
const { onFreshQueue } = require('./limit-queue');
const { appStoredForm } = require('./message');
const { percentiles } = require('./workloads/wake');

const COUNT = 300;
const GAP_MS = 10;
const TABLE = 'messenger_messages';

/** PostgreSQL: the transport's one-message INSERT (unnest form, with its pg_notify). */
const PG_INSERT =
  `WITH ins AS ( INSERT INTO ${TABLE} (queue_name, body, headers, available_at) ` +
  'SELECT $1::text, m.body, m.headers, now() + make_interval(secs => m.delay_ms / 1000) ' +
  'FROM unnest($2::text[], $3::text[], $4::float8[]) WITH ORDINALITY AS m(body, headers, delay_ms, ord) ' +
  'ORDER BY m.ord RETURNING id ), notified AS MATERIALIZED (SELECT pg_notify($5::text, $1::text)) ' +
  'SELECT ins.id::text AS id FROM ins CROSS JOIN notified ORDER BY ins.id';

/** MariaDB: the transport's one-row INSERT, a cached prepared statement. */
const MYSQL_INSERT =
  `INSERT INTO ${TABLE} (queue_name, body, headers, created_at, available_at) ` +
  'VALUES (?, ?, ?, NOW(3), NOW(3) + INTERVAL ? MICROSECOND)';

/** What each engine's floor runs, for the report. */
const WAKE_FLOORS = {
  postgres: { label: "pg: the transport's INSERT with pg_notify; seen: the NOTIFY on a LISTEN connection", measure: postgresFloor },
  mysql: { label: "mysql2: the transport's INSERT (prepared); seen: – (polling)", measure: mysqlFloor },
  redis: { label: 'ioredis: XADD; seen: a blocked XREADGROUP on another connection', measure: redisFloor },
};

/**
 * Sends `COUNT` messages `GAP_MS` apart with `send()` and times each; `seen()` (optional) is
 * read after the gap and gives when another connection learned of the last one.
 */
async function paced(send, seen) {
  const sends = [];
  const seens = [];
  for (let i = 0; i < COUNT; i += 1) {
    const started = performance.now();
    await send(i);
    sends.push(performance.now() - started);
    await sleep(GAP_MS);
    const at = seen?.(i);
    if (at !== undefined) seens.push(at - started);
  }
  return { send: percentiles(sends), seen: percentiles(seens) };
}

function postgresFloor() {
  return onFreshQueue('postgres', 'floor', async (queue) => {
    const { Client } = require('pg');
    const sender = new Client({ connectionString: ENGINES.postgres.dsn });
    const listener = new Client({ connectionString: ENGINES.postgres.dsn });
    await Promise.all([sender.connect(), listener.connect()]);
    try {
      const notifiedAt = [];
      listener.on('notification', (n) => {
        if (n.payload === queue) notifiedAt.push(performance.now());
      });
      await listener.query(`LISTEN ${TABLE}`);
      const { body, headers } = appStoredForm('floor', 'SqlTransport');
      return await paced(
        () => sender.query({ name: 'floor-insert', text: PG_INSERT, values: [queue, [body], [headers], [0], TABLE] }),
        (i) => notifiedAt[i],
      );
    } finally {
      await Promise.all([sender.end(), listener.end()]);
    }
  });
}

function mysqlFloor() {
  return onFreshQueue('mysql', 'floor', async (queue) => {
    const driver = require('mysql2/promise');
    const connection = await driver.createConnection({ uri: ENGINES.mysql.dsn.replace(/^mariadb:/, 'mysql:') });
    try {
      const { body, headers } = appStoredForm('floor', 'SqlTransport');
      return await paced(() => connection.execute(MYSQL_INSERT, [queue, body, headers, 0]));
    } finally {
      await connection.end();
    }
  });
}

function redisFloor() {
  return onFreshQueue('redis', 'floor', async (key) => {
    const Redis = require('ioredis');
    const sender = new Redis(ENGINES.redis.dsn);
    const reader = new Redis(ENGINES.redis.dsn);
    try {
      await sender.xgroup('CREATE', key, 'floor', '$', 'MKSTREAM');
      const readAt = [];
      let reading = true;
      const reads = (async () => {
        while (reading) {
          const reply = await reader.xreadgroup('GROUP', 'floor', 'c', 'COUNT', 10, 'BLOCK', 200, 'STREAMS', key, '>');
          const at = performance.now();
          for (const [, entries] of reply ?? []) for (let i = 0; i < entries.length; i += 1) readAt.push(at);
        }
      })();
      const { body, headers } = appStoredForm('floor', 'RedisStreamsTransport');
      const result = await paced(
        () => sender.xadd(key, '*', 'body', body, 'headers', headers),
        (i) => readAt[i],
      );
      reading = false;
      await reads;
      return result;
    } finally {
      sender.disconnect();
      reader.disconnect();
    }
  });
}

/**
 * The wake-up floor of `engine`: `{ send: { p50, p99 }, seen: { p50, p99 } | undefined }` in ms.
 * @param {'postgres' | 'mysql' | 'redis'} engine
 */
function wakeFloor(engine) {
  return WAKE_FLOORS[engine].measure();
}

module.exports = { WAKE_FLOORS, wakeFloor, FLOOR_SENDS: COUNT };
