'use strict';

// RedisStreamsTransport when the connection goes away under it, on a throwaway redis-server
// with an fsync-always AOF (so a kill -9 and a restart on the same port keep the stream, the
// group and the acks, as a real persistent Redis would): CLIENT KILL, crash and restart. Then
// processes that must exit by themselves after close().
//
// Reference behaviour: upstream uses ioredis, which reconnects by itself and re-sends or queues
// commands issued around a reconnect, so an application never sees a send or an ack fail just
// because an idle connection was dropped or the server restarted a moment ago.

const { spawnSync } = require('node:child_process');
const { Redis } = require('ioredis');
const { redis: engine } = require('../support/engines');
const { throwawayRedis } = require('../support/throwaway-redis');
const { ROOT, CORE, expectCleanExit } = require('../support/child');
const {
  serializer,
  envelopeOf,
  idOf,
  sleep,
  pollUntil,
  settleWithin,
  startAckingConsumer,
} = require('../support/transport-helpers');


const local = throwawayRedis({ args: ['--appendonly', 'yes', '--appendfsync', 'always'] });
const transport = local.open;
const consumers = [];

afterEach(async () => {
  await Promise.all(consumers.splice(0).map((c) => settleWithin(c.stop(), 3000)));
  await local.closeOpened(3000);
});

/** Runs `use` with a short-lived ioredis client on the throwaway server. */
const withServer = local.inspect;

/** Drops every normal client connection (the transports' included), as a failover or proxy would. */
async function killClients() {
  return withServer((redis) => redis.client('KILL', 'TYPE', 'normal', 'SKIPME', 'yes'));
}

async function xaddMessages(stream, ids) {
  return withServer(async (redis) => {
    const added = [];
    for (const id of ids) {
      const encoded = serializer().encode(envelopeOf(id));
      added.push(await redis.xadd(stream, '*', 'body', encoded.body, 'headers', JSON.stringify(encoded.headers)));
    }
    return added;
  });
}

async function streamState(stream) {
  return withServer(async (redis) => {
    let pending = 0;
    try {
      [pending] = await redis.xpending(stream, 'messenger');
    } catch {
      pending = 'no group';
    }
    return { length: await redis.xlen(stream), pending: Number(pending) };
  });
}

async function expectDrained(stream, timeoutMs = 3000) {
  await pollUntil(
    async () => {
      const state = await streamState(stream);
      return state.length === 0 && state.pending === 0;
    },
    { timeoutMs, intervalMs: 50 },
  );
  expect(await streamState(stream)).toEqual({ length: 0, pending: 0 });
}

/** A background get() loop that records and acks what it gets; `error` if get() threw. Stopped after the test. */
function startConsumer(t) {
  const consumer = startAckingConsumer(t);
  consumers.push(consumer);
  return consumer;
}

/** One get() loop held open at its first yielded envelope. */
async function holdOne(t) {
  const controller = new AbortController();
  const iterator = t.get(controller.signal);
  const { value } = await iterator.next();
  return {
    envelope: value,
    stop: async () => {
      controller.abort();
      await iterator.return();
    },
  };
}

/** A transport on a fresh stream named after `prefix`, with one message (`id`) sent. */
async function oneSent(prefix, options = {}, id = 'before') {
  const stream = engine.uniqueStream(prefix);
  const t = transport({ stream, ...options });
  await t.send(envelopeOf(id));
  return { stream, t };
}

/** oneSent, with that message held by holdOne. */
async function holdingOne(prefix, options = {}, id = 'in-flight') {
  const { stream, t } = await oneSent(prefix, options, id);
  return { stream, t, held: await holdOne(t) };
}

