'use strict';

// Sends served on the JavaScript thread (src/direct/sends.rs, src/engines/redis/direct.rs): after the
// first send, a single node's due sends go over a connection of their own, written by the
// send() call and read on the event loop. On a throwaway redis-server, because the cases pause
// it and kill its clients. What must hold: the path is taken; sends keep their order; a
// connection lost with a batch in flight loses nothing and stores nothing twice; a batch with
// no reply within the send bound fails saying it may have been stored and is not sent again.

const asyncHooks = require('node:async_hooks');
const { TransportConnectionError } = require('@schally/nestjs-messenger');
const { redis: engine } = require('../support/engines');
const { throwawayRedis } = require('../support/throwaway-redis');
const { envelopeOf, idOf, sleep, pollUntil, settleWithin } = require('../support/transport-helpers');

const SEND_CONNECTION = 'nestjs-messenger-native:send';

const local = throwawayRedis();
const transport = local.open;
const withServer = local.inspect;

afterEach(async () => {
  await withServer((redis) => redis.client('UNPAUSE'));
  await local.closeOpened();
});

/** The server's clients named as the send connection: `[{ id, cmd }]`. */
async function sendConnections() {
  const list = await withServer((redis) => redis.client('LIST'));
  return list
    .split('\n')
    .filter((line) => line.includes(` name=${SEND_CONNECTION} `))
    .map((line) => ({ id: /\bid=(\d+)/.exec(line)[1], cmd: /\bcmd=(\S+)/.exec(line)[1] }));
}

/** The stream's entries' message ids (the `id` of each stored body), in stream order. */
async function storedKeys(stream) {
  const entries = await withServer((redis) => redis.xrange(stream, '-', '+'));
  return entries.map(([, fields]) => JSON.parse(fields[fields.indexOf('body') + 1]).id);
}

/** Sends until the send connection carries them (it opens in the background after a first send). */
async function warmUp(t, stream) {
  let n = 0;
  await pollUntil(
    async () => {
      await t.send(envelopeOf(`warm-${n}`));
      n += 1;
      return (await sendConnections()).some((c) => c.cmd === 'exec');
    },
    { timeoutMs: 5000, intervalMs: 10 },
  );
  await withServer((redis) => redis.del(stream));
  await t.setup();
}

/** A transport on a stream of its own whose sends already take the send connection. */
async function warmTransport() {
  const stream = engine.uniqueStream('direct');
  const t = transport({ stream });
  await warmUp(t, stream);
  return { t, stream };
}

const keysOf = (prefix, count) => Array.from({ length: count }, (_, n) => `${prefix}-${n}`);

