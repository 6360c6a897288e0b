'use strict';

const { InMemoryTransport } = require('@schally/nestjs-messenger');
const { runTransportConformanceTests } = require('@schally/nestjs-messenger/testing');

function createTransport() {
  const transport = new InMemoryTransport({ name: 'async' });
  return Promise.resolve({ transport, cleanup: () => transport.close() });
}

// Full capabilities: 14 + 1 (delayed delivery) + 2 (listable) = 17 scenarios.
runTransportConformanceTests({
  name: 'InMemoryTransport',
  createTransport,
  capabilities: { delayedDelivery: true, listable: true },
});

// Minimal capabilities: the 14 unconditional scenarios.
runTransportConformanceTests({
  name: 'InMemoryTransport (minimal capabilities)',
  createTransport,
  capabilities: { delayedDelivery: false },
});
