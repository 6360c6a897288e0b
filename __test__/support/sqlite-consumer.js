'use strict';

// A consumer process for the multi-process SQLite tests (__test__/sql/sqlite.processes.test.js).
//
// Forked with an IPC channel and these environment variables:
//   CONSUMER_DSN       sqlite DSN of the shared file
//   CONSUMER_QUEUE     queue name
//   CONSUMER_MODE      'ack' (default): get(), report, ack, repeat
//                      'hold': get() one message, report it, never ack it (the parent kills us)
//   CONSUMER_REDELIVER_TIMEOUT_SECONDS  redeliverTimeoutSeconds (default 3600)
//   CONSUMER_POLL_MS   pollIntervalMs (default 20)
//   CONSUMER_IDLE_EXIT_MS  stop once nothing arrived for this long (default 10000; a safety net,
//                      the parent normally says when to stop)
//
// Protocol (process.send):
//   child → parent  { type: 'ready' }                     transport built and set up
//   parent → child  { type: 'start' }                     begin consuming
//   child → parent  { type: 'got', id, n, redelivery }    a delivery (before its ack)
//   child → parent  { type: 'acked', id }                 its ack committed
//   child → parent  { type: 'claimed', id, n }            (hold mode) the message we keep
//   parent → child  { type: 'stop' }                      end the get() loop, close, exit
//   child → parent  { type: 'done', handled, reason }     every id this process acked
//   child → parent  { type: 'error', message, stack }     then exit code 1

const { Envelope, JsonSerializer, RedeliveryStamp, TransportMessageIdStamp } = require('@schally/nestjs-messenger');

/** The message class both the parent and the children register. */
class ProcessMessage {
  /**
   * @param {number} n
   * @param {string} [text]
   */
  constructor(n, text = '') {
    this.n = n;
    this.text = text;
  }
}

function processMessageSerializer() {
  return new JsonSerializer([ProcessMessage]);
}

function processEnvelope(n, stamps = []) {
  return new Envelope(new ProcessMessage(n, `message ${n}`), stamps);
}

async function main() {
  const { SqlTransport } = require('../..');
  const env = process.env;
  const mode = env.CONSUMER_MODE ?? 'ack';
  const idleExitMs = Number(env.CONSUMER_IDLE_EXIT_MS ?? 10000);
  const transport = new SqlTransport({
    dsn: env.CONSUMER_DSN,
    queueName: env.CONSUMER_QUEUE,
    name: 'process-consumer',
    serializer: processMessageSerializer(),
    redeliverTimeoutSeconds: Number(env.CONSUMER_REDELIVER_TIMEOUT_SECONDS ?? 3600),
    pollIntervalMs: Number(env.CONSUMER_POLL_MS ?? 20),
  });
  const send = (message) =>
    new Promise((resolve) => {
      if (!process.connected) return resolve();
      process.send(message, () => resolve());
    });

  const controller = new AbortController();
  let stopReason = 'stopped';
  let lastActivity = Date.now();
  const started = new Promise((resolve) => {
    process.on('message', (message) => {
      if (message?.type === 'start') resolve();
      if (message?.type === 'stop') {
        stopReason = 'stopped';
        controller.abort();
        resolve();
      }
    });
  });
  process.on('disconnect', () => {
    stopReason = 'parent gone';
    controller.abort();
  });

  await transport.setup();
  await transport.getMessageCount();
  await send({ type: 'ready' });
  await started;

  const idleTimer = setInterval(() => {
    if (Date.now() - lastActivity > idleExitMs) {
      stopReason = 'idle';
      controller.abort();
    }
  }, 50);
  const handled = [];
  try {
    for await (const envelope of transport.get(controller.signal)) {
      lastActivity = Date.now();
      const id = String(envelope.last(TransportMessageIdStamp).id);
      const n = envelope.message.n;
      if (mode === 'hold') {
        // Keep it in flight forever: this process is about to be killed.
        await send({ type: 'claimed', id, n });
        clearInterval(idleTimer);
        await new Promise(() => {});
      }
      await send({ type: 'got', id, n, redelivery: envelope.last(RedeliveryStamp)?.retryCount ?? 0 });
      await transport.ack(envelope);
      handled.push(id);
      await send({ type: 'acked', id });
      lastActivity = Date.now();
    }
  } finally {
    clearInterval(idleTimer);
  }
  await transport.close();
  await send({ type: 'done', handled, reason: stopReason });
  if (process.connected) process.disconnect();
}

if (require.main === module) {
  main().catch(async (error) => {
    if (process.connected) {
      await new Promise((resolve) =>
        process.send({ type: 'error', message: String(error?.message ?? error), stack: String(error?.stack) }, () =>
          resolve(),
        ),
      );
    }
    process.exitCode = 1;
    if (process.connected) process.disconnect();
  });
}

module.exports = { ProcessMessage, processMessageSerializer, processEnvelope };
