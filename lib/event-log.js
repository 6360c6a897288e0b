'use strict';

const { InvalidArgumentError } = require('@schally/nestjs-messenger');

/** How often events are pulled from the native side while nothing else pulls them. */
const DRAIN_EVERY_MS = 500;

/**
 * The `logger` option: what an operator must know, handed to a NestJS `LoggerService`-shaped
 * object. The native side keeps events once asked and this pulls them (after each claim, on an
 * unref'd timer, at close): no Rust thread ever calls into JavaScript. A logger that throws is
 * ignored: logging must not break a transport.
 */
class EventLog {
  #queue;
  #logger;
  #context;
  #timer;

  /**
   * @param {object} queue the native queue
   * @param {import('../index').TransportLogger} logger
   * @param {string} context the NestJS logger context (the transport, by kind and name)
   */
  constructor(queue, logger, context) {
    this.#queue = queue;
    this.#logger = logger;
    this.#context = context;
    queue.watchEvents();
    this.#timer = setInterval(() => this.drain(), DRAIN_EVERY_MS);
    this.#timer.unref();
  }

  /** Hands what the native side reported since the last pull to the logger. */
  drain() {
    for (const { level, message } of this.#queue.takeEvents()) this.report(level, message);
  }

  /**
   * @param {'log' | 'warn' | 'error'} level
   * @param {string} message
   */
  report(level, message) {
    try {
      this.#logger[level](message, this.#context);
    } catch {
      // A failing logger must not fail the transport.
    }
  }

  /** A last pull, then no more. */
  stop() {
    clearInterval(this.#timer);
    this.drain();
  }
}

/**
 * The `logger` option, checked: undefined, or an object with `log`, `warn` and `error` methods.
 * @param {{ logger?: unknown }} options
 */
function loggerOf(options) {
  const { logger } = options;
  if (logger === undefined || logger === null) return undefined;
  if (typeof logger !== 'object' && typeof logger !== 'function') {
    throw new InvalidArgumentError('logger must be an object with log, warn and error methods (a NestJS LoggerService).');
  }
  for (const method of ['log', 'warn', 'error']) {
    if (typeof logger[method] !== 'function') {
      throw new InvalidArgumentError(`logger must be an object with log, warn and error methods (a NestJS LoggerService): ${method} is missing.`);
    }
  }
  return logger;
}

module.exports = { EventLog, loggerOf };
