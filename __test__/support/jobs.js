'use strict';

// Jobs: the numbered messages of the tests that count what is stored or taken (the send
// backlog, the lifecycle tests and their child processes), and a batch of them taken unacked.

const { Envelope, JsonSerializer } = require('@schally/nestjs-messenger');

class Job {
  constructor(n) {
    this.n = n;
  }
}

const jobSerializer = () => new JsonSerializer([Job]);

const jobEnvelope = (n) => new Envelope(new Job(n));

/** Sends jobs 0 to `count - 1` on `transport`, then takes them all with one get() loop; none is acked. */
async function sendThenTakeAll(transport, count) {
  for (let n = 0; n < count; n += 1) await transport.send(jobEnvelope(n));
  const taken = [];
  const controller = new AbortController();
  for await (const envelope of transport.get(controller.signal)) {
    taken.push(envelope);
    if (taken.length === count) controller.abort();
  }
  return taken;
}

module.exports = { jobSerializer, jobEnvelope, sendThenTakeAll };
