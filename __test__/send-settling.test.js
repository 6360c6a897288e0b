'use strict';

// Sends settle through one native callback per transport (src/completions.rs, lib/send-pipe.js)
// rather than a native promise each. What a promise gave for free must still hold, and only a
// process of its own shows it: a send that is all a process has left keeps it alive until the
// send settles, and nothing keeps it alive after (no close() here: the connections are the
// addon's own and hold no event loop).

const { postgres, mysql, redis } = require('./support/engines');
const { runChild } = require('./support/child');
const { SqlTransport, RedisStreamsTransport } = require('..');

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

describe.each([
  ['postgres', postgres],
  ['mariadb', mysql],
  ['redis', redis],
])('%s: a send in flight', (_name, engine) => {
  let target;

  beforeAll(() => engine.requireServer());

  afterAll(async () => {
    if (target) await engine.removeTarget(target, engine.dsn);
  });

  it('keeps the process alive until it settles, and not after', async () => {
    target = engine.target('settling');
    const result = runChild(SCRIPT, {
      timeout: 20000,
      fd3: true,
      env: { KIND: engine.kind, DSN: engine.dsn, TARGET: JSON.stringify(target) },
    });
    expect(result.stderr).toBe('');
    expect(result.signal).toBeNull();
    expect(result.status).toBe(0);
    expect(JSON.parse(result.report || '{}')).toEqual({ sent: true });
    expect(await countOf(engine, target)).toBe(1);
  }, 30000);
});
