'use strict';

const {
  DelayStamp,
  InMemoryTransport,
  ReceivedStamp,
  RedeliveryStamp,
  TransportError,
  TransportMessageIdStamp,
} = require('@schally/nestjs-messenger');
const { envelopeOf, receiveOne, collect } = require('../support/transport-helpers');

describe('InMemoryTransport', () => {
  it('assigns decimal string ids from a per-instance counter', async () => {
    const transport = new InMemoryTransport();
    const ids = [];
    for (const id of ['a', 'b']) {
      const sent = await transport.send(envelopeOf(id));
      ids.push(sent.last(TransportMessageIdStamp).id);
    }
    const other = await new InMemoryTransport().send(envelopeOf('c'));
    expect(ids).toEqual(['0', '1']);
    expect(other.last(TransportMessageIdStamp).id).toBe('0');
  });

  it('appends the id stamp to the sent envelope and stores it as given', async () => {
    const transport = new InMemoryTransport();
    const envelope = envelopeOf('a', '', [new TransportMessageIdStamp('old')]);
    const sent = await transport.send(envelope);
    expect(sent).not.toBe(envelope);
    expect(sent.all(TransportMessageIdStamp).map((s) => s.id)).toEqual(['old', '0']);
    const received = await receiveOne(transport);
    expect(received.last(TransportMessageIdStamp).id).toBe('0');
    expect(received.last(ReceivedStamp).transportName).toBe('in-memory');
    await transport.ack(received);
  });

  it('delivers FIFO among available messages, delayed ones later', async () => {
    const transport = new InMemoryTransport();
    await transport.send(envelopeOf('late').with(new DelayStamp(60)));
    await transport.send(envelopeOf('a'));
    await transport.send(envelopeOf('b'));
    const order = [];
    for (let i = 0; i < 3; i += 1) {
      const envelope = await receiveOne(transport);
      order.push(envelope.message.id);
      await transport.ack(envelope);
    }
    expect(order).toEqual(['a', 'b', 'late']);
  });

  it('counts and lists queued messages, excluding in-flight ones', async () => {
    const transport = new InMemoryTransport();
    await transport.send(envelopeOf('a'));
    await transport.send(envelopeOf('b').with(new DelayStamp(10_000)));
    await transport.send(envelopeOf('c'));
    const inFlight = await receiveOne(transport);

    expect(await transport.getMessageCount()).toBe(2);
    const listed = await collect(transport.list());
    expect(listed.map((e) => e.message.id)).toEqual(['b', 'c']);
    expect(listed.map((e) => e.last(TransportMessageIdStamp).id)).toEqual(['1', '2']);
    expect(listed.every((e) => e.last(ReceivedStamp) === undefined)).toBe(true);
    expect((await collect(transport.list(1))).map((e) => e.message.id)).toEqual(['b']);

    expect((await transport.find('2')).message.id).toBe('c');
    expect(await transport.find('0')).toBeUndefined();
    expect(await transport.find('99')).toBeUndefined();

    await transport.ack(inFlight);
    await transport.close();
  });

  it('reject re-enqueues a fresh copy available immediately, ignoring DelayStamp', async () => {
    const transport = new InMemoryTransport({ name: 'async' });
    await transport.send(envelopeOf('a').with(new DelayStamp(30)));
    const delivered = await receiveOne(transport);
    await transport.reject(delivered);

    const [copy] = await collect(transport.list());
    expect(copy.last(TransportMessageIdStamp).id).toBe('1');
    expect(copy.all(TransportMessageIdStamp)).toHaveLength(1);
    expect(copy.last(ReceivedStamp)).toBeUndefined();
    expect(copy.all(RedeliveryStamp)).toHaveLength(1);
    expect(copy.last(RedeliveryStamp).retryCount).toBe(1);
    expect(copy.last(RedeliveryStamp).redeliveredAt).toBeInstanceOf(Date);

    const start = Date.now();
    const again = await receiveOne(transport);
    expect(Date.now() - start).toBeLessThan(25);
    await transport.ack(again);
  });

  it('throws TransportError synchronously when sending on a closed transport', async () => {
    const transport = new InMemoryTransport();
    await transport.close();
    expect(() => transport.send(envelopeOf('a'))).toThrow(
      new TransportError('Cannot send on a transport that is closing or closed.'),
    );
  });

  it('throws TransportError synchronously on ack/reject without an id stamp', () => {
    const transport = new InMemoryTransport();
    const envelope = envelopeOf('a');
    const message = 'Cannot ack or reject an envelope without a TransportMessageIdStamp.';
    expect(() => transport.ack(envelope)).toThrow(TransportError);
    expect(() => transport.ack(envelope)).toThrow(message);
    expect(() => transport.reject(envelope)).toThrow(message);
  });

  it('close() is idempotent, stops get() and waits for in-flight deliveries', async () => {
    const transport = new InMemoryTransport();
    await transport.send(envelopeOf('a'));
    const delivered = await receiveOne(transport);

    let closed = 0;
    const closing = [transport.close(), transport.close()].map((p) => p.then(() => (closed += 1)));
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(closed).toBe(0);
    expect(await collect(transport.get(new AbortController().signal))).toEqual([]);

    await transport.ack(delivered);
    await Promise.all(closing);
    expect(closed).toBe(2);
    await transport.close();
  });
});
