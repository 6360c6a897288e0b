'use strict';

// Consumers that stop waiting just as a send hands its message to them (see docs/semantics.md,
// "Hand-off"): the sender takes back what it could not hand over and releases it at once.

const { envelopeOf, idOf, receiveWithin } = require('./transport-helpers');

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * `rounds` times: a consumer from `open()` idles, then its get() is aborted just as `producer`
 * sends (the INSERT takes milliseconds, so the row comes back to the sender); then a last
 * consumer takes whatever is claimable within a second. The ids sent and the ids received.
 * @param {() => object} open a new consumer transport on the producer's queue
 * @param {object} producer
 * @returns {Promise<{ sent: string[], received: string[] }>}
 */
async function leaveAsHandedOver(open, producer, rounds = 12) {
  const sent = [];
  const received = [];
  for (let round = 0; round < rounds; round += 1) {
    const consumer = open();
    const controller = new AbortController();
    const loop = (async () => {
      const got = [];
      for await (const envelope of consumer.get(controller.signal)) got.push(envelope);
      return got;
    })();
    await sleep(200);
    const sending = producer.send(envelopeOf(`leaving-${round}`));
    setImmediate(() => controller.abort());
    sent.push(idOf(await sending));
    for (const envelope of await loop) {
      received.push(idOf(envelope));
      await consumer.ack(envelope);
    }
    await consumer.close();
  }
  // What no consumer took is claimable now (with a lease of an hour): another consumer gets it.
  const late = open();
  for (;;) {
    const got = await receiveWithin(late, 1000);
    if (got === undefined) break;
    received.push(idOf(got));
    await late.ack(got);
  }
  return { sent, received };
}

module.exports = { leaveAsHandedOver };