describe('connections dropped by the server (CLIENT KILL TYPE normal)', () => {
  it('a live consumer survives: get() does not throw, acked entries stay acked, new messages arrive', async () => {
    const stream = engine.uniqueStream('kill');
    // A short claimIdleMs: an ack that got lost would come back as a redelivery within the test.
    const t = transport({ stream, claimIdleMs: 500 });
    const consumer = startConsumer(t);
    await xaddMessages(stream, ['a-1', 'a-2', 'a-3', 'a-4', 'a-5']);
    expect(await pollUntil(() => consumer.received.length === 5)).toBe(true);
    await expectDrained(stream);

    // Once while the consumer is busy finding out, once while it idles in a blocking read.
    expect(await killClients()).toBeGreaterThanOrEqual(1);
    await sleep(300);
    expect(await killClients()).toBeGreaterThanOrEqual(1);

    await xaddMessages(stream, ['b-1', 'b-2', 'b-3', 'b-4', 'b-5']);
    expect(await pollUntil(() => consumer.received.length >= 10, { timeoutMs: 5000 })).toBe(true);
    await sleep(1200);
    expect(consumer.error).toBeUndefined();
    expect(consumer.ids()).toEqual(['a-1', 'a-2', 'a-3', 'a-4', 'a-5', 'b-1', 'b-2', 'b-3', 'b-4', 'b-5']);
    await expectDrained(stream);
  }, 15000);

  it('an ack recorded after the connection was dropped is written by itself (written behind)', async () => {
    const { stream, t, held } = await holdingOne('kill');
    expect(await streamState(stream)).toEqual({ length: 1, pending: 1 });
    await killClients();
    await t.ack(held.envelope);
    // Nothing else happens on this transport: the recorded ack must still reach Redis.
    await expectDrained(stream, 3000);
    await held.stop();
  }, 10000);

  it('close() after a written-behind ack met a dropped connection writes it and resolves', async () => {
    const { stream, t, held } = await holdingOne('kill');
    await killClients();
    await t.ack(held.envelope);
    await sleep(300);
    await held.stop();
    expect(await settleWithin(t.close(), 3000)).toEqual({ value: undefined });
    // Otherwise the acked message is delivered again to another consumer after claimIdleMs.
    await expectDrained(stream, 0);
  }, 10000);

  it('the first send after the connection was dropped succeeds', async () => {
    const { stream, t } = await oneSent('kill');
    await killClients();
    const result = await settleWithin(t.send(envelopeOf('after')), 3000);
    expect(result.error?.message).toBeUndefined();
    expect(idOf(result.value)).toMatch(/^\d+-\d+$/);
    expect((await streamState(stream)).length).toBe(2);
  }, 10000);

  it("the first ack (ackMode 'commit') after the connection was dropped succeeds", async () => {
    const { stream, t, held } = await holdingOne('kill', { ackMode: 'commit' });
    await killClients();
    const result = await settleWithin(t.ack(held.envelope), 3000);
    expect(result.error?.message).toBeUndefined();
    expect(await streamState(stream)).toEqual({ length: 0, pending: 0 });
    await held.stop();
  }, 10000);
});

describe('redis-server crash (kill -9) and restart on the same port', () => {
  it('a live consumer rides it out: get() does not throw, acked entries stay acked, new messages arrive', async () => {
    const stream = engine.uniqueStream('restart');
    const t = transport({ stream, claimIdleMs: 500 });
    const consumer = startConsumer(t);
    await xaddMessages(stream, ['a-1', 'a-2', 'a-3']);
    expect(await pollUntil(() => consumer.received.length === 3)).toBe(true);
    await expectDrained(stream);

    await local.server.crash();
    await sleep(1000);
    expect(consumer.error).toBeUndefined();
    await local.server.restart();
    // The stream and the group survived (AOF); nothing is pending.
    expect(await streamState(stream)).toEqual({ length: 0, pending: 0 });

    await xaddMessages(stream, ['b-1', 'b-2', 'b-3']);
    expect(await pollUntil(() => consumer.received.length >= 6, { timeoutMs: 8000 })).toBe(true);
    await sleep(1200);
    expect(consumer.error).toBeUndefined();
    expect(consumer.ids()).toEqual(['a-1', 'a-2', 'a-3', 'b-1', 'b-2', 'b-3']);
    await expectDrained(stream);
  }, 20000);

  it('a message handled while Redis is down is acked once it is back (no redelivery)', async () => {
    const { stream, t, held } = await holdingOne('restart', { claimIdleMs: 500 }, 'handled-during-outage');
    await local.server.crash();
    await t.ack(held.envelope);
    await held.stop();
    await local.server.restart();
    await expectDrained(stream, 3000);
    // And a consumer started now finds nothing to redeliver.
    const consumer = startConsumer(t);
    await sleep(800);
    expect(consumer.ids()).toEqual([]);
    expect(consumer.error).toBeUndefined();
  }, 20000);

  it('the first send once Redis is back succeeds', async () => {
    const { stream, t } = await oneSent('restart');
    await local.server.crash();
    await sleep(300);
    await local.server.restart();
    const result = await settleWithin(t.send(envelopeOf('after')), 3000);
    expect(result.error?.message).toBeUndefined();
    expect((await streamState(stream)).length).toBe(2);
  }, 20000);

  it('sends while Redis is down fail fast with TransportConnectionError, and succeed again once it is back', async () => {
    const { t } = await oneSent('restart');
    await local.server.crash();
    const startedAt = Date.now();
    const down = await settleWithin(t.send(envelopeOf('down')), 8000);
    expect(down.error?.name).toBe('TransportConnectionError');
    expect(Date.now() - startedAt).toBeLessThan(6000);
    await local.server.restart();
    const sent = await pollUntil(
      async () => {
        const result = await settleWithin(t.send(envelopeOf('back')), 3000);
        return result.value !== undefined;
      },
      { timeoutMs: 5000, intervalMs: 100 },
    );
    expect(sent).toBe(true);
  }, 20000);
});

