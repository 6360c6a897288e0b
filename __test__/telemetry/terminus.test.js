'use strict';

// TransportHealthIndicator in a real Nest application context with @nestjs/terminus, on SQLite
// and Redis: what terminus's HealthCheckService reports for a transport that is up, one whose
// server refuses (Redis) or whose file cannot be opened (SQLite), and one closed. terminus 10 is
// driven the way it reads a down (a thrown HealthCheckError), terminus 11 and 12 through their
// HealthIndicatorService, and terminus 11 also without it, as a terminus 10 app upgraded
// unchanged (terminus 12 reads only returned results). Run by jest with the repository's NestJS
// and its side-by-side terminus 10 and 11, and by `npm run test:nest` with NestJS 10, 11 and 12,
// each with the terminus of its major (support/nest-suite.js).

const assert = require('node:assert/strict');
const { InvalidArgumentError } = require('@schally/nestjs-messenger');
const { describe, it, beforeAll, afterAll, afterEach, nest, terminusPackages } = require('../support/nest-suite');
const { TransportHealthIndicator } = require('../..');
const { sqlite, redis } = require('../support/engines');
const { closedPort } = require('../support/ports');
const { envelopeOf, serializer } = require('../support/transport-helpers');
const { engineTransports } = require('../support/engine-transports');

const { Module, ServiceUnavailableException } = nest.common;
const { NestFactory } = nest.core;
const hooks = { beforeAll, afterEach, afterAll };

/** A Nest application context importing `terminus`'s TerminusModule (its logger off). */
async function terminusApp(terminus) {
  class HealthModule {}
  Module({ imports: [terminus.TerminusModule.forRoot({ logger: false })] })(HealthModule);
  const app = await NestFactory.createApplicationContext(HealthModule, { logger: false });
  return { app, terminus, health: app.get(terminus.HealthCheckService) };
}

/** What HealthCheckService.check reports: its result when ok, the 503's body when not. */
async function reported(health, indicators) {
  try {
    return { ok: true, body: await health.check(indicators) };
  } catch (error) {
    if (!(error instanceof ServiceUnavailableException)) throw error;
    return { ok: false, body: error.getResponse() };
  }
}

/** `details` with its latency checked to be a number, then left out (it varies). */
function withoutLatency(entry) {
  const { latencyMs, ...rest } = entry;
  assert.equal(typeof latencyMs, 'number');
  return rest;
}

/** `body` (a terminus result) with each up entry's latency checked and left out. */
function comparable(body) {
  const strip = (entries) =>
    Object.fromEntries(Object.entries(entries).map(([key, entry]) => [key, entry.status === 'up' ? withoutLatency(entry) : entry]));
  return { ...body, info: strip(body.info), error: strip(body.error), details: strip(body.details) };
}

/** How each terminus major is driven: with its HealthIndicatorService (11 and later), without it (10 and 11). */
function setupsOf(terminus) {
  const withService = {
    name: `${terminus.name} with HealthIndicatorService`,
    indicator: ({ app, terminus: t }) => new TransportHealthIndicator(app.get(t.HealthIndicatorService)),
  };
  const withoutService = { name: `${terminus.name} without it`, indicator: () => new TransportHealthIndicator() };
  if (terminus.major <= 10) return [{ ...withoutService, name: terminus.name }];
  if (terminus.major === 11) return [withService, withoutService];
  return [withService];
}

const packages = terminusPackages();

describe(`@nestjs/terminus with @nestjs/common ${nest.versions.common}`, () => {
  it('has a terminus to test', () => {
    assert.ok(packages.length > 0, 'no @nestjs/terminus resolves');
  });
});

