'use strict';

// A pooled connection the server dropped while it sat idle (a restart, a failover, a NAT or
// proxy timing it out): the next send must not be written on it. The proxy resets every live
// connection while the transport is idle; its connections have been back in the pool for
// over a second by then.
//
// Expected (docs/reliability.md): the send after the reset is stored, once, with no error:
// a connection that sat in the pool for a second or more is pinged before it is handed out,
// and a dead one is replaced before anything is written. (Before: the send was written on the
// dead connection and failed with TransportConnectionError, its outcome unknown.)

const { serverBehindProxy } = require('./support/behind-proxy');
const { uniqueQueue, residue } = require('./support/engines');
const { faultEnvelope } = require('./support/messages');
const { settleWithin, sleep } = require('./support/account');

/** Longer than a kept connection's wait (1 s) plus the idle time after which one is pinged (1 s). */
const IDLE_MS = 2500;

describe.each(['postgres', 'mariadb'])('%s: a pooled connection reset while idle', (engine) => {
  const f = serverBehindProxy(engine, { connectTimeoutMs: 2000 });

  it('the next send is stored once, without an error', async () => {
    const queue = uniqueQueue(engine, 'idle_reset');
    const t = f.open({ dsn: f.viaProxy(), queue });
    await t.setup();
    await t.send(faultEnvelope('r:0', 0));
    await sleep(IDLE_MS);

    expect(f.proxy.cut()).toBeGreaterThan(0);
    const outcome = await settleWithin(t.send(faultEnvelope('r:1', 1)), 10_000);
    expect(outcome.timeout).toBeFalsy();
    expect(outcome.error?.message).toBeUndefined();

    const stored = await residue(engine, { dsn: f.server.dsn, queue });
    expect(stored.sort()).toEqual(['r:0', 'r:1']);
  }, 30_000);
});
