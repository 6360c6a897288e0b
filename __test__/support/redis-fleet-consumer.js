'use strict';

// A Redis Streams consumer process for the mixed-fleet tests
// (__test__/redis/redis.mixed-fleet.test.js): it reads from the stream with either the
// upstream TypeScript transport or ours, reports what it holds, and never acks — the parent
// then kills it with SIGKILL, leaving its entries pending in the consumer group.
//
// Forked with an IPC channel and these environment variables:
//   FLEET_IMPL           'upstream' (@schally/nestjs-messenger-transport-redis) or 'native'
//   FLEET_DSN            redis:// DSN
//   FLEET_STREAM         stream key
//   FLEET_CONSUMER       consumer name (so the parent can find our pending entries)
//   FLEET_CLAIM_IDLE_MS  claimIdleMs (default 30000: this process never reclaims anything)
//
// Protocol (process.send):
//   child → parent  { type: 'ready' }                 transport built
//   child → parent  { type: 'claimed', id, n }        first delivery, held forever, never acked
//   child → parent  { type: 'error', message, stack } then exit code 1

const { TransportMessageIdStamp } = require('@schally/nestjs-messenger');
// The message class the parent registers too (one class for both sides of every mixed fleet).
const { fleetSerializer } = require('./fleet');
const { toParent, reportError } = require('./ipc');

function makeTransport(impl, options) {
  if (impl === 'upstream') {
    const { RedisStreamsTransport } = require('@schally/nestjs-messenger-transport-redis');
    return new RedisStreamsTransport({ pollIntervalMs: 10, ...options });
  }
  if (impl === 'native') {
    const { RedisStreamsTransport } = require('../..');
    return new RedisStreamsTransport(options);
  }
  throw new Error(`unknown FLEET_IMPL ${String(impl)}`);
}

async function main() {
  const env = process.env;
  const transport = makeTransport(env.FLEET_IMPL, {
    dsn: env.FLEET_DSN,
    stream: env.FLEET_STREAM,
    consumer: env.FLEET_CONSUMER,
    name: `${env.FLEET_IMPL}-child`,
    serializer: fleetSerializer(),
    claimIdleMs: Number(env.FLEET_CLAIM_IDLE_MS ?? 30000),
  });
  await toParent({ type: 'ready' });
  const controller = new AbortController();
  for await (const envelope of transport.get(controller.signal)) {
    const id = String(envelope.last(TransportMessageIdStamp).id);
    await toParent({ type: 'claimed', id, n: envelope.message.n });
    // Hold it (and whatever else the read put in our pending list) until SIGKILL.
    setInterval(() => {}, 60000);
    await new Promise(() => {});
  }
}

if (require.main === module) main().catch(reportError);
