'use strict';

// A consumer process for the kill -9 scenario (consumer-crash.faults.test.js). It consumes with
// the code under test, acks the first FAULT_ACK_FIRST messages, then keeps the next one in flight
// (never settled) while its transport holds whatever else its claim prefetched, and waits for
// the parent's SIGKILL.
//
// Forked with an IPC channel and these environment variables:
//   FAULT_ENGINE      'postgres' | 'mariadb' | 'sqlite' | 'redis'
//   FAULT_OPTIONS     JSON options for support/engines.js makeTransport (dsn, queue, ackMode, leaseMs, …)
//   FAULT_ACK_FIRST   how many messages to ack before holding one (default 3)
//
// Protocol (process.send):
//   child → parent  { type: 'ready' }
//   parent → child  { type: 'start' }
//   child → parent  { type: 'got', key, id }          a delivery (before its ack)
//   child → parent  { type: 'acked', key, id }        its ack() resolved
//   child → parent  { type: 'holding', key, id }      the message kept in flight; kill me now
//   child → parent  { type: 'error', message, stack } then exit code 1

const { TransportMessageIdStamp } = require('@schally/nestjs-messenger');
const { makeTransport } = require('./engines');

const send = (message) =>
  new Promise((resolve) => {
    if (!process.connected) return resolve();
    process.send(message, () => resolve());
  });

async function main() {
  const engine = process.env.FAULT_ENGINE;
  const options = JSON.parse(process.env.FAULT_OPTIONS);
  const ackFirst = Number(process.env.FAULT_ACK_FIRST ?? 3);
  const transport = makeTransport(engine, options);
  const started = new Promise((resolve) => {
    process.on('message', (message) => {
      if (message?.type === 'start') resolve();
    });
  });
  await send({ type: 'ready' });
  await started;

  const controller = new AbortController();
  let handled = 0;
  for await (const envelope of transport.get(controller.signal)) {
    const key = envelope.message.key;
    const id = String(envelope.last(TransportMessageIdStamp).id);
    await send({ type: 'got', key, id });
    if (handled < ackFirst) {
      await transport.ack(envelope);
      handled += 1;
      await send({ type: 'acked', key, id });
      continue;
    }
    await send({ type: 'holding', key, id });
    // In flight forever, with the rest of the claim prefetched behind it, until SIGKILL.
    setInterval(() => {}, 60_000);
    await new Promise(() => {});
  }
}

main().catch(async (error) => {
  await send({ type: 'error', message: String(error?.message ?? error), stack: String(error?.stack) });
  process.exitCode = 1;
  if (process.connected) process.disconnect();
});
