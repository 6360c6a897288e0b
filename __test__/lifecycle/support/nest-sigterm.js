'use strict';

// A Nest application with shutdown hooks enabled whose provider owns a transport and closes it
// in onApplicationShutdown, as MessengerModule does. Forked with an IPC channel and DSN, TARGET
// (JSON), COUNT and HANDLER_MS. It sends COUNT messages, starts a worker-like loop (one
// message at a time, acked write-behind once its handler is done), and reports { handling,
// buffered, nest } when the first handler starts (`nest`: the @nestjs/core version it runs);
// the parent then sends SIGTERM. It reports { handled } when that handler acks, and { closed }
// when close() resolved. With NO_CLOSE=1 the provider does not close the transport (a transport
// nobody closes).

const fs = require('node:fs');
const path = require('node:path');
require('reflect-metadata');
const { Module } = require('@nestjs/common');
const { NestFactory } = require('@nestjs/core');
const { Envelope, JsonSerializer } = require('@schally/nestjs-messenger');
const { SqlTransport } = require('../../..');

class Job {
  constructor(n) {
    this.n = n;
  }
}

const transport = new SqlTransport({ dsn: process.env.DSN, ...JSON.parse(process.env.TARGET), serializer: new JsonSerializer([Job]) });

class MessengerLifecycle {
  async onApplicationShutdown() {
    if (process.env.NO_CLOSE === '1') return;
    await transport.close();
    process.send({ closed: true });
  }
}

/** The version of the @nestjs/core this app loaded (its entry point sits beside its package.json). */
function nestCoreVersion() {
  const manifest = path.join(path.dirname(require.resolve('@nestjs/core')), 'package.json');
  return JSON.parse(fs.readFileSync(manifest, 'utf8')).version;
}

async function work() {
  for await (const envelope of transport.get(new AbortController().signal)) {
    process.send({ handling: envelope.message.n, buffered: transport.stats().buffered, nest: nestCoreVersion() });
    await new Promise((resolve) => setTimeout(resolve, Number(process.env.HANDLER_MS)));
    await transport.ack(envelope);
    process.send({ handled: envelope.message.n });
  }
}

async function main() {
  class AppModule {}
  Module({ providers: [MessengerLifecycle] })(AppModule);
  const app = await NestFactory.createApplicationContext(AppModule, { logger: false });
  app.enableShutdownHooks();
  const count = Number(process.env.COUNT);
  for (let n = 0; n < count; n += 1) await transport.send(new Envelope(new Job(n)));
  await work();
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
