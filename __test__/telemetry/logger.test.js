'use strict';

// The `logger` option on every engine, against the shared servers: a NestJS
// LoggerService-shaped object hears of each poison message removed (its id and type, never its
// body), a logger that throws breaks nothing, and a logger without the three methods is refused.
// Without the option, in an app without @nestjs/common (hidden from a child process), warnings
// are process warnings with a stable code, and plain log lines go nowhere: a poison message on
// every engine, a connection lost and back on PostgreSQL behind a proxy. `logger: false` says
// nothing at all. Nest's own Logger as the default is in nest-logger.test.js and
// nest-default-logger.test.js; connections lost and back on private servers (PostgreSQL's
// LISTEN connection, a Redis connection, a SQL consumer's) in faults/logger.faults.test.js.

const path = require('node:path');
const { Envelope, InvalidArgumentError, JsonSerializer, TransportMessageIdStamp } = require('@schally/nestjs-messenger');
const { postgres, mysql, sqlite, redis } = require('../support/engines');
const { TestMessage, envelopeOf, serializer, ackFirst } = require('../support/transport-helpers');
const { engineTransports } = require('../support/engine-transports');
const { runChild } = require('../support/child');

/** A child process's environment in which `@nestjs/common` cannot be resolved. */
const WITHOUT_NEST = {
  NODE_OPTIONS: `--require ${path.join(__dirname, '..', 'support', 'hide-module.js')}`,
  HIDE_MODULE: '@nestjs/common',
};

/** Child-script lines that record the process's warnings in `warnings` ({ code, message }). */
const RECORD_WARNINGS = `
  const warnings = [];
  process.on('warning', (w) => warnings.push({ name: w.name, code: w.code, message: w.message }));
`;

class Unregistered {
  constructor(secret) {
    this.secret = secret;
  }
}

/** A logger that records what it is told. */
function recordingLogger() {
  const lines = [];
  const at = (level) => (message, context) => lines.push({ level, message, context });
  return { lines, log: at('log'), warn: at('warn'), error: at('error') };
}

describe.each([postgres, mysql, sqlite, redis])('$name: the logger option', (engine) => {
  const transports = engineTransports(engine, 'lg');

  /** Sends one poison message and one good one, then reads the good one with `reader`. */
  async function poisonThenGood(readerOptions) {
    const writer = transports.open({ serializer: new JsonSerializer([TestMessage, Unregistered]) });
    const reader = transports.track(
      new engine.Transport({ dsn: transports.dsn, serializer: serializer(), name: 'orders', ...transports.lastTarget, ...readerOptions }),
    );
    const poison = await writer.send(new Envelope(new Unregistered('do-not-log-me')));
    await writer.send(envelopeOf('good'));
    return { reader, poison, good: await ackFirst(reader) };
  }

  it('hears of a poison message removed: its id and type, never its body', async () => {
    const logger = recordingLogger();
    const { reader, poison, good } = await poisonThenGood({ logger });
    expect(good.message.id).toBe('good');
    const id = String(poison.last(TransportMessageIdStamp).id);
    expect(logger.lines).toEqual([
      {
        level: 'warn',
        message: `Removed a message that cannot be decoded (poison): id ${id}, type "Unregistered".`,
        context: expect.stringContaining('"orders"'),
      },
    ]);
    expect(JSON.stringify(logger.lines)).not.toContain('do-not-log-me');
    await reader.close();
    // Nothing more to say on a quiet close.
    expect(logger.lines).toHaveLength(1);
  }, 15000);

  it('a logger that throws breaks nothing', async () => {
    const throwing = { log: () => {}, warn: () => { throw new Error('logger down'); }, error: () => {} };
    const { good, reader } = await poisonThenGood({ logger: throwing });
    expect(good.message.id).toBe('good');
    expect(reader.stats().poisonRemoved).toBe(1);
  }, 15000);

  it('without a logger and without @nestjs/common: a poison message is a process warning, NMN_POISON_REMOVED', async () => {
    // The child's serializer knows its class M (support/child.js), not Unregistered.
    class M {
      constructor(id) {
        this.id = id;
      }
    }
    const writer = transports.open({ serializer: new JsonSerializer([M, Unregistered]), name: 'orders' });
    const poison = await writer.send(new Envelope(new Unregistered('do-not-log-me')));
    await writer.send(new Envelope(new M('good')));
    const result = runChild(
      `${RECORD_WARNINGS}
      (async () => {
        const t = new Transport(transportOptions({ name: 'orders' }));
        const controller = new AbortController();
        for await (const envelope of t.get(controller.signal)) {
          await t.ack(envelope);
          controller.abort();
        }
        await t.close();
        // A second transport does not look for @nestjs/common again.
        await new Transport(transportOptions({ name: 'other' })).close();
        console.log(JSON.stringify({ warnings, poisonRemoved: t.stats().poisonRemoved, lookups: globalThis.hiddenModuleLookups }));
      })();
      `,
      { env: { ...WITHOUT_NEST, KIND: engine.name === 'redis' ? 'redis' : 'sql', DSN: transports.dsn, TARGET: JSON.stringify(transports.lastTarget) } },
    );
    const id = String(poison.last(TransportMessageIdStamp).id);
    const message = `${engine.name === 'redis' ? 'Redis' : 'SQL'} transport "orders": Removed a message that cannot be decoded (poison): id ${id}, type "Unregistered".`;
    expect(JSON.parse(result.stdout)).toEqual({
      warnings: [{ name: 'Warning', code: 'NMN_POISON_REMOVED', message }],
      poisonRemoved: 1,
      // Looked for once: from the package's place, then from the working directory.
      lookups: 2,
    });
    // Node.js prints it as it prints every process warning (unless run with --no-warnings).
    expect(result.stderr).toContain(`[NMN_POISON_REMOVED] Warning: ${message}`);
    expect(result.stderr).not.toContain('do-not-log-me');
  }, 15000);

  it('logger: false: nothing is said, anywhere', async () => {
    const warnings = [];
    const onWarning = (warning) => warnings.push(warning);
    const written = [];
    const write = process.stdout.write;
    process.on('warning', onWarning);
    process.stdout.write = (chunk, ...rest) => {
      written.push(String(chunk));
      return write.call(process.stdout, chunk, ...rest);
    };
    try {
      const { reader, good } = await poisonThenGood({ logger: false });
      expect(good.message.id).toBe('good');
      await reader.close();
      expect(reader.stats().poisonRemoved).toBe(1);
    } finally {
      process.stdout.write = write;
      process.off('warning', onWarning);
    }
    expect({ warnings, written }).toEqual({ warnings: [], written: [] });
  }, 15000);

  it('refuses a logger without log, warn and error', () => {
    for (const logger of [{ log() {}, warn() {} }, 'console', 42, true]) {
      expect(() => new engine.Transport({ dsn: transports.dsn, logger, ...engine.target('lg') })).toThrow(InvalidArgumentError);
    }
  });
});

