'use strict';

const { Envelope, JsonSerializer } = require('@schally/nestjs-messenger');

/** The benchmark's message: a registered class with a ~100-character payload. */
class BenchMessage {
  constructor(id, sentAt = 0) {
    this.id = id;
    this.sentAt = sentAt;
    this.payload = 'p'.repeat(100);
  }
}

const serializer = () => new JsonSerializer([BenchMessage]);

/** Body and headers as every transport stores them, for prefilling with plain SQL or XADD. */
function storedForm(id) {
  const encoded = serializer().encode(new Envelope(new BenchMessage(id)));
  return { body: encoded.body, headers: JSON.stringify(encoded.headers) };
}

module.exports = { BenchMessage, serializer, storedForm };
