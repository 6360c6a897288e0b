'use strict';

// Every stamp of an envelope, the transport-added ones included, in the order the envelope
// reports them (classes in first-seen order, each class's stamps in insertion order): what
// must be equal when two transports yield the same stored message.

/**
 * @param {import('@schally/nestjs-messenger').Envelope} envelope
 * @returns {{ type: string, data: unknown }[]}
 */
function everyStamp(envelope) {
  const out = [];
  for (const [type, stamps] of envelope.all()) {
    for (const stamp of stamps) out.push({ type: type.name, data: JSON.parse(JSON.stringify({ ...stamp })) });
  }
  return out;
}

module.exports = { everyStamp };
