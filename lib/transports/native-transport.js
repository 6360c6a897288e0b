'use strict';

// lib/transports/: the transport classes the package exports and what they share. This file
// is the base every engine's transport extends; sql-transport.js and redis-streams-transport.js
// are the drop-ins for upstream's SQL and Redis transports, outbox.js is the SQL transport's
// transactional outbox, settle-tracker.js the settle state close() waits for, and send-pipe.js
// the sends settled in batches through one native callback. They build on options/, codec/,
// telemetry/ and native/; nothing else in lib/ imports them.

const {
  ReceivedStamp,
  RedeliveryStamp,
  TransportError,
  TransportMessageIdStamp,
} = require('@schally/nestjs-messenger');
const { native, nativeSync, withCode, withOutcome } = require('../native/errors');
const { SettleTracker } = require('./settle-tracker');
const { SendPipe } = require('./send-pipe');
const { encodeEnvelope, decodeStored } = require('../codec/envelope-codec');
const { EventLog } = require('../telemetry/event-log');
const { nestLogger } = require('../telemetry/nest-logger');
const { positiveNumber } = require('../options/option-checks');
const { telemetryFor } = require('../telemetry/telemetry');

const DEFAULT_LIST_LIMIT = 100;
const DEFAULT_HEALTH_TIMEOUT_MS = 2000;
/** How often a transport with write-behind acks pending checks whether they are written. */
const ACK_HOLD_CHECK_MS = 10;
/** How much longer than one write's bound pending acks may go unwritten before the process is let go. */
const ACK_HOLD_MARGIN_MS = 1000;

/**
 * What every native transport does in JavaScript: encode and decode through the app's
 * serializer, stamp envelopes with the app's own stamp classes, keep the ADR-007 settle state,
 * and drive the native queue (batched claims taken with a sync call, coalesced writes).
 * Engine-specific subclasses build the native queue and name themselves in messages.
 */
class NativeTransport {
  #queue;
  #serializer;
  #name;
  #label;
  #writeBehind;
  #settles = new SettleTracker();
  /** @type {SendPipe} */
  #sends;
  #closing = false;
  #closed = undefined;
  #activeLoops = 0;
  #nextWaitId = 1;
  #poisonRemoved = 0;
  #telemetry;
  /** Where events go (the `logger` option, Nest's `Logger`, process warnings); none for `logger: false`. */
  #events;
  /** A timer that holds the event loop while write-behind acks are pending. */
  #ackHold;

  /**
   * @param {object} queue the native queue (binding's NativeQueue)
   * @param {{ serializer: import('@schally/nestjs-messenger').Serializer, name: string, label: string, ackMode: string, messaging: { system: string, destination: string }, logger: import('../index').TransportLogger | false | undefined }} identity
   *   `messaging`: the OpenTelemetry `messaging.system` and `messaging.destination.name`;
   *   `logger`: the checked option (undefined: Nest's `Logger` if the app has it, else process
   *   warnings; false: silent)
   */
  constructor(queue, { serializer, name, label, ackMode, messaging, logger }) {
    this.#queue = queue;
    this.#sends = new SendPipe(queue, (count) => this.#settles.sendsSettled(count));
    this.#writeBehind = ackMode === 'write-behind';
    this.#serializer = serializer;
    this.#name = name;
    this.#label = label;
    this.#telemetry = telemetryFor(messaging.system, messaging.destination);
    this.#telemetry?.watch(this);
    const context = `${label} transport "${name}"`;
    if (logger !== false) this.#events = new EventLog(queue, logger ?? nestLogger(context), context);
  }

  /** Creates what the queue needs if missing (table and index, consumer group); always runs. */
  async setup() {
    await this.#settles.track(native(this.#queue.setup()));
  }

  /** @param {import('@schally/nestjs-messenger').Envelope} envelope */
  async send(envelope) {
    if (this.#closing) {
      throw notApplied(withCode(new TransportError(`Cannot send on a ${this.#label} transport that is closing or closed.`), 'E_CLOSED'));
    }
    let sending;
    try {
      sending = this.#queueSend(envelope);
    } catch (error) {
      throw notApplied(error);
    }
    const id = await unknownUnlessSaid(sending);
    // No id: a Redis send repeated after a lost reply found its batch stored, and its entries
    // already read and deleted (docs/semantics.md, "Sends").
    return id === '' ? envelope : envelope.with(new TransportMessageIdStamp(id));
  }

