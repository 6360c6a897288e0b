'use strict';

// Fault scenario: Redis behind Sentinel, reached with upstream's options (ioredis's
// `sentinels`, `name`, `sentinelPassword`; the DSN's password is the master's, its address is
// not used). A master with two replicas and three sentinels, all private; sends made with
// waitForReplicas: 1, so that a resolved send is on a replica when the master goes. Mid-traffic
// the master is failed over gracefully (SENTINEL FAILOVER), then hard (the master frozen with
// SIGSTOP, as a hung host). Judged per message: every send that resolved is delivered or
// stored on the new master; every send settles within its bound; sends resume within a few
// seconds of the promotion; the consumer's get() never throws and receives what is sent after.

const { RedisStreamsTransport } = require('../..');
const { startSentinelDeployment } = require('./support/sentinel');
const { stored } = require('./support/engines');
const { faultSerializer, faultEnvelope } = require('./support/messages');
const { settleWithin, sleep, consumeAndAck, sendSteadily } = require('./support/account');

const MASTER_PASSWORD = 'master-secret';
const SENTINEL_PASSWORD = 'sentinel-secret';
const CONNECT_TIMEOUT_MS = 1000;
/** A send's bound with waitForReplicas: write, WAIT and the connection's own waits. */
const SEND_BOUND_MS = 3 * CONNECT_TIMEOUT_MS + 1000 + 500;
/** How soon after the sentinels promoted a replica sends must succeed again. */
const RESUME_MS = 3000;

describe('Redis behind Sentinel, with upstream\'s options', () => {
  let deployment;
  const transports = [];

  /** A transport through the sentinels; the DSN's address (port 1) is never used. */
  function throughSentinels(stream, options = {}) {
    const transport = new RedisStreamsTransport({
      dsn: `redis://:${MASTER_PASSWORD}@127.0.0.1:1`,
      stream,
      serializer: faultSerializer(),
      connectTimeoutMs: CONNECT_TIMEOUT_MS,
      redisOptions: { sentinels: deployment.sentinels, name: deployment.name, sentinelPassword: SENTINEL_PASSWORD },
      ...options,
    });
    transports.push(transport);
    return transport;
  }

  /** What the stream holds on the current master. */
  async function onMaster(stream) {
    const port = await deployment.masterPort();
    return stored('redis', { dsn: `redis://:${MASTER_PASSWORD}@127.0.0.1:${port}`, queue: stream });
  }

  beforeAll(async () => {
    deployment = await startSentinelDeployment({ replicas: 2, masterPassword: MASTER_PASSWORD, sentinelPassword: SENTINEL_PASSWORD });
  }, 120_000);

  afterAll(async () => {
    await Promise.all(transports.map((t) => settleWithin(t.close(), 5000)));
    await deployment?.stop();
  }, 60_000);

  it('sends to and receives from the master the sentinels name', async () => {
    const stream = 'messenger:{sentinel_plain}';
    const t = throughSentinels(stream);
    for (let n = 0; n < 5; n += 1) await t.send(faultEnvelope(`p:${n}`, n));
    expect((await onMaster(stream)).map((e) => e.key)).toEqual(['p:0', 'p:1', 'p:2', 'p:3', 'p:4']);
    const { delivered, errors, controller, loop } = consumeAndAck(t);
    while (delivered.length < 5) await sleep(20);
    controller.abort();
    await settleWithin(loop, 5000);
    expect({ delivered: delivered.map((d) => d.key), errors }).toEqual({ delivered: ['p:0', 'p:1', 'p:2', 'p:3', 'p:4'], errors: [] });
  });

  describe.each([
    ['graceful (SENTINEL FAILOVER)', (d) => d.gracefulFailover()],
    ['hard (the master frozen)', (d) => d.hardFailover()],
  ])('a %s failover mid-traffic', (kind, failover) => {
    it(`sends resume within ${RESUME_MS} ms, each within its bound, and every resolved send is delivered`, async () => {
      const stream = `messenger:{sentinel_${kind.split(' ')[0]}}`;
      const sender = throughSentinels(stream, { waitForReplicas: 1 });
      const consumer = throughSentinels(stream);
      const { delivered, errors, controller, loop } = consumeAndAck(consumer);
      const { sends, stop } = sendSteadily(sender, { prefix: kind[0], everyMs: 10 });
      let failed;
      try {
        await sleep(1000);
        failed = await failover(deployment);
        const promotedAt = Date.now();
        await sleep(RESUME_MS + 2000);
        await stop();
        const lastOk = [...sends].reverse().find((s) => s.ok);
        const deadline = Date.now() + 10_000;
        while (!delivered.some((d) => d.key === lastOk?.key) && Date.now() < deadline) await sleep(20);
        controller.abort();
        await settleWithin(loop, 10_000);

        const firstOk = sends.find((s) => s.at >= promotedAt && s.ok);
        const rejected = sends.filter((s) => !s.ok);
        const storedKeys = new Set([...(await onMaster(stream)).map((e) => e.key), ...delivered.map((d) => d.key)]);
        const lost = sends.filter((s) => s.ok && !storedKeys.has(s.key)).map((s) => s.key);
        const slowest = Math.max(...sends.map((s) => s.ms));
        console.log(
          `[sentinel ${kind}] ${failed.from} -> ${failed.to}: ${sends.length} sends, ${rejected.length} rejected (${[...new Set(rejected.map((r) => r.outcome))].join(', ') || 'none'}); first send resolved ${firstOk ? firstOk.at - promotedAt : 'never'} ms after the promotion; slowest send ${slowest} ms; ${delivered.length} delivered`,
        );
        expect({
          resumed: firstOk !== undefined && firstOk.at - promotedAt <= RESUME_MS,
          lost,
          overBound: sends.filter((s) => s.ms > SEND_BOUND_MS).map((s) => `${s.key}: ${s.ms} ms`),
          consumerErrors: errors,
          lastDelivered: delivered.some((d) => d.key === lastOk?.key),
        }).toEqual({ resumed: true, lost: [], overBound: [], consumerErrors: [], lastDelivered: true });
      } finally {
        await stop();
        failed?.resume?.();
      }
    }, 120_000);
  });
});
