'use strict';

// The transports' lines through Nest's own loggers (@nestjs/common's `Logger` and
// `ConsoleLogger`), as an app passes them and as the default when it passes none: what they
// print, captured from stdout and stderr and compared whole. Each line comes out once, with the
// app's context when its logger has one and the transport's otherwise, and an error never prints
// the transport as a stack trace. Nest's timestamp is fixed and colours are off so the lines can
// be compared exactly. Run by jest with the repository's NestJS and by `npm run test:nest` with
// NestJS 10, 11 and 12 (support/nest-suite.js).

const assert = require('node:assert/strict');
const { Envelope, JsonSerializer } = require('@schally/nestjs-messenger');
const { describe, it, beforeAll, afterAll, afterEach, nest } = require('../support/nest-suite');
const { EventLog } = require('../../lib/telemetry/event-log');
const { sqlite } = require('../support/engines');
const { TestMessage, envelopeOf, idOf, serializer, ackFirst } = require('../support/transport-helpers');
const { engineTransports } = require('../support/engine-transports');

const { ConsoleLogger, Logger } = nest.common;
const TIME = '<time>';
const PID = process.pid;
const TRANSPORT = 'SQL transport "orders"';

/** One line as Nest's ConsoleLogger prints it (no colours, fixed time). */
function nestLine(level, context, message) {
  return `[Nest] ${PID}  - ${TIME} ${level.toUpperCase().padStart(7, ' ')} [${context}] ${message}\n`;
}

/**
 * What Nest prints to stdout and stderr while `run` runs, captured (it does not reach the
 * terminal); anything else written meanwhile (a test runner's own reports) passes through.
 */
async function captured(run) {
  const out = { stdout: '', stderr: '' };
  const writes = {};
  for (const stream of ['stdout', 'stderr']) {
    writes[stream] = process[stream].write;
    process[stream].write = function write(chunk, ...rest) {
      if (typeof chunk === 'string' && chunk.startsWith('[Nest] ')) {
        out[stream] += chunk;
        return true;
      }
      return writes[stream].call(this, chunk, ...rest);
    };
  }
  try {
    await run();
  } finally {
    for (const stream of ['stdout', 'stderr']) process[stream].write = writes[stream];
  }
  return out;
}

/** The native queue's event feed, as EventLog pulls it: events handed over on the next pull. */
function eventFeed() {
  const pending = [];
  return {
    pending,
    watchEvents() {},
    takeEvents: () => pending.splice(0),
  };
}

let savedNoColor;
let savedTimestamp;
beforeAll(() => {
  savedNoColor = process.env.NO_COLOR;
  process.env.NO_COLOR = '1';
  savedTimestamp = ConsoleLogger.prototype.getTimestamp;
  ConsoleLogger.prototype.getTimestamp = () => TIME;
});
afterAll(() => {
  if (savedNoColor === undefined) delete process.env.NO_COLOR;
  else process.env.NO_COLOR = savedNoColor;
  ConsoleLogger.prototype.getTimestamp = savedTimestamp;
});

describe(`Nest's loggers (@nestjs/common ${nest.versions.common}): one line per event, once`, () => {
  const events = [
    { level: 'log', message: 'Connection re-established.' },
    { level: 'warn', message: 'Connection lost: connection refused; retrying.' },
    { level: 'error', message: 'Write-behind acks are failing: connection refused.' },
  ];

  /** Every event reported through `logger`, and what Nest printed. */
  async function printed(logger) {
    const feed = eventFeed();
    const log = new EventLog(feed, logger, TRANSPORT);
    return captured(() => {
      feed.pending.push(...events);
      log.stop();
    });
  }

  for (const [name, make] of [
    ["new Logger('Messenger')", () => new Logger('Messenger')],
    ["new ConsoleLogger('Messenger')", () => new ConsoleLogger('Messenger')],
  ]) {
    it(`${name}: the app's context, the transport in the message, no stack`, async () => {
      const { stdout, stderr } = await printed(make());
      assert.equal(
        stdout,
        nestLine('log', 'Messenger', `${TRANSPORT}: Connection re-established.`) +
          nestLine('warn', 'Messenger', `${TRANSPORT}: Connection lost: connection refused; retrying.`),
      );
      assert.equal(stderr, nestLine('error', 'Messenger', `${TRANSPORT}: Write-behind acks are failing: connection refused.`));
    });
  }

  for (const [name, make] of [
    ['new ConsoleLogger()', () => new ConsoleLogger()],
    ['new Logger()', () => new Logger()],
    ['the static Logger class', () => Logger],
    ['new Logger(<the transport>), as the default logger is made', () => new Logger(TRANSPORT)],
  ]) {
    it(`${name}: the transport as the context`, async () => {
      const { stdout, stderr } = await printed(make());
      assert.equal(
        stdout,
        nestLine('log', TRANSPORT, 'Connection re-established.') +
          nestLine('warn', TRANSPORT, 'Connection lost: connection refused; retrying.'),
      );
      assert.equal(stderr, nestLine('error', TRANSPORT, 'Write-behind acks are failing: connection refused.'));
    });
  }

  it('a plain {log, warn, error} object: the message, then the transport as the context', async () => {
    const calls = [];
    const at = (level) => (...args) => calls.push([level, ...args]);
    await printed({ log: at('log'), warn: at('warn'), error: at('error') });
    assert.deepEqual(
      calls,
      events.map(({ level, message }) => [level, message, TRANSPORT]),
    );
  });
});

describe(`sqlite: a poison message through Nest's Logger (@nestjs/common ${nest.versions.common})`, () => {
  const transports = engineTransports(sqlite, 'nl', { beforeAll, afterEach, afterAll });
  class Unregistered {}

  /** Sends a poison message and a good one, reads the good one with `readerOptions`; what Nest printed. */
  async function poisonPrinted(readerOptions) {
    const writer = transports.open({ serializer: new JsonSerializer([TestMessage, Unregistered]), name: 'orders' });
    const reader = transports.track(
      new sqlite.Transport({ dsn: transports.dsn, serializer: serializer(), ...transports.lastTarget, name: 'orders', ...readerOptions }),
    );
    const poison = await writer.send(new Envelope(new Unregistered()));
    await writer.send(envelopeOf('good'));
    const printed = await captured(async () => {
      await ackFirst(reader);
      await reader.close();
    });
    return { ...printed, removed: `Removed a message that cannot be decoded (poison): id ${idOf(poison)}, type "Unregistered".` };
  }

  it("given new Logger('Messenger'): printed once, under the app's context", async () => {
    const { stdout, stderr, removed } = await poisonPrinted({ logger: new Logger('Messenger') });
    assert.equal(stdout, nestLine('warn', 'Messenger', `${TRANSPORT}: ${removed}`));
    assert.equal(stderr, '');
  }, 15000);

  it('given no logger: printed once by Nest, the transport as the context', async () => {
    const { stdout, stderr, removed } = await poisonPrinted({});
    assert.equal(stdout, nestLine('warn', TRANSPORT, removed));
    assert.equal(stderr, '');
  }, 15000);

  it('given logger: false: nothing', async () => {
    const { stdout, stderr } = await poisonPrinted({ logger: false });
    assert.deepEqual({ stdout, stderr }, { stdout: '', stderr: '' });
  }, 15000);
});