  /**
   * Encodes and queues a send synchronously (sends keep their call order); a message the
   * storage is known to refuse throws here, before anything is written. Not part of `send`:
   * an async function keeps its locals until it returns, and the encoded body (as large as
   * the message) would then live in the JavaScript heap for as long as the send is in flight.
   * @param {import('@schally/nestjs-messenger').Envelope} envelope
   * @returns {Promise<string>}
   */
  #queueSend(envelope) {
    const { body, headers, delayMs } = encodeEnvelope(this.#serializer, envelope);
    const sending = this.#sends.send(body, headers, delayMs);
    this.#settles.sendQueued();
    return this.#telemetry ? this.#telemetry.send(sending) : sending;
  }

  /**
   * Yields due messages until `signal` aborts or the transport closes; then returns.
   * @param {AbortSignal} [signal]
   */
  async *get(signal) {
    if (signal?.aborted || this.#closing) return;
    const waitId = this.#nextWaitId++;
    const onAbort = () => this.#queue.cancelWait(waitId);
    signal?.addEventListener('abort', onAbort, { once: true });
    this.#activeLoops += 1;
    try {
      while (!signal?.aborted && !this.#closing) {
        // [id, body, headers]: an array is cheaper to hand over than an object, per message.
        const taken = this.#queue.take();
        if (taken === null) {
          await native(this.#queue.fill(waitId));
          if (this.#telemetry) this.#telemetry.filled(this.#queue.stats());
          this.#events?.drain();
          continue;
        }
        const id = taken[0];
        const envelope = decodeStored(this.#serializer, taken[1], taken[2]);
        if (envelope === undefined) {
          // Poison (undecodable or unregistered type): removed, as upstream does, so it
          // cannot loop; get() goes on.
          await this.#settles.track(native(this.#queue.ack(id)));
          this.#poisonRemoved += 1;
          this.#events?.report(
            'warn',
            `Removed a message that cannot be decoded (poison): id ${id}, type ${typeOf(taken[2])}.`,
            'NMN_POISON_REMOVED',
          );
          continue;
        }
        this.#settles.deliver(id);
        if (this.#telemetry) this.#telemetry.consumed();
        yield envelope.with(new ReceivedStamp(this.#name), new TransportMessageIdStamp(id));
      }
    } finally {
      signal?.removeEventListener('abort', onAbort);
      this.#queue.forgetWait(waitId);
      this.#activeLoops -= 1;
      if (this.#activeLoops === 0) {
        // Nobody is left to take what was prefetched: make it claimable again before get()
        // is done. If that fails (server gone), the rows come back after
        // redeliverTimeoutSeconds like any unsettled claim; get() still ends normally.
        await this.#settles.track(native(this.#queue.releasePrefetched())).catch(() => {});
      }
    }
  }

  /** @param {import('@schally/nestjs-messenger').Envelope} envelope */
  async ack(envelope) {
    const id = messageIdOf(envelope);
    this.#settles.settle(id);
    // Ungated and idempotent: deleting a missing row is a no-op (ADR-007); this is also what
    // makes acking a find() result delete it. Write-behind: recorded now (a sync call), written
    // with the acks around it; close(), list(), find() and getMessageCount() wait for it.
    if (this.#writeBehind) {
      try {
        nativeSync(() => this.#queue.ackLater(id));
      } catch (error) {
        throw notApplied(error);
      }
      this.#holdLoopForAcks();
      return;
    }
    await unknownUnlessSaid(this.#settles.track(native(this.#queue.ack(id))));
  }

  /**
   * Keeps the event loop alive until every recorded ack is written, as a pending socket write
   * would: an `ack()` that resolved is not dropped by a process that just runs out of work. Not
   * for ever: once no ack has been written for longer than one write's bound (plus a margin),
   * the server is taken for gone, the acks still pending are reported (`NMN_ACKS_UNWRITTEN`,
   * see `#warn`) and the loop is let go, so a process that ends without `close()`
   * exits; those messages are delivered again after their lease.
   */
  #holdLoopForAcks() {
    if (this.#ackHold !== undefined) return;
    const boundMs = this.#queue.writeBoundMs() + ACK_HOLD_MARGIN_MS;
    let pending = this.#queue.pendingAcks();
    let progressAt = Date.now();
    this.#ackHold = setInterval(() => {
      const now = this.#queue.pendingAcks();
      if (now === 0) {
        this.#releaseAckHold();
        return;
      }
      if (now < pending) progressAt = Date.now();
      pending = now;
      if (Date.now() - progressAt > boundMs) {
        this.#releaseAckHold();
        this.#warn(
          'NMN_ACKS_UNWRITTEN',
          `${now} acknowledgement(s) could not be confirmed written within ${boundMs} ms; the process is no longer kept alive for them: if it ends now, the messages of those not written are delivered again after their lease.`,
        );
      }
    }, ACK_HOLD_CHECK_MS);
  }

  /**
   * Reports a warning through the transport's logger, or as a process warning with `code` when
   * it has none; nowhere with `logger: false`.
   * @param {string} code
   * @param {string} message
   */
  #warn(code, message) {
    this.#events?.report('warn', message, code);
  }

  #releaseAckHold() {
    clearInterval(this.#ackHold);
    this.#ackHold = undefined;
  }

  /** @param {import('@schally/nestjs-messenger').Envelope} envelope */
  async reject(envelope) {
    let redelivered;
    try {
      redelivered = this.#startRedelivery(envelope);
    } catch (error) {
      throw notApplied(error);
    }
    if (redelivered === undefined) return;
    await unknownUnlessSaid(redelivered);
  }

  /**
   * Encodes the copy and starts its redelivery synchronously; `undefined` when this instance
   * has no delivery of `envelope` in flight (at most once per delivery). Not part of `reject`,
   * as `#queueSend` is not of `send`: the copy would stay in the heap while it is written.
   * @param {import('@schally/nestjs-messenger').Envelope} envelope
   * @returns {Promise<unknown> | undefined}
   */
  #startRedelivery(envelope) {
    const id = messageIdOf(envelope);
    if (!this.#settles.isInFlight(id)) return undefined;
    let copy;
    try {
      const previous = envelope.last(RedeliveryStamp)?.retryCount ?? 0;
      copy = encodeEnvelope(
        this.#serializer,
        envelope.withoutAll(RedeliveryStamp).with(new RedeliveryStamp(previous + 1)),
      );
    } catch (error) {
      this.#settles.settle(id);
      this.#queue.giveUp(id);
      throw error;
    }
    // Tracked before the in-flight entry goes, in the same tick, so close() never sees half
    // a settle.
    const redelivered = this.#settles.track(
      native(this.#queue.redeliver(id, copy.body, copy.headers, copy.delayMs)),
    );
    this.#settles.settle(id);
    return redelivered;
  }

  /** @param {number} [limit] */
  async *list(limit = DEFAULT_LIST_LIMIT) {
    const rows = await this.#settles.track(native(this.#queue.list(limit)));
    for (const stored of rows) {
      const envelope = this.#decodeListed(stored);
      if (envelope !== undefined) yield envelope;
    }
  }

  /** @param {string} id */
  async find(id) {
    const stored = await this.#settles.track(native(this.#queue.find(String(id))));
    if (stored === null) return undefined;
    return this.#decodeListed(stored);
  }

  /**
   * A listed or found message stamped as upstream's list() and find() stamp it (the stamps
   * its get() adds, in the same order), so an inspection tool sees the same envelope from
   * either implementation. Undefined when it cannot be decoded (skipped, not removed).
   * @param {{ id: string, body: string, headers: string }} stored
   */
  #decodeListed(stored) {
    const envelope = decodeStored(this.#serializer, stored.body, stored.headers);
    return envelope?.with(new ReceivedStamp(this.#name), new TransportMessageIdStamp(stored.id));
  }

  /** Due messages not in flight, as upstream counts them. */
  async getMessageCount() {
    return this.#settles.track(native(this.#queue.count()));
  }

  /**
   * Checks that the transport reaches its storage, within `timeoutMs` (default 2000): reads the
   * queue's message count. Never throws: `{ status: 'up', details }` with the count and the
   * latency, or `{ status: 'down', details }` with the error (no password in it). For
   * `@nestjs/terminus`, see docs/operations.md.
   * @param {{ timeoutMs?: number }} [options]
   * @returns {Promise<import('../index').TransportHealth>}
   */
  async health(options = {}) {
    const timeoutMs = positiveNumber(options, { timeoutMs: DEFAULT_HEALTH_TIMEOUT_MS }, 'timeoutMs');
    const transport = this.#name;
    if (this.#closing) return { status: 'down', details: { transport, error: 'The transport is closing or closed.' } };
    try {
      const { messages, latencyMs } = await this.#settles.track(native(this.#queue.health(timeoutMs)));
      return { status: 'up', details: { transport, messages, latencyMs } };
    } catch (error) {
      return { status: 'down', details: { transport, error: error.message } };
    }
  }

  /**
   * A snapshot of this instance, read synchronously without I/O (see `TransportStats`).
   * @returns {import('../index').TransportStats}
   */
  stats() {
    const s = this.#queue.stats();
    return {
      buffered: s.buffered,
      inFlight: s.inFlight,
      pendingAcks: s.pendingAcks,
      ackWriteFailingMs: s.ackWriteFailingMs ?? null,
      sent: s.sent,
      claims: s.claims,
      claimed: s.claimed,
      emptyClaims: s.emptyClaims,
      sharedPolls: s.sharedPolls,
      acked: s.acked,
      rejected: s.rejected,
      poisonRemoved: this.#poisonRemoved,
      lastClaimSize: s.lastClaimSize,
      lastClaimMs: s.lastClaimMs,
      reconnects: s.reconnects,
      staleSettles: s.staleSettles,
      trackedIds: s.trackedIds,
      lastError: s.lastError ?? null,
    };
  }

  /**
   * Refuses new sends and claims, waits for in-flight settles, gives back prefetched rows,
   * then releases connections. Idempotent.
   */
  close() {
    this.#closed ??= this.#close();
    return this.#closed;
  }

  async #close() {
    this.#closing = true;
    this.#telemetry?.unwatch();
    this.#queue.beginClose();
    await this.#settles.drained();
    try {
      await unknownUnlessSaid(native(this.#queue.close()));
    } finally {
      // Nothing is written after close (its error says how many acks were not).
      this.#releaseAckHold();
      this.#events?.stop();
    }
  }
}

/** A stored message's type header (the core serializer's `X-Message-Type`), for a log line. */
function typeOf(storedHeaders) {
  try {
    const headers = JSON.parse(storedHeaders);
    const type = headers?.['X-Message-Type'] ?? headers?.type;
    return typeof type === 'string' ? JSON.stringify(type) : 'unknown';
  } catch {
    return 'unknown';
  }
}

function messageIdOf(envelope) {
  const stamp = envelope.last(TransportMessageIdStamp);
  if (stamp === undefined) {
    throw notApplied(withCode(new TransportError('Cannot ack or reject an envelope without a TransportMessageIdStamp.'), 'E_TRANSPORT'));
  }
  return String(stamp.id);
}

/**
 * A write refused before anything went out (a closed transport, an envelope the serializer
 * cannot encode, a full backlog): nothing was applied.
 * @template T
 * @param {T} error
 * @returns {T}
 */
function notApplied(error) {
  return withOutcome(error, 'not-applied');
}

/**
 * A write that went out: its rejection says what it did, or else that the outcome is unknown.
 * @template T
 * @param {Promise<T>} writing
 * @returns {Promise<T>}
 */
function unknownUnlessSaid(writing) {
  return writing.catch((error) => {
    throw withOutcome(error, 'unknown');
  });
}

module.exports = { NativeTransport };
