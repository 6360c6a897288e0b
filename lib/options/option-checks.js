'use strict';

// lib/options/: the options a transport is constructed with, checked and completed before
// anything native is built. This file holds the checks every option reader shares (numbers,
// `ackMode`, the send backlog, well-formed strings); sql-options.js and redis-options.js resolve
// each transport's options over upstream's defaults, redis-connection-options.js reads
// `redisOptions` as ioredis reads them, and dsn-schemes.js answers upstream's exported DSN
// checks. A bad value is refused here, by name, as an InvalidArgumentError.

const { invalidArgument } = require('../native/errors');

const ACK_MODES = new Set(['write-behind', 'commit']);

/** `options[key]`, or `defaults[key]` when unset, checked to be a finite number >= 0. */
function nonNegativeNumber(options, defaults, key) {
  const value = options[key] ?? defaults[key];
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) {
    throw invalidArgument(`Invalid ${key} ${String(value)}: expected a finite number >= 0.`);
  }
  return value;
}

/** `options[key]`, or `defaults[key]` when unset, checked to be a finite number > 0. */
function positiveNumber(options, defaults, key) {
  const value = options[key] ?? defaults[key];
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0) {
    throw invalidArgument(`Invalid ${key} ${String(value)}: expected a finite number > 0.`);
  }
  return value;
}

/** Defaults of the send backlog bound, the same for every transport. */
const SEND_BACKLOG_DEFAULTS = Object.freeze({
  maxQueuedSends: 10_000,
  maxQueuedSendBytes: 64 * 1024 * 1024,
});

/**
 * `maxQueuedSends` and `maxQueuedSendBytes`: how many sends (and bytes of their bodies and
 * headers) may wait to be written; beyond either, `send()` is refused at once.
 */
function sendBacklogOf(options) {
  const backlog = {};
  for (const key of Object.keys(SEND_BACKLOG_DEFAULTS)) {
    const value = options[key] ?? SEND_BACKLOG_DEFAULTS[key];
    if (!Number.isSafeInteger(value) || value < 1) {
      throw invalidArgument(`Invalid ${key} ${String(value)}: expected a positive integer.`);
    }
    backlog[key] = value;
  }
  return backlog;
}

/**
 * `value` unless it is a string holding a lone UTF-16 surrogate: such text has no UTF-8 form,
 * so it could only be stored changed (as U+FFFD), and two different names would name one queue.
 * @param {unknown} value
 * @param {string} what what it is, for the message
 */
function wellFormed(value, what) {
  if (typeof value === 'string' && !value.isWellFormed()) {
    throw invalidArgument(`Invalid ${what}: it holds a lone UTF-16 surrogate, which has no UTF-8 form and cannot be stored unchanged.`);
  }
  return value;
}

/** The `ackMode` option: `'write-behind'` (default) or `'commit'`. */
function ackModeOf(options) {
  const mode = options.ackMode ?? 'write-behind';
  if (!ACK_MODES.has(mode)) {
    throw invalidArgument(`Invalid ackMode ${JSON.stringify(mode)}: expected 'write-behind' or 'commit'.`);
  }
  return mode;
}

/** The `maxConnections` option: undefined (the engine's default) or a positive integer. */
function connectionBudgetOf(options) {
  const maxConnections = options.maxConnections;
  if (maxConnections !== undefined && !(Number.isInteger(maxConnections) && maxConnections >= 1 && maxConnections <= 65535)) {
    throw invalidArgument(`Invalid maxConnections ${String(maxConnections)}: expected a positive integer.`);
  }
  return maxConnections;
}

module.exports = { nonNegativeNumber, positiveNumber, wellFormed, ackModeOf, sendBacklogOf, connectionBudgetOf, SEND_BACKLOG_DEFAULTS };
