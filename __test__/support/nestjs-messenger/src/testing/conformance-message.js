'use strict';

/**
 * Message used by the transport conformance suite. Exported so that a serializing
 * transport can register it, e.g. `new JsonSerializer([ConformanceMessage])`.
 */
class ConformanceMessage {
  /**
   * @param {string} id
   * @param {string} [payload]
   */
  constructor(id, payload = '') {
    this.id = id;
    this.payload = payload;
  }
}

module.exports = { ConformanceMessage };
