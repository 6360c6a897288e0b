'use strict';

// TransportHealthIndicator in a real Nest application context with @nestjs/terminus 10 and 11
// (installed side by side as `terminus10` and `terminus11`), on SQLite and Redis: what
// terminus's HealthCheckService reports for a transport that is up, one whose server refuses
// (Redis) or whose file cannot be opened (SQLite), and one closed. terminus 10 is driven the
// way it reads a down (a thrown HealthCheckError), terminus 11 through its
// HealthIndicatorService, and terminus 11 without it as a terminus 10 app upgraded unchanged.

require('reflect-metadata');
const { Module, ServiceUnavailableException } = require('@nestjs/common');
const { NestFactory } = require('@nestjs/core');
const { InvalidArgumentError } = require('@schally/nestjs-messenger');
const { TransportHealthIndicator } = require('../..');
const { sqlite, redis } = require('../support/engines');
const { closedPort } = require('../support/ports');
const { envelopeOf, serializer } = require('../support/transport-helpers');
const { engineTransports } = require('../support/engine-transports');

/** A Nest application context importing terminus `pkg`'s TerminusModule (its logger off). */
async function terminusApp(pkg) {
  const terminus = require(pkg);
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

const setups = [
  { name: 'terminus 10', pkg: 'terminus10', indicator: () => new TransportHealthIndicator() },
  {
    name: 'terminus 11 with HealthIndicatorService',
    pkg: 'terminus11',
    indicator: ({ app, terminus }) => new TransportHealthIndicator(app.get(terminus.HealthIndicatorService)),
  },
  { name: 'terminus 11 without it', pkg: 'terminus11', indicator: () => new TransportHealthIndicator() },
];

describe.each(setups)('$name', (setup) => {
  let nest;
  let indicator;

  beforeAll(async () => {
    nest = await terminusApp(setup.pkg);
    indicator = setup.indicator(nest);
  });
  afterAll(() => nest?.app.close());

  describe.each([sqlite, redis])('$name', (engine) => {
    const transports = engineTransports(engine, 'tm');

    /** A transport that cannot reach its storage. */
    async function unreachable() {
      const dsn = engine.name === 'sqlite' ? 'sqlite:///nonexistent-nmn-dir/nested/queue.db' : engine.dsnWith({ port: await closedPort() });
      return transports.track(new engine.Transport({ dsn, serializer: serializer(), name: 'orders', connectTimeoutMs: 1000, ...engine.target('tm') }));
    }

    it('up: ok, with the count and the latency under the key', async () => {
      const t = transports.open({ name: 'orders' });
      await t.send(envelopeOf('a'));
      const entry = { status: 'up', transport: 'orders', messages: 1, latencyMs: expect.any(Number) };
      expect(await reported(nest.health, [() => indicator.isHealthy('queue', t)])).toEqual({
        ok: true,
        body: { status: 'ok', info: { queue: entry }, error: {}, details: { queue: entry } },
      });
    });

    it('down for storage it cannot reach: a 503 with the error under the key', async () => {
      const t = await unreachable();
      const { ok, body } = await reported(nest.health, [() => indicator.isHealthy('queue', t, { timeoutMs: 3000 })]);
      expect(ok).toBe(false);
      const entry = { status: 'down', transport: 'orders', error: expect.any(String) };
      expect(body).toEqual({ status: 'error', info: {}, error: { queue: entry }, details: { queue: entry } });
    }, 15000);

    it('down after close(), next to an indicator that is up', async () => {
      const closed = transports.open({ name: 'orders' });
      const live = transports.open({ name: 'audit' });
      await closed.close();
      const { ok, body } = await reported(nest.health, [
        () => indicator.isHealthy('orders', closed),
        () => indicator.isHealthy('audit', live),
      ]);
      expect(ok).toBe(false);
      const down = { status: 'down', transport: 'orders', error: expect.stringMatching(/closed/) };
      const up = { status: 'up', transport: 'audit', messages: 0, latencyMs: expect.any(Number) };
      expect(body).toEqual({ status: 'error', info: { audit: up }, error: { orders: down }, details: { orders: down, audit: up } });
    });
  });
});

describe("terminus 11's HealthIndicatorService", () => {
  const transports = engineTransports(sqlite, 'ts');

  it('a down is returned through it, not thrown (terminus 12 reads only returned results)', async () => {
    const { app, terminus } = await terminusApp('terminus11');
    try {
      const indicator = new TransportHealthIndicator(app.get(terminus.HealthIndicatorService));
      const t = transports.open({ name: 'orders' });
      await t.close();
      await expect(indicator.isHealthy('queue', t)).resolves.toEqual({
        queue: { status: 'down', transport: 'orders', error: expect.stringMatching(/closed/) },
      });
    } finally {
      await app.close();
    }
  });
});

describe('TransportHealthIndicator arguments', () => {
  it('refuses a service without check(), a bad key and something without health()', async () => {
    expect(() => new TransportHealthIndicator({})).toThrow(InvalidArgumentError);
    const indicator = new TransportHealthIndicator();
    const transport = { health: async () => ({ status: 'up', details: { transport: 't' } }) };
    await expect(indicator.isHealthy('', transport)).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(indicator.isHealthy('k', {})).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(indicator.isHealthy('k', transport)).resolves.toEqual({ k: { status: 'up', transport: 't' } });
  });
});
