'use strict';

const { invalidArgument } = require('../native/errors');
const { warningCode } = require('./warning-codes');

/** How often events are pulled from the native side while nothing else pulls them. */
const DRAIN_EVERY_MS = 500;

/**
 * What an operator must know, handed to a NestJS `LoggerService`-shaped object (the `logger`
 * option, else Nest's `Logger`), or, when there is none, to `process.emitWarning` (warnings and
 * errors, each with its stable code; plain log lines go nowhere). The native side keeps events
 * once asked and this pulls them (after each claim, on an unref'd timer, at close): no Rust
 * thread ever calls into JavaScript. A logger that throws is ignored: logging must not break a
 * transport.
 *
 * How each line is handed over depends on whether the logger already has a context of its own
 * (see `lineFor`), because Nest's loggers read a second argument differently per level.
 */
class EventLog {
  #queue;
  #logger;
  #context;
  #timer;

  /**
   * @param {object} queue the native queue
   * @param {import('../index').TransportLogger | undefined} logger undefined: process warnings
   * @param {string} context the NestJS logger context (the transport, by kind and name)
   */
  constructor(queue, logger, context) {
    this.#queue = queue;
    this.#logger = logger;
    this.#context = context;
    queue.watchEvents();
    this.#timer = EventLog.#drainTimer(new WeakRef(this));
  }

  /**
   * An unref'd timer that pulls events for `log` while it lives. It holds the log weakly: a
   * transport dropped without close() is collected all the same, and its timer ends then.
   *
   * Every log pulls on the same beat, the multiples of the period on one clock: Node runs the
   * timers that are due together in one wake-up, so a process with hundreds of idle transports
   * wakes once a period for all of their pulls rather than once per transport. A first timer
   * waits for the next beat; the interval started there keeps it, as intervals started in one
   * run of timers share their start.
   * @param {WeakRef<EventLog>} log
   * @returns {{ stop(): void }}
   */
  static #drainTimer(log) {
    const pull = () => {
      const live = log.deref();
      if (live === undefined) clearInterval(timer);
      else live.drain();
    };
    const toNextBeat = Math.ceil(DRAIN_EVERY_MS - (performance.now() % DRAIN_EVERY_MS));
    let timer = setTimeout(() => {
      if (log.deref() !== undefined) timer = setInterval(pull, DRAIN_EVERY_MS).unref();
    }, toNextBeat).unref();
    // clearInterval clears either timer.
    return { stop: () => clearInterval(timer) };
  }

  /** Hands what the native side reported since the last pull to the logger. */
  drain() {
    for (const { level, message } of this.#queue.takeEvents()) this.report(level, message);
  }

  /**
   * @param {'log' | 'warn' | 'error'} level
   * @param {string} message
   * @param {string} [code] the process warning's code, when it is not read from the message
   */
  report(level, message, code) {
    if (this.#logger === undefined) {
      if (level !== 'log') process.emitWarning(`${this.#context}: ${message}`, { code: code ?? warningCode(level, message) });
      return;
    }
    try {
      this.#logger[level](...lineFor(this.#logger, message, this.#context));
    } catch {
      // A failing logger must not fail the transport.
    }
  }

  /** A last pull, then no more. */
  stop() {
    this.#timer.stop();
    this.drain();
  }
}

/**
 * The arguments of one logger call. A Nest `Logger` or `ConsoleLogger` built with a context
 * (`new Logger('Messenger')`) appends that context after our arguments, so a second argument
 * of ours would be printed as a second message by `log`/`warn`, and as a stack trace by
 * `error`. Such a logger gets one argument: the message, prefixed with the transport unless
 * its context is the transport already (the default logger). Every other logger (a
 * context-free `ConsoleLogger`, the static `Logger` class, a plain object, a pino or winston
 * adapter) gets the transport as its context, Nest's `(message, context)`.
 * @param {import('../index').TransportLogger} logger
 * @param {string} message
 * @param {string} context the transport, by kind and name
 * @returns {[string] | [string, string]}
 */
function lineFor(logger, message, context) {
  if (!hasOwnContext(logger)) return [message, context];
  return logger.context === context ? [message] : [`${context}: ${message}`];
}

/**
 * Whether the logger carries a context it adds to every call: Nest's `Logger` and
 * `ConsoleLogger` keep it in a `context` field (protected in their types, plain at run time).
 * The static `Logger` class has none: it forwards to the app's logger as it is called.
 */
function hasOwnContext(logger) {
  return typeof logger === 'object' && typeof logger.context === 'string' && logger.context !== '';
}

/**
 * The `logger` option, checked: undefined (the default logger), `false` (silent), or an object
 * with `log`, `warn` and `error` methods.
 * @param {{ logger?: unknown }} options
 * @returns {import('../index').TransportLogger | false | undefined}
 */
function loggerOf(options) {
  const { logger } = options;
  if (logger === undefined || logger === null) return undefined;
  if (logger === false) return false;
  if (typeof logger !== 'object' && typeof logger !== 'function') {
    throw invalidArgument('logger must be false, or an object with log, warn and error methods (a NestJS LoggerService).');
  }
  for (const method of ['log', 'warn', 'error']) {
    if (typeof logger[method] !== 'function') {
      throw invalidArgument(`logger must be an object with log, warn and error methods (a NestJS LoggerService): ${method} is missing.`);
    }
  }
  return logger;
}

module.exports = { EventLog, loggerOf };
