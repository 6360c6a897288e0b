'use strict';

// The engines a fault scenario runs on, behind one vocabulary: each builds transports of the
// code under test on a given DSN and queue (a SQL queue name, or a Redis stream key), with the
// scenario's options translated to the engine's own (`leaseMs` is redeliverTimeoutSeconds on
// SQL, claimIdleMs on Redis).

const crypto = require('node:crypto');
const { TransportMessageIdStamp } = require('@schally/nestjs-messenger');
const { SqlTransport, RedisStreamsTransport } = require('../../..');
const { faultSerializer } = require('./messages');

/** A queue name (SQL) or stream key (Redis) no other scenario uses. */
function uniqueQueue(engine, prefix = 'fault') {
  const tag = `${prefix}_${crypto.randomBytes(5).toString('hex')}`;
  return engine === 'redis' ? `messenger:{${tag}}` : tag;
}

/**
 * Options of the transport under test for `engine`.
 * @param {'postgres' | 'mariadb' | 'sqlite' | 'redis'} engine
 * @param {{ dsn: string, queue: string, name?: string, ackMode?: string, leaseMs?: number,
 *   connectTimeoutMs?: number, pollIntervalMs?: number, getNotifyTimeoutMs?: number, useNotify?: boolean,
 *   consumer?: string }} o
 */
function transportOptions(engine, o) {
  const common = {
    dsn: o.dsn,
    name: o.name ?? 'faults',
    serializer: faultSerializer(),
    ...(o.ackMode !== undefined && { ackMode: o.ackMode }),
    ...(o.connectTimeoutMs !== undefined && { connectTimeoutMs: o.connectTimeoutMs }),
    ...(o.pollIntervalMs !== undefined && { pollIntervalMs: o.pollIntervalMs }),
    ...(o.logger !== undefined && { logger: o.logger }),
  };
  if (engine === 'redis') {
    return {
      ...common,
      stream: o.queue,
      ...(o.leaseMs !== undefined && { claimIdleMs: o.leaseMs }),
      ...(o.consumer !== undefined && { consumer: o.consumer }),
    };
  }
  return {
    ...common,
    queueName: o.queue,
    ...(o.leaseMs !== undefined && { redeliverTimeoutSeconds: o.leaseMs / 1000 }),
    ...(engine === 'postgres' && o.getNotifyTimeoutMs !== undefined && { getNotifyTimeoutMs: o.getNotifyTimeoutMs }),
    ...(engine === 'postgres' && o.useNotify !== undefined && { useNotify: o.useNotify }),
  };
}

/** A transport of the code under test. */
function makeTransport(engine, options) {
  const o = transportOptions(engine, options);
  return engine === 'redis' ? new RedisStreamsTransport(o) : new SqlTransport(o);
}

/** What is still stored in the queue (claimed/pending rows and entries included): `[{ key, id }]`. */
async function stored(engine, options) {
  const inspector = makeTransport(engine, options);
  try {
    const entries = [];
    for await (const envelope of inspector.list(1000)) {
      entries.push({ key: envelope.message?.key, id: envelope.last(TransportMessageIdStamp)?.id });
    }
    return entries;
  } finally {
    await Promise.race([inspector.close().catch(() => {}), new Promise((resolve) => setTimeout(resolve, 5000).unref())]);
  }
}

/** Keys of what is still stored in the queue, in order. */
async function residue(engine, options) {
  return (await stored(engine, options)).map((entry) => entry.key);
}

module.exports = { uniqueQueue, transportOptions, makeTransport, stored, residue };
