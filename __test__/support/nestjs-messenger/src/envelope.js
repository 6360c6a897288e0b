'use strict';

/**
 * Immutable wrapper around a message and its stamps. Every "mutation" returns a new
 * instance; the message itself is never cloned. Stamp identity is the constructor
 * reference (subclasses do not match).
 */
class Envelope {
  #message;
  #stamps;

  /**
   * @param {object} message
   * @param {readonly object[]} [stamps] copied
   */
  constructor(message, stamps = []) {
    this.#message = message;
    this.#stamps = [...stamps];
  }

  /**
   * Returns an existing Envelope as is (or `with(...stamps)` when stamps are given);
   * wraps anything else in a new Envelope.
   */
  static wrap(messageOrEnvelope, stamps = []) {
    if (messageOrEnvelope instanceof Envelope) {
      return stamps.length === 0 ? messageOrEnvelope : messageOrEnvelope.with(...stamps);
    }
    return new Envelope(messageOrEnvelope, stamps);
  }

  /** The wrapped message (not a copy). */
  get message() {
    return this.#message;
  }

  /** New envelope with `stamps` appended. */
  with(...stamps) {
    return new Envelope(this.#message, [...this.#stamps, ...stamps]);
  }

  /** New envelope without any stamp whose constructor is exactly `stampType`. */
  withoutAll(stampType) {
    return new Envelope(
      this.#message,
      this.#stamps.filter((stamp) => stamp.constructor !== stampType),
    );
  }

  /** The most recently appended stamp of exactly `stampType`, or undefined. */
  last(stampType) {
    for (let i = this.#stamps.length - 1; i >= 0; i -= 1) {
      if (this.#stamps[i].constructor === stampType) {
        return this.#stamps[i];
      }
    }
    return undefined;
  }

  /**
   * Without argument: a Map of stamp class to stamps, classes in first-seen order.
   * With a class: that class's stamps in insertion order.
   */
  all(stampType) {
    if (stampType !== undefined) {
      return this.#stamps.filter((stamp) => stamp.constructor === stampType);
    }
    const grouped = new Map();
    for (const stamp of this.#stamps) {
      const group = grouped.get(stamp.constructor);
      if (group) {
        group.push(stamp);
      } else {
        grouped.set(stamp.constructor, [stamp]);
      }
    }
    return grouped;
  }
}

module.exports = { Envelope };
