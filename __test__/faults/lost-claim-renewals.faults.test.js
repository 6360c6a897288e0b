'use strict';

// A PostgreSQL claim whose reply is lost is released by the consumer's next claim: the rows of
// the queue stamped with the lost claim's residue in the time it can have run in (see
// src/engines/sql/claim_doubt.rs). Renewals stamp `delivered_at` too. A renewal stamped in that window
// with the same residue belongs to a message a handler is still running: releasing it hands the
// message to a second consumer while the first still works on it.
//
// The scenario: handlers that never finish hold one message each, their claims renewed every
// third of their lease, while another consumer of the same process (same DSN, through the
// proxy) has claim after claim cut after the server ran it. Every lost claim is released by
// that consumer's next claim. Were renewals stamped at plain now(), each release would take a
// live renewal with a chance of about HOLDERS / 100 (1 in 100 per held message, the residue's
// span for a lease of a second and more): over CUTS releases, all but surely once.
//
// The claimer's lease is long: it never takes a held message over at its lease, only one that
// was released. With the holders' lease of a second, both have the same residue span (a
// hundred milliseconds for every lease of a second and more); with the holders' 200 ms lease
// the spans differ, and a stamp at plain now() of theirs could carry any residue of the
// claimer's span. Were renewals stamped so, a release there would take live renewals when the
// claimer's nonce is one of the residues the holders' span falls on, hence more cuts.

const { setMaxListeners } = require('node:events');
const { serverBehindProxy } = require('./support/behind-proxy');
const { uniqueQueue } = require('./support/engines');
const { faultEnvelope } = require('./support/messages');
const { settleWithin, sleep } = require('./support/account');

/** Consumers whose handlers never finish during the test, one held message each. */
const HOLDERS = 20;
/** The claimer's lease: long enough that it takes no held message at its lease. */
const CLAIMER_LEASE_MS = 60_000;

/**
 * A PostgreSQL Bind message with `count` parameters: a claim binds five (queue, lease, limit,
 * nonce, span); the idle peek binds two and the lost-claim release six. Renewals and
 * hand-backs are sent as simple queries or with their Parse, so they never start with a Bind.
 */
function bindWithParameters(count) {
  return (chunk) => {
    if (chunk[0] !== 0x42 || chunk.length < 9) return false;
    let at = chunk.indexOf(0, 5) + 1; // after the portal's name
    at = chunk.indexOf(0, at) + 1; // after the statement's name
    if (at <= 0 || at + 2 > chunk.length) return false;
    const formats = chunk.readInt16BE(at);
    at += 2 + 2 * formats;
    return at + 2 <= chunk.length && chunk.readInt16BE(at) === count;
  };
}
const CLAIM_BIND = bindWithParameters(5);

/** Waits until `done()` or the deadline; says whether it got there. */
async function until(done, ms) {
  const deadline = Date.now() + ms;
  while (!done() && Date.now() < deadline) await sleep(20);
  return done();
}

describe('postgres: the release of a lost claim and live renewals', () => {
  const f = serverBehindProxy('postgres', { connectTimeoutMs: 2000 });

  /**
   * HOLDERS handlers hold a message each (their claims renewed every third of `holderLeaseMs`)
   * while `cuts` claims of another consumer of the process are lost after the server ran them.
   */
  async function lostClaimsAmongRenewals({ holderLeaseMs, cuts }) {
    const queue = uniqueQueue('postgres', 'renewals');
    const producer = f.open({ dsn: f.server.dsn, queue });
    await producer.setup();

    const held = new Map(); // key → holder
    const taken = []; // keys the claimer got
    const errors = [];
    let finish;
    const finished = new Promise((resolve) => {
      finish = resolve;
    });
    const controller = new AbortController();
    // One abort listener per get() loop.
    setMaxListeners(HOLDERS + 2, controller.signal);
    const loops = [];
    /** Runs `transport`'s get() loop, `handle` called for each message. */
    const consume = (transport, handle) =>
      loops.push(
        (async () => {
          for await (const envelope of transport.get(controller.signal)) {
            await handle(envelope.message.key);
            await transport.ack(envelope);
          }
        })().catch((error) => errors.push(error)),
      );

    try {
      // One at a time, each idle when its message is sent: a busy holder claims no more.
      for (let h = 0; h < HOLDERS; h += 1) {
        consume(f.open({ dsn: f.viaProxy(), queue, leaseMs: holderLeaseMs }), async (key) => {
          held.set(key, h);
          await finished;
        });
        await producer.send(faultEnvelope(`h:${h}`, h));
        await until(() => held.has(`h:${h}`), 10_000);
      }
      expect([...held.values()].sort((a, b) => a - b)).toEqual(Array.from({ length: HOLDERS }, (_, h) => h));

      consume(f.open({ dsn: f.viaProxy(), queue, leaseMs: CLAIMER_LEASE_MS }), async (key) => {
        taken.push(key);
      });
      // Idle on LISTEN after a first empty claim: its next claim is the one a send wakes it for.
      await sleep(1000);

      let lost = 0;
      for (let k = 0; k < cuts; k += 1) {
        const cut = f.proxy.cutAfter(CLAIM_BIND);
        await producer.send(faultEnvelope(`c:${k}`, k));
        const { value } = await settleWithin(cut, 5000);
        if (value?.replied) lost += 1;
        await until(() => taken.includes(`c:${k}`), 5000);
        // Renewals go on between two lost claims.
        await sleep(100);
      }
      const stolen = taken.filter((key) => held.has(key));
      console.log(
        `[lost claim vs renewals, holders' lease ${holderLeaseMs} ms] ` +
          `${lost} of ${cuts} claims lost after the server ran them; ` +
          `held messages taken by the claimer: ${stolen.length ? stolen.join(', ') : 'none'}`,
      );

      expect(errors).toEqual([]);
      expect(lost).toBeGreaterThanOrEqual(cuts / 2);
      expect(stolen).toEqual([]);
      for (let k = 0; k < cuts; k += 1) expect(taken).toContain(`c:${k}`);
    } finally {
      finish();
      controller.abort();
      await settleWithin(Promise.all(loops), 10_000);
    }
  }

  it('a renewal stamped while a claim is in doubt is not released: no running handler has its message taken by another consumer', async () => {
    await lostClaimsAmongRenewals({ holderLeaseMs: 1000, cuts: 60 });
  }, 180_000);

  it("with a lease whose residue span is not the claimer's, renewals are still not released", async () => {
    await lostClaimsAmongRenewals({ holderLeaseMs: 200, cuts: 120 });
  }, 180_000);
});
