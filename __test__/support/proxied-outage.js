'use strict';

// An outage of the shared PostgreSQL as one process sees it, with the server itself untouched:
// the transports' DSN goes through a loopback proxy (faults/support/proxy.js). `lose()` points
// new connections at a closed port and resets every open one (the LISTEN connection, the
// pool's), so the consumer's reconnects are refused; `restore()` points them at the server
// again. For the tests that show a connection lost and back where the app's lines go.

const { startProxy, viaProxy } = require('../faults/support/proxy');
const { closedPort } = require('./ports');
const { postgres } = require('./engines');
const { startAckingConsumer } = require('./transport-helpers');

/**
 * A proxy in front of the shared PostgreSQL, and the DSN through it.
 * @returns {Promise<{ dsn: string, lose(): Promise<void>, restore(): void, close(): Promise<void> }>}
 */
async function proxiedPostgres() {
  await postgres.requireServer();
  const serverPort = Number(new URL(postgres.dsn).port);
  const proxy = await startProxy({ targetPort: serverPort });
  return {
    dsn: viaProxy(postgres.dsn, proxy),
    async lose() {
      proxy.retarget(await closedPort());
      proxy.cut();
    },
    restore() {
      proxy.retarget(serverPort);
    },
    close: () => proxy.close(),
  };
}

/**
 * Runs a `get()` loop on `transport` that acks what it receives, until the returned `stop()`
 * (which rejects with what get() threw, if it threw).
 * @param {{ get(signal: AbortSignal): AsyncIterable<unknown>, ack(envelope: unknown): Promise<void> }} transport
 * @returns {{ received: unknown[], stop(): Promise<void> }}
 */
function consume(transport) {
  const consumer = startAckingConsumer(transport);
  return { received: consumer.received, stop: consumer.stopOrThrow };
}

module.exports = { proxiedPostgres, consume };
