'use strict';

// The message the fault scenarios send: numbered per producer, so every delivery can be
// matched to the send that made it. Shared by the test process and its child consumers.

const { Envelope, JsonSerializer } = require('@schally/nestjs-messenger');

class FaultMessage {
  /**
   * @param {string} key unique per send: `<producer>:<n>`
   * @param {number} n
   * @param {string} [text]
   */
  constructor(key, n, text = '') {
    this.key = key;
    this.n = n;
    this.text = text;
  }
}

function faultSerializer() {
  return new JsonSerializer([FaultMessage]);
}

function faultEnvelope(key, n, text = `message ${key}`) {
  return new Envelope(new FaultMessage(key, n, text));
}

module.exports = { FaultMessage, faultSerializer, faultEnvelope };
