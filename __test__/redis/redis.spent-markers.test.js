'use strict';

// What a stream's batch markers cost Redis under sustained sends (src/engines/redis/spent_markers.rs).
// A batch's first attempt marks it stored under `<stream>:sent:<name>`, so that a repeat after a
// lost reply stores nothing twice. A batch answered at its first attempt is never repeated: its
// marker is deleted with the next few dozen such, rather than left for its minute. What must
// hold, on the path served on the JavaScript thread and on the runtime's: after many sends a
// stream keeps at most one set's worth of markers, every message is stored once, and the markers
// still there are this stream's own.

const { redis: engine } = require('../support/engines');
const { withIoredis } = require('../support/redis-server');
const { RedisStreamsTransport } = require('../..');
const { serializer, envelopeOf, pollUntil, settleWithin } = require('../support/transport-helpers');

/** How many spent markers one DEL takes (spent_markers.rs `PER_DELETE`). */
const PER_DELETE = 64;
const SENDS = 500;

const transports = [];
const streams = [];

beforeAll(async () => {
  await engine.requireServer();
});

afterEach(async () => {
  await Promise.all(transports.splice(0).map((t) => settleWithin(t.close(), 5000)));
  const keys = await withServer((redis) => Promise.all(streams.map((stream) => markersOf(stream, redis))));
  await withServer((redis) => redis.del([...streams.splice(0), ...keys.flat()]));
});

const withServer = (use) => withIoredis(engine.runDsn(), use);

/** The batch markers of `stream` on the server. */
async function markersOf(stream, redis) {
  const found = [];
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', `*${stream}*:sent:*`, 'COUNT', 1000);
    found.push(...keys);
    cursor = next;
  } while (cursor !== '0');
  return found;
}

const markers = (stream) => withServer((redis) => markersOf(stream, redis));

/** A transport on a stream of its own; `directSends: false` makes it in a process environment that turns that path off. */
function transportOn({ directSends }) {
  const stream = engine.uniqueStream('spent');
  streams.push(stream);
  const before = process.env.NESTJS_MESSENGER_NATIVE_DIRECT_SENDS;
  if (!directSends) process.env.NESTJS_MESSENGER_NATIVE_DIRECT_SENDS = '0';
  try {
    const t = new RedisStreamsTransport({ dsn: engine.runDsn(), stream, serializer: serializer() });
    transports.push(t);
    return { t, stream };
  } finally {
    if (before === undefined) delete process.env.NESTJS_MESSENGER_NATIVE_DIRECT_SENDS;
    else process.env.NESTJS_MESSENGER_NATIVE_DIRECT_SENDS = before;
  }
}

/** The markers of `stream` once the deletes the sends started have landed (nothing awaits them), or after 3 s. */
async function markersOnceDeleted(stream) {
  let left = [];
  await pollUntil(
    async () => {
      left = await markers(stream);
      return left.length < PER_DELETE;
    },
    { timeoutMs: 3000, intervalMs: 20 },
  ).catch(() => {});
  return left;
}

const stored = (stream) => withServer((redis) => redis.xlen(stream));

describe.each([
  ['on the JavaScript thread', true],
  ['on the runtime', false],
])('spent batch markers, sends %s', (_, directSends) => {
  it(`${SENDS} sequential sends leave at most one set of markers`, async () => {
    const { t, stream } = transportOn({ directSends });
    for (let n = 0; n < SENDS; n += 1) await t.send(envelopeOf(`s-${n}`));
    expect(await stored(stream)).toBe(SENDS);
    const left = await markersOnceDeleted(stream);
    expect(left.length).toBeLessThan(PER_DELETE);
    // The newest batches' markers are still there, until a full set goes: the count is real.
    expect(left.length).toBeGreaterThan(0);
    expect(left.every((key) => key.includes(stream))).toBe(true);
  });

  it(`${SENDS * 4} sends 64 at a time leave at most one set of markers`, async () => {
    const { t, stream } = transportOn({ directSends });
    let next = 0;
    const lane = async () => {
      while (next < SENDS * 4) {
        const n = next;
        next += 1;
        await t.send(envelopeOf(`c-${n}`));
      }
    };
    await Promise.all(Array.from({ length: 64 }, lane));
    expect(await stored(stream)).toBe(SENDS * 4);
    const left = await markersOnceDeleted(stream);
    expect(left.length).toBeLessThan(PER_DELETE);
  });
});