describe('the send connection', () => {
  it('carries sequential sends after the first, stored in the order they were made', async () => {
    const stream = engine.uniqueStream('direct');
    const t = transport({ stream });
    await t.send(envelopeOf('first'));
    const ids = [];
    for (let n = 0; n < 50; n += 1) ids.push(idOf(await t.send(envelopeOf(`m-${n}`))));
    const connections = await sendConnections();
    expect(connections).toHaveLength(1);
    expect(connections[0].cmd).toBe('exec');
    expect(await storedKeys(stream)).toEqual(['first', ...keysOf('m', 50)]);
    expect(new Set(ids).size).toBe(50);
  });

  it('a reply resolves its send from the poll callback itself, not through a queued callback', async () => {
    // The direct call runs under an async resource of its own (napi_async_init); the
    // threadsafe callback's calls run under another. Seen by async_hooks: the sends resolved
    // in callbacks of that resource, one per reply.
    const ours = new Set();
    let callbacks = 0;
    const hook = asyncHooks
      .createHook({
        init(id, type) {
          if (type === SEND_CONNECTION) ours.add(id);
        },
        before(id) {
          if (ours.has(id)) callbacks += 1;
        },
      })
      .enable();
    try {
      // The resource is made with the send connection's path: a transport made under the hook.
      const stream = engine.uniqueStream('direct');
      const fresh = transport({ stream });
      await warmUp(fresh, stream);
      // The first send after warmUp's setup() may still take the runtime's path.
      await fresh.send(envelopeOf('primer'));
      const before = callbacks;
      for (let n = 0; n < 20; n += 1) await fresh.send(envelopeOf(`h-${n}`));
      expect(ours.size).toBe(1);
      expect(callbacks - before).toBe(20);
    } finally {
      hook.disable();
    }
  });

  it('a send resolved from the poll callback can close the transport, and the next one send again', async () => {
    // JavaScript runs inside the loop callback: closing there frees the direct path's state
    // under it, and a send made there re-enters it; neither may touch freed state.
    const { t, stream } = await warmTransport();
    await t.send(envelopeOf('before-close'));
    await t.close();
    await expect(t.send(envelopeOf('after-close'))).rejects.toThrow(/closing or closed/);
    expect(await storedKeys(stream)).toEqual(['before-close']);
    const { t: again, stream: second } = await warmTransport();
    const ids = [];
    for (let n = 0; n < 10; n += 1) ids.push(idOf(await again.send(envelopeOf(`r-${n}`))));
    expect(await storedKeys(second)).toEqual(keysOf('r', 10));
    expect(new Set(ids).size).toBe(10);
  });

  it('concurrent sends share batches and keep their order', async () => {
    const { t, stream } = await warmTransport();
    const keys = keysOf('c', 300);
    const sent = await Promise.all(keys.map((key) => t.send(envelopeOf(key))));
    expect(new Set(sent.map(idOf)).size).toBe(300);
    expect(await storedKeys(stream)).toEqual(keys);
  });

  it('concurrent sends: a second batch is written before the first one is answered', async () => {
    const { t, stream } = await warmTransport();
    // Paused, the server holds the first batch unrun; what was written behind it waits unread
    // in the connection's query buffer.
    await withServer((redis) => redis.client('PAUSE', 1500, 'WRITE'));
    const keys = keysOf('p', 40);
    const sends = keys.map((key) => t.send(envelopeOf(key)));
    await sleep(100);
    const [connection] = await sendConnections();
    const list = await withServer((redis) => redis.client('LIST', 'ID', connection.id));
    expect(Number(/\bqbuf=(\d+)/.exec(list)[1])).toBeGreaterThan(0);
    await withServer((redis) => redis.client('UNPAUSE'));
    const sent = await Promise.all(sends);
    expect(new Set(sent.map(idOf)).size).toBe(40);
    expect(await storedKeys(stream)).toEqual(keys);
  });

  it('lost with two batches in flight: every send resolves, stored once, in order', async () => {
    const { t, stream } = await warmTransport();
    const [connection] = await sendConnections();
    await withServer((redis) => redis.client('PAUSE', 1500, 'WRITE'));
    const keys = keysOf('l', 40);
    const sends = keys.map((key) => t.send(envelopeOf(key)));
    await sleep(100);
    await withServer((redis) => redis.client('KILL', 'ID', connection.id));
    const outcomes = await Promise.all(sends.map((send) => settleWithin(send, 10000)));
    expect(outcomes.filter((o) => o.error !== undefined || o.timeout !== undefined)).toEqual([]);
    expect(await storedKeys(stream)).toEqual(keys);
  });

  it('a batch is one transaction that marks it stored, as a repeat of it would find it', async () => {
    const { t, stream } = await warmTransport();
    const sent = await t.send(envelopeOf('marked'));
    const [connection] = await sendConnections();
    expect(connection.cmd).toBe('exec');
    // A marker per batch, the warm-up's included (they live beside the stream, not in it).
    const markers = await withServer((redis) => redis.keys(`${stream}:sent:*`));
    const values = await withServer((redis) => Promise.all(markers.map((key) => redis.get(key))));
    expect(values.length).toBeGreaterThan(1);
    expect(new Set(values)).toEqual(new Set(['*']));
    expect(idOf(sent)).toMatch(/^\d+-\d+$/);
    expect(await storedKeys(stream)).toEqual(['marked']);
  });

  it('dropped by the server while idle: the next sends are stored once each, in order, and it comes back', async () => {
    const { t, stream } = await warmTransport();
    const [before] = await sendConnections();
    await withServer((redis) => redis.client('KILL', 'ID', before.id));
    const keys = keysOf('k', 20);
    for (const key of keys) await t.send(envelopeOf(key));
    expect(await storedKeys(stream)).toEqual(keys);
    // Tried again a second after the failure.
    await sleep(1100);
    await t.send(envelopeOf('again-0'));
    await pollUntil(async () => {
      await t.send(envelopeOf('again'));
      return (await sendConnections()).some((c) => c.id !== before.id && c.cmd === 'exec');
    }, { timeoutMs: 3000 });
  });

  it('lost with a batch in flight: the send resolves and the message is stored once', async () => {
    const { t, stream } = await warmTransport();
    const [connection] = await sendConnections();
    // Paused, the server holds the script unrun; the kill then discards it with the connection.
    await withServer((redis) => redis.client('PAUSE', 1500, 'WRITE'));
    const send = t.send(envelopeOf('in-flight'));
    await sleep(100);
    await withServer((redis) => redis.client('KILL', 'ID', connection.id));
    const outcome = await settleWithin(send, 10000);
    expect(outcome.error).toBeUndefined();
    expect(outcome.timeout).toBeUndefined();
    expect(idOf(outcome.value)).toMatch(/^\d+-\d+$/);
    await t.send(envelopeOf('after'));
    expect(await storedKeys(stream)).toEqual(['in-flight', 'after']);
  });

  it('no reply within the send bound: the send fails saying it may have been stored, and is not sent again', async () => {
    const stream = engine.uniqueStream('direct');
    // Bound: 2 x 200 ms + 1 s.
    const t = transport({ stream, connectTimeoutMs: 200 });
    await warmUp(t, stream);
    await withServer((redis) => redis.client('PAUSE', 3000, 'WRITE'));
    const started = Date.now();
    const outcome = await settleWithin(t.send(envelopeOf('unanswered')), 10000);
    const waited = Date.now() - started;
    expect(outcome.error).toBeInstanceOf(TransportConnectionError);
    expect(outcome.error.message).toMatch(/may have been stored/);
    expect(waited).toBeGreaterThanOrEqual(1300);
    expect(waited).toBeLessThan(2900);
    // The connection was given up with the script unrun in it (the server drops a closed
    // client's paused command), and nothing sent it again: a resend, on the command
    // connection, would have run once the pause ended.
    await sleep(3200 - waited);
    await t.send(envelopeOf('next'));
    expect(await storedKeys(stream)).toEqual(['next']);
  });

  it('close() with a batch in flight: the send still settles, stored once', async () => {
    const { t, stream } = await warmTransport();
    await withServer((redis) => redis.client('PAUSE', 500, 'WRITE'));
    const send = t.send(envelopeOf('closing'));
    await sleep(50);
    await t.close();
    const outcome = await settleWithin(send, 10000);
    expect(outcome.timeout).toBeUndefined();
    expect(outcome.error).toBeUndefined();
    await pollUntil(async () => (await storedKeys(stream)).length > 0, { timeoutMs: 3000 });
    expect(await storedKeys(stream)).toEqual(['closing']);
  });

});

