'use strict';

// A good guest: the app's own connections to the same servers (pg, mysql2, ioredis, opened
// before the transports and kept open beside them) keep the socket options their drivers gave
// them. Read from outside with `ss`, as the keepalive test reads the transports' own: the
// kernel shows a keepalive timer on an idle established socket only when SO_KEEPALIVE is set,
// and `ss -i` shows each socket's options. Each app socket is told by its local port.

const { postgres, mysql, redis } = require('../support/engines');
const { runChild } = require('../support/child');

/**
 * Opens the app's three connections, records their `ss` lines, runs a round trip through a
 * transport of every engine on the same servers, records the lines again.
 */
const SCRIPT = `
  const { execFileSync } = require('node:child_process');
  const pg = require('pg');
  const mysql2 = require('mysql2/promise');
  const { Redis } = require('ioredis');
  const targets = JSON.parse(process.env.TARGETS);

  /** The ss line of the established socket with local port \`port\`, less its changing counters. */
  function socketLine(port) {
    const table = execFileSync('ss', ['-tnoH', 'state', 'established', 'sport', '=', ':' + port], { encoding: 'utf8' });
    // Keep what options show: whether a keepalive timer runs (not its countdown).
    return table.trim().replace(/timer:\\((\\w+),[^)]*\\)/g, 'timer:($1)').replace(/\\s+\\d+\\s+\\d+\\s+/, ' ');
  }

  (async () => {
    const app = new pg.Client({ connectionString: process.env.PG_DSN });
    await app.connect();
    const appMysql = await mysql2.createConnection(process.env.MYSQL_DSN);
    const appRedis = new Redis(process.env.REDIS_DSN, { lazyConnect: true });
    await appRedis.connect();
    await Promise.all([app.query('SELECT 1'), appMysql.query('SELECT 1'), appRedis.ping()]);
    const ports = {
      pg: app.connection.stream.localPort,
      mysql2: appMysql.connection.stream.localPort,
      ioredis: appRedis.stream.localPort,
    };
    const read = () => Object.fromEntries(Object.entries(ports).map(([name, port]) => [name, socketLine(port)]));
    await new Promise((resolve) => setTimeout(resolve, 300));
    const before = read();

    const transports = [
      new SqlTransport({ dsn: process.env.PG_DSN, ...targets.pg, serializer: new JsonSerializer([M]) }),
      new SqlTransport({ dsn: process.env.MYSQL_DSN, ...targets.mysql, serializer: new JsonSerializer([M]) }),
      new RedisStreamsTransport({ dsn: process.env.REDIS_DSN, ...targets.redis, serializer: new JsonSerializer([M]) }),
    ];
    for (const t of transports) {
      await t.send(new Envelope(new M('k')));
      for await (const envelope of t.get(new AbortController().signal)) {
        await t.ack(envelope);
        break;
      }
    }
    await new Promise((resolve) => setTimeout(resolve, 300));
    const after = read();
    require('node:fs').writeSync(3, JSON.stringify({ before, after }));
    for (const t of transports) await t.close();
    await app.end();
    await appMysql.end();
    appRedis.disconnect();
  })().catch((error) => {
    console.error(error);
    process.exitCode = 1;
  });
`;

describe('the app’s own connections to the same servers', () => {
  const targets = {};

  beforeAll(async () => {
    await Promise.all([postgres.requireServer(), mysql.requireServer(), redis.requireServer()]);
    targets.pg = postgres.target('appsock');
    targets.mysql = mysql.target('appsock');
    targets.redis = redis.target('appsock');
  });

  afterAll(async () => {
    await postgres.removeTarget(targets.pg, postgres.dsn);
    await mysql.removeTarget(targets.mysql, mysql.dsn);
    await redis.removeTarget(targets.redis, redis.dsn);
  });

  it('keep the socket options their drivers set (pg, mysql2, ioredis)', () => {
    const result = runChild(SCRIPT, {
      timeout: 30000,
      fd3: true,
      env: {
        PG_DSN: postgres.dsn,
        MYSQL_DSN: mysql.dsn,
        REDIS_DSN: redis.dsn,
        TARGETS: JSON.stringify(targets),
      },
    });
    expect(result.stderr).toBe('');
    expect(result.status).toBe(0);
    const { before, after } = JSON.parse(result.report);
    for (const line of Object.values(before)) expect(line).not.toBe('');
    expect(after).toEqual(before);
  }, 40000);
});
