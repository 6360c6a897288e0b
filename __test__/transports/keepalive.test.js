'use strict';

// Every socket the addon opens itself (Redis: the command, blocking and send connections) has
// TCP keepalive, so that a server gone silent (a dropped NAT entry, a host gone without a reset)
// is noticed on an idle connection too (see the blackhole fault scenario). SQL connections are
// opened by sqlx, which sets no socket option, and the addon touches no socket it did not open
// (app-sockets.test.js): their waits are bounded by statement bounds and liveness checks. Read
// from outside with `ss`: the kernel shows a keepalive timer on an idle established socket only
// when SO_KEEPALIVE is set. A child process of its own, so that every connection it holds to
// the server is a transport's (the test process has drivers of its own).

const { redis } = require('../support/engines');
const { runChild } = require('../support/child');

/** The child's established TCP connections to `port`, as `ss` prints them. */
const SCRIPT = `
  const { execFileSync } = require('node:child_process');
  (async () => {
    const t = new Transport(transportOptions());
    await t.setup();
    await t.send(new Envelope(new M('k')));
    const controller = new AbortController();
    for await (const envelope of t.get(controller.signal)) {
      await t.ack(envelope);
      break;
    }
    // Idle a moment (PostgreSQL: on its LISTEN connection), then let every connection settle
    // (no unacknowledged data: the timer shown is keepalive's).
    const idle = new AbortController();
    setTimeout(() => idle.abort(), 300);
    for await (const envelope of t.get(idle.signal)) throw new Error('unexpected ' + envelope);
    await new Promise((resolve) => setTimeout(resolve, 300));
    const table = execFileSync('ss', ['-tnpoH', 'state', 'established', 'dport', '=', ':' + process.env.PORT], {
      encoding: 'utf8',
    });
    const mine = table.split('\\n').filter((line) => line.includes('pid=' + process.pid + ','));
    require('node:fs').writeSync(3, JSON.stringify(mine));
    await t.close();
  })().catch((error) => {
    console.error(error);
    process.exitCode = 1;
  });
`;

describe.each([['redis', redis, 1]])('%s: TCP keepalive', (_name, engine, atLeast) => {
  let target;

  beforeAll(() => engine.requireServer());

  afterAll(async () => {
    if (target) await engine.removeTarget(target, engine.dsn);
  });

  it(`is on for every connection a transport opens (at least ${atLeast} here)`, () => {
    target = engine.target('keepalive');
    const port = new URL(engine.dsn).port || String(engine.defaultPort);
    const result = runChild(SCRIPT, {
      timeout: 20000,
      fd3: true,
      env: { KIND: engine.kind, DSN: engine.dsn, TARGET: JSON.stringify(target), PORT: port },
    });
    expect(result.stderr).toBe('');
    expect(result.status).toBe(0);
    const connections = JSON.parse(result.report);
    expect(connections.length).toBeGreaterThanOrEqual(atLeast);
    for (const line of connections) expect(line).toMatch(/timer:\(keepalive,/);
  }, 30000);
});
