'use strict';

const {
  InvalidArgumentError,
  TransportConnectionError,
  TransportError,
  TransportNotFoundError,
} = require('@schally/nestjs-messenger');
const { envelopeOf, textOf } = require('./native-error');

const CLASS_BY_CODE = {
  E_CONNECTION: TransportConnectionError,
  E_NOT_FOUND: TransportNotFoundError,
  E_INVALID_ARGUMENT: InvalidArgumentError,
  E_CLOSED: TransportError,
  E_BACKLOG_FULL: TransportError,
  E_TRANSPORT: TransportError,
};

/**
 * What the driver, the server or the network said, shaped as the Node drivers shape it: an
 * Error whose `code` is pg's SQLSTATE, mysql2's `ER_*` (with `errno` and `sqlState`),
 * better-sqlite3's `SQLITE_*`, the Redis reply's prefix or Node's socket code.
 * @param {{ code?: string, message: string, errno?: number, sqlState?: string }} cause
 */
function driverError({ code, message, errno, sqlState }) {
  const error = new Error(message);
  if (code !== undefined) error.code = code;
  if (errno !== undefined) error.errno = errno;
  if (sqlState !== undefined) error.sqlState = sqlState;
  return error;
}

/**
 * Gives `error` our stable code as an own, enumerable property (as Node's errors carry theirs).
 * @template {Error} E
 * @param {E} error
 * @param {string} code
 * @returns {E}
 */
function withCode(error, code) {
  error.code = code;
  return error;
}

/**
 * What a rejected write did to storage, as `error.outcome`: `'not-applied'` (nothing of it was
 * applied: safe to try again) or `'unknown'` (it went out and no answer came: it may have been
 * applied). Sets `fallback` when the error does not say; leaves a non-object thrown value as it is.
 * @template T
 * @param {T} error
 * @param {'not-applied' | 'unknown'} fallback
 * @returns {T}
 */
function withOutcome(error, fallback) {
  if (error !== null && typeof error === 'object' && error.outcome === undefined) {
    try {
      error.outcome = fallback;
    } catch {
      // A frozen error from an app's serializer keeps its own shape.
    }
  }
  return error;
}

/**
 * An `InvalidArgumentError` with its code, for the options and inputs the JavaScript side checks.
 * @param {string} message
 * @returns {Error}
 */
function invalidArgument(message) {
  return withCode(new InvalidArgumentError(message), 'E_INVALID_ARGUMENT');
}

/**
 * Turns an error thrown by the native addon into the core's error class (built from the
 * app's own copy of the core, so `instanceof` works), with our stable code as `code` and, when
 * a driver, the server or the network reported the failure, that report as `cause`. A failure
 * that did not come as an envelope keeps the native error as its cause.
 * @param {unknown} error
 * @returns {Error}
 */
function fromNative(error) {
  const text = textOf(error);
  const envelope = envelopeOf(text);
  if (envelope === undefined) {
    return withCode(new TransportError(`Native transport failure: ${text}`, { cause: error }), 'E_TRANSPORT');
  }
  const ErrorClass = CLASS_BY_CODE[envelope.code] ?? TransportError;
  const options = envelope.cause === undefined ? undefined : { cause: driverError(envelope.cause) };
  const converted = withCode(new ErrorClass(envelope.message, options), envelope.code);
  if (envelope.outcome !== undefined) converted.outcome = envelope.outcome;
  return converted;
}

/**
 * Awaits a native promise, rethrowing its failure as a core error.
 * @template T
 * @param {Promise<T>} promise
 * @returns {Promise<T>}
 */
async function native(promise) {
  try {
    return await promise;
  } catch (error) {
    throw fromNative(error);
  }
}

/**
 * Calls a synchronous native function, rethrowing its failure as a core error.
 * @template T
 * @param {() => T} call
 * @returns {T}
 */
function nativeSync(call) {
  try {
    return call();
  } catch (error) {
    throw fromNative(error);
  }
}

module.exports = { fromNative, invalidArgument, native, nativeSync, withCode, withOutcome };
