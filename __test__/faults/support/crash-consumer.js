'use strict';

// A consumer process for the kill -9 scenario (consumer-crash.faults.test.js) and the frozen
// consumer scenario (frozen-consumer.faults.test.js). It consumes with the code under test, acks
// the first FAULT_ACK_FIRST messages, then keeps the next one in flight while its transport holds
// whatever else its claim prefetched, and waits for the parent's SIGKILL, or (after a SIGSTOP
// and SIGCONT) for the parent to tell it to settle the held message at last.
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
//   parent → child  { type: 'settle', how: 'ack' | 'reject' }   settle the held message now
//   child → parent  { type: 'settled', how, staleSettles }       once settled (acks written)
//   child → parent  { type: 'error', message, stack } then exit code 1

const { TransportMessageIdStamp } = require('@schally/nestjs-messenger');
const { makeTransport } = require('./engines');
const { toParent, reportError } = require('../../support/ipc');


async function main() {
  const engine = process.env.FAULT_ENGINE;
  const options = JSON.parse(process.env.FAULT_OPTIONS);
  const ackFirst = Number(process.env.FAULT_ACK_FIRST ?? 3);
  const transport = makeTransport(engine, options);
  let held;
  const started = new Promise((resolve) => {
    process.on('message', (message) => {
      if (message?.type === 'start') resolve();
      if (message?.type === 'settle') settleHeld(message.how).catch(reportError);
    });
  });
  /** Settles the held message; getMessageCount() waits for a write-behind ack's delete. */
  async function settleHeld(how) {
    await (how === 'reject' ? transport.reject(held) : transport.ack(held));
    await transport.getMessageCount();
    await toParent({ type: 'settled', how, staleSettles: transport.stats().staleSettles });
  }
  await toParent({ type: 'ready' });
  await started;

  const controller = new AbortController();
  let handled = 0;
  for await (const envelope of transport.get(controller.signal)) {
    const key = envelope.message.key;
    const id = String(envelope.last(TransportMessageIdStamp).id);
    await toParent({ type: 'got', key, id });
    if (handled < ackFirst) {
      await transport.ack(envelope);
      handled += 1;
      await toParent({ type: 'acked', key, id });
      continue;
    }
    held = envelope;
    await toParent({ type: 'holding', key, id });
    // In flight until the parent says to settle it, with the rest of the claim prefetched behind it, until SIGKILL.
    setInterval(() => {}, 60_000);
    await new Promise(() => {});
  }
}

main().catch(reportError);
