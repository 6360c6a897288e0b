'use strict';

// `doctor` on Redis, run as a child process: all checks pass on a stream the transport set up;
// the pending count is the group's; a missing stream or group, a wrong password, and on a
// local Redis Cluster a stream and delayed key in different slots each give their FAIL and
// exit 1.

const { RedisStreamsTransport } = require('../..');
const { redis } = require('../../bench/engines');
const { startRedisServer } = require('../support/redis-server');
const crypto = require('node:crypto');
const { startCluster, nodeCommand } = require('../../bench/redis-cluster');
const { envelopeOf, receiveUpTo, serializer } = require('../support/transport-helpers');
const { runCli, jsonOf, verdicts, detailOf } = require('./cli-support');

jest.setTimeout(30000);

const CHECKS = ['connect', 'server version', 'xautoclaim', 'clock', 'stream', 'group', 'pending', 'delayed'];
const streams = [];

/** A stream of its own, set up by the transport (stream and group made); removed after the file. */
async function transportStream(dsn = redis.dsn, options = {}) {
  const stream = redis.uniqueStream('doctor');
  streams.push({ dsn, keys: [stream, `${stream}:delayed`] });
  const t = new RedisStreamsTransport({ dsn, stream, serializer: serializer(), ackMode: 'commit', ...options });
  await t.setup();
  return { stream, t };
}

afterAll(async () => {
  for (const { dsn, keys } of streams.filter((s) => s.dsn === redis.dsn)) await redis.admin(dsn).del(keys);
});

describe('doctor on Redis', () => {
  test('every check passes on a stream the transport set up (exit 0, JSON shape)', async () => {
    const { stream, t } = await transportStream();
    await t.close();
    const run = await runCli(['doctor', '--dsn', redis.dsn, '--stream', stream, '--json']);
    const report = jsonOf(run);
    expect(report.checks.map((c) => c.name)).toEqual(CHECKS);
    expect(report.checks.filter((c) => c.status !== 'ok')).toEqual([]);
    expect(report.ok).toBe(true);
    expect(run.code).toBe(0);
    expect(detailOf(report, 'group')).toBe('messenger exists (0 consumers)');
    expect(detailOf(report, 'delayed')).toBe(`${stream}:delayed: no delayed messages`);
  });

  test('pending and delayed counts are the stream group\'s', async () => {
    const { stream, t } = await transportStream();
    const { DelayStamp } = require('@schally/nestjs-messenger');
    let held = [];
    try {
      for (let i = 0; i < 3; i += 1) await t.send(envelopeOf(`m${i}`));
      await t.send(envelopeOf('later').with(new DelayStamp(60000)));
      held = await receiveUpTo(t, 3, 5000);
      expect(held).toHaveLength(3);
      await t.ack(held.shift());
      const report = jsonOf(await runCli(['doctor', '--dsn', redis.dsn, '--stream', stream, '--json']));
      expect(detailOf(report, 'stream')).toBe(`${stream} exists (2 entries)`);
      expect(detailOf(report, 'pending')).toBe('2 entries delivered and not acked');
      expect(detailOf(report, 'delayed')).toBe(`${stream}:delayed: 1 delayed messages`);
      expect(report.ok).toBe(true);
    } finally {
      // close() waits for what was delivered to be settled.
      for (const envelope of held) await t.ack(envelope);
      await t.close();
    }
  });

  test('a missing group fails naming the groups there are (exit 1)', async () => {
    const { stream, t } = await transportStream();
    await t.close();
    const run = await runCli(['doctor', '--dsn', redis.dsn, '--stream', stream, '--group', 'billing', '--json']);
    const report = jsonOf(run);
    expect(verdicts(report)).toMatchObject({ stream: 'ok', group: 'FAIL' });
    expect(detailOf(report, 'group')).toBe(`group billing does not exist on ${stream} (groups: messenger)`);
    expect(report.checks.map((c) => c.name)).not.toContain('pending');
    expect(run.code).toBe(1);
  });

  test('a missing stream fails and is not created (exit 1)', async () => {
    const stream = redis.uniqueStream('absent');
    const run = await runCli(['doctor', '--dsn', redis.dsn, '--stream', stream, '--json']);
    const report = jsonOf(run);
    expect(report.checks.map((c) => c.name)).toEqual(CHECKS.slice(0, 5));
    expect(verdicts(report).stream).toBe('FAIL');
    expect(run.code).toBe(1);
    expect(await redis.admin().withClient((c) => c.exists(stream))).toBe(0);
  });

  describe('a server with a password', () => {
    let server;
    beforeAll(async () => {
      server = await startRedisServer({ args: ['--requirepass', 'Right-Redis-pw'] });
    });
    afterAll(() => server?.stop());

    test('the right password passes connect', async () => {
      const run = await runCli(['doctor', '--dsn', `redis://:Right-Redis-pw@127.0.0.1:${server.port}`, '--json']);
      const report = jsonOf(run);
      expect(verdicts(report).connect).toBe('ok');
      expect(detailOf(report, 'connect')).toMatch(new RegExp(`^redis://:\\*\\*\\*@127\\.0\\.0\\.1:${server.port} in \\d+ ms$`));
      expect(run.code).toBe(0);
    });

    test('a wrong one fails connect (exit 1) and is printed nowhere', async () => {
      const dsn = `redis://:Wrong-Redis-pw@127.0.0.1:${server.port}`;
      for (const args of [['doctor', '--dsn', dsn], ['stats', '--dsn', dsn, '--stream', 's']]) {
        const run = await runCli(args);
        expect(run.code).toBe(1);
        const output = `${run.stdout}${run.stderr}`;
        expect(output).toMatch(/WRONGPASS|AuthenticationFailed/);
        expect(output).not.toContain('Wrong-Redis-pw');
      }
    });
  });
});