describe('process exit after close()', () => {
  beforeAll(() => engine.requireServer());

  /** Runs an async script body in a fresh node process; it must exit by itself. */
  function runChild(body) {
    const stream = engine.uniqueStream('exit');
    const script = `
      const { RedisStreamsTransport } = require(${JSON.stringify(ROOT)});
      const { Envelope, JsonSerializer } = require(${JSON.stringify(CORE)});
      class TestMessage { constructor(id, payload = '') { this.id = id; this.payload = payload; } }
      const options = (extra = {}) => ({
        dsn: process.env.DSN,
        stream: process.env.STREAM,
        serializer: new JsonSerializer([TestMessage]),
        ...extra,
      });
      (async () => {
        ${body}
      })().catch((error) => { console.error('FAILED', error); process.exitCode = 2; });
    `;
    const startedAt = Date.now();
    const result = spawnSync(process.execPath, ['-e', script], {
      cwd: ROOT,
      encoding: 'utf8',
      timeout: 10000,
      killSignal: 'SIGKILL',
      env: { ...process.env, DSN: engine.dsn, STREAM: stream },
    });
    return { ...result, elapsedMs: Date.now() - startedAt, stream };
  }

  /** Asserts that the child exited cleanly within 5 s, having printed `stdout`. */
  function expectExitedByItself(result, stdout) {
    expectCleanExit(result);
    expect(result.stdout).toBe(stdout);
    expect(result.elapsedMs).toBeLessThan(5000);
  }

  async function cleanUp(stream) {
    const redis = new Redis(engine.dsn, { maxRetriesPerRequest: 1 });
    try {
      const state = { length: await redis.xlen(stream), delayed: await redis.zcard(`${stream}:delayed`) };
      await redis.del(stream, `${stream}:delayed`);
      return state;
    } finally {
      redis.disconnect();
    }
  }

  it('exits by itself after send, delayed send, consume, reject, ack and close', async () => {
    const result = runChild(`
      const t = new RedisStreamsTransport(options());
      await t.send(new Envelope(new TestMessage('child')));
      const { DelayStamp } = require(${JSON.stringify(CORE)});
      await t.send(new Envelope(new TestMessage('later'), [new DelayStamp(100)]));
      let rejected = false;
      const seen = [];
      for await (const envelope of t.get(new AbortController().signal)) {
        if (envelope.message.id === 'child' && !rejected) {
          rejected = true;
          await t.reject(envelope);
          continue;
        }
        seen.push(envelope.message.id);
        await t.ack(envelope);
        if (seen.length === 2) break;
      }
      console.log('handled ' + seen.sort().join(','));
      await t.close();
      console.log('closed');
    `);
    expectExitedByItself(result, 'handled child,later\nclosed\n');
    expect(await cleanUp(result.stream)).toEqual({ length: 0, delayed: 0 });
  }, 15000);

  it('exits by itself after close() released a consumer blocked in a read (pollIntervalMs 60000)', async () => {
    const result = runChild(`
      const t = new RedisStreamsTransport(options({ pollIntervalMs: 60000 }));
      const consumer = (async () => {
        for await (const envelope of t.get(new AbortController().signal)) console.log('UNEXPECTED ' + envelope.message.id);
        console.log('consumer ended');
      })();
      await new Promise((resolve) => setTimeout(resolve, 500));
      await t.close();
      await consumer;
      console.log('closed');
    `);
    expectExitedByItself(result, 'consumer ended\nclosed\n');
    await cleanUp(result.stream);
  }, 15000);

  it('exits by itself when several transports on one DSN (one shared connection) are all closed', async () => {
    const result = runChild(`
      const a = new RedisStreamsTransport(options());
      const b = new RedisStreamsTransport(options({ pollIntervalMs: 60000 }));
      const c = new RedisStreamsTransport(options({ dsn: process.env.DSN + '/0' }));
      const got = [];
      const consumer = (async () => {
        for await (const envelope of b.get(new AbortController().signal)) {
          got.push(envelope.message.id);
          console.log('got ' + envelope.message.id);
          await b.ack(envelope);
        }
      })();
      await a.send(new Envelope(new TestMessage('one')));
      await c.send(new Envelope(new TestMessage('two')));
      while (got.length < 2) await new Promise((resolve) => setTimeout(resolve, 10));
      await Promise.all([a.close(), b.close(), c.close()]);
      await consumer;
      console.log('closed');
    `);
    expectExitedByItself(result, 'got one\ngot two\nclosed\n');
    expect(await cleanUp(result.stream)).toEqual({ length: 0, delayed: 0 });
  }, 15000);
});
