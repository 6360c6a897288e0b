'use strict';

const {
  BusNameStamp,
  DelayStamp,
  Envelope,
  ErrorDetailsStamp,
  HandledStamp,
  JsonSerializer,
  MessengerError,
  ReceivedStamp,
  RedeliveryStamp,
  SentStamp,
  SentToFailureTransportStamp,
  SerializationError,
  TransportError,
  TransportMessageIdStamp,
} = require('@schally/nestjs-messenger');
const { ConformanceMessage } = require('@schally/nestjs-messenger/testing');

class OrderPlaced {
  constructor(id, total) {
    this.id = id;
    this.total = total;
  }
}

const EXAMPLE_STAMPS_HEADER = [
  '[{"type":"BusNameStamp","data":{"busName":"default"}},{"type":"BusNameStamp","data":{"busName":"second"}},',
  '{"type":"SentStamp","data":{"senderClass":"SqlTransport","senderAlias":"async"}},',
  '{"type":"RedeliveryStamp","data":{"retryCount":1,"redeliveredAt":"2026-01-01T00:00:00.000Z"}},',
  '{"type":"DelayStamp","data":{"delayMs":1000}},',
  '{"type":"ErrorDetailsStamp","data":{"exceptionClass":"Error","exceptionMessage":"boom"}},',
  '{"type":"SentToFailureTransportStamp","data":{"originalReceiverName":"async"}},',
  '{"type":"HandledStamp","data":{"result":{"ok":true},"handlerName":"H"}}]',
].join('');

function exampleEnvelope() {
  return new Envelope(new OrderPlaced('o-1', 42), [
    new BusNameStamp('default'),
    new SentStamp('SqlTransport', 'async'),
    new ReceivedStamp('async'),
    new TransportMessageIdStamp(7),
    new RedeliveryStamp(1, new Date('2026-01-01T00:00:00.000Z')),
    new DelayStamp(1000),
    new BusNameStamp('second'),
    ErrorDetailsStamp.create(new Error('boom')),
    new SentToFailureTransportStamp('async'),
    new HandledStamp({ ok: true }, 'H'),
  ]);
}

function decodeError(serializer, encoded) {
  try {
    serializer.decode(encoded);
  } catch (error) {
    return error;
  }
  throw new Error('expected decode() to throw');
}

describe('JsonSerializer encode', () => {
  it('produces the exact documented wire format', () => {
    const encoded = new JsonSerializer([OrderPlaced]).encode(exampleEnvelope());

    expect(encoded.body).toBe('{"id":"o-1","total":42}');
    expect(encoded.headers).toStrictEqual({
      'X-Message-Type': 'OrderPlaced',
      'X-Message-Stamps': EXAMPLE_STAMPS_HEADER,
    });
    expect(Object.keys(encoded.headers)).toEqual(['X-Message-Type', 'X-Message-Stamps']);
  });

  it('omits the alias key of a SentStamp without alias', () => {
    const encoded = new JsonSerializer().encode(
      new Envelope(new OrderPlaced('o-1', 1), [new SentStamp('X')]),
    );
    expect(encoded.headers['X-Message-Stamps']).toBe(
      '[{"type":"SentStamp","data":{"senderClass":"X"}}]',
    );
  });

  it('encodes an envelope without stamps as "[]"', () => {
    const encoded = new JsonSerializer().encode(new Envelope(new OrderPlaced('o-1', 1)));
    expect(encoded.headers['X-Message-Stamps']).toBe('[]');
  });

  it('strips the non-sendable stamps', () => {
    const encoded = new JsonSerializer().encode(
      new Envelope(new OrderPlaced('o-1', 1), [new ReceivedStamp('a'), new TransportMessageIdStamp('9')]),
    );
    expect(encoded.headers['X-Message-Stamps']).toBe('[]');
  });

  it('serializes only own enumerable properties of the message', () => {
    class Rich {
      constructor() {
        this.when = new Date('2026-02-03T04:05:06.007Z');
        this.missing = undefined;
        this.n = 1;
      }
      get computed() {
        return 42;
      }
      method() {
        return 1;
      }
    }
    const encoded = new JsonSerializer().encode(new Envelope(new Rich()));
    expect(encoded.body).toBe('{"when":"2026-02-03T04:05:06.007Z","n":1}');
    expect(encoded.headers['X-Message-Type']).toBe('Rich');
  });

  it('lets the raw TypeError of a BigInt through', () => {
    const serializer = new JsonSerializer();
    expect(() => serializer.encode(new Envelope({ big: 10n }))).toThrow(TypeError);
  });
});

