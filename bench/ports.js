'use strict';

// Loopback ports picked at run time, never hard-coded: a free one for a private server, a
// closed one for "nothing listens there".

const net = require('node:net');

/** Resolves true when `port` can be bound on 127.0.0.1 right now. */
function portIsFree(port) {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.once('error', () => resolve(false));
    server.listen({ port, host: '127.0.0.1', exclusive: true }, () => server.close(() => resolve(true)));
  });
}

/** A TCP port that was free a moment ago on 127.0.0.1 (the kernel's pick). */
function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

/**
 * A loopback port nothing listens on: bound by the kernel's pick, then closed again, and
 * checked to refuse connections.
 */
async function closedPort() {
  for (let attempt = 0; attempt < 20; attempt += 1) {
    const port = await freePort();
    const refused = await new Promise((resolve) => {
      const socket = net.connect({ host: '127.0.0.1', port });
      socket.once('connect', () => {
        socket.destroy();
        resolve(false);
      });
      socket.once('error', () => resolve(true));
    });
    if (refused) return port;
  }
  throw new Error('no closed loopback port found');
}

/**
 * A free port whose `port + offset` is free too (a Redis Cluster node and its bus port).
 * @param {number} offset
 */
async function freePortPair(offset) {
  for (let attempt = 0; attempt < 200; attempt += 1) {
    const port = await freePort();
    if (port + offset <= 65535 && (await portIsFree(port + offset))) return port;
  }
  throw new Error(`no free loopback port pair (port, port + ${offset}) found`);
}

module.exports = { portIsFree, freePort, closedPort, freePortPair };
