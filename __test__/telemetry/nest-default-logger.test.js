'use strict';

// A NestJS application whose transport has no `logger` option prints a connection's loss and
// its return through Nest's logger. The transport is a provider of the app, on the shared
// PostgreSQL behind a loopback proxy (support/proxied-outage.js); the app installs its logger
// the usual way (`bufferLogs`, then `app.useLogger()`), a ConsoleLogger that records what it is
// asked to print. The proxy then refuses new connections and resets the open ones, and lets
// them through again: the app's logger gets the loss as a warning and the return as a log line,
// with the transport as the context, and consuming goes on. Run by jest with the repository's
// NestJS and by `npm run test:nest` with NestJS 10, 11 and 12 (support/nest-suite.js).

const assert = require('node:assert/strict');
const { describe, it, nest } = require('../support/nest-suite');
const { proxiedPostgres, consume } = require('../support/proxied-outage');
const { postgres } = require('../support/engines');
const { SqlTransport } = require('../..');
const { envelopeOf, pollUntil, serializer } = require('../support/transport-helpers');

const { ConsoleLogger, Module } = nest.common;
const { NestFactory } = nest.core;
const TRANSPORT = 'SQL transport "orders"';
const ORDERS = Symbol('ORDERS_TRANSPORT');

/** The app's logger: a ConsoleLogger that records `{ level, message, context }` instead of printing. */
class RecordingLogger extends ConsoleLogger {
  lines = [];

  log(message, ...rest) {
    this.lines.push({ level: 'log', message, context: rest.at(-1) });
  }

  warn(message, ...rest) {
    this.lines.push({ level: 'warn', message, context: rest.at(-1) });
  }

  error(message, ...rest) {
    this.lines.push({ level: 'error', message, context: rest.at(-1) });
  }
}

/** A Nest application context providing `ORDERS`: a transport on `dsn` with no `logger` option. */
async function appWithTransport(dsn, target) {
  class AppModule {}
  Module({
    providers: [{ provide: ORDERS, useFactory: () => new SqlTransport({ dsn, ...target, name: 'orders', serializer: serializer() }) }],
  })(AppModule);
  const app = await NestFactory.createApplicationContext(AppModule, { bufferLogs: true });
  const logger = new RecordingLogger();
  app.useLogger(logger);
  return { app, logger, transport: app.get(ORDERS) };
}

describe(`postgres: a Nest app (@nestjs/core ${nest.versions.core}) with no transport logger, its connections cut`, () => {
  it("prints the loss (warn) and the return (log) through the app's logger; consuming goes on", async () => {
    const pg = await proxiedPostgres();
    const target = postgres.target('ndl');
    const { app, logger, transport } = await appWithTransport(pg.dsn, target);
    const consumer = consume(transport);
    const ours = () => logger.lines.filter(({ context }) => context === TRANSPORT);
    try {
      await transport.setup();
      await new Promise((resolve) => setTimeout(resolve, 500));

      await pg.lose();
      const lost = await pollUntil(() => ours().find(({ message }) => /^(LISTEN )?[Cc]onnection lost/.test(message)), { timeoutMs: 10_000 });
      assert.ok(lost, `no loss printed; the app's logger got: ${JSON.stringify(logger.lines)}`);
      pg.restore();
      const back = await pollUntil(() => ours().find(({ message }) => /^(LISTEN )?[Cc]onnection back/.test(message)), { timeoutMs: 15_000 });
      assert.ok(back, `no return printed; the app's logger got: ${JSON.stringify(logger.lines)}`);

      const lines = ours();
      console.log(`[${nest.versions.core}] ${lines.map(({ level, message }) => `${level}: ${message}`).join(' / ')}`);
      for (const line of lines.filter(({ message }) => /connection lost/i.test(message))) assert.equal(line.level, 'warn', line.message);
      for (const line of lines.filter(({ message }) => /connection back/i.test(message))) assert.equal(line.level, 'log', line.message);
      assert.ok(lines.indexOf(lost) < lines.indexOf(back));
      assert.deepEqual(
        lines.filter(({ level }) => level === 'error'),
        [],
      );

      await transport.send(envelopeOf('after'));
      assert.ok(await pollUntil(() => consumer.received.some((e) => e.message.id === 'after'), { timeoutMs: 10_000 }));
    } finally {
      await consumer.stop();
      await app.close();
      await transport.close();
      await pg.close();
      await postgres.removeTarget(target, postgres.dsn);
    }
  }, 45_000);
});
