'use strict';

const { Envelope, JsonSerializer } = require('@schally/nestjs-messenger');

let payload = 'p'.repeat(100);

/** The benchmark's message: a registered class with a payload of 100 characters by default. */
class BenchMessage {
  constructor(id, sentAt = 0) {
    this.id = id;
    this.sentAt = sentAt;
    this.payload = payload;
  }

  /** Sets the payload of the messages made from now on in this process (a run's job says it). */
  static usePayloadBytes(bytes) {
    payload = 'p'.repeat(bytes);
  }
}

const serializer = () => new JsonSerializer([BenchMessage]);

/** Body and headers as every transport stores them, for prefilling with plain SQL or XADD. */
function storedForm(id) {
  const encoded = serializer().encode(new Envelope(new BenchMessage(id)));
  return { body: encoded.body, headers: JSON.stringify(encoded.headers) };
}

module.exports = { BenchMessage, serializer, storedForm };