describe('doctor on a Redis Cluster', () => {
  let cluster;
  beforeAll(async () => {
    cluster = await startCluster({ masters: 3 });
  }, 90000);
  afterAll(() => cluster?.stop(), 30000);

  test('a hash-tagged stream set up by the transport passes, slot included (exit 0)', async () => {
    const { stream, t } = await transportStream(cluster.dsn, { cluster: true });
    await t.close();
    const run = await runCli(['doctor', '--dsn', cluster.dsn, '--cluster', '--stream', stream, '--json']);
    const report = jsonOf(run);
    expect(report.checks.map((c) => c.name)).toEqual([...CHECKS.slice(0, 4), 'tracking', 'slot', ...CHECKS.slice(4)]);
    expect(report.checks.filter((c) => c.status !== 'ok')).toEqual([]);
    const slot = await cluster.keyslot(stream);
    expect(detailOf(report, 'slot')).toBe(`${stream} and ${stream}:delayed share slot ${slot}`);
    expect(run.code).toBe(0);
  });

  test('a user the nodes refuse CLIENT TRACKING gets a warning that names the permission (exit 0)', async () => {
    const user = `doctor-no-tracking-${crypto.randomBytes(3).toString('hex')}`;
    for (const port of cluster.ports) {
      await nodeCommand(port, 'ACL', 'SETUSER', user, 'on', '>pw', '~*', '&*', '+@all', '-client|tracking');
    }
    try {
      const dsn = cluster.dsn.replace('redis://', `redis://${user}:pw@`);
      const run = await runCli(['doctor', '--dsn', dsn, '--cluster', '--json']);
      const report = jsonOf(run);
      expect(verdicts(report).tracking).toBe('warn');
      expect(detailOf(report, 'tracking')).toMatch(/^CLIENT TRACKING refused \(.*(NOPERM|NoPerm).*client\|tracking.*\): idle consumers claim each pollIntervalMs instead; grant the user \+client\|tracking$/);
      expect(run.code).toBe(0);
    } finally {
      for (const port of cluster.ports) await nodeCommand(port, 'ACL', 'DELUSER', user);
    }
  });

  test('an untagged stream whose default delayed key lands in another slot fails (exit 1)', async () => {
    const stream = 'messenger:orders';
    const [a, b] = [await cluster.keyslot(stream), await cluster.keyslot(`${stream}:delayed`)];
    expect(a).not.toBe(b);
    const run = await runCli(['doctor', '--dsn', cluster.dsn, '--cluster', '--stream', stream, '--json']);
    const report = jsonOf(run);
    expect(verdicts(report).slot).toBe('FAIL');
    expect(detailOf(report, 'slot')).toMatch(
      new RegExp(`^messenger:orders is in slot ${a} but messenger:orders:delayed in slot ${b}: the transport refuses them`),
    );
    expect(run.code).toBe(1);
  });

  test('an explicit stream and delayed key with different tags fail; the same tag passes the slot check', async () => {
    const bad = await runCli(['doctor', '--dsn', cluster.dsn, '--cluster', '--stream', '{a}:s', '--delayed-key', '{b}:d', '--json']);
    const slots = [await cluster.keyslot('{a}:s'), await cluster.keyslot('{b}:d')];
    expect(detailOf(jsonOf(bad), 'slot')).toMatch(new RegExp(`^\\{a\\}:s is in slot ${slots[0]} but \\{b\\}:d in slot ${slots[1]}`));
    expect(bad.code).toBe(1);
    const good = await runCli(['doctor', '--dsn', cluster.dsn, '--cluster', '--stream', '{a}:s', '--delayed-key', '{a}:d', '--json']);
    expect(verdicts(jsonOf(good)).slot).toBe('ok');
  });
});