describe('one send connection for the queues of a process', () => {
  /** `count` transports on streams of their own, all warmed onto the send connection. */
  async function warmTransports(count) {
    const list = Array.from({ length: count }, () => {
      const stream = engine.uniqueStream('shared');
      return { t: transport({ stream }), stream };
    });
    for (const { t, stream } of list) await warmUp(t, stream);
    return list;
  }

  it('transports on one node share it: sequential and concurrent sends, each stream in order', async () => {
    const list = await warmTransports(20);
    for (let n = 0; n < 5; n += 1) {
      for (const [q, { t }] of list.entries()) await t.send(envelopeOf(`s${q}-${n}`));
    }
    await Promise.all(list.flatMap(({ t }, q) => keysOf(`c${q}`, 30).map((key) => t.send(envelopeOf(key)))));
    const connections = await sendConnections();
    expect(connections).toHaveLength(1);
    for (const [q, { stream }] of list.entries()) {
      expect(await storedKeys(stream)).toEqual([...keysOf(`s${q}`, 5), ...keysOf(`c${q}`, 30)]);
    }
  });

  it('lost with batches of several queues in flight: each queue\'s sends resolve, stored once, in order', async () => {
    const list = await warmTransports(3);
    const [connection] = await sendConnections();
    await withServer((redis) => redis.client('PAUSE', 1500, 'WRITE'));
    const sends = list.flatMap(({ t }, q) => keysOf(`x${q}`, 40).map((key) => t.send(envelopeOf(key))));
    await sleep(100);
    await withServer((redis) => redis.client('KILL', 'ID', connection.id));
    const outcomes = await Promise.all(sends.map((send) => settleWithin(send, 10000)));
    expect(outcomes.filter((o) => o.error !== undefined || o.timeout !== undefined)).toEqual([]);
    for (const [q, { stream }] of list.entries()) expect(await storedKeys(stream)).toEqual(keysOf(`x${q}`, 40));
  });

  it('a transport closed with a batch in flight settles it; the others keep the connection; the last close ends it', async () => {
    const list = await warmTransports(3);
    const [connection] = await sendConnections();
    await withServer((redis) => redis.client('PAUSE', 500, 'WRITE'));
    const [first, ...rest] = list;
    const send = first.t.send(envelopeOf('closing'));
    await sleep(50);
    await first.t.close();
    const outcome = await settleWithin(send, 10000);
    expect(outcome.error).toBeUndefined();
    expect(outcome.timeout).toBeUndefined();
    expect(await storedKeys(first.stream)).toEqual(['closing']);
    for (const { t } of rest) await t.send(envelopeOf('after'));
    expect((await sendConnections()).map((c) => c.id)).toEqual([connection.id]);
    for (const { stream } of rest) expect(await storedKeys(stream)).toEqual(['after']);
    await Promise.all(rest.map(({ t }) => t.close()));
    await pollUntil(async () => (await sendConnections()).length === 0, { timeoutMs: 3000 });
  });
});
