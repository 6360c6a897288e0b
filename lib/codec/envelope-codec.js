'use strict';

// lib/codec/: the stored form of a message, shared with the TypeScript transports: an envelope
// encoded through the app's serializer into the body and headers a row or stream entry holds,
// and decoded back (or found to be poison). The transports and the SQL outbox both write
// through it, so a message stored either way reads the same.

const { DelayStamp } = require('@schally/nestjs-messenger');
const { wellFormed } = require('../options/option-checks');

/**
 * Encodes an envelope into the stored form shared with the TypeScript transports: the
 * serializer's body verbatim, its header map JSON-encoded once more into one string.
 * @param {import('@schally/nestjs-messenger').Serializer} serializer
 * @param {import('@schally/nestjs-messenger').Envelope} envelope
 */
function encodeEnvelope(serializer, envelope) {
  const encoded = serializer.encode(envelope);
  return {
    body: wellFormed(encoded.body, 'message: its encoded body'),
    headers: JSON.stringify(encoded.headers),
    delayMs: envelope.last(DelayStamp)?.delayMs ?? 0,
  };
}

/**
 * Decodes a stored message, or returns undefined when it cannot be decoded (poison).
 * @param {import('@schally/nestjs-messenger').Serializer} serializer
 * @param {string} body the stored body
 * @param {string} storedHeaders the stored headers (a JSON object)
 */
function decodeStored(serializer, body, storedHeaders) {
  try {
    const headers = JSON.parse(storedHeaders);
    if (headers === null || typeof headers !== 'object' || Array.isArray(headers)) return undefined;
    return serializer.decode({ body, headers });
  } catch {
    return undefined;
  }
}

module.exports = { encodeEnvelope, decodeStored };
