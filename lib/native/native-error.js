'use strict';

// The envelope a Rust error crosses the boundary in (see src/support/error.rs), read without the core
// (the CLI uses it too): `{ code, message, cause?: { code?, message, errno?, sqlState? } }`.

const STABLE_CODE = /^E_[A-Z_]+$/;

/**
 * The envelope in a native error's message, or undefined for a failure that did not come in
 * one (a panic, an argument napi could not convert).
 * @param {string} text
 * @returns {{ code: string, message: string, cause?: { code?: string, message: string, errno?: number, sqlState?: string } } | undefined}
 */
function envelopeOf(text) {
  if (!text.startsWith('{')) return undefined;
  try {
    const envelope = JSON.parse(text);
    const valid = typeof envelope?.code === 'string' && STABLE_CODE.test(envelope.code) && typeof envelope.message === 'string';
    return valid ? envelope : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The text of whatever was thrown.
 * @param {unknown} error
 * @returns {string}
 */
function textOf(error) {
  return typeof error?.message === 'string' ? error.message : String(error);
}

module.exports = { envelopeOf, textOf };
