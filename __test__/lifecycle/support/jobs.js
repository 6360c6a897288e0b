'use strict';

// The messages of the lifecycle tests that take a batch and then settle it late (in the test
// process or a child), and the taking itself.

const { Envelope, JsonSerializer } = require('@schally/nestjs-messenger');

class Job {
  constructor(n) {
    this.n = n;
  }
}

const jobSerializer = () => new JsonSerializer([Job]);

/** Sends jobs 0 to `count - 1` on `transport`, then takes them all with one get() loop; none is acked. */
async function sendThenTakeAll(transport, count) {
  for (let n = 0; n < count; n += 1) await transport.send(new Envelope(new Job(n)));
  const taken = [];
  const controller = new AbortController();
  for await (const envelope of transport.get(controller.signal)) {
    taken.push(envelope);
    if (taken.length === count) controller.abort();
  }
  return taken;
}

module.exports = { jobSerializer, sendThenTakeAll };