describe('postgres: without a logger and without @nestjs/common, a connection lost and back', () => {
  it('the losses are process warnings with their codes; the return (a log line) is not', () => {
    // All in the child: the proxy in front of the shared server, the consumer, the outage.
    const result = runChild(
      `${RECORD_WARNINGS}
      const { proxiedPostgres, consume } = require(${JSON.stringify(path.join(__dirname, '..', 'support', 'proxied-outage'))});
      const until = async (probe, ms) => {
        for (const deadline = Date.now() + ms; !probe() && Date.now() < deadline; ) await new Promise((r) => setTimeout(r, 50));
        return probe();
      };
      (async () => {
        const pg = await proxiedPostgres();
        const t = new Transport(transportOptions({ dsn: pg.dsn, name: 'orders' }));
        await t.setup();
        const consumer = consume(t);
        await new Promise((r) => setTimeout(r, 500));
        await pg.lose();
        const lost = await until(() => warnings.some((w) => w.code === 'NMN_CONNECTION_LOST'), 10000);
        pg.restore();
        const back = await until(() => t.stats().reconnects > 0, 15000);
        // One more pull of the native events: a log line would be reported by now.
        await new Promise((r) => setTimeout(r, 700));
        await consumer.stop();
        await t.close();
        await pg.close();
        console.log(JSON.stringify({ lost, back, warnings }));
      })();
      `,
      { env: { ...WITHOUT_NEST, KIND: 'sql', TARGET: JSON.stringify(postgres.target('lgw')) }, timeout: 40_000 },
    );
    const { lost, back, warnings } = JSON.parse(result.stdout);
    expect({ lost, back }).toEqual({ lost: true, back: true });
    expect(warnings.map((w) => w.code).sort()).toEqual(['NMN_CONNECTION_LOST', 'NMN_LISTEN_LOST']);
    for (const w of warnings) expect(w.message).toMatch(/^SQL transport "orders": (Connection lost: .*get\(\) keeps trying\.|LISTEN connection lost)/);
    expect(result.stderr).toContain('[NMN_CONNECTION_LOST] Warning: SQL transport "orders": Connection lost: ');
    expect(result.stderr).not.toMatch(/Connection back|LISTEN connection back/);
  }, 45_000);
});
