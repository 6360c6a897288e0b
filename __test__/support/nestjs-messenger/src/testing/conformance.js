'use strict';

// Transport conformance suite. Runs under Jest (or a Jest-compatible runner): it uses
// the describe/it/beforeEach/afterEach/expect globals and sets no timeouts of its own.

const { ok } = require('node:assert');
const { Envelope } = require('../envelope');
const {
  DelayStamp,
  ReceivedStamp,
  RedeliveryStamp,
  TransportMessageIdStamp,
} = require('../stamps');
const { isListableReceiver, isMessageRetriever } = require('../capabilities');
const { sleep } = require('../sleep');
const { ConformanceMessage } = require('./conformance-message');

/**
 * First envelope yielded by `transport.get()` within `ms` milliseconds, or undefined.
 * Uses its own AbortController; always aborts and clears its timer afterwards.
 */
async function receiveWithin(transport, ms) {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), ms);
  if (typeof timer.unref === 'function') {
    timer.unref();
  }
  try {
    for await (const envelope of transport.get(controller.signal)) {
      return envelope;
    }
    return undefined;
  } finally {
    controller.abort();
    clearTimeout(timer);
  }
}

/** One envelope received within 1000 ms (asserted). */
async function receiveOne(transport) {
  const envelope = await receiveWithin(transport, 1000);
  ok(envelope !== undefined, 'expected the transport to deliver a message within 1000 ms');
  return envelope;
}

/** The envelope's transport id as a string (the stamp is asserted). */
function transportMessageId(envelope) {
  const stamp = envelope.last(TransportMessageIdStamp);
  ok(stamp !== undefined, 'expected the envelope to carry a TransportMessageIdStamp');
  return String(stamp.id);
}

/** Drains an async iterable into an array. */
async function collect(iterable) {
  const items = [];
  for await (const item of iterable) {
    items.push(item);
  }
  return items;
}

function envelopeOf(id, payload) {
  return new Envelope(new ConformanceMessage(id, payload));
}

/**
 * Registers the transport conformance scenarios (14, +1 with `delayedDelivery`,
 * +2 with `listable`) inside one `describe("<name> (transport conformance)")`.
 * A fresh transport is created before each scenario and cleaned up after it.
 */
