'use strict';

// The `logger` option on every engine, against the shared servers: a NestJS
// LoggerService-shaped object hears of each poison message removed (its id and type, never its
// body), a logger that throws breaks nothing, and a logger without the three methods is refused.
// Connections lost and back (PostgreSQL's LISTEN connection, a Redis connection, a SQL
// consumer's) are in the fault suite (faults/logger.faults.test.js).

const { Envelope, InvalidArgumentError, JsonSerializer, TransportMessageIdStamp } = require('@schally/nestjs-messenger');
const { postgres, mysql, sqlite, redis } = require('../support/engines');
const { TestMessage, envelopeOf, serializer } = require('../support/transport-helpers');
const { engineTransports } = require('../support/engine-transports');

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
    const controller = new AbortController();
    const loop = reader.get(controller.signal);
    const { value } = await loop.next();
    await reader.ack(value);
    controller.abort();
    await loop.return();
    return { reader, poison, good: value };
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

  it('refuses a logger without log, warn and error', () => {
    for (const logger of [{ log() {}, warn() {} }, 'console', 42]) {
      expect(() => new engine.Transport({ dsn: transports.dsn, logger, ...engine.target('lg') })).toThrow(InvalidArgumentError);
    }
  });
});
