'use strict';

/**
 * Resolves the senders of an envelope from a routing table keyed by message class name
 * (`message.constructor.name`). Aliases without a registered sender are skipped.
 */
class RoutingSendersLocator {
  #senders;
  #routing;

  /**
   * @param {ReadonlyMap<string, object>} senders alias -> sender
   * @param {ReadonlyMap<string, readonly string[]>} routing message class name -> aliases
   */
  constructor(senders, routing) {
    this.#senders = senders;
    this.#routing = routing;
  }

  /** Yields `[alias, sender]` pairs for the envelope's message class, in routing order. */
  *getSenders(envelope) {
    const aliases = this.#routing.get(envelope.message.constructor.name) ?? [];
    for (const alias of aliases) {
      const sender = this.#senders.get(alias);
      if (sender !== undefined) {
        yield [alias, sender];
      }
    }
  }

  /** The sender registered under `alias`, or undefined. */
  getSenderByAlias(alias) {
    return this.#senders.get(alias);
  }
}

module.exports = { RoutingSendersLocator };
