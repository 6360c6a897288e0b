'use strict';

// transport.stats() on every engine: a synchronous snapshot whose every counter
// moves when, and only when, what it counts happens: sends, claims and their size and
// duration, buffered and in-flight messages, acks (and the write-behind ones pending), rejects,
// poison removals, the last error (with no password in it). Reconnects are shown by the fault
// suite (backend-kill), where connections really drop.

const { Envelope, JsonSerializer } = require('@schally/nestjs-messenger');
const { postgres, mysql, sqlite, redis } = require('../support/engines');
const { closedPort } = require('../support/ports');
const { TestMessage, envelopeOf, serializer, settleWithin } = require('../support/transport-helpers');
const { engineTransports } = require('../support/engine-transports');

const ZERO = {
  buffered: 0,
  inFlight: 0,
  pendingAcks: 0,
  ackWriteFailingMs: null,
  sent: 0,
  claims: 0,
  claimed: 0,
  emptyClaims: 0,
  sharedPolls: 0,
  acked: 0,
  rejected: 0,
  poisonRemoved: 0,
  lastClaimSize: 0,
  lastClaimMs: 0,
  reconnects: 0,
  staleSettles: 0,
  trackedIds: 0,
  lastError: null,
};

class Unregistered {
  constructor(id) {
    this.id = id;
  }
}

describe.each([postgres, mysql, sqlite, redis])('$name: stats()', (engine) => {
  const transports = engineTransports(engine, 'st');
  const open = (options) => transports.open(options);

  it('starts at zero, with every field present', () => {
    expect(open().stats()).toEqual(ZERO);
  });

  it('counts sends, claims, buffered and in-flight messages, acks and rejects', async () => {
    const t = open();
    for (const id of ['a', 'b', 'c']) await t.send(envelopeOf(id));
    expect(t.stats()).toMatchObject({ sent: 3, claims: 0, claimed: 0 });

    const controller = new AbortController();
    const loop = t.get(controller.signal);
    const first = (await loop.next()).value;
    const claimedOnce = t.stats();
    expect(claimedOnce).toMatchObject({ claims: 1, claimed: 3, lastClaimSize: 3, buffered: 2, inFlight: 1 });
    expect(claimedOnce.lastClaimMs).toBeGreaterThan(0);

    const second = (await loop.next()).value;
    expect(t.stats()).toMatchObject({ buffered: 1, inFlight: 2 });
    await t.ack(first);
    await t.reject(second);
    expect(t.stats()).toMatchObject({ acked: 1, rejected: 1, inFlight: 0 });
    controller.abort();
    await loop.return();
    expect(t.stats().buffered).toBe(0);
    // The write-behind ack is written by the time a count is read.
    await t.getMessageCount();
    expect(t.stats().pendingAcks).toBe(0);
    expect(t.stats().lastError).toBeNull();
  }, 15000);

  it('claims grow from 16 rows by more than 4x and at most 16x a claim for a fast consumer', async () => {
    const t = open();
    const count = 2000;
    for (let start = 0; start < count; start += 200) {
      const sends = [];
      for (let i = start; i < start + 200; i += 1) sends.push(t.send(envelopeOf(`g-${i}`)));
      await Promise.all(sends);
    }
    const sizes = [];
    const controller = new AbortController();
    let received = 0;
    for await (const envelope of t.get(controller.signal)) {
      await t.ack(envelope);
      const { claims, lastClaimSize } = t.stats();
      if (claims > sizes.length) sizes.push(lastClaimSize);
      received += 1;
      if (received === count) break;
    }
    expect(sizes[0]).toBeLessThanOrEqual(16);
    const steps = sizes.slice(1).map((size, i) => size / sizes[i]);
    expect(Math.max(...steps)).toBeLessThanOrEqual(16);
    // A no-op handler's pace fits a full 1,024 rows into a claim's 100 ms of work: growing at
    // 4x a claim at most took three claims to get there from 16.
    expect(Math.max(...steps)).toBeGreaterThan(4);
  }, 30000);

  it('counts acks in commit mode once written', async () => {
    const t = open({ ackMode: 'commit' });
    await t.send(envelopeOf('x'));
    const controller = new AbortController();
    const loop = t.get(controller.signal);
    const { value } = await loop.next();
    await t.ack(value);
    expect(t.stats()).toMatchObject({ acked: 1, pendingAcks: 0, inFlight: 0 });
    controller.abort();
    await loop.return();
  }, 15000);

  it('counts an undecodable message removed by get() as poison', async () => {
    const writer = open({ serializer: new JsonSerializer([TestMessage, Unregistered]) });
    const reader = transports.track(new engine.Transport({ dsn: transports.dsn, serializer: serializer(), ...transports.lastTarget }));
    await writer.send(new Envelope(new Unregistered('p')));
    await writer.send(envelopeOf('good'));

    const controller = new AbortController();
    const loop = reader.get(controller.signal);
    const { value } = await loop.next();
    expect(value.message.id).toBe('good');
    expect(reader.stats()).toMatchObject({ poisonRemoved: 1, claimed: 2 });
    await reader.ack(value);
    controller.abort();
    await loop.return();
  }, 15000);

  it('keeps the last error, with no password in it', async () => {
    const secret = 'st4ts-s3cret';
    const unreachable =
      engine.name === 'sqlite'
        ? 'sqlite:///nonexistent-nmn-dir/nested/queue.db'
        : engine.dsnWith({ port: await closedPort(), user: 'u', password: secret });
    const t = transports.track(
      new engine.Transport({ dsn: unreachable, serializer: serializer(), connectTimeoutMs: 1000, ...engine.target('st') }),
    );
    const sent = await settleWithin(t.send(envelopeOf('lost')), 10000);
    expect(sent.error).toBeDefined();
    const { lastError, sent: count } = t.stats();
    expect(count).toBe(0);
    expect(lastError).toEqual(expect.any(String));
    expect(lastError).toContain(sent.error.message.slice(0, 20));
    expect(lastError).not.toContain(secret);
  }, 15000);

  it('is cheap: a synchronous read, no I/O (works after close)', async () => {
    const t = open();
    await t.send(envelopeOf('y'));
    await t.close();
    expect(t.stats()).toMatchObject({ sent: 1, buffered: 0, inFlight: 0 });
  });
});
