'use strict';

// A Redis consumer's get() aborted while its blocking read is under way ends at once. The read
// goes over the consumer's own connection and is ended by a CLIENT UNBLOCK sent over another
// one, so the UNBLOCK can reach the server first and find nothing blocked; the read would then
// block its full time (the poll interval and a second more). Before the fix, the first get() of
// a process aborted at once often took about 1.1 s to end (default poll interval; the benchmark's
// four competing consumers stopped that late in two rounds of three), and one whose read a slow
// path held back ended only after 2 s, with the read's connection dropped. Runs on the shared
// server: it stops or breaks nothing, and each case has a stream of its own.

const { RedisStreamsTransport } = require('../..');
const { redis } = require('../support/engines');
const { startProxy, viaProxy } = require('./support/proxy');
const { serializer } = require('../support/transport-helpers');

/** Far longer than any case here: a read left blocked would hold get() for it. */
const POLL_INTERVAL_MS = 5000;
/** What an aborted get() may take to end: a few round trips, not a blocked read's time. */
const ENDS_WITHIN_MS = 500;

let proxy;
let transport;
let target;

beforeAll(async () => {
  await redis.requireServer();
});

beforeEach(async () => {
  proxy = await startProxy({ targetPort: Number(new URL(redis.dsn).port) });
  target = redis.target('aborted-read');
  transport = new RedisStreamsTransport({
    dsn: viaProxy(redis.dsn, proxy),
    ...target,
    pollIntervalMs: POLL_INTERVAL_MS,
    serializer: serializer(),
  });
  await transport.getMessageCount();
});

afterEach(async () => {
  await transport.close();
  await proxy.close();
  await redis.removeTarget(target);
});

/** Starts get() and returns its first step's promise with the controller that aborts it. */
function startGet() {
  const controller = new AbortController();
  const next = transport.get(controller.signal)[Symbol.asyncIterator]().next();
  return { controller, next };
}

/** Aborts and returns how long the get() took to end, and how it ended. */
async function abortAndTime({ controller, next }) {
  const started = performance.now();
  controller.abort();
  const ended = await next.then(
    (step) => ({ done: step.done }),
    (error) => ({ error: error.message }),
  );
  return { ms: performance.now() - started, ended };
}

/** The consumer's blocking read (its claims read without BLOCK). */
const blockingRead = (chunk) => chunk.includes('XREADGROUP') && chunk.includes('BLOCK');

/** The blocking connection's first command, as it opens (it learns its id for CLIENT UNBLOCK). */
const clientId = '$6\r\nCLIENT\r\n$2\r\nID\r\n';

it('a get() aborted while its blocking connection opens sends no read, and ends at once', async () => {
  // Opening is slow: the abort must not wait for it.
  const opening = proxy.holdBack(clientId, 1000);
  let readSent = false;
  proxy.holdBack(blockingRead, 150).then(() => {
    readSent = true;
  });
  const get = startGet();
  await opening;
  const { ms, ended } = await abortAndTime(get);
  expect(ended).toEqual({ done: true });
  expect(ms).toBeLessThan(ENDS_WITHIN_MS);
  // Sent after the abort, the read would race the UNBLOCK that is to end it.
  await new Promise((resolve) => setTimeout(resolve, 200));
  expect(readSent).toBe(false);
});

it('a get() aborted while a slow path holds its blocking read back ends at once', async () => {
  // The blocking connection is open and used once, so the next read is the one held back.
  const warm = startGet();
  await new Promise((resolve) => setTimeout(resolve, 50));
  await abortAndTime(warm);
  const caught = proxy.holdBack(blockingRead, 150);
  const get = startGet();
  await caught;
  const { ms, ended } = await abortAndTime(get);
  expect(ended).toEqual({ done: true });
  expect(ms).toBeLessThan(ENDS_WITHIN_MS);
  // The read's connection was kept: the next get() blocks and is ended as promptly.
  const accepted = proxy.accepted;
  const again = startGet();
  await new Promise((resolve) => setTimeout(resolve, 50));
  expect((await abortAndTime(again)).ms).toBeLessThan(ENDS_WITHIN_MS);
  expect(proxy.accepted).toBe(accepted);
});