for (const terminus of packages) {
  for (const setup of setupsOf(terminus)) {
    describe(setup.name, () => {
      let app;
      let indicator;

      beforeAll(async () => {
        app = await terminusApp(terminus.load());
        indicator = setup.indicator(app);
      });
      afterAll(() => app?.app.close());

      for (const engine of [sqlite, redis]) {
        describe(engine.name, () => {
          const transports = engineTransports(engine, 'tm', hooks);

          /** A transport that cannot reach its storage. */
          async function unreachable() {
            const dsn = engine.name === 'sqlite' ? 'sqlite:///nonexistent-nmn-dir/nested/queue.db' : engine.dsnWith({ port: await closedPort() });
            return transports.track(
              new engine.Transport({ dsn, serializer: serializer(), name: 'orders', connectTimeoutMs: 1000, ...engine.target('tm') }),
            );
          }

          it('up: ok, with the count and the latency under the key', async () => {
            const t = transports.open({ name: 'orders' });
            await t.send(envelopeOf('a'));
            const { ok, body } = await reported(app.health, [() => indicator.isHealthy('queue', t)]);
            const entry = { status: 'up', transport: 'orders', messages: 1 };
            assert.deepEqual(
              { ok, body: comparable(body) },
              { ok: true, body: { status: 'ok', info: { queue: entry }, error: {}, details: { queue: entry } } },
            );
          });

          it('down for storage it cannot reach: a 503 with the error under the key', async () => {
            const t = await unreachable();
            const { ok, body } = await reported(app.health, [() => indicator.isHealthy('queue', t, { timeoutMs: 3000 })]);
            assert.equal(ok, false);
            const entry = body.error.queue;
            assert.equal(typeof entry?.error, 'string');
            const down = { status: 'down', transport: 'orders', error: entry.error };
            assert.deepEqual(body, { status: 'error', info: {}, error: { queue: down }, details: { queue: down } });
          }, 15000);

          it('down after close(), next to an indicator that is up', async () => {
            const closed = transports.open({ name: 'orders' });
            const live = transports.open({ name: 'audit' });
            await closed.close();
            const { ok, body } = await reported(app.health, [
              () => indicator.isHealthy('orders', closed),
              () => indicator.isHealthy('audit', live),
            ]);
            assert.equal(ok, false);
            assert.match(body.error.orders?.error ?? '', /closed/);
            const down = { status: 'down', transport: 'orders', error: body.error.orders.error };
            const up = { status: 'up', transport: 'audit', messages: 0 };
            assert.deepEqual(comparable(body), {
              status: 'error',
              info: { audit: up },
              error: { orders: down },
              details: { orders: down, audit: up },
            });
          });
        });
      }
    });
  }
}

for (const terminus of packages.filter(({ major }) => major >= 11)) {
  describe(`${terminus.name}'s HealthIndicatorService`, () => {
    const transports = engineTransports(sqlite, 'ts', hooks);

    it('a down is returned through it, not thrown (terminus 12 reads only returned results)', async () => {
      const { app, terminus: t } = await terminusApp(terminus.load());
      try {
        const indicator = new TransportHealthIndicator(app.get(t.HealthIndicatorService));
        const closed = transports.open({ name: 'orders' });
        await closed.close();
        const result = await indicator.isHealthy('queue', closed);
        assert.match(result.queue?.error ?? '', /closed/);
        assert.deepEqual(result, { queue: { status: 'down', transport: 'orders', error: result.queue.error } });
      } finally {
        await app.close();
      }
    });
  });
}

describe('TransportHealthIndicator arguments', () => {
  it('refuses a service without check(), a bad key and something without health()', async () => {
    assert.throws(() => new TransportHealthIndicator({}), InvalidArgumentError);
    const indicator = new TransportHealthIndicator();
    const transport = { health: async () => ({ status: 'up', details: { transport: 't' } }) };
    await assert.rejects(indicator.isHealthy('', transport), InvalidArgumentError);
    await assert.rejects(indicator.isHealthy('k', {}), InvalidArgumentError);
    assert.deepEqual(await indicator.isHealthy('k', transport), { k: { status: 'up', transport: 't' } });
  });
});
