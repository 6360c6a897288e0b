'use strict';

// Sends settle through one native callback per transport (src/queue/completions.rs, lib/transports/send-pipe.js)
// rather than a native promise each. What a promise gave for free must still hold, and only a
// process of its own shows it: a send that is all a process has left keeps it alive until the
// send settles, and nothing keeps it alive after (no close() here: the connections are the
// addon's own and hold no event loop).

const { postgres, mysql, redis } = require('../support/engines');
const { runChild, killedBy } = require('../support/child');
const { SqlTransport, RedisStreamsTransport } = require('../..');

/** How many messages `target` holds, read by a transport of this process. */
async function countOf(engine, target) {
  const Transport = engine.kind === 'redis' ? RedisStreamsTransport : SqlTransport;
  const transport = new Transport({ dsn: engine.dsn, ...target });
  try {
    return await transport.getMessageCount();
  } finally {
    await transport.close();
  }
}

const SCRIPT = `
  const t = new Transport(transportOptions());
  // Not awaited, and nothing else pending: only the send can keep this process running.
  t.send(new Envelope(new M('last'))).then(
    (envelope) => require('node:fs').writeSync(3, JSON.stringify({ sent: envelope instanceof Envelope })),
    (error) => require('node:fs').writeSync(3, JSON.stringify({ error: String(error) })),
  );
`;

// Sends made after others went out over a connection's round trips: on a single Redis node
// these take the send connection served on the JavaScript thread (src/direct/sends.rs),
// whose socket is watched by the event loop but must not keep it alive by itself.
const AFTER_OTHERS = `
  const t = new Transport(transportOptions());
  (async () => {
    for (let n = 0; n < 40; n += 1) {
      await t.send(new Envelope(new M('warm-' + n)));
      // Lets the send connection, opened in the background after the first send, come up.
      if (n === 0) await new Promise((resolve) => setTimeout(resolve, 100));
    }
    t.send(new Envelope(new M('last'))).then(
      (envelope) => require('node:fs').writeSync(3, JSON.stringify({ sent: envelope instanceof Envelope })),
      (error) => require('node:fs').writeSync(3, JSON.stringify({ error: String(error) })),
    );
  })();
`;

describe.each([
  ['postgres', postgres],
  ['mariadb', mysql],
  ['redis', redis],
])('%s: a send in flight', (_name, engine) => {
  const targets = [];

  beforeAll(() => engine.requireServer());

  afterAll(async () => {
    await Promise.all(targets.map((target) => engine.removeTarget(target, engine.dsn)));
  });

  /** Runs `script` in a child on a fresh target: it must exit by itself with its last send settled. */
  async function expectSettledThenExit(script, name, stored) {
    const target = engine.target(name);
    targets.push(target);
    const result = runChild(script, {
      timeout: 20000,
      fd3: true,
      env: { KIND: engine.kind, DSN: engine.dsn, TARGET: JSON.stringify(target) },
    });
    expect(result.stderr).toBe('');
    expect(killedBy(result)).toBeNull();
    expect(result.status).toBe(0);
    expect(JSON.parse(result.report || '{}')).toEqual({ sent: true });
    expect(await countOf(engine, target)).toBe(stored);
  }

  it('keeps the process alive until it settles, and not after', () => expectSettledThenExit(SCRIPT, 'settling', 1), 30000);

  it('made after others, keeps the process alive until it settles, and not after', () =>
    expectSettledThenExit(AFTER_OTHERS, 'settling-after', 41), 30000);
});
