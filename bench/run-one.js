'use strict';

// One measurement in a process of its own (fresh pools, fresh peak RSS). The parent passes a
// JSON job as argv[2] and reads one JSON line from stdout.

const { transportFactory, freshName } = require('./engines');
const { prefill } = require('./prefill');
const { consume } = require('./workloads/consume');
const { sendSequential, sendConcurrent } = require('./workloads/send');
const { wake } = require('./workloads/wake');
const { competing } = require('./workloads/competing');
const { soak } = require('./workloads/soak');

const WORKLOADS = { consume, sendSequential, sendConcurrent, wake, competing, soak };
const PREFILLED = new Set(['consume', 'competing', 'soak']);

async function ensureSchema(engine, makeTransport) {
  if (engine === 'redis') return;
  const transport = makeTransport();
  await transport.setup?.();
  await transport.close();
}

async function main() {
  const job = JSON.parse(process.argv[2]);
  const queue = job.engine === 'redis' ? `bench:{${freshName('s')}}` : freshName('bench');
  const makeTransport = transportFactory(job.engine, job.impl, queue);
  const nativeFactory = transportFactory(job.engine, 'native', queue);
  await ensureSchema(job.engine, nativeFactory);
  if (PREFILLED.has(job.workload)) await prefill(job.engine, queue, job.n, nativeFactory);
  const result = await WORKLOADS[job.workload]({ makeTransport, n: job.n });
  result.peakRssMb = process.resourceUsage().maxRSS / 1024;
  await cleanup(job.engine, queue);
  process.stdout.write(`${JSON.stringify(result)}\n`);
}

/** Removes what the run left (nothing, normally: every message was consumed or is dropped here). */
async function cleanup(engine, queue) {
  const { DSN } = require('./engines');
  if (engine === 'postgres') {
    const { Client } = require('pg');
    const client = new Client({ connectionString: DSN.postgres });
    await client.connect();
    await client.query('DELETE FROM messenger_messages WHERE queue_name = $1', [queue]);
    await client.end();
  } else if (engine === 'mysql') {
    const mysql = require('mysql2/promise');
    const connection = await mysql.createConnection(DSN.mysql);
    await connection.query('DELETE FROM messenger_messages WHERE queue_name = ?', [queue]);
    await connection.end();
  } else if (engine === 'redis') {
    const { Redis } = require('ioredis');
    const redis = new Redis(DSN.redis);
    await redis.del(queue, `${queue}:delayed`);
    redis.disconnect();
  }
}

main().then(
  () => process.exit(0),
  (error) => {
    process.stderr.write(`${error.stack ?? error}\n`);
    process.exit(1);
  },
);
