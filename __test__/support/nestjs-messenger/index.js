'use strict';

const { Envelope } = require('./src/envelope');
const stamps = require('./src/stamps');
const { JsonSerializer } = require('./src/json-serializer');
const errors = require('./src/errors');
const { InMemoryTransport } = require('./src/in-memory-transport');
const capabilities = require('./src/capabilities');
const { RoutingSendersLocator } = require('./src/routing-senders-locator');
const { MultiplierRetryStrategy } = require('./src/multiplier-retry-strategy');
const { Worker } = require('./src/worker');

module.exports = {
  // Envelope and serializer
  Envelope,
  JsonSerializer,
  // Stamps
  BusNameStamp: stamps.BusNameStamp,
  DelayStamp: stamps.DelayStamp,
  ErrorDetailsStamp: stamps.ErrorDetailsStamp,
  HandledStamp: stamps.HandledStamp,
  ReceivedStamp: stamps.ReceivedStamp,
  RedeliveryStamp: stamps.RedeliveryStamp,
  SentStamp: stamps.SentStamp,
  SentToFailureTransportStamp: stamps.SentToFailureTransportStamp,
  TransportMessageIdStamp: stamps.TransportMessageIdStamp,
  // Errors
  MessengerError: errors.MessengerError,
  TransportError: errors.TransportError,
  TransportConnectionError: errors.TransportConnectionError,
  TransportNotFoundError: errors.TransportNotFoundError,
  SerializationError: errors.SerializationError,
  HandlerNotFoundError: errors.HandlerNotFoundError,
  HandlerFailedError: errors.HandlerFailedError,
  InvalidArgumentError: errors.InvalidArgumentError,
  // Transports and routing
  InMemoryTransport,
  RoutingSendersLocator,
  isListableReceiver: capabilities.isListableReceiver,
  isMessageCountAware: capabilities.isMessageCountAware,
  isMessageRetriever: capabilities.isMessageRetriever,
  // Retry and worker
  MultiplierRetryStrategy,
  Worker,
};
