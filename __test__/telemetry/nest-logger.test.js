'use strict';

// The `logger` option with Nest's own loggers (@nestjs/common's `Logger` and `ConsoleLogger`,
// as an app passes them): what they print, captured from stdout and stderr and compared whole.
// Each line comes out once, with the app's context when its logger has one and the transport's
// otherwise, and an error never prints the transport as a stack trace. Nest's timestamp is
// fixed and colours are off so the lines can be compared exactly.

const { Envelope, JsonSerializer } = require('@schally/nestjs-messenger');
const { ConsoleLogger, Logger } = require('@nestjs/common');
const { EventLog } = require('../../lib/telemetry/event-log');
const { sqlite } = require('../support/engines');
const { TestMessage, envelopeOf, idOf, serializer } = require('../support/transport-helpers');
const { engineTransports } = require('../support/engine-transports');

const TIME = '<time>';
const PID = process.pid;
const TRANSPORT = 'SQL transport "orders"';

/** One line as Nest's ConsoleLogger prints it (no colours, fixed time). */
function nestLine(level, context, message) {
  return `[Nest] ${PID}  - ${TIME} ${level.toUpperCase().padStart(7, ' ')} [${context}] ${message}\n`;
}

/** What `run` writes to stdout and stderr, captured (nothing reaches the terminal). */
async function captured(run) {
  const out = { stdout: '', stderr: '' };
  const spies = ['stdout', 'stderr'].map((stream) =>
    jest.spyOn(process[stream], 'write').mockImplementation((chunk) => {
      out[stream] += String(chunk);
      return true;
    }),
  );
  try {
    await run();
  } finally {
    for (const spy of spies) spy.mockRestore();
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
beforeAll(() => {
  savedNoColor = process.env.NO_COLOR;
  process.env.NO_COLOR = '1';
  jest.spyOn(ConsoleLogger.prototype, 'getTimestamp').mockReturnValue(TIME);
});
afterAll(() => {
  if (savedNoColor === undefined) delete process.env.NO_COLOR;
  else process.env.NO_COLOR = savedNoColor;
  jest.restoreAllMocks();
});

describe("Nest's loggers: one line per event, once", () => {
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

  it.each([
    ["new Logger('Messenger')", () => new Logger('Messenger')],
    ["new ConsoleLogger('Messenger')", () => new ConsoleLogger('Messenger')],
  ])('%s: the app\'s context, the transport in the message, no stack', async (_name, make) => {
    const { stdout, stderr } = await printed(make());
    expect(stdout).toBe(
      nestLine('log', 'Messenger', `${TRANSPORT}: Connection re-established.`) +
        nestLine('warn', 'Messenger', `${TRANSPORT}: Connection lost: connection refused; retrying.`),
    );
    expect(stderr).toBe(nestLine('error', 'Messenger', `${TRANSPORT}: Write-behind acks are failing: connection refused.`));
  });

  it.each([
    ['new ConsoleLogger()', () => new ConsoleLogger()],
    ['new Logger()', () => new Logger()],
    ['the static Logger class', () => Logger],
  ])('%s: the transport as the context', async (_name, make) => {
    const { stdout, stderr } = await printed(make());
    expect(stdout).toBe(
      nestLine('log', TRANSPORT, 'Connection re-established.') +
        nestLine('warn', TRANSPORT, 'Connection lost: connection refused; retrying.'),
    );
    expect(stderr).toBe(nestLine('error', TRANSPORT, 'Write-behind acks are failing: connection refused.'));
  });

  it('a plain {log, warn, error} object: the message, then the transport as the context', async () => {
    const calls = [];
    const at = (level) => (...args) => calls.push([level, ...args]);
    await printed({ log: at('log'), warn: at('warn'), error: at('error') });
    expect(calls).toEqual(events.map(({ level, message }) => [level, message, TRANSPORT]));
  });
});

describe("sqlite: a transport given new Logger('Messenger')", () => {
  const transports = engineTransports(sqlite, 'nl');

  it('prints a poison message removed once, under the app\'s context', async () => {
    class Unregistered {}
    const writer = transports.open({ serializer: new JsonSerializer([TestMessage, Unregistered]), name: 'orders' });
    const reader = transports.track(
      new sqlite.Transport({ dsn: transports.dsn, serializer: serializer(), ...transports.lastTarget, name: 'orders', logger: new Logger('Messenger') }),
    );
    const poison = await writer.send(new Envelope(new Unregistered()));
    await writer.send(envelopeOf('good'));
    const { stdout, stderr } = await captured(async () => {
      const controller = new AbortController();
      const loop = reader.get(controller.signal);
      const { value } = await loop.next();
      await reader.ack(value);
      controller.abort();
      await loop.return();
      await reader.close();
    });
    const removed = `Removed a message that cannot be decoded (poison): id ${idOf(poison)}, type "Unregistered".`;
    expect(stdout).toBe(nestLine('warn', 'Messenger', `${TRANSPORT}: ${removed}`));
    expect(stderr).toBe('');
  }, 15000);
});
