'use strict';

// send() and reject() hand the encoded message to the native side and keep none of it in the
// JavaScript heap while it is written. An async function keeps its locals until it returns:
// an encoded copy held there, as large as the message, would live (and be copied by every
// scavenge) for as long as its write is in flight. The writes are held in flight here by a
// lock on the table, and the heap is measured after a full collection.

const v8 = require('node:v8');
const vm = require('node:vm');
const { Client } = require('pg');
const { SqlTransport } = require('../..');
const { postgres, uniqueName } = require('../support/engines');
const { envelopeOf, serializer, closeAll } = require('../support/transport-helpers');

v8.setFlagsFromString('--expose-gc');
const collectGarbage = vm.runInNewContext('gc');

const PAYLOAD_CHARS = 1_000_000;
const COUNT = 16;

/** Bytes in use in the JavaScript heap once everything unreachable is collected. */
function heapInUse() {
  collectGarbage();
  collectGarbage();
  return process.memoryUsage().heapUsed;
}

/**
 * A message payload as a flat string: `'x'.repeat(n)` makes a rope that V8 flattens, in place
 * and for good, the first time the serializer reads it, which would be measured as the send's.
 */
const payload = () => Buffer.alloc(PAYLOAD_CHARS, 'x').toString('latin1');

/** Lets the calls just made run up to their first wait. */
const aTurn = () => new Promise((resolve) => setImmediate(resolve));

describe('the JavaScript heap while writes are in flight (PostgreSQL)', () => {
  const tableName = uniqueName('heap');
  const transports = [];
  let locker;

  beforeAll(async () => {
    await postgres.requireServer();
  });

  beforeEach(async () => {
    locker = new Client({ connectionString: postgres.dsn });
    await locker.connect();
  });

  afterEach(async () => {
    await locker.query('ROLLBACK').catch(() => {});
    await locker.end();
    await closeAll(transports.splice(0));
  });

  afterAll(async () => {
    const admin = new Client({ connectionString: postgres.dsn });
    await admin.connect();
    await admin.query(`DROP TABLE IF EXISTS ${tableName}`);
    await admin.end();
  });

  function open() {
    const t = new SqlTransport({ dsn: postgres.dsn, tableName, queueName: uniqueName('q'), serializer: serializer() });
    transports.push(t);
    return t;
  }

  /** Holds every write to the table until `release()`. */
  async function holdWrites() {
    await locker.query('BEGIN');
    await locker.query(`LOCK TABLE ${tableName} IN EXCLUSIVE MODE`);
    return () => locker.query('COMMIT');
  }

  /**
   * Asserts that the writes `start()` begins (it returns their promises) add less than a quarter
   * of the payloads to the heap while the table holds them up; they then complete.
   */
  async function expectNoCopiesWhileHeld(start) {
    const release = await holdWrites();
    const before = heapInUse();
    const writes = start();
    await aTurn();
    const during = heapInUse();
    await release();
    await Promise.all(writes);
    expect(during - before).toBeLessThan((COUNT * PAYLOAD_CHARS) / 4);
  }

  it('keeps no copy of a message a send() is writing', async () => {
    const t = open();
    await t.setup();
    // The envelopes themselves are kept (send() resolves to each with its id stamp): they are
    // made before the first measurement, so that only what a send adds is measured.
    const envelopes = Array.from({ length: COUNT }, (_, i) => envelopeOf(`big-${i}`, payload()));
    await expectNoCopiesWhileHeld(() => envelopes.map((envelope) => t.send(envelope)));
  }, 30_000);

  it('keeps no copy of a message a reject() is writing', async () => {
    const t = open();
    for (let i = 0; i < COUNT; i += 1) await t.send(envelopeOf(`big-${i}`, payload()));
    const received = [];
    const controller = new AbortController();
    for await (const envelope of t.get(controller.signal)) {
      received.push(envelope);
      if (received.length === COUNT) break;
    }
    await expectNoCopiesWhileHeld(() => received.map((envelope) => t.reject(envelope)));
    expect(await t.getMessageCount()).toBe(COUNT);
  }, 30_000);
});
