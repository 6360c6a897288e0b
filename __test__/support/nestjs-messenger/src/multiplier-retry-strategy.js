'use strict';

const { InvalidArgumentError } = require('./errors');
const { RedeliveryStamp } = require('./stamps');

const DEFAULTS = Object.freeze({
  maxRetries: 3,
  delayMs: 1000,
  multiplier: 2,
  maxDelayMs: 0,
  jitter: 0.1,
});

/**
 * Exponential back-off: waits `delayMs * multiplier^retryCount`, capped by `maxDelayMs`
 * (0 = no cap), spread by +/- `jitter` and rounded. Retryable while
 * `retryCount < maxRetries` (so at most `maxRetries + 1` attempts).
 */
class MultiplierRetryStrategy {
  #maxRetries;
  #delayMs;
  #multiplier;
  #maxDelayMs;
  #jitter;

  /** @param {{maxRetries?: number, delayMs?: number, multiplier?: number, maxDelayMs?: number, jitter?: number}} [options] */
  constructor(options = {}) {
    const maxRetries = options.maxRetries ?? DEFAULTS.maxRetries;
    const delayMs = options.delayMs ?? DEFAULTS.delayMs;
    const multiplier = options.multiplier ?? DEFAULTS.multiplier;
    const maxDelayMs = options.maxDelayMs ?? DEFAULTS.maxDelayMs;
    const jitter = options.jitter ?? DEFAULTS.jitter;

    if (!Number.isInteger(maxRetries) || maxRetries < 0) {
      invalid(`maxRetries must be a non-negative integer, got ${String(maxRetries)}.`);
    }
    if (!isNumber(delayMs) || delayMs < 0) {
      invalid(`delayMs must be a finite number >= 0, got ${String(delayMs)}.`);
    }
    if (!isNumber(multiplier) || multiplier < 1) {
      invalid(`multiplier must be a finite number >= 1, got ${String(multiplier)}.`);
    }
    if (!isNumber(maxDelayMs) || maxDelayMs < 0) {
      invalid(`maxDelayMs must be a finite number >= 0, got ${String(maxDelayMs)}.`);
    }
    if (!isNumber(jitter) || jitter < 0 || jitter > 1) {
      invalid(`jitter must be a number between 0 and 1, got ${String(jitter)}.`);
    }

    this.#maxRetries = maxRetries;
    this.#delayMs = delayMs;
    this.#multiplier = multiplier;
    this.#maxDelayMs = maxDelayMs;
    this.#jitter = jitter;
  }

  /** True while the envelope's retry count is below `maxRetries`. */
  isRetryable(envelope, _error) {
    return retryCountOf(envelope) < this.#maxRetries;
  }

  /** Milliseconds to wait before the next attempt. */
  getWaitingTime(envelope, _error) {
    let delay = this.#delayMs * this.#multiplier ** retryCountOf(envelope);
    if (this.#maxDelayMs > 0 && delay > this.#maxDelayMs) {
      delay = this.#maxDelayMs;
    }
    if (this.#jitter > 0) {
      delay *= 1 + this.#jitter * (Math.random() * 2 - 1);
    }
    return Math.max(0, Math.round(delay));
  }
}

function retryCountOf(envelope) {
  return envelope.last(RedeliveryStamp)?.retryCount ?? 0;
}

function isNumber(value) {
  return typeof value === 'number' && Number.isFinite(value);
}

function invalid(detail) {
  throw new InvalidArgumentError(`MultiplierRetryStrategy ${detail}`);
}

module.exports = { MultiplierRetryStrategy };
