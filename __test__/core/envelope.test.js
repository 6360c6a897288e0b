'use strict';

const {
  BusNameStamp,
  DelayStamp,
  Envelope,
  ReceivedStamp,
  RedeliveryStamp,
  TransportMessageIdStamp,
} = require('@schally/nestjs-messenger');
const { TestMessage } = require('../support/transport-helpers');

describe('Envelope', () => {
  it('exposes the message without cloning it', () => {
    const message = new TestMessage('a');
    expect(new Envelope(message).message).toBe(message);
  });

  it('copies the stamp array given to the constructor', () => {
    const stamps = [new BusNameStamp('default')];
    const envelope = new Envelope(new TestMessage('a'), stamps);
    stamps.push(new BusNameStamp('later'));
    expect(envelope.all(BusNameStamp)).toHaveLength(1);
  });

  it('with() appends and returns a new instance, leaving the original untouched', () => {
    const original = new Envelope(new TestMessage('a'), [new BusNameStamp('one')]);
    const next = original.with(new BusNameStamp('two'), new DelayStamp(5));

    expect(next).not.toBe(original);
    expect(next.message).toBe(original.message);
    expect(original.all(BusNameStamp).map((s) => s.busName)).toEqual(['one']);
    expect(next.all(BusNameStamp).map((s) => s.busName)).toEqual(['one', 'two']);
    expect(next.last(DelayStamp).delayMs).toBe(5);
  });

  it('withoutAll() removes every stamp of exactly that class', () => {
    const envelope = new Envelope(new TestMessage('a'), [
      new RedeliveryStamp(1),
      new BusNameStamp('x'),
      new RedeliveryStamp(2),
    ]);
    const stripped = envelope.withoutAll(RedeliveryStamp);

    expect(stripped).not.toBe(envelope);
    expect(stripped.last(RedeliveryStamp)).toBeUndefined();
    expect(stripped.all(BusNameStamp)).toHaveLength(1);
    expect(envelope.all(RedeliveryStamp)).toHaveLength(2);
  });

  it('last() returns the most recently appended stamp of that class, or undefined', () => {
    const first = new RedeliveryStamp(1);
    const second = new RedeliveryStamp(2);
    const envelope = new Envelope(new TestMessage('a')).with(first, new BusNameStamp('x')).with(second);

    expect(envelope.last(RedeliveryStamp)).toBe(second);
    expect(envelope.last(DelayStamp)).toBeUndefined();
  });

  it('last() does not match subclasses or look-alike classes', () => {
    class SpecialReceivedStamp extends ReceivedStamp {}
    const LookAlike = (() => {
      class ReceivedStamp {
        constructor(transportName) {
          this.transportName = transportName;
        }
      }
      return ReceivedStamp;
    })();
    const envelope = new Envelope(new TestMessage('a'), [
      new SpecialReceivedStamp('sub'),
      new LookAlike('other'),
    ]);

    expect(envelope.last(ReceivedStamp)).toBeUndefined();
    expect(envelope.last(SpecialReceivedStamp).transportName).toBe('sub');
  });

  it('all() groups stamps by class in first-seen order, insertion order within a class', () => {
    const a1 = new BusNameStamp('a1');
    const r1 = new RedeliveryStamp(1);
    const a2 = new BusNameStamp('a2');
    const t1 = new TransportMessageIdStamp('7');
    const envelope = new Envelope(new TestMessage('a'), [a1, r1, a2, t1]);

    const all = envelope.all();
    expect(all).toBeInstanceOf(Map);
    expect([...all.keys()]).toEqual([BusNameStamp, RedeliveryStamp, TransportMessageIdStamp]);
    expect(all.get(BusNameStamp)).toEqual([a1, a2]);
    expect(envelope.all(BusNameStamp)).toEqual([a1, a2]);
    expect(envelope.all(DelayStamp)).toEqual([]);
    expect(new Envelope(new TestMessage('b')).all().size).toBe(0);
  });

  it('all(type) returns a copy', () => {
    const envelope = new Envelope(new TestMessage('a'), [new BusNameStamp('a')]);
    envelope.all(BusNameStamp).push(new BusNameStamp('b'));
    envelope.all().get(BusNameStamp).push(new BusNameStamp('c'));
    expect(envelope.all(BusNameStamp)).toHaveLength(1);
  });

  describe('wrap()', () => {
    it('returns the same envelope when no stamps are given', () => {
      const envelope = new Envelope(new TestMessage('a'));
      expect(Envelope.wrap(envelope)).toBe(envelope);
      expect(Envelope.wrap(envelope, [])).toBe(envelope);
    });

    it('appends the stamps to an existing envelope', () => {
      const envelope = new Envelope(new TestMessage('a'), [new BusNameStamp('x')]);
      const wrapped = Envelope.wrap(envelope, [new DelayStamp(1)]);
      expect(wrapped).not.toBe(envelope);
      expect(wrapped.message).toBe(envelope.message);
      expect(wrapped.last(BusNameStamp).busName).toBe('x');
      expect(wrapped.last(DelayStamp).delayMs).toBe(1);
    });

    it('wraps a plain message', () => {
      const message = new TestMessage('a');
      const wrapped = Envelope.wrap(message, [new BusNameStamp('x')]);
      expect(wrapped).toBeInstanceOf(Envelope);
      expect(wrapped.message).toBe(message);
      expect(wrapped.all(BusNameStamp)).toHaveLength(1);
    });
  });

  describe('stamp identity across module copies', () => {
    let other;
    beforeAll(() => {
      jest.isolateModules(() => {
        other = require('@schally/nestjs-messenger');
      });
    });

    it('loads a distinct copy of the core', () => {
      expect(other.ReceivedStamp).not.toBe(ReceivedStamp);
    });

    it('does not see stamps created by another copy', () => {
      const envelope = new Envelope(new TestMessage('a')).with(new other.ReceivedStamp('async'));
      expect(envelope.last(ReceivedStamp)).toBeUndefined();
      expect(envelope.last(other.ReceivedStamp).transportName).toBe('async');
    });

    it('wraps an envelope from another copy again', () => {
      const foreign = new other.Envelope(new TestMessage('a'));
      const wrapped = Envelope.wrap(foreign);
      expect(wrapped).toBeInstanceOf(Envelope);
      expect(wrapped.message).toBe(foreign);
    });
  });
});