function runTransportConformanceTests(options) {
  const { name, createTransport, capabilities } = options;

  describe(`${name} (transport conformance)`, () => {
    let harness;
    let transport;

    beforeEach(async () => {
      harness = await createTransport();
      transport = harness.transport;
    });

    afterEach(async () => {
      const current = harness;
      harness = undefined;
      transport = undefined;
      if (current !== undefined) {
        await current.cleanup();
      }
    });

    it('round-trips a message, tagging it with ReceivedStamp and TransportMessageIdStamp', async () => {
      const message = new ConformanceMessage('m-1', 'hello');
      await transport.send(new Envelope(message));

      const received = await receiveOne(transport);
      expect(received.message).toStrictEqual(message);
      expect(received.last(ReceivedStamp)).toBeDefined();
      expect(received.last(TransportMessageIdStamp)).toBeDefined();

      await transport.ack(received);
    });

    it('does not redeliver a message once it has been acked', async () => {
      await transport.send(envelopeOf('m-1'));
      const received = await receiveOne(transport);
      await transport.ack(received);

      expect(await receiveWithin(transport, 40)).toBeUndefined();
    });

    it('redelivers a rejected message with an incremented RedeliveryStamp', async () => {
      await transport.send(envelopeOf('m-1'));

      const first = await receiveOne(transport);
      expect(first.last(RedeliveryStamp)).toBeUndefined();
      await transport.reject(first);

      const second = await receiveOne(transport);
      expect(second.last(RedeliveryStamp)?.retryCount).toBe(1);
      await transport.reject(second);

      const third = await receiveOne(transport);
      expect(third.last(RedeliveryStamp)?.retryCount).toBe(2);
      await transport.ack(third);
    });

    it('treats a second ack of the same message as a no-op', async () => {
      await transport.send(envelopeOf('m-1'));
      const received = await receiveOne(transport);

      await transport.ack(received);
      await transport.ack(received);

      expect(await receiveWithin(transport, 40)).toBeUndefined();
    });

    it('treats a second reject of the same message as a no-op (single redelivery)', async () => {
      await transport.send(envelopeOf('m-1'));
      const received = await receiveOne(transport);

      await transport.reject(received);
      await transport.reject(received);

      const copy = await receiveOne(transport);
      expect(copy.last(RedeliveryStamp)?.retryCount).toBe(1);
      await transport.ack(copy);

      expect(await receiveWithin(transport, 40)).toBeUndefined();
    });

    it('treats a reject of a never-delivered envelope as a no-op (publishes no copy)', async () => {
      const sent = await transport.send(envelopeOf('m-1'));

      await transport.reject(sent);

      const received = await receiveOne(transport);
      expect(received.last(RedeliveryStamp)).toBeUndefined();
      await transport.ack(received);

      expect(await receiveWithin(transport, 40)).toBeUndefined();
    });

    it('treats a reject after an ack of the same delivery as a no-op (no redelivery)', async () => {
      await transport.send(envelopeOf('m-1'));
      const received = await receiveOne(transport);

      await transport.ack(received);
      await transport.reject(received);

      expect(await receiveWithin(transport, 40)).toBeUndefined();
    });

    it('treats an ack after a reject as a no-op (the redelivered copy survives)', async () => {
      await transport.send(envelopeOf('m-1'));
      const original = await receiveOne(transport);

      await transport.reject(original);
      await transport.ack(original);

      const copy = await receiveOne(transport);
      expect(copy.last(RedeliveryStamp)?.retryCount).toBe(1);
      await transport.ack(copy);

      expect(await receiveWithin(transport, 40)).toBeUndefined();
    });

    it('ends the get() iterator cleanly when the AbortSignal is aborted', async () => {
      await transport.send(envelopeOf('m-1'));
      const controller = new AbortController();
      const seen = [];

      const loop = (async () => {
        for await (const envelope of transport.get(controller.signal)) {
          seen.push(envelope);
          await transport.ack(envelope);
          controller.abort();
        }
      })();

      await expect(loop).resolves.toBeUndefined();
      expect(seen).toHaveLength(1);
    });

    it('waits for in-flight messages to settle before close() resolves', async () => {
      await transport.send(envelopeOf('slow'));
      const controller = new AbortController();
      const order = [];
      let processing = false;

      const consumer = (async () => {
        for await (const envelope of transport.get(controller.signal)) {
          processing = true;
          await sleep(50);
          order.push('processed');
          await transport.ack(envelope);
          controller.abort();
        }
      })();

      while (!processing) {
        await sleep(5);
      }
      await transport.close();
      order.push('closed');
      await consumer;

      expect(order).toEqual(['processed', 'closed']);
    });

    it('waits for an in-flight reject to settle before close() resolves', async () => {
      await transport.send(envelopeOf('slow'));
      const controller = new AbortController();
      const order = [];
      let processing = false;

      const consumer = (async () => {
        for await (const envelope of transport.get(controller.signal)) {
          processing = true;
          await sleep(50);
          await transport.reject(envelope);
          order.push('rejected');
          controller.abort();
        }
      })();

      while (!processing) {
        await sleep(5);
      }
      await transport.close();
      order.push('closed');
      await consumer;

      expect(order).toEqual(['rejected', 'closed']);
    });

    it('round-trips a large (1 MB) payload intact', async () => {
      const payload = 'x'.repeat(1024 * 1024);
      await transport.send(envelopeOf('big', payload));

      const received = await receiveOne(transport);
      expect(received.message.payload).toHaveLength(1048576);
      await transport.ack(received);
    });

    it('round-trips a payload with special characters intact', async () => {
      const payload =
        'party \u{1F389} with "quotes" then a\nnewline, a\ttab, a back\\slash and \u65E5\u672C\u8A9E text';
      await transport.send(envelopeOf('special', payload));

      const received = await receiveOne(transport);
      expect(received.message.payload).toBe(payload);
      await transport.ack(received);
    });

    it('does not deliver the same message to two concurrent consumers', async () => {
      const total = 20;
      for (let i = 0; i < total; i += 1) {
        await transport.send(envelopeOf(`m-${i}`));
      }

      const controller = new AbortController();
      const ids = [];
      const consume = async () => {
        for await (const envelope of transport.get(controller.signal)) {
          ids.push(transportMessageId(envelope));
          await transport.ack(envelope);
          if (ids.length >= total) {
            controller.abort();
          }
        }
      };

      await Promise.all([consume(), consume()]);

      expect(ids).toHaveLength(total);
      expect(new Set(ids).size).toBe(total);
    });

    if (capabilities.delayedDelivery) {
      it('honors a DelayStamp before delivering the message', async () => {
        const start = Date.now();
        await transport.send(envelopeOf('delayed').with(new DelayStamp(150)));

        const received = await receiveOne(transport);
        const elapsed = Date.now() - start;
        expect(elapsed).toBeGreaterThanOrEqual(100);
        expect(elapsed).toBeLessThanOrEqual(350);
        await transport.ack(received);
      });
    }

    if (capabilities.listable) {
      it('removes a message located via find() from list() once acked (ack deletes)', async () => {
        ok(isListableReceiver(transport), 'expected the transport to implement list()');
        ok(isMessageRetriever(transport), 'expected the transport to implement find()');

        await transport.send(envelopeOf('m-1'));
        const [listed] = await collect(transport.list());
        ok(listed !== undefined, 'expected list() to return the sent message');

        const found = await transport.find(transportMessageId(listed));
        expect(found).toBeDefined();
        await transport.ack(found);

        expect(await collect(transport.list())).toHaveLength(0);
      });

      it('redelivers a rejected message under a new id, leaving no stale original in list()', async () => {
        ok(isListableReceiver(transport), 'expected the transport to implement list()');

        await transport.send(envelopeOf('m-1'));
        const original = await receiveOne(transport);
        const originalId = transportMessageId(original);
        await transport.reject(original);

        const listed = await collect(transport.list());
        expect(listed).toHaveLength(1);
        expect(transportMessageId(listed[0])).not.toBe(originalId);
        expect(listed[0].last(RedeliveryStamp)?.retryCount).toBe(1);

        const copy = await receiveOne(transport);
        await transport.ack(copy);
      });
    }
  });
}

module.exports = { runTransportConformanceTests };
