'use strict';

const {
  Envelope,
  InMemoryTransport,
  ReceivedStamp,
  RedeliveryStamp,
  TransportMessageIdStamp,
  Worker,
} = require('@schally/nestjs-messenger');

class Job {
  constructor(id) {
    this.id = id;
  }
}

async function sendAll(transport, ids) {
  for (const id of ids) {
    await transport.send(new Envelope(new Job(id)));
  }
}

function recordingBus(fail = () => false) {
  const dispatched = [];
  return {
    dispatched,
    async dispatch(envelope) {
      dispatched.push(envelope);
      if (fail(envelope)) {
        throw new Error(`failed ${envelope.message.id}`);
      }
      return envelope;
    },
  };
}

describe('Worker', () => {
  let transport;

  beforeEach(() => {
    transport = new InMemoryTransport({ name: 'async' });
  });

  afterEach(async () => {
    await transport.close();
  });

  it('dispatches each received envelope and acks it on success', async () => {
    await sendAll(transport, ['a', 'b', 'c']);
    const bus = recordingBus();
    const handled = [];
    const ack = jest.spyOn(transport, 'ack');
    const reject = jest.spyOn(transport, 'reject');

    const stats = await new Worker(transport, bus, { maxMessages: 3 }, {
      onHandled: (envelope) => handled.push(envelope.message.id),
    }).run(new AbortController().signal);

    expect(stats).toEqual({ processed: 3 });
    expect(bus.dispatched.map((e) => e.message.id)).toEqual(['a', 'b', 'c']);
    expect(bus.dispatched[0].last(ReceivedStamp).transportName).toBe('async');
    expect(handled).toEqual(['a', 'b', 'c']);
    expect(ack).toHaveBeenCalledTimes(3);
    expect(ack.mock.calls.map(([envelope]) => envelope)).toEqual(bus.dispatched);
    expect(reject).not.toHaveBeenCalled();
    expect(await transport.getMessageCount()).toBe(0);
  });

  it('calls onError then rejects the original envelope when dispatch throws', async () => {
    await sendAll(transport, ['bad']);
    let failures = 0;
    const bus = recordingBus(() => {
      failures += 1;
      return failures === 1;
    });
    const events = [];
    const originalReject = transport.reject.bind(transport);
    jest.spyOn(transport, 'reject').mockImplementation(async (envelope) => {
      events.push(['reject', envelope]);
      return originalReject(envelope);
    });
    const ack = jest.spyOn(transport, 'ack');

    const stats = await new Worker(transport, bus, { maxMessages: 2 }, {
      onError: (envelope, error) => events.push(['onError', envelope, error]),
      onHandled: (envelope) => events.push(['onHandled', envelope]),
    }).run(new AbortController().signal);

    expect(stats.processed).toBe(2);
    const [first, second] = bus.dispatched;
    expect(events[0][0]).toBe('onError');
    expect(events[0][1]).toBe(first);
    expect(events[0][2]).toBeInstanceOf(Error);
    expect(events[0][2].message).toBe('failed bad');
    expect(events[1]).toEqual(['reject', first]);
    expect(events[2]).toEqual(['onHandled', second]);
    expect(second.last(RedeliveryStamp).retryCount).toBe(1);
    expect(ack).toHaveBeenCalledTimes(1);
    expect(ack).toHaveBeenCalledWith(second);
    expect(await transport.getMessageCount()).toBe(0);
  });

  it('stops after maxMessages, leaving the rest queued', async () => {
    await sendAll(transport, ['1', '2', '3', '4', '5']);
    const stats = await new Worker(transport, recordingBus(), { maxMessages: 2 }).run(
      new AbortController().signal,
    );
    expect(stats.processed).toBe(2);
    expect(await transport.getMessageCount()).toBe(3);
  });

  it('stops when the external signal aborts', async () => {
    const controller = new AbortController();
    const bus = recordingBus();
    const running = new Worker(transport, bus).run(controller.signal);
    await sendAll(transport, ['x']);
    while (bus.dispatched.length === 0) {
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    controller.abort();
    await expect(running).resolves.toEqual({ processed: 1 });
  });

  it('returns immediately for an already aborted signal', async () => {
    await sendAll(transport, ['x']);
    const controller = new AbortController();
    controller.abort();
    const stats = await new Worker(transport, recordingBus()).run(controller.signal);
    expect(stats.processed).toBe(0);
    expect(await transport.getMessageCount()).toBe(1);
  });

  it('stops after maxRuntimeMs', async () => {
    const start = Date.now();
    const stats = await new Worker(transport, recordingBus(), { maxRuntimeMs: 60 }).run(
      new AbortController().signal,
    );
    expect(stats.processed).toBe(0);
    expect(Date.now() - start).toBeGreaterThanOrEqual(50);
  });

  it('stops after a message once RSS exceeds maxMemoryBytes', async () => {
    await sendAll(transport, ['1', '2']);
    const stats = await new Worker(transport, recordingBus(), { maxMemoryBytes: 1 }).run(
      new AbortController().signal,
    );
    expect(stats.processed).toBe(1);
    expect(await transport.getMessageCount()).toBe(1);
  });

  it('propagates a failing ack without rejecting, leaving the message in flight', async () => {
    await sendAll(transport, ['x']);
    const ackError = new Error('ack failed');
    const receiver = {
      get: (signal) => transport.get(signal),
      ack: jest.fn(async () => {
        throw ackError;
      }),
      reject: jest.fn(async () => undefined),
    };

    await expect(new Worker(receiver, recordingBus()).run(new AbortController().signal)).rejects.toBe(
      ackError,
    );
    expect(receiver.reject).not.toHaveBeenCalled();
    expect(await transport.getMessageCount()).toBe(0);
    // settle it so afterEach's close() does not wait forever
    const [delivered] = receiver.ack.mock.calls[0];
    expect(delivered.last(TransportMessageIdStamp)).toBeDefined();
    await transport.ack(delivered);
  });

  it('never closes the receiver', async () => {
    await sendAll(transport, ['x']);
    const close = jest.spyOn(transport, 'close');
    await new Worker(transport, recordingBus(), { maxMessages: 1 }).run(new AbortController().signal);
    expect(close).not.toHaveBeenCalled();
    close.mockRestore();
  });
});
