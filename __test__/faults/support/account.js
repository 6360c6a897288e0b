'use strict';

// The load harness of the fault scenarios: producers send numbered messages through transports
// of the code under test and record which sends resolved (confirmed) and which rejected, with
// which error class and after how long; consumers run get() loops that record every delivery
// and ack it, and record whether get() threw or ended by itself (then they start a new loop
// after a short pause, as a supervisor would, so that losses are still measured). At the end,
// an account: confirmed, delivered, acked, duplicates, lost (confirmed but never delivered),
// time to recover after the fault, and the bounds every operation kept or broke.
//
// Every wait here is bounded: an operation of the code under test that never settles is
// recorded as such (and the scenario fails on it), it does not hang the suite.

const { TransportMessageIdStamp } = require('@schally/nestjs-messenger');
const { faultEnvelope } = require('./messages');

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** `{ value }`, `{ error }`, or `{ timeout: true }` after `ms` (the promise goes on). */
async function settleWithin(promise, ms) {
  let timer;
  const timeout = new Promise((resolve) => {
    timer = setTimeout(() => resolve({ timeout: true }), ms);
  });
  try {
    return await Promise.race([
      Promise.resolve(promise).then(
        (value) => ({ value }),
        (error) => ({ error }),
      ),
      timeout,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * A get() loop on `consumer` acking each message: when each key came (`delivered`), what the
 * loop threw (`errors`), its `controller` (abort ends it) and the `loop` itself.
 */
function consumeAndAck(consumer) {
  const delivered = [];
  const errors = [];
  const controller = new AbortController();
  const loop = (async () => {
    for await (const envelope of consumer.get(controller.signal)) {
      delivered.push({ key: envelope.message.key, at: Date.now() });
      await consumer.ack(envelope);
    }
  })().catch((error) => errors.push(error));
  return { delivered, errors, controller, loop };
}

/**
 * Sends `prefix:n` fault envelopes on `transport` one after another, `everyMs` apart, until
 * `stop()` (which resolves once the last send has settled): `sends` holds each one's key,
 * start time, duration (`ms`) and fate (`ok`, else the error's `outcome` and `message`).
 */
function sendSteadily(transport, { prefix, everyMs }) {
  const sends = [];
  let sending = true;
  const loop = (async () => {
    for (let n = 0; sending; n += 1) {
      const at = Date.now();
      const outcome = await transport.send(faultEnvelope(`${prefix}:${n}`, n)).then(
        () => ({ ok: true }),
        (error) => ({ ok: false, outcome: error.outcome, message: error.message }),
      );
      sends.push({ key: `${prefix}:${n}`, at, ms: Date.now() - at, ...outcome });
      await sleep(everyMs);
    }
  })();
  return {
    sends,
    stop() {
      sending = false;
      return loop;
    },
  };
}

function classOf(error) {
  return error?.constructor?.name ?? typeof error;
}

function short(error) {
  const text = String(error?.message ?? error);
  return text.length > 160 ? `${text.slice(0, 160)}…` : text;
}

class LoadRun {
  /**
   * @param {{
   *   producers?: object[],        transports that send (one producer loop each)
   *   consumers?: object[],        transports that consume (one get() loop each)
   *   sendIntervalMs?: number,     pause between two rounds of sends of one producer
   *   burst?: number,              sends one producer makes at once each round (default 1)
   *   opBoundMs?: number,          how long a send or an ack may take before it counts as unbounded
   *   handlerMs?: number,          time a consumer spends on each message before acking it
   *   restartDelayMs?: number,     pause before a consumer starts a new get() after one threw/ended
   *   label?: string,
   * }} options
   */
  constructor({
    producers = [],
    consumers = [],
    sendIntervalMs = 20,
    burst = 1,
    opBoundMs = 10_000,
    handlerMs = 0,
    restartDelayMs = 250,
    label = 'p',
  }) {
    this.t0 = Date.now();
    this.sendIntervalMs = sendIntervalMs;
    this.burst = burst;
    this.opBoundMs = opBoundMs;
    this.handlerMs = handlerMs;
    this.restartDelayMs = restartDelayMs;
    this.sends = [];
    this.deliveries = [];
    this.acks = [];
    this.getThrows = [];
    this.getEnds = [];
    this.stops = [];
    this.closes = [];
    this.faultStartAt = undefined;
    this.faultEndAt = undefined;
    this.producers = producers.map((transport, i) => ({ transport, name: `${label}${i}`, n: 0, stopping: false }));
    this.consumers = consumers.map((transport, i) => ({ transport, name: `c${i}`, stopping: false }));
  }

  now() {
    return Date.now();
  }

  // -------------------------------------------------------------------------------------------
  // Producers
  // -------------------------------------------------------------------------------------------

  /** Sends one numbered message on `producer` now and records its fate (not awaited past the bound). */
  send(producer) {
    producer.n += 1;
    const key = `${producer.name}:${producer.n}`;
    const record = { key, producer: producer.name, startedAt: Date.now(), settledAt: undefined, outcome: 'pending' };
    this.sends.push(record);
    const promise = Promise.resolve()
      .then(() => producer.transport.send(faultEnvelope(key, producer.n)))
      .then(
        (envelope) => {
          record.settledAt = Date.now();
          record.outcome = 'confirmed';
          record.id = String(envelope.last(TransportMessageIdStamp)?.id);
        },
        (error) => {
          record.settledAt = Date.now();
          record.outcome = 'rejected';
          record.errorClass = classOf(error);
          record.error = short(error);
          record.saidMaybeStored = /may have been stored/.test(String(error?.message));
        },
      );
    return { record, promise };
  }

  startProducers() {
    for (const producer of this.producers) {
      producer.loop = (async () => {
        while (!producer.stopping) {
          // A burst: concurrent sends share flushes, as a producer that does not wait makes them.
          const round = Array.from({ length: this.burst }, () => this.send(producer).promise);
          await settleWithin(Promise.all(round), this.opBoundMs);
          if (!producer.stopping) await sleep(this.sendIntervalMs);
        }
      })();
    }
  }

  async stopProducers() {
    for (const producer of this.producers) producer.stopping = true;
    await Promise.all(this.producers.map((p) => settleWithin(p.loop, this.opBoundMs + 1000)));
  }

  /** Sends `count` messages on the first producer, one after the other; resolves the records. */
  async sendBatch(count, producer = this.producers[0]) {
    const records = [];
    for (let i = 0; i < count; i += 1) {
      const { record, promise } = this.send(producer);
      await settleWithin(promise, this.opBoundMs);
      records.push(record);
    }
    return records;
  }

  /** A producer of the run that is not driven by startProducers() (for probes). */
  addProducer(transport, name) {
    const producer = { transport, name, n: 0, stopping: true };
    this.producers.push(producer);
    producer.loop = Promise.resolve();
    return producer;
  }

  /**
   * Sends one message on `producer` and waits (at most `timeoutMs`) for a consumer of the run
   * to yield it. Resolves `{ key, sendMs, yieldMs }`: yieldMs from the send() call to the
   * yield (undefined if it was not delivered in time, or the send failed).
   */
  async probe(producer, timeoutMs = 5000) {
    const { record, promise } = this.send(producer);
    await settleWithin(promise, timeoutMs);
    const deadline = record.startedAt + timeoutMs;
    let delivery;
    while (Date.now() < deadline) {
      delivery = this.deliveries.find((d) => d.key === record.key);
      if (delivery !== undefined) break;
      await sleep(2);
    }
    return {
      key: record.key,
      outcome: record.outcome,
      sendMs: record.settledAt === undefined ? undefined : record.settledAt - record.startedAt,
      yieldMs: delivery === undefined ? undefined : delivery.at - record.startedAt,
    };
  }

  // -------------------------------------------------------------------------------------------
  // Consumers
  // -------------------------------------------------------------------------------------------

  /** Records a delivery made anywhere (also by a child process). */
  recordDelivery({ key, id, consumer, at = Date.now() }) {
    this.deliveries.push({ key, id, consumer, at });
  }

  startConsumers(consumers = this.consumers) {
    for (const consumer of consumers) {
      consumer.loop = (async () => {
        while (!consumer.stopping) {
          const controller = new AbortController();
          consumer.controller = controller;
          let threw = false;
          try {
            for await (const envelope of consumer.transport.get(controller.signal)) {
              this.recordDelivery({
                key: envelope.message?.key,
                id: String(envelope.last(TransportMessageIdStamp)?.id),
                consumer: consumer.name,
              });
              if (this.handlerMs > 0) await sleep(this.handlerMs);
              const ack = { consumer: consumer.name, startedAt: Date.now(), outcome: 'pending' };
              this.acks.push(ack);
              const result = await settleWithin(
                Promise.resolve()
                  .then(() => consumer.transport.ack(envelope))
                  .then(
                    () => {
                      ack.outcome = 'acked';
                      ack.settledAt = Date.now();
                    },
                    (error) => {
                      ack.outcome = 'failed';
                      ack.settledAt = Date.now();
                      ack.errorClass = classOf(error);
                      ack.error = short(error);
                    },
                  ),
                this.opBoundMs,
              );
              void result;
            }
          } catch (error) {
            threw = true;
            this.getThrows.push({ consumer: consumer.name, at: Date.now(), errorClass: classOf(error), error: short(error) });
          }
          if (!consumer.stopping && !threw) this.getEnds.push({ consumer: consumer.name, at: Date.now() });
          if (!consumer.stopping) await sleep(this.restartDelayMs);
        }
      })();
    }
  }

  /**
   * Aborts every consumer's get() and waits (at most `boundMs` each) for its loop to end;
   * records how long that took, or that it did not end.
   */
  async stopConsumers({ boundMs = this.opBoundMs, consumers = this.consumers } = {}) {
    await Promise.all(
      consumers.map(async (consumer) => {
        consumer.stopping = true;
        const startedAt = Date.now();
        consumer.controller?.abort();
        const result = await settleWithin(consumer.loop, boundMs);
        this.stops.push({ consumer: consumer.name, ms: Date.now() - startedAt, ended: !result.timeout });
      }),
    );
  }

  /** Closes `transports` (default: all of the run), each bounded; records how long it took. */
  async close({ boundMs = this.opBoundMs, transports } = {}) {
    const all = transports ?? [...this.producers.map((p) => p.transport), ...this.consumers.map((c) => c.transport)];
    await Promise.all(
      [...new Set(all)].map(async (transport) => {
        const startedAt = Date.now();
        const result = await settleWithin(transport.close(), boundMs);
        this.closes.push({
          ms: Date.now() - startedAt,
          outcome: result.timeout ? 'hung' : result.error ? `failed: ${classOf(result.error)}: ${short(result.error)}` : 'closed',
        });
      }),
    );
  }

  // -------------------------------------------------------------------------------------------
  // Faults and waiting
  // -------------------------------------------------------------------------------------------

  faultStarted() {
    this.faultStartAt = Date.now();
  }

  faultEnded() {
    this.faultEndAt = Date.now();
  }

  /** Keys of confirmed sends not delivered yet. */
  undelivered() {
    const delivered = new Set(this.deliveries.map((d) => d.key));
    return this.sends.filter((s) => s.outcome === 'confirmed' && !delivered.has(s.key)).map((s) => s.key);
  }

  /** Waits until every confirmed send was delivered, or `timeoutMs`; true when all were. */
  async waitDelivered(timeoutMs) {
    const deadline = Date.now() + timeoutMs;
    while (this.undelivered().length > 0 && Date.now() < deadline) await sleep(50);
    return this.undelivered().length === 0;
  }

  /** Waits until no delivery happened for `quietMs` (at most `timeoutMs`). */
  async waitQuiet(quietMs, timeoutMs = 10_000) {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const last = this.deliveries.at(-1)?.at ?? this.t0;
      if (Date.now() - last >= quietMs || Date.now() >= deadline) return;
      await sleep(50);
    }
  }

  // -------------------------------------------------------------------------------------------
  // The account
  // -------------------------------------------------------------------------------------------

  account() {
    const now = Date.now();
    const confirmed = this.sends.filter((s) => s.outcome === 'confirmed');
    const rejected = this.sends.filter((s) => s.outcome === 'rejected');
    const pending = this.sends.filter((s) => s.outcome === 'pending');
    const counts = new Map();
    for (const d of this.deliveries) counts.set(d.key, (counts.get(d.key) ?? 0) + 1);
    const sentKeys = new Set(this.sends.map((s) => s.key));
    const rejectedByClass = {};
    for (const s of rejected) rejectedByClass[s.errorClass] = (rejectedByClass[s.errorClass] ?? 0) + 1;
    const ackFailures = this.acks.filter((a) => a.outcome === 'failed');
    const ackFailuresByClass = {};
    for (const a of ackFailures) ackFailuresByClass[a.errorClass] = (ackFailuresByClass[a.errorClass] ?? 0) + 1;
    const durations = (records) => records.map((r) => (r.settledAt ?? now) - r.startedAt);
    const max = (values) => (values.length === 0 ? 0 : Math.max(...values));

    let recoverMs;
    let firstDeliveryAfterFaultMs;
    if (this.faultEndAt !== undefined) {
      const after = this.deliveries.filter((d) => d.at >= this.faultEndAt);
      if (after.length > 0) firstDeliveryAfterFaultMs = after[0].at - this.faultEndAt;
      // Recovery of the whole path: a message sent after the fault ended, delivered.
      const sentAfter = new Set(this.sends.filter((s) => s.startedAt >= this.faultEndAt).map((s) => s.key));
      const first = after.find((d) => sentAfter.has(d.key));
      if (first !== undefined) recoverMs = first.at - this.faultEndAt;
    }

    return {
      sent: this.sends.length,
      confirmed: confirmed.length,
      rejected: rejected.length,
      rejectedByClass,
      rejectedSamples: [...new Set(rejected.map((s) => `${s.errorClass}: ${s.error}`))].slice(0, 3),
      unsettledSends: pending.length,
      sendMaxMs: max(durations(this.sends)),
      delivered: counts.size,
      deliveries: this.deliveries.length,
      duplicates: this.deliveries.length - counts.size,
      foreign: [...counts.keys()].filter((k) => !sentKeys.has(k)).length,
      rejectedButDelivered: rejected.filter((s) => counts.has(s.key)).length,
      // A rejected send that was stored must have said it may have been.
      storedButReportedFailed: rejected.filter((s) => counts.has(s.key) && !s.saidMaybeStored).map((s) => `${s.key}: ${s.errorClass}: ${s.error}`),
      acked: this.acks.filter((a) => a.outcome === 'acked').length,
      ackFailures: ackFailures.length,
      ackFailuresByClass,
      unsettledAcks: this.acks.filter((a) => a.outcome === 'pending').length,
      ackMaxMs: max(durations(this.acks)),
      lost: confirmed.filter((s) => !counts.has(s.key)).map((s) => s.key),
      getThrows: this.getThrows.map((t) => ({ ...t, at: t.at - this.t0 })),
      getEnds: this.getEnds.map((e) => ({ ...e, at: e.at - this.t0 })),
      stops: this.stops,
      closes: this.closes,
      faultMs:
        this.faultStartAt !== undefined && this.faultEndAt !== undefined ? this.faultEndAt - this.faultStartAt : undefined,
      firstDeliveryAfterFaultMs,
      recoverMs,
    };
  }
}

/**
 * The rules of DESIGN.md "Faults" a scenario checks, as a list of broken ones (empty: all kept).
 * @param {ReturnType<LoadRun['account']>} a
 * @param {{
 *   sendBoundMs?: number,           every send settles within this
 *   allowedRejections?: string[],   error classes a send may reject with
 *   ackBoundMs?: number,            every ack settles within this
 *   allowedAckFailures?: string[],  error classes an ack may reject with (default: none)
 *   getMustRideThrough?: boolean,   get() neither throws nor ends by itself
 *   recoverWithinMs?: number,       a message sent after the fault is delivered within this of its end
 *   stopBoundMs?: number,           get() ends within this of abort
 *   closeBoundMs?: number,          close() completes within this
 * }} rules
 */
function violations(a, rules) {
  const broken = [];
  if (a.lost.length > 0) {
    broken.push(`lost ${a.lost.length} confirmed message(s) (never delivered): ${a.lost.slice(0, 10).join(', ')}`);
  }
  if (a.foreign > 0) broken.push(`${a.foreign} delivered message(s) that no producer sent`);
  if (a.unsettledSends > 0) broken.push(`${a.unsettledSends} send(s) never settled`);
  if (a.storedButReportedFailed.length > 0) {
    broken.push(
      `${a.storedButReportedFailed.length} send(s) rejected without "may have been stored" were stored: ${a.storedButReportedFailed.slice(0, 3).join(' | ')}`,
    );
  }
  if (rules.sendBoundMs !== undefined && a.sendMaxMs > rules.sendBoundMs) {
    broken.push(`a send took ${a.sendMaxMs} ms to settle (bound ${rules.sendBoundMs} ms)`);
  }
  if (rules.allowedRejections !== undefined) {
    const other = Object.keys(a.rejectedByClass).filter((c) => !rules.allowedRejections.includes(c));
    if (other.length > 0) {
      broken.push(`sends rejected with ${other.join(', ')} (allowed: ${rules.allowedRejections.join(', ')}): ${a.rejectedSamples.join(' | ')}`);
    }
  }
  if (a.unsettledAcks > 0) broken.push(`${a.unsettledAcks} ack(s) never settled`);
  if (rules.ackBoundMs !== undefined && a.ackMaxMs > rules.ackBoundMs) {
    broken.push(`an ack took ${a.ackMaxMs} ms to settle (bound ${rules.ackBoundMs} ms)`);
  }
  const allowedAck = rules.allowedAckFailures ?? [];
  const badAcks = Object.entries(a.ackFailuresByClass).filter(([c]) => !allowedAck.includes(c));
  if (badAcks.length > 0) {
    broken.push(`ack(s) failed: ${JSON.stringify(Object.fromEntries(badAcks))} (allowed: ${allowedAck.join(', ') || 'none'})`);
  }
  if (rules.getMustRideThrough) {
    for (const t of a.getThrows) broken.push(`get() of ${t.consumer} threw at +${t.at} ms: ${t.errorClass}: ${t.error}`);
    for (const e of a.getEnds) broken.push(`get() of ${e.consumer} ended by itself at +${e.at} ms (not aborted)`);
  }
  if (rules.recoverWithinMs !== undefined) {
    if (a.recoverMs === undefined) {
      broken.push('no message sent after the fault was ever delivered (no recovery)');
    } else if (a.recoverMs > rules.recoverWithinMs) {
      broken.push(`recovery took ${a.recoverMs} ms after the fault ended (bound ${rules.recoverWithinMs} ms)`);
    }
  }
  if (rules.stopBoundMs !== undefined) {
    for (const s of a.stops) {
      if (!s.ended || s.ms > rules.stopBoundMs) {
        broken.push(`get() of ${s.consumer} ${s.ended ? `took ${s.ms} ms to end` : `did not end within ${s.ms} ms`} after abort (bound ${rules.stopBoundMs} ms)`);
      }
    }
  }
  if (rules.closeBoundMs !== undefined) {
    for (const c of a.closes) {
      if (c.outcome === 'hung' || c.ms > rules.closeBoundMs) broken.push(`close() ${c.outcome} after ${c.ms} ms (bound ${rules.closeBoundMs} ms)`);
    }
  }
  return broken;
}

/** One line for the log: the account's numbers. */
function summary(label, a) {
  const parts = [
    `sent ${a.sent}`,
    `confirmed ${a.confirmed}`,
    `rejected ${a.rejected}${a.rejected ? ` ${JSON.stringify(a.rejectedByClass)}` : ''}`,
    `unsettled sends ${a.unsettledSends}`,
    `send max ${a.sendMaxMs} ms`,
    `delivered ${a.delivered}`,
    `duplicates ${a.duplicates}`,
    `acked ${a.acked}`,
    `ack failures ${a.ackFailures}`,
    `lost ${a.lost.length}`,
    `get() threw ${a.getThrows.length} / ended ${a.getEnds.length}`,
    `fault ${a.faultMs} ms`,
    `first delivery after fault ${a.firstDeliveryAfterFaultMs ?? '-'} ms`,
    `recovered in ${a.recoverMs ?? 'never'} ms`,
  ];
  return `[${label}] ${parts.join(', ')}`;
}

module.exports = { LoadRun, violations, summary, settleWithin, sleep, classOf, consumeAndAck, sendSteadily };
