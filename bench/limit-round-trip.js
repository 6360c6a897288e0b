'use strict';

// The floor B2 (sequential sends) runs on, on Redis: one XADD of the message B2 sends, written
// as RESP on a bare Node socket and awaited before the next, with nothing between (no client
// library, no envelope, no serializer). A sequential send is at least this round trip, so
// B2's native and upstream rates read against it say how much of a send is the transport's.

const net = require('node:net');
const { ENGINES } = require('./engines');
const { onFreshQueue } = require('./limit-queue');
const { appStoredForm } = require('./message');
const { RUNS } = require('./targets');

/** One command as RESP: an array of bulk strings. */
function resp(args) {
  let out = `*${args.length}\r\n`;
  for (const arg of args) out += `$${Buffer.byteLength(arg)}\r\n${arg}\r\n`;
  return out;
}

/** Resolves each write's one reply (a bulk string or an error), in order. */
function roundTrips(socket) {
  let buffered = Buffer.alloc(0);
  let waiting;
  socket.on('data', (chunk) => {
    buffered = buffered.length === 0 ? chunk : Buffer.concat([buffered, chunk]);
    const lineEnd = buffered.indexOf('\r\n');
    if (lineEnd < 0 || waiting === undefined) return;
    const first = String.fromCharCode(buffered[0]);
    if (first === '-') {
      const error = new Error(buffered.subarray(1, lineEnd).toString());
      buffered = Buffer.alloc(0);
      waiting.reject(error);
      return;
    }
    const length = Number(buffered.subarray(1, lineEnd).toString());
    const end = lineEnd + 2 + length + 2;
    if (buffered.length < end) return;
    const id = buffered.subarray(lineEnd + 2, lineEnd + 2 + length).toString();
    buffered = buffered.subarray(end);
    const { resolve } = waiting;
    waiting = undefined;
    resolve(id);
  });
  return (bytes) =>
    new Promise((resolve, reject) => {
      waiting = { resolve, reject };
      socket.write(bytes);
    });
}

/**
 * B2's round-trip floor on Redis, measured as B2 runs (the same count after the same warm-up,
 * in a fresh process): `{ rate, perSendMicros }`.
 */
function redisRoundTripFloor() {
  const { n, warmUp } = RUNS.sendSequential;
  return onFreshQueue('redis', 'round-trip', async (key) => {
    const url = new URL(ENGINES.redis.dsn);
    const socket = net.connect(Number(url.port || 6379), url.hostname);
    socket.setNoDelay(true);
    await new Promise((resolve, reject) => socket.once('connect', resolve).once('error', reject));
    try {
      const send = roundTrips(socket);
      const { body, headers } = appStoredForm('round-trip', 'RedisStreamsTransport');
      const xadd = () => send(resp(['XADD', key, '*', 'body', body, 'headers', headers]));
      for (let i = 0; i < warmUp; i += 1) await xadd();
      const started = performance.now();
      for (let i = 0; i < n; i += 1) await xadd();
      const seconds = (performance.now() - started) / 1000;
      return { rate: n / seconds, perSendMicros: (seconds * 1e6) / n };
    } finally {
      socket.destroy();
    }
  });
}

module.exports = { redisRoundTripFloor };
