'use strict';

const net = require('node:net');
const crypto = require('node:crypto');

/** DSNs of the servers the tests run against (override with the environment). */
const POSTGRES_DSN = process.env.POSTGRES_DSN ?? 'postgres://postgres@127.0.0.1:5432/test';
const MYSQL_DSN = process.env.MYSQL_DSN ?? 'mysql://root@127.0.0.1:3306/test';
const REDIS_DSN = process.env.REDIS_DSN ?? 'redis://127.0.0.1:6379';

const START_HINTS = {
  postgres:
    'Start PostgreSQL with: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start',
  mysql: 'Start MariaDB with: start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd',
  redis:
    'Start Redis with: redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log',
};

/**
 * Fails with a message that says how to start the server when its port is closed.
 * @param {'postgres' | 'mysql' | 'redis'} server
 * @param {string} dsn
 */
async function requireServer(server, dsn) {
  const url = new URL(dsn);
  const port = Number(url.port || { postgres: 5432, mysql: 3306, redis: 6379 }[server]);
  const host = url.hostname || '127.0.0.1';
  await new Promise((resolve, reject) => {
    const socket = net.connect({ host, port });
    socket.setTimeout(2000);
    const fail = (why) => {
      socket.destroy();
      reject(new Error(`${server} is not reachable at ${host}:${port} (${why}). ${START_HINTS[server]}`));
    };
    socket.once('connect', () => {
      socket.end();
      resolve();
    });
    socket.once('timeout', () => fail('timeout'));
    socket.once('error', (error) => fail(error.code ?? error.message));
  });
}

/** A queue or table name no other test uses. */
function uniqueName(prefix) {
  return `${prefix}_${crypto.randomBytes(5).toString('hex')}`;
}

/** A fresh SQLite DSN in a new temporary directory (the embedded engine needs no server). */
function temporarySqliteDsn(prefix = 'nmn') {
  const fs = require('node:fs');
  const os = require('node:os');
  const path = require('node:path');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `${prefix}-`));
  return `sqlite://${path.join(dir, 'queue.db')}`;
}

module.exports = { POSTGRES_DSN, MYSQL_DSN, REDIS_DSN, requireServer, uniqueName, temporarySqliteDsn };
