'use strict';

/**
 * Base class of every error raised by the messenger. Treated as abstract: only its
 * subclasses are thrown. `name` is the concrete class name (via `new.target`).
 */
class MessengerError extends Error {
  /**
   * @param {string} message
   * @param {ErrorOptions} [options] standard `{ cause }` bag
   */
  constructor(message, options) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** A transport operation failed. */
class TransportError extends MessengerError {}

/** The transport's backend could not be reached (refused, network, auth). */
class TransportConnectionError extends TransportError {}

/** The queue/table/stream, or a transport alias, does not exist. */
class TransportNotFoundError extends TransportError {}

/** An encoded envelope could not be decoded. Not a TransportError. */
class SerializationError extends MessengerError {}

/** No handler is registered for a dispatched message. */
class HandlerNotFoundError extends MessengerError {}

/** A handler threw; the thrown value is kept as `cause`. */
class HandlerFailedError extends MessengerError {
  /**
   * @param {import('./envelope').Envelope} envelope the envelope being handled
   * @param {unknown} cause the value thrown by the handler
   */
  constructor(envelope, cause) {
    super(`Handling "${messageClassName(envelope)}" failed: ${causeText(cause)}`, { cause });
    this.envelope = envelope;
  }
}

/** An argument (option, stamp value, CLI flag) is invalid. */
class InvalidArgumentError extends MessengerError {}

function messageClassName(envelope) {
  const message = envelope && envelope.message;
  const ctor = message !== null && message !== undefined ? message.constructor : undefined;
  return ctor && typeof ctor.name === 'string' ? ctor.name : 'Object';
}

function causeText(cause) {
  return cause instanceof Error ? cause.message : 'a non-Error value was thrown';
}

module.exports = {
  MessengerError,
  TransportError,
  TransportConnectionError,
  TransportNotFoundError,
  SerializationError,
  HandlerNotFoundError,
  HandlerFailedError,
  InvalidArgumentError,
};
