'use strict';

// The send backlog is bounded: while the storage does not answer (its writes stalled by a lock
// or a pause the test holds), sends beyond `maxQueuedSends` are refused at once with a
// TransportError that says so and stores nothing; the sends that were accepted are stored once
// the stall ends, and nothing else is. Bad values of the two options are refused by name.

const { InvalidArgumentError, TransportError } = require('@schally/nestjs-messenger');
const { SqlTransport, RedisStreamsTransport } = require('../..');
const { sqlite } = require('../../bench/engines');
const { WRITE_STALLS } = require('../support/write-stalls');
const { sleep, settleWithin } = require('../faults/support/account');
const { jobSerializer, jobEnvelope } = require('../support/jobs');

const BACKLOG = 20;
const SENDS = 100;
/** How soon a refusal must come: at once, not after any write or timeout. */
const AT_ONCE_MS = 250;

describe.each(WRITE_STALLS)('$name: the send backlog while writes stall', (engine) => {
  it('refuses sends beyond maxQueuedSends at once and stores exactly the accepted ones', async () => {
    const setup = await engine.prepare();
    const Transport = engine.name === 'redis' ? RedisStreamsTransport : SqlTransport;
    const transport = new Transport({
      dsn: setup.dsn,
      ...setup.target,
      serializer: jobSerializer(),
      maxQueuedSends: BACKLOG,
    });
    let endStall;
    try {
      await transport.setup();
      // Connections up (and on Redis the direct send path open) before the stall.
      for (let n = 0; n < 3; n += 1) await transport.send(jobEnvelope(-1));
      endStall = await setup.stallWrites();
      const startedAt = Date.now();
      const outcomes = Array.from({ length: SENDS }, (_, n) =>
        transport.send(jobEnvelope(n)).then(
          () => ({ stored: true }),
          (error) => ({ error, ms: Date.now() - startedAt }),
        ),
      );
      await sleep(500);
      await endStall();
      endStall = undefined;
      const settled = await settleWithin(Promise.all(outcomes), 15_000);
      if (settled.timeout) throw new Error('sends did not settle within 15 s of the stall ending');
      const refused = settled.value.filter((o) => o.error !== undefined);
      const stored = settled.value.filter((o) => o.stored).length;
      expect({
        refusedNotAsBacklog: refused
          .filter((o) => !(o.error instanceof TransportError) || !/backlog is full/.test(o.error.message) || o.error.code !== 'E_BACKLOG_FULL')
          .map((o) => `${o.error.code}: ${o.error.message}`),
        refusedLate: refused.filter((o) => o.ms > AT_ONCE_MS).length,
        storedAtLeastTheBacklog: stored >= BACKLOG,
        someRefused: refused.length > 0,
        remaining: await setup.remaining(),
      }).toEqual({ refusedNotAsBacklog: [], refusedLate: 0, storedAtLeastTheBacklog: true, someRefused: true, remaining: stored + 3 });
    } finally {
      if (endStall) await endStall().catch(() => {});
      await transport.close().catch(() => {});
      await setup.cleanup();
    }
  }, 30_000);
});

describe('the send backlog options', () => {
  it.each([
    ['maxQueuedSends', 0],
    ['maxQueuedSends', 1.5],
    ['maxQueuedSends', '10'],
    ['maxQueuedSendBytes', -1],
    ['maxQueuedSendBytes', Number.POSITIVE_INFINITY],
  ])('refuses %s = %p by name', (option, value) => {
    for (const make of [
      () => new SqlTransport({ dsn: sqlite.temporaryDsn('nmn-backlog'), [option]: value }),
      () => new RedisStreamsTransport({ dsn: 'redis://127.0.0.1:6379', stream: 'messenger:backlog', [option]: value }),
    ]) {
      expect(make).toThrow(InvalidArgumentError);
      expect(make).toThrow(new RegExp(`Invalid ${option}`));
    }
  });
});