describe('JsonSerializer decode', () => {
  it('round-trips the example envelope, rebuilding class instances', () => {
    const serializer = new JsonSerializer([OrderPlaced]);
    const decoded = serializer.decode(serializer.encode(exampleEnvelope()));

    expect(decoded).toBeInstanceOf(Envelope);
    expect(decoded.message).toStrictEqual(new OrderPlaced('o-1', 42));
    expect(decoded.last(ReceivedStamp)).toBeUndefined();
    expect(decoded.last(TransportMessageIdStamp)).toBeUndefined();
    expect(decoded.all(BusNameStamp).map((s) => s.busName)).toEqual(['default', 'second']);
    expect(decoded.last(BusNameStamp)).toBeInstanceOf(BusNameStamp);
    expect(decoded.last(SentStamp)).toStrictEqual(new SentStamp('SqlTransport', 'async'));
    expect(decoded.last(DelayStamp).delayMs).toBe(1000);
    expect(decoded.last(HandledStamp).result).toEqual({ ok: true });
    expect(decoded.last(ErrorDetailsStamp).exceptionMessage).toBe('boom');
    expect(decoded.last(SentToFailureTransportStamp).originalReceiverName).toBe('async');
    // Date fields stay strings after the round-trip.
    expect(decoded.last(RedeliveryStamp).redeliveredAt).toBe('2026-01-01T00:00:00.000Z');
    expect(decoded.last(RedeliveryStamp).retryCount).toBe(1);
    // Stamp order: grouped by class in first-seen order.
    expect([...decoded.all().keys()].map((type) => type.name)).toEqual([
      'BusNameStamp',
      'SentStamp',
      'RedeliveryStamp',
      'DelayStamp',
      'ErrorDetailsStamp',
      'SentToFailureTransportStamp',
      'HandledStamp',
    ]);
  });

  it('round-trips a ConformanceMessage to a strictly equal instance', () => {
    const serializer = new JsonSerializer([ConformanceMessage]);
    const message = new ConformanceMessage('m-1', 'hello');
    const decoded = serializer.decode(serializer.encode(new Envelope(message)));
    expect(decoded.message).toStrictEqual(message);
    expect(Object.getPrototypeOf(decoded.message)).toBe(ConformanceMessage.prototype);
  });

  it('never runs constructors', () => {
    let calls = 0;
    class Counted {
      constructor() {
        calls += 1;
        this.v = 1;
      }
    }
    const serializer = new JsonSerializer([Counted]);
    const encoded = serializer.encode(new Envelope(new Counted()));
    calls = 0;
    const decoded = serializer.decode(encoded);
    expect(calls).toBe(0);
    expect(decoded.message).toBeInstanceOf(Counted);

    const negative = serializer.decode({
      body: '{}',
      headers: {
        'X-Message-Type': 'Counted',
        'X-Message-Stamps': '[{"type":"DelayStamp","data":{"delayMs":-5}}]',
      },
    });
    expect(negative.last(DelayStamp)).toBeInstanceOf(DelayStamp);
    expect(negative.last(DelayStamp).delayMs).toBe(-5);
  });

  it('accepts a missing stamps header as no stamps', () => {
    const decoded = new JsonSerializer([OrderPlaced]).decode({
      body: '{"id":"o-1","total":1}',
      headers: { 'X-Message-Type': 'OrderPlaced' },
    });
    expect(decoded.all().size).toBe(0);
  });

  it('lets a later registered type with the same name win', () => {
    class Shared {}
    const First = Shared;
    const Second = (() => {
      class Shared {}
      return Shared;
    })();
    const decoded = new JsonSerializer([First, Second]).decode({
      body: '{}',
      headers: { 'X-Message-Type': 'Shared' },
    });
    expect(decoded.message).toBeInstanceOf(Second);
    expect(decoded.message).not.toBeInstanceOf(First);
  });

  it('shares one registry between messages and stamps', () => {
    const decoded = new JsonSerializer().decode({
      body: '{"busName":"x"}',
      headers: { 'X-Message-Type': 'BusNameStamp' },
    });
    expect(decoded.message).toBeInstanceOf(BusNameStamp);
  });

  describe('errors', () => {
    const serializer = new JsonSerializer([OrderPlaced]);
    const type = { 'X-Message-Type': 'OrderPlaced' };

    it.each([
      ['a missing type header', { body: '{}', headers: {} }, 'Encoded envelope is missing the "X-Message-Type" header.'],
      ['a body that is not JSON', { body: '{nope', headers: type }, 'Failed to parse encoded envelope as JSON.'],
      ['a stamps header that is not JSON', { body: '{}', headers: { ...type, 'X-Message-Stamps': '[' } }, 'Failed to parse encoded envelope as JSON.'],
      ['an array body', { body: '[]', headers: type }, 'Encoded body must be a JSON object.'],
      ['a null body', { body: 'null', headers: type }, 'Encoded body must be a JSON object.'],
      ['a primitive body', { body: '3', headers: type }, 'Encoded body must be a JSON object.'],
      ['a non-array stamps header', { body: '{}', headers: { ...type, 'X-Message-Stamps': '{}' } }, 'Header "X-Message-Stamps" must encode an array.'],
      ['a non-object stamp', { body: '{}', headers: { ...type, 'X-Message-Stamps': '[1]' } }, 'Encoded stamp must be an object.'],
      ['a null stamp', { body: '{}', headers: { ...type, 'X-Message-Stamps': '[null]' } }, 'Encoded stamp must be an object.'],
      ['a stamp without type', { body: '{}', headers: { ...type, 'X-Message-Stamps': '[{"data":{}}]' } }, 'Encoded stamp is missing a string "type".'],
      ['a stamp with a numeric type', { body: '{}', headers: { ...type, 'X-Message-Stamps': '[{"type":1,"data":{}}]' } }, 'Encoded stamp is missing a string "type".'],
      ['a stamp without data', { body: '{}', headers: { ...type, 'X-Message-Stamps': '[{"type":"DelayStamp"}]' } }, 'Encoded stamp is missing its "data" object.'],
      ['a stamp with null data', { body: '{}', headers: { ...type, 'X-Message-Stamps': '[{"type":"DelayStamp","data":null}]' } }, 'Encoded stamp is missing its "data" object.'],
      ['an unknown message type', { body: '{}', headers: { 'X-Message-Type': 'Nope' } }, 'No type "Nope" is registered with the serializer.'],
      ['an unknown stamp type', { body: '{}', headers: { ...type, 'X-Message-Stamps': '[{"type":"NopeStamp","data":{}}]' } }, 'No type "NopeStamp" is registered with the serializer.'],
    ])('rejects %s', (_label, encoded, message) => {
      const error = decodeError(serializer, encoded);
      expect(error).toBeInstanceOf(SerializationError);
      expect(error).toBeInstanceOf(MessengerError);
      expect(error).not.toBeInstanceOf(TransportError);
      expect(error.name).toBe('SerializationError');
      expect(error.message).toBe(message);
    });

    it('keeps the SyntaxError as cause of a JSON parse failure', () => {
      const error = decodeError(serializer, { body: '{nope', headers: type });
      expect(error.cause).toBeInstanceOf(SyntaxError);
    });
  });
});
