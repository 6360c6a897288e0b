'use strict';

// The addon's I/O runs on one tokio worker unless NESTJS_MESSENGER_NATIVE_WORKER_THREADS says
// otherwise. Counted from outside the runtime: the child's threads by name, in /proc, after a
// round trip that needs the runtime (a send on Redis).

const { redis } = require('../support/engines');
const { runChild } = require('../support/child');

const SCRIPT = `
  (async () => {
    const t = new Transport(transportOptions());
    await t.send(new Envelope(new M('runtime')));
    const fs = require('node:fs');
    const names = fs.readdirSync('/proc/self/task').map((tid) =>
      fs.readFileSync('/proc/self/task/' + tid + '/comm', 'utf8').trim(),
    );
    fs.writeSync(3, JSON.stringify(names));
    await t.close();
  })().catch((error) => {
    console.error(error);
    process.exitCode = 1;
  });
`;

describe('the tokio runtime', () => {
  let target;

  beforeAll(() => redis.requireServer());

  afterAll(async () => {
    if (target) await redis.removeTarget(target, redis.dsn);
  });

  const workersOf = (variable) => {
    target ??= redis.target('runtime');
    const env = { KIND: redis.kind, DSN: redis.dsn, TARGET: JSON.stringify(target) };
    if (variable !== undefined) env.NESTJS_MESSENGER_NATIVE_WORKER_THREADS = variable;
    const result = runChild(SCRIPT, { timeout: 20000, fd3: true, env });
    expect(result.stderr).toBe('');
    expect(result.status).toBe(0);
    return JSON.parse(result.report).filter((name) => name === 'messenger-io').length;
  };

  it('has one worker by default', () => {
    expect(workersOf(undefined)).toBe(1);
  }, 30000);

  it('has as many workers as NESTJS_MESSENGER_NATIVE_WORKER_THREADS asks', () => {
    expect(workersOf('3')).toBe(3);
  }, 30000);

  it('keeps the default for a value that is not a positive integer', () => {
    expect(workersOf('0')).toBe(1);
  }, 30000);
});
