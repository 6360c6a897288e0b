'use strict';

const {
  DelayStamp,
  Envelope,
  ErrorDetailsStamp,
  HandlerFailedError,
  HandlerNotFoundError,
  InMemoryTransport,
  InvalidArgumentError,
  MessengerError,
  MultiplierRetryStrategy,
  RedeliveryStamp,
  RoutingSendersLocator,
  SerializationError,
  TransportConnectionError,
  TransportError,
  TransportNotFoundError,
  isListableReceiver,
  isMessageCountAware,
  isMessageRetriever,
} = require('@schally/nestjs-messenger');

class OrderPlaced {
  constructor(id) {
    this.id = id;
  }
}

describe('errors', () => {
  it.each([
    [TransportError, [MessengerError]],
    [TransportConnectionError, [TransportError, MessengerError]],
    [TransportNotFoundError, [TransportError, MessengerError]],
    [SerializationError, [MessengerError]],
    [HandlerNotFoundError, [MessengerError]],
    [InvalidArgumentError, [MessengerError]],
  ])('%p has its class name, message and cause, and no code', (ErrorClass, parents) => {
    const cause = new Error('root');
    const error = new ErrorClass('something broke', { cause });
    expect(error).toBeInstanceOf(Error);
    for (const parent of parents) {
      expect(error).toBeInstanceOf(parent);
    }
    expect(error.name).toBe(ErrorClass.name);
    expect(error.message).toBe('something broke');
    expect(error.cause).toBe(cause);
    expect('code' in error).toBe(false);
    expect(new ErrorClass('no options').cause).toBeUndefined();
  });

  it('keeps SerializationError outside the TransportError branch', () => {
    expect(new SerializationError('x')).not.toBeInstanceOf(TransportError);
  });

  it('formats HandlerFailedError from an Error cause', () => {
    const envelope = new Envelope(new OrderPlaced('o-1'));
    const cause = new TypeError('boom');
    const error = new HandlerFailedError(envelope, cause);
    expect(error).toBeInstanceOf(MessengerError);
    expect(error.name).toBe('HandlerFailedError');
    expect(error.message).toBe('Handling "OrderPlaced" failed: boom');
    expect(error.envelope).toBe(envelope);
    expect(error.cause).toBe(cause);
    expect('code' in error).toBe(false);
  });

  it('formats HandlerFailedError from a non-Error cause', () => {
    const error = new HandlerFailedError(new Envelope(new OrderPlaced('o-1')), 'oops');
    expect(error.message).toBe('Handling "OrderPlaced" failed: a non-Error value was thrown');
    expect(error.cause).toBe('oops');
  });
});

describe('DelayStamp validation', () => {
  it.each([
    [-1, 'DelayStamp delayMs must be a finite number >= 0, got -1.'],
    [Number.NaN, 'DelayStamp delayMs must be a finite number >= 0, got NaN.'],
    [Number.POSITIVE_INFINITY, 'DelayStamp delayMs must be a finite number >= 0, got Infinity.'],
    [-0.5, 'DelayStamp delayMs must be a finite number >= 0, got -0.5.'],
  ])('rejects %p', (value, message) => {
    let caught;
    try {
      new DelayStamp(value);
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(InvalidArgumentError);
    expect(caught.message).toBe(message);
  });

  it('accepts zero and fractions', () => {
    expect(new DelayStamp(0).delayMs).toBe(0);
    expect(new DelayStamp(1.5).delayMs).toBe(1.5);
  });
});

describe('ErrorDetailsStamp.create', () => {
  it('maps an Error to its class name and message, without a code', () => {
    class CustomError extends Error {}
    const stamp = ErrorDetailsStamp.create(new CustomError('bad'));
    expect(stamp).toBeInstanceOf(ErrorDetailsStamp);
    expect(stamp.exceptionClass).toBe('CustomError');
    expect(stamp.exceptionMessage).toBe('bad');
    expect(stamp.exceptionCode).toBeUndefined();
  });

  it('maps a string and anything else', () => {
    expect({ ...ErrorDetailsStamp.create('text') }).toEqual({
      exceptionClass: 'Error',
      exceptionMessage: 'text',
      exceptionCode: undefined,
    });
    expect(ErrorDetailsStamp.create(42).exceptionMessage).toBe('Unknown error');
    expect(ErrorDetailsStamp.create(undefined).exceptionClass).toBe('Error');
  });
});

describe('MultiplierRetryStrategy', () => {
  const at = (retryCount) =>
    retryCount === 0
      ? new Envelope(new OrderPlaced('o'))
      : new Envelope(new OrderPlaced('o'), [new RedeliveryStamp(retryCount)]);

  it('uses the defaults: 3 retries, 1000 ms x2, 10% jitter', () => {
    const strategy = new MultiplierRetryStrategy();
    expect([0, 1, 2, 3].map((n) => strategy.isRetryable(at(n), new Error('x')))).toEqual([
      true,
      true,
      true,
      false,
    ]);
    for (let i = 0; i < 50; i += 1) {
      const wait = strategy.getWaitingTime(at(2));
      expect(wait).toBeGreaterThanOrEqual(3600);
      expect(wait).toBeLessThanOrEqual(4400);
      expect(Number.isInteger(wait)).toBe(true);
    }
  });

  it('multiplies, then caps, without jitter', () => {
    const strategy = new MultiplierRetryStrategy({
      delayMs: 100,
      multiplier: 3,
      maxDelayMs: 1000,
      jitter: 0,
    });
    expect([0, 1, 2, 3].map((n) => strategy.getWaitingTime(at(n)))).toEqual([100, 300, 900, 1000]);
  });

  it.each([
    [{ maxRetries: -1 }],
    [{ maxRetries: 1.5 }],
    [{ delayMs: -1 }],
    [{ multiplier: 0.5 }],
    [{ maxDelayMs: -1 }],
    [{ jitter: -0.1 }],
    [{ jitter: 1.1 }],
  ])('rejects invalid options %p', (options) => {
    expect(() => new MultiplierRetryStrategy(options)).toThrow(InvalidArgumentError);
  });

  it('accepts boundary options', () => {
    expect(
      () => new MultiplierRetryStrategy({ maxRetries: 0, delayMs: 0, multiplier: 1, maxDelayMs: 0, jitter: 1 }),
    ).not.toThrow();
  });
});

describe('capability guards', () => {
  it('detect capabilities by duck typing', () => {
    const transport = new InMemoryTransport();
    expect(isListableReceiver(transport)).toBe(true);
    expect(isMessageRetriever(transport)).toBe(true);
    expect(isMessageCountAware(transport)).toBe(true);

    const bare = { list: 1, find: 'no' };
    expect(isListableReceiver(bare)).toBe(false);
    expect(isMessageRetriever(bare)).toBe(false);
    expect(isMessageCountAware({})).toBe(false);
  });
});

describe('RoutingSendersLocator', () => {
  it('routes by message class name and skips unknown aliases', () => {
    const a = new InMemoryTransport({ name: 'a' });
    const b = new InMemoryTransport({ name: 'b' });
    const locator = new RoutingSendersLocator(
      new Map([
        ['a', a],
        ['b', b],
      ]),
      new Map([['OrderPlaced', ['b', 'missing', 'a']]]),
    );
    expect([...locator.getSenders(new Envelope(new OrderPlaced('o')))]).toEqual([
      ['b', b],
      ['a', a],
    ]);
    expect([...locator.getSenders(new Envelope({}))]).toEqual([]);
    expect(locator.getSenderByAlias('a')).toBe(a);
    expect(locator.getSenderByAlias('missing')).toBeUndefined();
  });
});
