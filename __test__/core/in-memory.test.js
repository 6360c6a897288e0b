'use strict';

const {
  DelayStamp,
  Envelope,
  InMemoryTransport,
  ReceivedStamp,
  RedeliveryStamp,
  TransportError,
  TransportMessageIdStamp,
} = require('@schally/nestjs-messenger');

class Job {
  constructor(id) {
    this.id = id;
  }
}

async function first(transport) {
  const controller = new AbortController();
  try {
    for await (const envelope of transport.get(controller.signal)) {
      return envelope;
    }
    return undefined;
  } finally {
    controller.abort();
  }
}

async function collect(iterable) {
  const out = [];
  for await (const item of iterable) out.push(item);
  return out;
}

describe('InMemoryTransport', () => {
  it('assigns decimal string ids from a per-instance counter', async () => {
    const transport = new InMemoryTransport();
    const ids = [];
    for (const id of ['a', 'b']) {
      const sent = await transport.send(new Envelope(new Job(id)));
      ids.push(sent.last(TransportMessageIdStamp).id);
    }
    const other = await new InMemoryTransport().send(new Envelope(new Job('c')));
    expect(ids).toEqual(['0', '1']);
    expect(other.last(TransportMessageIdStamp).id).toBe('0');
  });

  it('appends the id stamp to the sent envelope and stores it as given', async () => {
    const transport = new InMemoryTransport();
    const envelope = new Envelope(new Job('a'), [new TransportMessageIdStamp('old')]);
    const sent = await transport.send(envelope);
    expect(sent).not.toBe(envelope);
    expect(sent.all(TransportMessageIdStamp).map((s) => s.id)).toEqual(['old', '0']);
    const received = await first(transport);
    expect(received.last(TransportMessageIdStamp).id).toBe('0');
    expect(received.last(ReceivedStamp).transportName).toBe('in-memory');
    await transport.ack(received);
  });

  it('delivers FIFO among available messages, delayed ones later', async () => {
    const transport = new InMemoryTransport();
    await transport.send(new Envelope(new Job('late')).with(new DelayStamp(60)));
    await transport.send(new Envelope(new Job('a')));
    await transport.send(new Envelope(new Job('b')));
    const order = [];
    for (let i = 0; i < 3; i += 1) {
      const envelope = await first(transport);
      order.push(envelope.message.id);
      await transport.ack(envelope);
    }
    expect(order).toEqual(['a', 'b', 'late']);
  });

  it('counts and lists queued messages, excluding in-flight ones', async () => {
    const transport = new InMemoryTransport();
    await transport.send(new Envelope(new Job('a')));
    await transport.send(new Envelope(new Job('b')).with(new DelayStamp(10_000)));
    await transport.send(new Envelope(new Job('c')));
    const inFlight = await first(transport);

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
    await transport.send(new Envelope(new Job('a')).with(new DelayStamp(30)));
    const delivered = await first(transport);
    await transport.reject(delivered);

    const [copy] = await collect(transport.list());
    expect(copy.last(TransportMessageIdStamp).id).toBe('1');
    expect(copy.all(TransportMessageIdStamp)).toHaveLength(1);
    expect(copy.last(ReceivedStamp)).toBeUndefined();
    expect(copy.all(RedeliveryStamp)).toHaveLength(1);
    expect(copy.last(RedeliveryStamp).retryCount).toBe(1);
    expect(copy.last(RedeliveryStamp).redeliveredAt).toBeInstanceOf(Date);

    const start = Date.now();
    const again = await first(transport);
    expect(Date.now() - start).toBeLessThan(25);
    await transport.ack(again);
  });

  it('throws TransportError synchronously when sending on a closed transport', async () => {
    const transport = new InMemoryTransport();
    await transport.close();
    expect(() => transport.send(new Envelope(new Job('a')))).toThrow(
      new TransportError('Cannot send on a transport that is closing or closed.'),
    );
  });

  it('throws TransportError synchronously on ack/reject without an id stamp', () => {
    const transport = new InMemoryTransport();
    const envelope = new Envelope(new Job('a'));
    const message = 'Cannot ack or reject an envelope without a TransportMessageIdStamp.';
    expect(() => transport.ack(envelope)).toThrow(TransportError);
    expect(() => transport.ack(envelope)).toThrow(message);
    expect(() => transport.reject(envelope)).toThrow(message);
  });

  it('close() is idempotent, stops get() and waits for in-flight deliveries', async () => {
    const transport = new InMemoryTransport();
    await transport.send(new Envelope(new Job('a')));
    const delivered = await first(transport);

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
