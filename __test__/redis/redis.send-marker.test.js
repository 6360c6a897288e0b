'use strict';

// What keeps a Redis batch of sends stored once however often it is sent
// (src/engines/redis/writes.rs, src/engines/redis/scripts/insert.lua): a first attempt is one
// transaction, `MULTI`, its `XADD`s, `SET <marker> * PX 60000`, `EXEC`; a repeat (sent because
// the reply to an attempt was lost) runs the insert script, which must find what that
// transaction stored and add nothing. The transaction is made here as the transport makes it,
// and the script run as the transport runs it, on the shared server, each case on a stream of
// its own.

const fs = require('node:fs');
const path = require('node:path');
const { redis } = require('../support/engines');
const { withIoredis } = require('../support/redis-server');
const { sleep } = require('../support/transport-helpers');

const INSERT = fs.readFileSync(path.join(__dirname, '..', '..', 'src', 'engines', 'redis', 'scripts', 'insert.lua'), 'utf8');
const MARKER_TTL_MS = 60000;

beforeAll(async () => {
  await redis.requireServer();
});

const withServer = (use) => withIoredis(redis.runDsn(), use);

/** A stream of its own and its batch marker's key, removed after the case. */
const made = [];
function target() {
  const { stream } = redis.target('marker');
  const marker = `${stream}:sent:${made.length}`;
  made.push(stream, marker);
  return { stream, marker };
}

afterAll(async () => {
  await withServer((r) => r.del(made));
});

/** `[body, headers]` of `n` messages labelled `label`. */
const batch = (label, n) => Array.from({ length: n }, (_, i) => [JSON.stringify({ id: `${label}-${i}` }), '{"type":"T"}']);

/** A first attempt, as the transport makes it: one transaction marking the batch stored. */
async function storeByTransaction({ stream, marker }, messages) {
  return withServer(async (r) => {
    const multi = r.multi();
    for (const [body, headers] of messages) multi.xadd(stream, '*', 'body', body, 'headers', headers);
    multi.set(marker, '*', 'PX', MARKER_TTL_MS);
    const answers = await multi.exec();
    return answers.slice(0, messages.length).map(([, id]) => id);
  });
}

/** A repeat of the batch, as the transport sends it: the insert script. */
async function repeat({ stream, marker }, messages) {
  return withServer((r) => r.eval(INSERT, 2, stream, marker, MARKER_TTL_MS, ...messages.flat()));
}

const entries = ({ stream }) => withServer((r) => r.xrange(stream, '-', '+'));

describe('a batch repeated after its first attempt was stored by a transaction', () => {
  it('answers the ids that transaction stored, and adds nothing', async () => {
    const t = target();
    const messages = batch('a', 3);
    // The same bodies stored earlier (another send, 30 ms before) are not this batch's.
    await withServer((r) => r.xadd(t.stream, '*', 'body', messages[0][0], 'headers', messages[0][1]));
    await sleep(30);
    const ids = await storeByTransaction(t, messages);
    await withServer((r) => r.xadd(t.stream, '*', 'body', messages[0][0], 'headers', messages[0][1]));

    expect(await repeat(t, messages)).toEqual(ids);
    expect(await entries(t)).toHaveLength(5);
  });

  it('finds the batch among entries of other batches written in the same millisecond', async () => {
    const t = target();
    const messages = batch('b', 2);
    const before = batch('other', 2);
    const ids = await withServer(async (r) => {
      const multi = r.multi();
      for (const [body, headers] of before) multi.xadd(t.stream, '*', 'body', body, 'headers', headers);
      // Its first message, then another: not a run of the whole batch.
      multi.xadd(t.stream, '*', 'body', messages[0][0], 'headers', messages[0][1]);
      for (const [body, headers] of messages) multi.xadd(t.stream, '*', 'body', body, 'headers', headers);
      multi.set(t.marker, '*', 'PX', MARKER_TTL_MS);
      const answers = await multi.exec();
      return answers.slice(3, 5).map(([, id]) => id);
    });

    expect(await repeat(t, messages)).toEqual(ids);
    expect(await entries(t)).toHaveLength(5);
  });

  it('answers no ids once those entries were read and deleted, and stores nothing again', async () => {
    const t = target();
    const messages = batch('c', 2);
    const ids = await storeByTransaction(t, messages);
    await withServer((r) => r.xdel(t.stream, ...ids));

    expect(await repeat(t, messages)).toEqual([]);
    expect(await entries(t)).toEqual([]);
  });
});

describe('the insert script on its own', () => {
  it('stores a batch it has no marker for, and answers a repeat with the same ids', async () => {
    const t = target();
    const messages = batch('d', 2);
    const ids = await repeat(t, messages);
    expect(ids).toHaveLength(2);
    expect(await withServer((r) => r.get(t.marker))).toBe(ids.join(' '));

    expect(await repeat(t, messages)).toEqual(ids);
    expect(await entries(t)).toHaveLength(2);
  });
});
