'use strict';

// Fault scenario: sends that must survive the loss of the master. Redis replication is
// asynchronous: a send that resolved once the master stored it can be lost when the master
// dies before its replica has it. With `waitForReplicas`, a send resolves only once the write
// reached that many replicas (WAIT): a private master and its replica, every resolved send is
// already on the replica when it resolves; with the replica frozen (SIGSTOP), a send rejects
// within its bound, saying its outcome is unknown (it is on the master only).

const { Redis } = require('ioredis');
const { RedisStreamsTransport } = require('../..');
const { startRedisServer } = require('../support/redis-server');
const { serializer, envelopeOf, failure, pollUntil } = require('../support/transport-helpers');

const CONNECT_TIMEOUT_MS = 1000;

describe('Redis: waitForReplicas', () => {
  let master;
  let replica;
  let onReplica;
  const transports = [];

  beforeAll(async () => {
    master = await startRedisServer();
    replica = await startRedisServer({ args: ['--replicaof', '127.0.0.1', String(master.port)] });
    onReplica = new Redis(`redis://127.0.0.1:${replica.port}`, { maxRetriesPerRequest: 1 });
    const linked = await pollUntil(async () => /master_link_status:up/.test(await onReplica.info('replication')), {
      timeoutMs: 10_000,
    });
    if (!linked) throw new Error('the replica did not connect to its master');
  }, 30_000);

  afterAll(async () => {
    await Promise.all(transports.map((t) => t.close().catch(() => {})));
    onReplica?.disconnect();
    await replica?.stop();
    await master?.stop();
  });

  function transport(options) {
    const t = new RedisStreamsTransport({
      dsn: `redis://127.0.0.1:${master.port}`,
      stream: `messenger:replicated-${transports.length}`,
      serializer: serializer(),
      connectTimeoutMs: CONNECT_TIMEOUT_MS,
      ...options,
    });
    transports.push(t);
    return t;
  }

  it('resolves a send only once its message is on the replica', async () => {
    const t = transport({ waitForReplicas: 1 });
    const stream = `messenger:replicated-${transports.length - 1}`;
    for (let n = 0; n < 50; n += 1) {
      await t.send(envelopeOf(`r${n}`));
      // Read from the replica the moment the send resolved: already there.
      expect(await onReplica.xlen(stream)).toBe(n + 1);
    }
  });

  it('rejects a send its replica cannot acknowledge within the bound, as of unknown outcome', async () => {
    const t = transport({ waitForReplicas: 1 });
    await t.send(envelopeOf('warm'));
    process.kill(replica.pid, 'SIGSTOP');
    try {
      const started = Date.now();
      const { error } = await failure(() => t.send(envelopeOf('frozen replica')));
      const tookMs = Date.now() - started;
      expect({ code: error?.code, outcome: error?.outcome, within: tookMs <= 3 * CONNECT_TIMEOUT_MS + 1000 }).toEqual({
        code: 'E_CONNECTION',
        outcome: 'unknown',
        within: true,
      });
      expect(error.message).toMatch(/0 of the 1 replica/);
    } finally {
      process.kill(replica.pid, 'SIGCONT');
    }
  });

  it('is refused with cluster: true, and a negative or fractional count is refused', () => {
    for (const options of [{ waitForReplicas: 1, cluster: true }, { waitForReplicas: -1 }, { waitForReplicas: 1.5 }]) {
      expect(() => transport(options)).toThrow(/waitForReplicas/);
    }
  });
});
