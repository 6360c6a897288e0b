'use strict';

// Run by bun-deno.test.js under another JavaScript runtime: one transport of process.env.KIND
// on process.env.DSN and process.env.TARGET (JSON) sends, gets, acks and rejects, then closes.
// Prints one JSON line: what it saw, or the error. Plain CommonJS that every runtime loads.

const path = require('node:path');
const { SqlTransport, RedisStreamsTransport } = require(path.resolve(__dirname, '..', '..'));
const { Envelope, JsonSerializer, TransportMessageIdStamp } = require('@schally/nestjs-messenger');

class Probe {
  constructor(n) {
    this.n = n;
  }
}

const COUNT = 24;

async function main() {
  const Transport = process.env.KIND === 'redis' ? RedisStreamsTransport : SqlTransport;
  const transport = new Transport({
    dsn: process.env.DSN,
    ...JSON.parse(process.env.TARGET),
    serializer: new JsonSerializer([Probe]),
  });
  try {
    await transport.setup();
    // One at a time, with a pause after the first: on a single Redis node that is when a
    // Node.js host serves sends on its own event loop (the path other runtimes must not take).
    const sentIds = [];
    for (let n = 0; n < COUNT; n += 1) {
      const sent = await transport.send(new Envelope(new Probe(n)));
      sentIds.push(String(sent.last(TransportMessageIdStamp).id));
      if (n === 0) await new Promise((resolve) => setTimeout(resolve, 150));
    }
    // And a burst, sent together.
    const burst = await Promise.all(
      Array.from({ length: COUNT }, (_, i) => transport.send(new Envelope(new Probe(COUNT + i)))),
    );
    sentIds.push(...burst.map((e) => String(e.last(TransportMessageIdStamp).id)));

    const received = [];
    const controller = new AbortController();
    const deadline = setTimeout(() => controller.abort(), 10000);
    for await (const envelope of transport.get(controller.signal)) {
      received.push(envelope);
      if (received.length === sentIds.length) break;
    }
    clearTimeout(deadline);
    const [rejected, ...acked] = received;
    await transport.reject(rejected);
    await Promise.all(acked.map((envelope) => transport.ack(envelope)));
    const left = await transport.getMessageCount();
    return {
      sent: sentIds.length,
      distinctIds: new Set(sentIds).size,
      received: received.map((e) => e.message.n).sort((a, b) => a - b),
      acked: acked.length,
      rejected: 1,
      left,
    };
  } finally {
    await transport.close();
  }
}

main().then(
  (report) => console.log(JSON.stringify({ ok: true, ...report })),
  (error) => {
    console.log(JSON.stringify({ ok: false, error: String(error?.stack ?? error) }));
    process.exitCode = 1;
  },
);
