'use strict';

const net = require('node:net');
const crypto = require('node:crypto');

/** DSNs of the servers the tests run against (override with the environment). */
const POSTGRES_DSN = process.env.POSTGRES_DSN ?? 'postgres://postgres@127.0.0.1:5432/test';

const START_HINTS = {
  postgres:
    'Start PostgreSQL with: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start',
};

/**
 * Fails with a message that says how to start the server when its port is closed.
 * @param {'postgres'} server
 * @param {string} dsn
 */
async function requireServer(server, dsn) {
  const url = new URL(dsn);
  const port = Number(url.port || { postgres: 5432 }[server]);
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

module.exports = { POSTGRES_DSN, requireServer, uniqueName };
