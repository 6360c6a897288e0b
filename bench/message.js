'use strict';

const { BusNameStamp, Envelope, JsonSerializer, SentStamp } = require('@schally/nestjs-messenger');

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

/** The core's default bus name and the routing alias the benchmark's apps send through. */
const BUS_NAME = 'default';
const SENDER_ALIAS = 'async';

/**
 * Sends `message` as an app's `MessageBus.dispatch` does: the bus wraps it in an envelope,
 * AddBusNameStampMiddleware stamps the bus's name, SendMessageMiddleware appends
 * `SentStamp(sender.constructor.name, alias)` and hands that envelope to the transport. The
 * stamps travel (they are in every stored message's headers), so they are part of every send's
 * cost, on both sides. `shape: 'bare'` sends the message in an envelope with no stamps, as
 * nothing in an app does (for comparison).
 * @param {{ send(envelope: Envelope): Promise<Envelope> }} transport
 * @param {object} message
 * @param {'app' | 'bare'} [shape]
 */
function sendAsApp(transport, message, shape = 'app') {
  if (shape === 'bare') return transport.send(new Envelope(message));
  let envelope = Envelope.wrap(message);
  if (envelope.last(BusNameStamp) === undefined) envelope = envelope.with(new BusNameStamp(BUS_NAME));
  return transport.send(envelope.with(new SentStamp(transport.constructor.name, SENDER_ALIAS)));
}

/** Body and headers as every transport stores them, for prefilling with plain SQL or XADD. */
function storedForm(id) {
  const encoded = serializer().encode(new Envelope(new BenchMessage(id)));
  return { body: encoded.body, headers: JSON.stringify(encoded.headers) };
}

/**
 * Body and headers of the message an app's send stores (the stamps of `sendAsApp`), as the
 * wake-up floor stores it beside B4.
 * @param {string} id
 * @param {string} senderClass the transport class an app sends through
 */
function appStoredForm(id, senderClass) {
  const envelope = new Envelope(new BenchMessage(id), [new BusNameStamp(BUS_NAME), new SentStamp(senderClass, SENDER_ALIAS)]);
  const encoded = serializer().encode(envelope);
  return { body: encoded.body, headers: JSON.stringify(encoded.headers) };
}

module.exports = { BenchMessage, serializer, storedForm, appStoredForm, sendAsApp };
