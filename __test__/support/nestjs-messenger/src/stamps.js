'use strict';

const { InvalidArgumentError } = require('./errors');

// Stamps are plain classes; their identity (for Envelope.last/all/withoutAll) is the
// constructor reference. Every field is an own, enumerable property set in the
// constructor, so the JsonSerializer's shallow copy sees exactly these fields.

/** Name of the bus that dispatched the message. */
class BusNameStamp {
  /** @param {string} busName */
  constructor(busName) {
    this.busName = busName;
  }
}

/** Records that the message was sent to a transport (sender class and routing alias). */
class SentStamp {
  /**
   * @param {string} senderClass
   * @param {string} [senderAlias]
   */
  constructor(senderClass, senderAlias) {
    this.senderClass = senderClass;
    this.senderAlias = senderAlias;
  }
}

/** Non-sendable. Added by a transport to every envelope yielded by `get()`. */
class ReceivedStamp {
  /** @param {string} transportName */
  constructor(transportName) {
    this.transportName = transportName;
  }
}

/** Non-sendable. The transport's id for the stored message. */
class TransportMessageIdStamp {
  /** @param {string | number} id */
  constructor(id) {
    this.id = id;
  }
}

/** Asks the transport to deliver the message no earlier than `delayMs` from now. */
class DelayStamp {
  /** @param {number} delayMs finite and >= 0 (fractions allowed) */
  constructor(delayMs) {
    if (typeof delayMs !== 'number' || !Number.isFinite(delayMs) || delayMs < 0) {
      throw new InvalidArgumentError(
        `DelayStamp delayMs must be a finite number >= 0, got ${String(delayMs)}.`,
      );
    }
    this.delayMs = delayMs;
  }
}

/** Marks a redelivery; `retryCount` starts at 1 for the first redelivery. */
class RedeliveryStamp {
  /**
   * @param {number} retryCount
   * @param {Date} [redeliveredAt]
   */
  constructor(retryCount, redeliveredAt = new Date()) {
    this.retryCount = retryCount;
    this.redeliveredAt = redeliveredAt;
  }
}

/** One per handler that handled the message successfully. */
class HandledStamp {
  /**
   * @param {unknown} result
   * @param {string} handlerName
   */
  constructor(result, handlerName) {
    this.result = result;
    this.handlerName = handlerName;
  }
}

/** Details of the error that made the message fail. */
class ErrorDetailsStamp {
  /**
   * @param {string} exceptionClass
   * @param {string} exceptionMessage
   * @param {string | number} [exceptionCode]
   */
  constructor(exceptionClass, exceptionMessage, exceptionCode) {
    this.exceptionClass = exceptionClass;
    this.exceptionMessage = exceptionMessage;
    this.exceptionCode = exceptionCode;
  }

  /**
   * Builds the stamp from any thrown value. Never sets a code.
   * @param {unknown} error
   * @returns {ErrorDetailsStamp}
   */
  static create(error) {
    if (error instanceof Error) {
      return new ErrorDetailsStamp(error.constructor.name, error.message);
    }
    if (typeof error === 'string') {
      return new ErrorDetailsStamp('Error', error);
    }
    return new ErrorDetailsStamp('Error', 'Unknown error');
  }
}

/** Added when a message is routed to the failure transport. */
class SentToFailureTransportStamp {
  /** @param {string} originalReceiverName */
  constructor(originalReceiverName) {
    this.originalReceiverName = originalReceiverName;
  }
}

/** Stamp classes that never travel on the wire. */
const NON_SENDABLE_STAMPS = new Set([ReceivedStamp, TransportMessageIdStamp]);

/** The nine built-in stamp classes, registered by default in the JsonSerializer. */
const BUILT_IN_STAMPS = [
  BusNameStamp,
  DelayStamp,
  ErrorDetailsStamp,
  HandledStamp,
  ReceivedStamp,
  RedeliveryStamp,
  SentStamp,
  SentToFailureTransportStamp,
  TransportMessageIdStamp,
];

module.exports = {
  BusNameStamp,
  DelayStamp,
  ErrorDetailsStamp,
  HandledStamp,
  ReceivedStamp,
  RedeliveryStamp,
  SentStamp,
  SentToFailureTransportStamp,
  TransportMessageIdStamp,
  NON_SENDABLE_STAMPS,
  BUILT_IN_STAMPS,
};
