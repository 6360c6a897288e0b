'use strict';

const { InvalidArgumentError } = require('@schally/nestjs-messenger');

const ACK_MODES = new Set(['write-behind', 'commit']);

/** `options[key]`, or `defaults[key]` when unset, checked to be a finite number >= 0. */
function nonNegativeNumber(options, defaults, key) {
  const value = options[key] ?? defaults[key];
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) {
    throw new InvalidArgumentError(`Invalid ${key} ${String(value)}: expected a finite number >= 0.`);
  }
  return value;
}

/** The `ackMode` option: `'write-behind'` (default) or `'commit'`. */
function ackModeOf(options) {
  const mode = options.ackMode ?? 'write-behind';
  if (!ACK_MODES.has(mode)) {
    throw new InvalidArgumentError(`Invalid ackMode ${JSON.stringify(mode)}: expected 'write-behind' or 'commit'.`);
  }
  return mode;
}

module.exports = { nonNegativeNumber, ackModeOf };
