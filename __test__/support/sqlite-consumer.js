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
const { toParent, reportError } = require('./ipc');

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
  await toParent({ type: 'ready' });
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
        await toParent({ type: 'claimed', id, n });
        clearInterval(idleTimer);
        await new Promise(() => {});
      }
      await toParent({ type: 'got', id, n, redelivery: envelope.last(RedeliveryStamp)?.retryCount ?? 0 });
      await transport.ack(envelope);
      handled.push(id);
      await toParent({ type: 'acked', id });
      lastActivity = Date.now();
    }
  } finally {
    clearInterval(idleTimer);
  }
  await transport.close();
  await toParent({ type: 'done', handled, reason: stopReason });
  if (process.connected) process.disconnect();
}

if (require.main === module) main().catch(reportError);

module.exports = { ProcessMessage, processMessageSerializer, processEnvelope };
