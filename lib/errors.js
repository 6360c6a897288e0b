'use strict';

const {
  InvalidArgumentError,
  TransportConnectionError,
  TransportError,
  TransportNotFoundError,
} = require('@schally/nestjs-messenger');

/** Rust errors cross the boundary as `[E_CODE] message` (see src/error.rs). */
const CODED_MESSAGE = /^\[(E_[A-Z_]+)\] ([\s\S]*)$/;

const CLASS_BY_CODE = {
  E_CONNECTION: TransportConnectionError,
  E_NOT_FOUND: TransportNotFoundError,
  E_INVALID_ARGUMENT: InvalidArgumentError,
  E_CLOSED: TransportError,
  E_BACKLOG_FULL: TransportError,
  E_TRANSPORT: TransportError,
};

/**
 * Turns an error thrown by the native addon into the core's error class (built from the
 * app's own copy of the core, so `instanceof` works). The native error is kept as `cause`;
 * its message is the same already-redacted text.
 * @param {unknown} error
 * @returns {Error}
 */
function fromNative(error) {
  const text = typeof error?.message === 'string' ? error.message : String(error);
  const coded = CODED_MESSAGE.exec(text);
  if (coded === null) {
    return new TransportError(`Native transport failure: ${text}`, { cause: error });
  }
  const ErrorClass = CLASS_BY_CODE[coded[1]] ?? TransportError;
  return new ErrorClass(coded[2], { cause: error });
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

module.exports = { fromNative, native, nativeSync };
